"""MixUp and CutMix against Keras 3's (torch backend): the same transformation applied to the
same images and labels gives the same result; the random draws have the right statistics;
inference passes inputs through; dict inputs; configs and errors."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")


def _images(shape=(4, 5, 6, 3), seed=0):
    return np.random.default_rng(seed).random(shape).astype("float32")


def _same_keys(ours, theirs):
    assert set(ours.get_config()) == set(theirs.get_config())


def test_mix_up_transform_matches_keras():
    x, labels = _images(), np.eye(4, dtype="float32")
    mix = {"mix_weight": np.array([0.1, 0.5, 0.9, 0.3], "float32"), "permutation_order": np.array([2, 0, 3, 1])}
    ours, theirs = tp.layers.MixUp(alpha=0.3), keras.layers.MixUp(alpha=0.3)
    ref = theirs.transform_images(torch.tensor(x), {k: torch.tensor(v) for k, v in mix.items()})
    out = ours.transform_images(tp.tensor(x), {k: tp.tensor(v) for k, v in mix.items()})
    np.testing.assert_allclose(out.numpy(), np.asarray(ref), rtol=1e-6, atol=1e-7)
    ref = theirs.transform_labels(torch.tensor(labels), {k: torch.tensor(v) for k, v in mix.items()})
    out = ours.transform_labels(tp.tensor(labels), {k: tp.tensor(v) for k, v in mix.items()})
    np.testing.assert_allclose(out.numpy(), np.asarray(ref), rtol=1e-6, atol=1e-7)
    _same_keys(ours, theirs)
    assert ours.get_config()["alpha"] == 0.3


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_cut_mix_transform_matches_keras(data_format):
    x, labels = _images(), np.eye(4, dtype="float32")
    if data_format == "channels_first":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    ours, theirs = (
        tp.layers.CutMix(seed=1, data_format=data_format),
        keras.layers.CutMix(seed=1, data_format=data_format),
    )
    cut = {k: np.asarray(v) for k, v in theirs.get_random_transformation(x).items()}
    ref = theirs.transform_images(torch.tensor(x), {k: torch.tensor(v) for k, v in cut.items()})
    out = ours.transform_images(tp.tensor(x), {k: tp.tensor(v) for k, v in cut.items()})
    np.testing.assert_array_equal(out.numpy(), np.asarray(ref))
    ref = theirs.transform_labels(torch.tensor(labels), {k: torch.tensor(v) for k, v in cut.items()})
    out = ours.transform_labels(tp.tensor(labels), {k: tp.tensor(v) for k, v in cut.items()})
    np.testing.assert_allclose(out.numpy(), np.asarray(ref), rtol=1e-6, atol=1e-7)
    _same_keys(ours, theirs)
    assert tuple(ours.get_config()["factor"]) == tuple(theirs.get_config()["factor"]) == (0.0, 1.0)


def test_mix_up_statistics_and_dict_inputs():
    layer = tp.layers.MixUp(alpha=2.0, seed=3)
    x = _images((64, 2, 2, 1))
    weights = np.concatenate([layer.get_random_transformation(tp.tensor(x))["mix_weight"].numpy() for _ in range(100)])
    assert abs(weights.mean() - 0.5) < 0.02  # Beta(2, 2): mean 1/2, variance 1/20
    assert abs(weights.var() - 0.05) < 0.01
    order = layer.get_random_transformation(tp.tensor(x))["permutation_order"].numpy()
    assert sorted(order.tolist()) == list(range(64))
    labels = np.eye(64, dtype="float32")
    out = layer({"images": x, "labels": labels}, training=True)
    np.testing.assert_allclose(out["labels"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    # each image is the blend of itself and the image its label row points to, with its weight
    mixed, rows = out["images"].numpy(), out["labels"].numpy()
    np.testing.assert_allclose(mixed.reshape(64, -1), rows @ x.reshape(64, -1), rtol=1e-5, atol=1e-6)


def test_cut_mix_statistics():
    layer = tp.layers.CutMix(factor=(0.5, 0.5), seed=4)
    x = _images((32, 16, 16, 1))
    cut = layer.get_random_transformation(tp.tensor(x))
    masks, weights = cut["batch_masks"].numpy(), cut["mix_weight"].numpy().ravel()
    assert masks.shape == (32, 16, 16, 1) and masks.dtype == bool
    # the box covers about 1 - weight of each image
    np.testing.assert_allclose(masks.mean(axis=(1, 2, 3)), 1.0 - weights, atol=0.2)
    labels = np.eye(32, dtype="float32")
    out = layer({"images": x, "labels": labels}, training=True)
    np.testing.assert_allclose(out["labels"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    # each pixel comes from the image itself or from the image it was mixed with
    mixed, rows = out["images"].numpy(), out["labels"].numpy()
    for i in range(32):
        other = np.argmax(np.where(np.arange(32) == i, -1.0, rows[i])) if rows[i, i] < 1 else i
        assert np.all((mixed[i] == x[i]) | (mixed[i] == x[other]))


@pytest.mark.parametrize("name", ["MixUp", "CutMix"])
def test_inference_passes_through_and_single_images(name):
    layer = getattr(tp.layers, name)(seed=0)
    x = _images()
    np.testing.assert_array_equal(layer(x).numpy(), x)
    out = layer({"images": x, "labels": np.eye(4, dtype="float32")})
    np.testing.assert_array_equal(out["images"].numpy(), x)
    np.testing.assert_array_equal(out["labels"].numpy(), np.eye(4))
    single = layer(x[0], training=True).numpy()
    np.testing.assert_allclose(single, x[0], rtol=1e-6, atol=1e-6)  # mixed with itself
    assert layer(tp.ones((2, 3, 3, 1), dtype="int32")).dtype == tp.float32


@pytest.mark.parametrize("name", ["MixUp", "CutMix"])
def test_mix_errors(name):
    layer = getattr(tp.layers, name)(seed=0)
    x = _images()
    with pytest.raises(NotImplementedError, match="bounding_boxes"):
        layer({"images": x, "bounding_boxes": {"boxes": np.zeros((4, 1, 4)), "labels": np.zeros((4, 1))}})
    with pytest.raises(NotImplementedError, match="segmentation_masks"):
        layer({"images": x, "segmentation_masks": x})
    with pytest.raises(ValueError, match="images"):
        layer({"labels": np.eye(4)})


def test_mix_argument_errors():
    with pytest.raises(ValueError, match="alpha"):
        tp.layers.MixUp(alpha=0.0)
    with pytest.raises(ValueError, match="factor"):
        tp.layers.CutMix(factor=2.0)
    assert tp.layers.CutMix(factor=0.4).factor == (0.0, 0.4)


def _pixels(shape=(3, 8, 8, 3), seed=0):
    return (np.random.default_rng(seed).random(shape) * 255).astype("float32")


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("RandAugment", {}),
        ("RandAugment", {"num_ops": 3, "factor": (0.2, 0.6), "interpolation": "nearest", "value_range": (0, 1)}),
        ("AugMix", {}),
        ("AugMix", {"all_ops": False, "num_chains": 2, "chain_depth": 1, "alpha": 0.5}),
        ("RandomElasticTransform", {}),
        ("RandomElasticTransform", {"factor": (0.5, 1.0), "scale": 0.5, "fill_mode": "constant", "fill_value": 3.0}),
        ("MaxNumBoundingBoxes", {"max_number": 2}),
        ("MaxNumBoundingBoxes", {"max_number": 2, "bounding_box_format": "xyxy"}),
    ],
)
def test_configs_have_keras_keys_and_values(name, kwargs):
    kwargs = {**kwargs} if name == "MaxNumBoundingBoxes" else {"seed": 2, **kwargs}
    ours, theirs = getattr(tp.layers, name)(**kwargs), getattr(keras.layers, name)(**kwargs)
    mine, ref = ours.get_config(), theirs.get_config()
    assert set(mine) == set(ref)
    for key in set(mine) - {"name", "dtype"}:
        value, expected = mine[key], ref[key]
        if isinstance(expected, tuple | list):
            value, expected = [float(v) for v in value], [float(v) for v in expected]
        assert value == expected, key
    clone = type(ours).from_config(mine)
    assert clone.get_config() == mine


@pytest.mark.parametrize("name", ["RandAugment", "AugMix", "RandomElasticTransform"])
def test_random_image_layers_train_and_infer(name):
    x = _pixels()
    layer = getattr(tp.layers, name)(seed=5)
    np.testing.assert_array_equal(layer(x).numpy(), x)  # inference: identity
    out = layer(x, training=True).numpy()
    assert out.shape == x.shape and out.min() >= 0.0 and out.max() <= 255.0
    again = getattr(tp.layers, name)(seed=5)(x, training=True).numpy()
    np.testing.assert_array_equal(out, again)  # the seed fixes the draws
    changed = [not np.allclose(layer(x, training=True).numpy(), x) for _ in range(4)]
    assert any(changed)
    assert layer(x[0], training=True).shape == x[0].shape
    first = getattr(tp.layers, name)(seed=5, data_format="channels_first")
    assert first(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), training=True).shape == (3, 3, 8, 8)


def test_rand_augment_applies_the_picked_ops():
    x = _pixels()
    layer = tp.layers.RandAugment(num_ops=2, seed=0)
    transformation = layer.get_random_transformation(tp.tensor(x))
    # ops 3 (brightness) then 10 (equalization), each with its drawn parameters
    transformation["layer_idxes"] = tp.tensor([3, 10])
    out = layer.transform_images(tp.tensor(x), transformation).numpy()
    brightness, equalize = layer._ops["random_brightness"], layer._ops["equalization"]
    step = brightness.transform_images(tp.tensor(x), transformation["transforms"]["random_brightness"])
    expected = equalize.transform_images(step, transformation["transforms"]["equalization"]).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-4)
    indices = np.concatenate([layer.get_random_transformation(tp.tensor(x))["layer_idxes"].numpy() for _ in range(300)])
    assert set(indices.tolist()) == set(range(11))


def test_aug_mix_blends_chains_and_original():
    x = _pixels()
    layer = tp.layers.AugMix(seed=0, num_chains=2)
    transformation = {
        "chain_mixing_weights": tp.tensor([0.25, 0.75]),
        "weight_sample": tp.tensor(0.4),
        "chain_transforms": [[], [{"layer_name": "auto_contrast", "transformation": None}]],
    }
    out = layer.transform_images(tp.tensor(x), transformation).numpy()
    stretched = tp.layers.AutoContrast()(x).numpy()
    np.testing.assert_allclose(out, np.clip(0.4 * x + 0.6 * (0.25 * x + 0.75 * stretched), 0, 255), rtol=1e-5)
    weights = layer.get_random_transformation(tp.tensor(x))["chain_mixing_weights"].numpy()
    assert weights.shape == (2,) and abs(weights.sum() - 1.0) < 1e-6


def test_elastic_transform_probability():
    x = _pixels((16, 8, 8, 1))
    never = tp.layers.RandomElasticTransform(factor=0.0, seed=0)
    np.testing.assert_array_equal(never(x, training=True).numpy(), x)
    layer = tp.layers.RandomElasticTransform(factor=(0.5, 0.5), seed=0)
    chosen = np.concatenate(
        [layer.get_random_transformation(tp.tensor(x))["apply_transform"].numpy() for _ in range(50)]
    )
    assert abs(chosen.mean() - 0.5) < 0.06
    transformation = layer.get_random_transformation(tp.tensor(x))
    transformation["apply_transform"] = tp.tensor([True] * 8 + [False] * 8)
    out = layer.transform_images(tp.tensor(x), transformation).numpy()
    np.testing.assert_array_equal(out[8:], x[8:])
    assert not np.allclose(out[:8], x[:8])


def test_max_num_bounding_boxes_matches_keras():
    rng = np.random.default_rng(0)
    images = rng.random((2, 4, 4, 3)).astype("float32")
    boxes = rng.random((2, 5, 4)).astype("float32")
    labels = rng.integers(0, 9, (2, 5)).astype("float32")
    for max_number, fill in ((3, -1), (7, -2)):
        ours = tp.layers.MaxNumBoundingBoxes(max_number, fill_value=fill, bounding_box_format="xyxy")
        theirs = keras.layers.MaxNumBoundingBoxes(max_number, fill_value=fill, bounding_box_format="xyxy")
        for training in (True, False):
            data = {"images": images, "bounding_boxes": {"boxes": boxes, "labels": labels}}
            out = ours(dict(data), training=training)
            ref = theirs({"images": images, "bounding_boxes": {"boxes": boxes, "labels": labels}}, training=training)
            np.testing.assert_array_equal(np.asarray(out["images"]), images)
            for key in ("boxes", "labels"):
                np.testing.assert_array_equal(
                    out["bounding_boxes"][key].numpy(), np.asarray(ref["bounding_boxes"][key])
                )
    single = ours({"images": images[0], "bounding_boxes": {"boxes": boxes[0], "labels": labels[0]}})
    assert single["bounding_boxes"]["boxes"].shape == (7, 4)
    assert single["bounding_boxes"]["labels"].shape == (7,)
    np.testing.assert_array_equal(ours(images).numpy(), images)
    shape = ours.compute_output_shape(
        {"images": (2, 4, 4, 3), "bounding_boxes": {"boxes": (2, 5, 4), "labels": (2, 5)}}
    )
    assert shape["bounding_boxes"] == {"boxes": (2, 7, 4), "labels": (2, 7)}


def test_max_num_bounding_boxes_errors():
    data = {
        "images": np.zeros((1, 2, 2, 1)),
        "bounding_boxes": {"boxes": np.zeros((1, 2, 4)), "labels": np.zeros((1, 2))},
    }
    with pytest.raises(ValueError, match="bounding_box_format"):
        tp.layers.MaxNumBoundingBoxes(2)(data)
    with pytest.raises(ValueError, match="max_number"):
        tp.layers.MaxNumBoundingBoxes(0)
    bad = {**data, "bounding_boxes": {**data["bounding_boxes"], "scores": np.zeros((1, 2))}}
    with pytest.raises(ValueError, match="boxes"):
        tp.layers.MaxNumBoundingBoxes(2, bounding_box_format="xyxy")(bad)


def test_more_argument_errors():
    with pytest.raises(ValueError, match="num_ops"):
        tp.layers.RandAugment(num_ops=-1)
    with pytest.raises(ValueError, match="factor"):
        tp.layers.RandAugment(factor=1.5)
    with pytest.raises(NotImplementedError, match="interpolation"):
        tp.layers.AugMix(interpolation="bicubic")
    with pytest.raises(ValueError, match="alpha"):
        tp.layers.AugMix(alpha=0)
    with pytest.raises(ValueError, match="num_chains"):
        tp.layers.AugMix(num_chains=0)
    with pytest.raises(ValueError, match="scale"):
        tp.layers.RandomElasticTransform(scale=2.0)
    with pytest.raises(NotImplementedError, match="fill_mode"):
        tp.layers.RandomElasticTransform(fill_mode="edge")
