"""ContrastLimitedAdaptiveHistogramEqualization against Keras 3's (torch backend): outputs and
their dtypes on random images (tile grids, clip limits, value ranges, data formats, batched
and single images), eager against frozen, configs, and argument errors."""

import json
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")
CLAHE = tp.layers.ContrastLimitedAdaptiveHistogramEqualization
KERAS_CLAHE = keras.layers.ContrastLimitedAdaptiveHistogramEqualization


def _np(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


def _images(rng, shape, value_range=(0, 255), dtype="float32"):
    """Random pixels in `value_range`: whole numbers for the default range."""
    low, high = value_range
    if (low, high) == (0, 255):
        return rng.integers(0, 256, size=shape).astype(dtype)
    return (rng.random(shape) * (high - low) + low).astype(dtype)


CASES = [
    # (input shape, layer arguments)
    ((2, 16, 16, 3), {}),
    ((2, 10, 13, 3), {"tile_grid_size": (4, 3), "clip_limit": 2.0}),
    ((1, 9, 7, 2), {"tile_grid_size": (2, 2), "clip_limit": 0}),
    ((2, 11, 9, 1), {"tile_grid_size": (4, 4), "clip_limit": 40.0}),  # padding of 1 and 3 rows
    ((2, 5, 6, 2), {"tile_grid_size": (8, 8)}),  # more tiles than pixels
    ((1, 8, 8, 3), {"tile_grid_size": (1, 1), "clip_limit": 1}),
    ((12, 10, 3), {"tile_grid_size": (3, 5), "clip_limit": 1.5}),  # one image
    ((2, 3, 12, 10), {"tile_grid_size": (3, 2), "clip_limit": 3.0, "data_format": "channels_first"}),
    ((3, 9, 10), {"tile_grid_size": (2, 3), "data_format": "channels_first"}),  # one image, channels first
    ((2, 20, 17, 1), {"value_range": (0, 1), "tile_grid_size": (3, 2)}),
    (
        (2, 3, 14, 12),
        {"value_range": (-1, 1), "clip_limit": 2.5, "tile_grid_size": (2, 4), "data_format": "channels_first"},
    ),
]


@pytest.mark.parametrize("shape, kwargs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_matches_keras(shape, kwargs):
    rng = np.random.default_rng(len(shape) + sum(shape))
    for seed in range(2):
        x = _images(np.random.default_rng(seed + rng.integers(100)), shape, kwargs.get("value_range", (0, 255)))
        out = CLAHE(**kwargs)(tp.tensor(x))
        ref = _np(KERAS_CLAHE(**kwargs)(torch.tensor(x)))
        assert out.shape == ref.shape == x.shape
        assert out.dtype.name == "float32"
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64", "float64"])
def test_output_dtype_matches_keras(dtype):
    """Integer images stay integers; float64 arrays take the layer's float32, as Keras autocasts.
    (tapeflow has no uint8 tensors: uint8 arrays become int64 ones.)"""
    x = _images(np.random.default_rng(3), (2, 9, 11, 3), dtype=dtype)
    kwargs = {"tile_grid_size": (3, 2), "clip_limit": 2.0}
    out = CLAHE(**kwargs)(x)
    ref = _np(KERAS_CLAHE(**kwargs)(x))
    assert out.dtype.name == ("int64" if dtype == "uint8" else str(ref.dtype))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-4)
    wide = CLAHE(dtype="float64", **kwargs)(x.astype("float64"))
    theirs = _np(KERAS_CLAHE(dtype="float64", **kwargs)(x.astype("float64")))
    assert wide.dtype.name == str(theirs.dtype) == "float64"
    np.testing.assert_allclose(wide.numpy(), theirs, rtol=1e-6, atol=1e-4)


def test_integer_images_with_a_value_range_match_keras():
    x = np.random.default_rng(4).integers(0, 16, size=(2, 8, 8, 1)).astype("int32")
    kwargs = {"value_range": (0, 15), "tile_grid_size": (2, 2)}
    np.testing.assert_array_equal(CLAHE(**kwargs)(x).numpy(), _np(KERAS_CLAHE(**kwargs)(x)))


def test_acts_in_training_and_inference_alike():
    x = _images(np.random.default_rng(5), (1, 8, 8, 2))
    layer = CLAHE(tile_grid_size=(2, 2))
    ref = layer(x).numpy()
    for training in (True, False):
        np.testing.assert_array_equal(layer(x, training=training).numpy(), ref)


def test_equalizes_a_small_image_by_hand():
    x = np.array([10.0, 20.0, 30.0, 40.0], "float32").reshape(1, 2, 2, 1)
    out = CLAHE(clip_limit=0, tile_grid_size=(1, 1))(x).numpy().ravel()
    np.testing.assert_allclose(out, np.arange(1, 5) * 255.0 / 4)


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_frozen_equals_eager(data_format):
    shape = (3, 10, 9, 2) if data_format == "channels_last" else (3, 2, 10, 9)
    x = _images(np.random.default_rng(6), shape)
    layer = CLAHE(tile_grid_size=(3, 2), clip_limit=2.0, data_format=data_format)
    eager = layer(tp.tensor(x)).numpy()
    for optimize in (True, False):
        graph = tp.freeze(layer, tp.TensorSpec((None, *shape[1:]), "float32"), optimize=optimize)
        np.testing.assert_array_equal(np.asarray(graph(x)), eager)
    np.testing.assert_array_equal(tp.function(lambda images: layer(images))(tp.tensor(x)).numpy(), eager)


def test_in_a_model_trained_with_fit():
    rng = np.random.default_rng(7)
    x = _images(rng, (8, 8, 8, 1))
    y = rng.normal(size=(8, 1)).astype("float32")
    model = tp.Sequential(
        [
            tp.Input((8, 8, 1)),
            CLAHE(tile_grid_size=(2, 2)),
            tp.layers.Rescaling(1 / 255.0),
            tp.layers.Flatten(),
            tp.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    features = CLAHE(tile_grid_size=(2, 2))(x).numpy().reshape(8, -1) / 255.0
    kernel, bias = model.layers[-1].get_weights()
    np.testing.assert_allclose(model.predict(x, verbose=0), features @ kernel + bias, rtol=1e-4, atol=1e-5)


def test_symbolic_input_gives_the_input_shape():
    inputs = tp.Input((12, 10, 3))
    assert CLAHE(tile_grid_size=(3, 3))(inputs).shape == (None, 12, 10, 3)


def test_config_has_keras_keys_and_round_trips():
    kwargs = {"value_range": (-1, 1), "clip_limit": 2.5, "tile_grid_size": (2, 4), "data_format": "channels_first"}
    layer = CLAHE(name="clahe", **kwargs)
    config = layer.get_config()
    theirs = KERAS_CLAHE(name="clahe", **kwargs).get_config()
    assert set(config) == set(theirs)
    for key in kwargs:
        assert config[key] == theirs[key]
    assert set(CLAHE().get_config()) == set(KERAS_CLAHE().get_config())
    x = _images(np.random.default_rng(8), (2, 3, 6, 8), (-1, 1))
    clone = CLAHE.from_config(json.loads(json.dumps(config)))
    np.testing.assert_array_equal(clone(x).numpy(), layer(x).numpy())
    revived = tp.layers.deserialize(json.loads(json.dumps(tp.layers.serialize(layer))))
    assert type(revived) is CLAHE
    np.testing.assert_array_equal(revived(x).numpy(), layer(x).numpy())
    assert layer.weights == []


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"data_format": "channels_middle"}, ValueError, "data_format"),
        ({"value_range": (1,)}, ValueError, "value_range"),
        ({"value_range": "0-255"}, ValueError, "value_range"),
        ({"value_range": (3, 3)}, ValueError, "value_range"),
        ({"clip_limit": "high"}, TypeError, "clip_limit"),
        ({"clip_limit": None}, TypeError, "clip_limit"),
        ({"tile_grid_size": 8}, ValueError, "tile_grid_size"),
        ({"tile_grid_size": (0, 2)}, ValueError, "tile_grid_size"),
        ({"tile_grid_size": (2.5, 2)}, ValueError, "tile_grid_size"),
        ({"tile_grid_size": (2, 2, 2)}, ValueError, "tile_grid_size"),
    ],
)
def test_bad_arguments_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        CLAHE(**kwargs)


def test_bad_inputs_raise():
    layer = CLAHE(name="clahe")
    with pytest.raises(ValueError, match="clahe.*rank"):
        layer(np.zeros((4, 4), "float32"))
    with pytest.raises(ValueError, match="clahe.*rank"):
        layer(np.zeros((1, 1, 4, 4, 1), "float32"))
    with pytest.raises(ValueError, match="must be known"):
        tp.freeze(CLAHE(), tp.TensorSpec((None, None, None, 3), "float32"))
