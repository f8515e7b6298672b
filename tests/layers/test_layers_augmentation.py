"""The image augmentation layers against Keras 3's (torch backend). Random streams differ
from Keras's, so each layer's drawn transformation is fed to Keras's own
`transform_images`, which must give the same images; fixed factor ranges are compared end
to end; inference is the identity (RandomCrop: a centre resize); the draws have the
documented ranges."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")


import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")
L = tp.layers


def _np(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


def _to_torch(transformation):
    if isinstance(transformation, dict):
        as_uint8 = {"shift_factor"}  # Keras keeps posterization shifts in uint8
        return {
            k: torch.tensor(v.numpy().astype("uint8") if k in as_uint8 else v.numpy())
            for k, v in transformation.items()
        }
    return transformation


def _same_value(a, b):
    if a is None or isinstance(a, str):
        return a == b
    return np.allclose(np.asarray(a, float), np.asarray(b, float))


CASES = [
    ("flip", "RandomFlip", {}, (4, 3, 5, 2)),
    ("flip_horizontal_first", "RandomFlip", {"mode": "horizontal", "data_format": "channels_first"}, (4, 2, 3, 5)),
    ("flip_vertical_unbatched", "RandomFlip", {"mode": "vertical"}, (3, 5, 2)),
    ("rotation", "RandomRotation", {"factor": 0.2}, (3, 5, 6, 2)),
    (
        "rotation_constant_nearest",
        "RandomRotation",
        {"factor": (0.1, 0.3), "fill_mode": "constant", "interpolation": "nearest", "fill_value": 0.5},
        (2, 6, 5, 1),
    ),
    (
        "rotation_wrap_first",
        "RandomRotation",
        {"factor": 0.5, "fill_mode": "wrap", "data_format": "channels_first"},
        (2, 2, 5, 5),
    ),
    ("zoom", "RandomZoom", {"height_factor": 0.3}, (3, 5, 6, 2)),
    (
        "zoom_both_nearest_fill",
        "RandomZoom",
        {"height_factor": (-0.3, 0.2), "width_factor": 0.4, "fill_mode": "nearest"},
        (2, 6, 5, 1),
    ),
    ("translation", "RandomTranslation", {"height_factor": 0.2, "width_factor": (-0.3, 0.1)}, (3, 5, 6, 2)),
    (
        "translation_constant",
        "RandomTranslation",
        {"height_factor": 0.5, "width_factor": 0.5, "fill_mode": "constant"},
        (2, 4, 4, 1),
    ),
    ("contrast", "RandomContrast", {"factor": 0.4, "value_range": (-3, 3)}, (3, 4, 5, 2)),
    ("contrast_pair", "RandomContrast", {"factor": (0.3, 0.6), "value_range": (-1, 1)}, (3, 4, 5, 2)),
    ("brightness", "RandomBrightness", {"factor": 0.3, "value_range": (-2, 2)}, (3, 4, 5, 2)),
    ("grayscale", "RandomGrayscale", {"factor": 0.5}, (6, 3, 4, 3)),
    ("color_degeneration", "RandomColorDegeneration", {"factor": 0.7, "value_range": (-2, 2)}, (4, 3, 4, 3)),
    (
        "color_degeneration_first",
        "RandomColorDegeneration",
        {"factor": (0.2, 0.9), "value_range": (-2, 2), "data_format": "channels_first"},
        (4, 3, 4, 3),
    ),
    ("shear", "RandomShear", {"x_factor": 0.3, "y_factor": (0.1, 0.4)}, (3, 5, 6, 2)),
    ("posterization", "RandomPosterization", {"factor": (2, 7)}, (6, 3, 4, 3)),
    ("perspective", "RandomPerspective", {"factor": 0.7, "scale": 0.4}, (4, 5, 6, 2)),
    ("erasing", "RandomErasing", {"factor": 0.8, "scale": (0.1, 0.4)}, (4, 5, 6, 2)),
    ("sharpness", "RandomSharpness", {"factor": 0.9, "value_range": (-3, 3)}, (4, 5, 6, 2)),
    ("gaussian_blur", "RandomGaussianBlur", {"factor": 0.7, "sigma": (0.3, 0.9), "value_range": (-3, 3)}, (4, 5, 6, 2)),
    (
        "gaussian_blur_5_first",
        "RandomGaussianBlur",
        {"kernel_size": 5, "value_range": (-3, 3), "data_format": "channels_first"},
        (4, 2, 6, 5),
    ),
    (
        "sharpness_first",
        "RandomSharpness",
        {"factor": (0.1, 0.9), "value_range": (-3, 3), "data_format": "channels_first"},
        (4, 3, 5, 6),
    ),
    (
        "erasing_fill_first",
        "RandomErasing",
        {"fill_value": (1.0, 2.0, 3.0), "data_format": "channels_first"},
        (4, 3, 5, 6),
    ),
    (
        "perspective_first",
        "RandomPerspective",
        {"scale": 0.2, "data_format": "channels_first", "interpolation": "nearest", "fill_value": 0.5},
        (3, 2, 5, 6),
    ),
    ("posterization_range", "RandomPosterization", {"factor": 5, "value_range": (0, 1)}, (6, 3, 4, 3)),
    ("saturation", "RandomSaturation", {"factor": (0.2, 0.8), "value_range": (0, 1)}, (4, 3, 4, 3)),
    ("saturation_first", "RandomSaturation", {"factor": 0.6, "data_format": "channels_first"}, (4, 3, 4, 3)),
    ("hue", "RandomHue", {"factor": 0.7, "value_range": (-1, 1)}, (4, 3, 4, 3)),
    ("hue_first", "RandomHue", {"factor": (0.2, 0.9), "data_format": "channels_first"}, (4, 3, 4, 3)),
    (
        "shear_constant",
        "RandomShear",
        {"x_factor": 0.5, "fill_mode": "constant", "interpolation": "nearest"},
        (2, 5, 5, 1),
    ),
    ("grayscale_first", "RandomGrayscale", {"factor": 0.7, "data_format": "channels_first"}, (6, 3, 4, 2)),
    ("invert", "RandomInvert", {"factor": 0.6, "value_range": (0, 1)}, (6, 3, 4, 2)),
    (
        "solarization",
        "Solarization",
        {"addition_factor": 0.2, "threshold_factor": (0.3, 0.6), "value_range": (-3, 3)},
        (4, 3, 4, 2),
    ),
]


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_same_transformation_matches_keras(rng, name, kwargs, shape):
    x = rng.normal(size=shape).astype("float32")
    if name == "RandomPosterization":  # Keras casts to uint8: values must lie in the value range
        x = rng.uniform(0, kwargs.get("value_range", (0, 255))[1], size=shape).astype("float32")
    ours = getattr(L, name)(seed=3, **kwargs)
    theirs = getattr(keras.layers, name)(seed=3, **kwargs)
    transformation = ours.get_random_transformation(tp.tensor(x))
    out = ours.transform_images(tp.tensor(x), transformation).numpy()
    ref = _np(theirs.transform_images(torch.tensor(x), _to_torch(transformation), training=True))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ours(tp.tensor(x)).numpy(), x)  # inference: the identity
    assert ours(tp.tensor(x), training=True).shape == shape
    their_config = theirs.get_config()
    config = ours.get_config()
    extra = {"seed"} if name == "RandomGrayscale" else set()  # Keras's RandomGrayscale forgets its seed
    assert set(config) == set(their_config) | extra, set(config) ^ set(their_config)
    for key in set(kwargs) | {"factor", "value_range", "height_factor", "width_factor"}:
        if key in config:
            assert _same_value(config[key], their_config[key]), key


def test_solarization_and_auto_contrast_end_to_end(rng):
    x = rng.uniform(0, 255, size=(3, 4, 5, 3)).astype("float32")
    for kwargs in ({}, {"value_range": (-1, 300)}):  # no random part: the same output as Keras's
        out = L.Solarization(**kwargs)(tp.tensor(x), training=True).numpy()
        ref = _np(keras.layers.Solarization(**kwargs)(torch.tensor(x), training=True))
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)
    x[0, :, :, 1] = 7.0  # a flat channel is left as it is
    for value_range in ((0, 255), (-1, 300)):
        ours, theirs = L.AutoContrast(value_range=value_range), keras.layers.AutoContrast(value_range=value_range)
        for training in (False, True):
            out = ours(tp.tensor(x), training=training).numpy()
            np.testing.assert_allclose(out, _np(theirs(torch.tensor(x), training=training)), rtol=1e-4, atol=1e-3)
        assert set(ours.get_config()) == set(theirs.get_config()) | {"data_format"} - {"seed"}


@pytest.mark.parametrize(
    "value_range, shape, data_format",
    [((0, 255), (3, 5, 6, 3), None), ((0, 1), (2, 4, 4, 2), None), ((-1, 1), (2, 3, 4, 5), "channels_first")],
)
def test_equalization_matches_keras(rng, value_range, shape, data_format):
    x = rng.uniform(*value_range, size=shape).astype("float32")
    ours = L.Equalization(value_range=value_range, data_format=data_format)
    theirs = keras.layers.Equalization(value_range=value_range, data_format=data_format)
    out = ours(tp.tensor(x), training=True).numpy()
    np.testing.assert_allclose(out, _np(theirs(torch.tensor(x), training=True)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours(tp.tensor(x)).numpy(), x)
    flat = np.full((1, 2, 2, 1), 7.0, "float32")  # a single used bin: left as it is
    np.testing.assert_array_equal(L.Equalization()(tp.tensor(flat), training=True).numpy(), flat)
    assert set(ours.get_config()) == set(theirs.get_config())


def test_pipeline_matches_keras(rng):
    x = rng.uniform(0, 255, size=(2, 6, 6, 3)).astype("float32")
    ours = L.Pipeline([L.RandomFlip(seed=1), L.Rescaling(1 / 255), L.CenterCrop(4, 4)])
    theirs = keras.layers.Pipeline(
        [keras.layers.RandomFlip(seed=1), keras.layers.Rescaling(1 / 255), keras.layers.CenterCrop(4, 4)]
    )
    np.testing.assert_allclose(ours(tp.tensor(x)).numpy(), _np(theirs(torch.tensor(x), training=False)), rtol=1e-5)
    assert set(ours.get_config()) == set(theirs.get_config())
    clone = L.deserialize(L.serialize(ours))
    assert [type(layer).__name__ for layer in clone.layers] == ["RandomFlip", "Rescaling", "CenterCrop"]
    assert ours(tp.tensor(x), training=True).shape == (2, 4, 4, 3)


def test_rotation_matrix_matches_keras(rng):
    ours, theirs = L.RandomRotation(0.3), keras.layers.RandomRotation(0.3)
    angle = rng.uniform(-100, 100, size=4)
    matrix = ours.rotation_matrix(tp.tensor(angle), 5, 7).numpy()
    zeros, ones = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    ref = theirs._compute_affine_matrix(0.5, 0.5, torch.tensor(angle), zeros, zeros, ones, zeros, zeros, 5, 7)
    np.testing.assert_allclose(matrix, _np(ref), rtol=1e-6, atol=1e-6)  # Keras converts degrees in float32


FIXED = [
    ("rotation_quarter", "RandomRotation", {"factor": (0.25, 0.25)}, (2, 5, 5, 3)),
    ("rotation_constant", "RandomRotation", {"factor": (-0.1, -0.1), "fill_mode": "constant"}, (2, 6, 4, 1)),
    ("zoom_fixed", "RandomZoom", {"height_factor": (0.5, 0.5), "width_factor": (-0.2, -0.2)}, (2, 6, 5, 2)),
    (
        "translation_fixed",
        "RandomTranslation",
        {"height_factor": (0.2, 0.2), "width_factor": (-0.4, -0.4)},
        (2, 5, 5, 1),
    ),
    ("brightness_fixed", "RandomBrightness", {"factor": (0.25, 0.25), "value_range": (-1, 1)}, (2, 3, 3, 2)),
    ("contrast_identity", "RandomContrast", {"factor": 0.0, "value_range": (-9, 9)}, (2, 3, 3, 2)),
]


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in FIXED], ids=[c[0] for c in FIXED])
def test_fixed_factors_match_keras_end_to_end(rng, name, kwargs, shape):
    x = rng.normal(size=shape).astype("float32")
    out = getattr(L, name)(**kwargs)(tp.tensor(x), training=True).numpy()
    ref = _np(getattr(keras.layers, name)(**kwargs)(torch.tensor(x), training=True))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_color_jitter_matches_keras_with_fixed_factors(rng):
    x = rng.uniform(0, 1, size=(2, 3, 4, 3)).astype("float32")
    kwargs = {
        "value_range": (0, 1),
        "brightness_factor": (0.1, 0.1),
        "contrast_factor": 0.0,
        "saturation_factor": (0.5, 0.5),
        "hue_factor": (0.0, 0.0),
    }
    ours, theirs = L.RandomColorJitter(**kwargs), keras.layers.RandomColorJitter(**kwargs)
    out = ours(tp.tensor(x), training=True).numpy()
    np.testing.assert_allclose(out, _np(theirs(torch.tensor(x), training=True)), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ours(tp.tensor(x)).numpy(), x)
    assert set(ours.get_config()) == set(theirs.get_config())
    y = L.RandomColorJitter(brightness_factor=0.2, hue_factor=0.3, seed=2)(tp.tensor(x * 255), training=True)
    assert y.shape == x.shape and float(tp.max(y)) <= 255.0


def test_random_draws_cover_their_ranges():
    x = tp.zeros((400, 2, 2, 1))
    angle = L.RandomRotation((-0.1, 0.2), seed=1).get_random_transformation(x)["angle"].numpy()
    assert -36.0 <= angle.min() < -30 and 66 < angle.max() <= 72.0
    zoom = L.RandomZoom((-0.2, 0.4), seed=1).get_random_transformation(x)
    assert 0.8 <= zoom["height_zoom"].numpy().min() < 0.85 and 1.35 < zoom["height_zoom"].numpy().max() <= 1.4
    np.testing.assert_array_equal(zoom["height_zoom"].numpy(), zoom["width_zoom"].numpy())
    flips = L.RandomFlip(seed=1).get_random_transformation(x)["flips"].numpy()
    assert 0.4 < flips.mean() < 0.6
    factor = L.RandomContrast(0.3, seed=1).get_random_transformation(x)["contrast_factor"].numpy()
    assert 1.0 <= factor.min() < 1.02 and 1.28 < factor.max() <= 1.3  # Keras's bounds: [1, 1 + f] for a number
    y = L.RandomFlip("horizontal", seed=2)(tp.reshape(tp.arange(800.0), (400, 1, 2, 1)), training=True).numpy()
    assert set(y[:, 0, 1, 0] - y[:, 0, 0, 0]) == {1.0, -1.0}
    layer = L.RandomRotation(0.1, seed=5)
    first = layer(tp.ones((2, 4, 4, 1)), training=True)
    assert first.shape == (2, 4, 4, 1)
    a = L.RandomZoom(0.3, seed=7)(tp.tensor(np.arange(32.0).reshape(2, 4, 4, 1)), training=True).numpy()
    b = L.RandomZoom(0.3, seed=7)(tp.tensor(np.arange(32.0).reshape(2, 4, 4, 1)), training=True).numpy()
    np.testing.assert_array_equal(a, b)  # the same seed repeats the draws


def test_random_erasing_rectangles():
    x = tp.ones((300, 10, 10, 1))
    erase = L.RandomErasing((1.0, 1.0), scale=(0.04, 0.36), fill_value=0.0, seed=4)
    y = erase(x, training=True).numpy()[..., 0]
    erased = y == 0.0
    areas = erased.sum(axis=(1, 2))
    assert 1 <= areas.min() and areas.max() <= 49 and len(set(areas.tolist())) > 5
    rows, cols = erased.any(axis=2), erased.any(axis=1)
    assert (areas == rows.sum(1) * cols.sum(1)).all()  # one axis-aligned rectangle per image


def test_random_crop(rng):
    x = rng.normal(size=(3, 6, 7, 2)).astype("float32")
    crop = L.RandomCrop(3, 4, seed=1)
    tops = set()
    for _ in range(20):
        y = crop(tp.tensor(x), training=True).numpy()
        found = [(t, s) for t in range(4) for s in range(4) if np.array_equal(x[:, t : t + 3, s : s + 4], y)]
        assert len(found) == 1
        tops.add(found[0])
    assert len(tops) > 4
    # inference: the centre at the target's aspect ratio, resized (as Keras documents; Keras 3.15.1's
    # code returns the input unchanged at inference, against its documentation and output shape)
    inference = crop(tp.tensor(x)).numpy()
    ref = _np(keras.layers.Resizing(3, 4, crop_to_aspect_ratio=True)(torch.tensor(x)))
    np.testing.assert_allclose(inference, ref, rtol=1e-5, atol=1e-5)
    assert tuple(crop.compute_output_shape((None, 6, 7, 2))) == (None, 3, 4, 2)
    small = L.RandomCrop(4, 4)(tp.tensor(x[:, :3]), training=True)
    assert small.shape == (3, 4, 4, 2)
    theirs = keras.layers.RandomCrop(3, 4)
    assert set(crop.get_config()) == set(theirs.get_config())
    unchanged = L.RandomCrop(6, 7)(tp.tensor(x), training=True).numpy()
    np.testing.assert_array_equal(unchanged, x)


def test_uint8_images_and_errors():
    images = np.full((2, 4, 4, 3), 200, dtype="uint8")
    out = L.RandomBrightness((0.2, 0.2))(images, training=True)
    assert out.dtype == "float32" and float(out.numpy().max()) == 251.0
    with pytest.raises(ValueError, match="factor"):
        L.RandomRotation(1.5)
    with pytest.raises(ValueError, match="height_factor"):
        L.RandomZoom(-1.0)
    with pytest.raises(NotImplementedError, match="fill_mode"):
        L.RandomTranslation(0.1, 0.1, fill_mode="mirror_edge")
    with pytest.raises(ValueError, match="mode"):
        L.RandomFlip("diagonal")
    with pytest.raises(ValueError, match="value_range"):
        L.RandomBrightness(0.1, value_range=(0,))


def test_in_a_sequential_model():
    model = tp.Sequential(
        [
            tp.Input((8, 8, 3)),
            L.RandomFlip(seed=0),
            L.RandomRotation(0.1, seed=0),
            L.RandomZoom(0.1, seed=0),
            L.RandomCrop(6, 6, seed=0),
            L.Conv2D(2, 3),
        ]
    )
    assert model.outputs[0].shape == (None, 4, 4, 2)
    x = np.random.default_rng(0).normal(size=(4, 8, 8, 3))
    assert model(x, training=True).shape == (4, 4, 4, 2)
