"""The numeric preprocessing layers against Keras 3's (torch backend): the same outputs,
adapted statistics and config keys; IntegerLookup (whose Keras version needs TensorFlow)
against a NumPy statement of its rules."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")


import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

L = tp.layers
BASE_KEYS = {"name", "trainable", "dtype"}


def _keras_out(layer, x):
    out = layer(x)
    return np.asarray(keras.ops.convert_to_numpy(out))


def _same_keys(ours, theirs):
    assert set(ours.get_config()) == set(theirs.get_config()), set(ours.get_config()) ^ set(theirs.get_config())


IMAGE_CASES = [
    ("rescaling", "Rescaling", {"scale": 0.5, "offset": -1.0}, (2, 3, 4, 2)),
    ("rescaling_channels", "Rescaling", {"scale": [1.0, 2.0], "offset": [0.5, 0.0]}, (2, 3, 2)),
    ("resizing_up", "Resizing", {"height": 5, "width": 7}, (2, 3, 4, 2)),
    ("resizing_down_nearest", "Resizing", {"height": 2, "width": 3, "interpolation": "nearest"}, (1, 5, 6, 1)),
    ("resizing_crop", "Resizing", {"height": 3, "width": 3, "crop_to_aspect_ratio": True}, (2, 4, 6, 2)),
    ("resizing_pad", "Resizing", {"height": 3, "width": 3, "pad_to_aspect_ratio": True}, (2, 4, 6, 2)),
    ("resizing_first", "Resizing", {"height": 3, "width": 2, "data_format": "channels_first"}, (2, 2, 5, 4)),
    ("resizing_unbatched", "Resizing", {"height": 3, "width": 2}, (5, 4, 3)),
    ("center_crop", "CenterCrop", {"height": 2, "width": 3}, (2, 5, 6, 2)),
    ("center_crop_upscale", "CenterCrop", {"height": 6, "width": 4}, (2, 3, 5, 1)),
    ("center_crop_first", "CenterCrop", {"height": 2, "width": 2, "data_format": "channels_first"}, (1, 3, 4, 5)),
    ("normalization_given", "Normalization", {"mean": [1.0, 2.0], "variance": [4.0, 0.25]}, (3, 2)),
    ("normalization_scalar", "Normalization", {"axis": None, "mean": 1.5, "variance": 2.0}, (3, 2)),
    ("normalization_invert", "Normalization", {"mean": [1.0, 2.0], "variance": [4.0, 0.25], "invert": True}, (3, 2)),
    ("discretization", "Discretization", {"bin_boundaries": [-0.5, 0.0, 0.7]}, (3, 4)),
    ("discretization_one_hot", "Discretization", {"bin_boundaries": [0.0, 1.0], "output_mode": "one_hot"}, (3, 1)),
    ("discretization_multi_hot", "Discretization", {"bin_boundaries": [0.0], "output_mode": "multi_hot"}, (3, 4)),
    ("discretization_count", "Discretization", {"bin_boundaries": [-1.0, 0.5], "output_mode": "count"}, (3, 5)),
]


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in IMAGE_CASES], ids=[c[0] for c in IMAGE_CASES])
def test_matches_keras(rng, name, kwargs, shape):
    x = rng.normal(size=shape)
    ours = getattr(L, name)(dtype="float64", **kwargs)
    theirs = getattr(keras.layers, name)(dtype="float64", **kwargs)
    out = ours(tp.tensor(x)).numpy()
    ref = _keras_out(theirs, x)
    assert out.shape == ref.shape == tuple(ours.compute_output_shape(shape))
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    _same_keys(ours, theirs)


@pytest.mark.parametrize("mode", ["one_hot", "multi_hot", "count"])
@pytest.mark.parametrize("shape", [(4,), (3, 1), (3, 4)])
def test_category_encoding_matches_keras(rng, mode, shape):
    x = rng.integers(0, 5, size=shape)
    ours = L.CategoryEncoding(num_tokens=5, output_mode=mode)
    theirs = keras.layers.CategoryEncoding(num_tokens=5, output_mode=mode)
    out, ref = ours(tp.tensor(x)).numpy(), _keras_out(theirs, x)
    np.testing.assert_array_equal(out, ref)
    assert tuple(ours.compute_output_shape(shape)) == ref.shape
    _same_keys(ours, theirs)


def test_category_encoding_count_weights():
    x, w = np.array([[0, 1, 1]]), np.array([[0.5, 1.0, 2.0]])
    out = L.CategoryEncoding(3, output_mode="count")(tp.tensor(x), count_weights=tp.tensor(w, dtype="float32"))
    np.testing.assert_allclose(out.numpy(), [[0.5, 3.0, 0.0]])
    with pytest.raises(ValueError, match="count_weights"):
        L.CategoryEncoding(3)(tp.tensor(x), count_weights=tp.tensor(w))


def test_normalization_adapt_matches_keras(rng):
    x = rng.normal(size=(20, 3, 2)) * 3 + 1
    for axis in (-1, (1, 2), None):
        ours, theirs = L.Normalization(axis=axis, dtype="float64"), keras.layers.Normalization(axis=axis)
        ours.adapt(x)
        theirs.adapt(x)
        np.testing.assert_allclose(ours.adapt_mean.numpy(), theirs.adapt_mean.numpy(), rtol=1e-5)
        np.testing.assert_allclose(ours.adapt_variance.numpy(), theirs.adapt_variance.numpy(), rtol=1e-5)
        np.testing.assert_allclose(ours(tp.tensor(x)).numpy(), _keras_out(theirs, x), rtol=1e-5, atol=1e-5)
        assert [w.shape for w in ours.get_weights()] == [w.shape for w in theirs.get_weights()]


def test_normalization_adapt_dataset(rng):
    x = rng.normal(size=(25, 4)) * 2 - 1
    layer = L.Normalization(dtype="float64")
    layer.adapt(tp.data.Dataset.from_tensor_slices((x, np.zeros(25))).batch(7))
    np.testing.assert_allclose(layer.adapt_mean.numpy(), x.mean(0), rtol=1e-10)
    np.testing.assert_allclose(layer.adapt_variance.numpy(), x.var(0), rtol=1e-10)
    back = L.Normalization(mean=x.mean(0), variance=x.var(0), invert=True, dtype="float64")
    np.testing.assert_allclose(back(layer(tp.tensor(x))).numpy(), x, rtol=1e-10)
    with pytest.raises(ValueError, match="does not fit"):
        layer.adapt(np.ones((3, 5)))
    with pytest.raises(ValueError, match="both mean and variance"):
        L.Normalization(mean=1.0)


def test_discretization_adapt_matches_keras(rng):
    x = rng.normal(size=(200, 1))
    # Keras's adapt() needs TensorFlow to test for datasets: its NumPy steps are the reference
    from keras.src.layers.preprocessing import discretization as kd

    ours, theirs = L.Discretization(num_bins=4, epsilon=0.01), keras.layers.Discretization(num_bins=4, epsilon=0.01)
    ours.adapt(x)
    summary = kd.merge_summaries(kd.summarize(x.astype("float32"), 0.01), theirs.summary, 0.01)
    theirs.bin_boundaries = kd.get_bin_boundaries(summary, 4).tolist()
    np.testing.assert_allclose(ours.bin_boundaries, theirs.bin_boundaries, rtol=1e-6)
    np.testing.assert_array_equal(ours(tp.tensor(x, dtype="float32")).numpy(), _keras_out(theirs, x.astype("float32")))
    ours.adapt(tp.data.Dataset.from_tensor_slices(x).batch(120))  # Keras needs TensorFlow for datasets
    np.testing.assert_allclose(ours.bin_boundaries, np.quantile(x, [0.25, 0.5, 0.75]), atol=0.1)
    clone = L.Discretization.from_config(ours.get_config())
    assert clone.bin_boundaries == ours.bin_boundaries and clone.num_bins == 4
    with pytest.raises(ValueError, match="not both"):
        L.Discretization(bin_boundaries=[0.0], num_bins=2)


def _lookup_reference(x, vocab, mask_token=None, num_oov=1):
    reserved = (mask_token is not None) + num_oov
    table = {v: i + reserved for i, v in enumerate(vocab)}
    oov = (1 if mask_token is not None else 0) if num_oov else -1
    return np.vectorize(lambda v: 0 if v == mask_token else table.get(v, oov))(x)


@pytest.mark.parametrize("mask_token, num_oov", [(None, 1), (0, 1), (None, 0), (0, 0)])
def test_integer_lookup(rng, mask_token, num_oov):
    vocab = [12, 36, 7, 3]
    x = rng.choice([0, 12, 36, 7, 3, 99, 5], size=(3, 4))
    layer = L.IntegerLookup(vocabulary=vocab, mask_token=mask_token, num_oov_indices=num_oov)
    out = layer(tp.tensor(x))
    assert out.dtype == "int64"
    np.testing.assert_array_equal(out.numpy(), _lookup_reference(x, vocab, mask_token, num_oov))
    assert layer.vocabulary_size() == len(vocab) + (mask_token is not None) + num_oov
    inverse = L.IntegerLookup(vocabulary=vocab, mask_token=mask_token, num_oov_indices=num_oov, invert=True)
    valid = out.numpy()[out.numpy() >= 0]
    table = np.asarray(layer.get_vocabulary())
    np.testing.assert_array_equal(inverse(tp.tensor(valid)).numpy(), table[valid])
    clone = L.IntegerLookup.from_config(layer.get_config())
    np.testing.assert_array_equal(clone(tp.tensor(x)).numpy(), out.numpy())


def test_integer_lookup_adapt_and_encodings():
    layer = L.IntegerLookup(max_tokens=4, output_mode="multi_hot")
    layer.adapt(tp.data.Dataset.from_tensor_slices(np.array([5, 5, 5, 9, 9, 2, 2, 1])).batch(3))
    assert layer.get_vocabulary() == [-1, 5, 2, 9]
    np.testing.assert_array_equal(layer(tp.tensor([[5, 1], [9, 9]])).numpy(), [[1, 1, 0, 0], [0, 0, 0, 1]])
    count = L.IntegerLookup(vocabulary=[4, 6], output_mode="count")
    np.testing.assert_array_equal(count(tp.tensor([[4, 4, 8]])).numpy(), [[1, 2, 0]])
    with pytest.raises(NotImplementedError, match="num_oov_indices"):
        L.IntegerLookup(num_oov_indices=2)
    with pytest.raises(TypeError, match="integer"):
        count(tp.tensor([1.0]))
    with pytest.raises(ValueError, match="repeated"):
        L.IntegerLookup(vocabulary=[1, 1])


def test_functional_model_and_errors():
    inputs = L.Input((4, 4, 3))
    outputs = L.CenterCrop(2, 2)(L.Rescaling(1 / 255)(inputs))
    model = tp.Model(inputs, outputs)
    assert model.outputs[0].shape == (None, 2, 2, 3)
    out = model(np.full((1, 4, 4, 3), 255, dtype="uint8"))
    np.testing.assert_allclose(out.numpy(), 1.0)
    ids = L.Input((3,), dtype="int64")
    looked_up = L.IntegerLookup(vocabulary=[5, 6, 7])(ids)
    assert looked_up.dtype == "int64" and looked_up.shape == (None, 3)
    embedded = tp.Model(ids, L.Embedding(4, 2)(looked_up))(np.array([[5, 7, 9]]))
    assert embedded.shape == (1, 3, 2)
    buckets = L.Discretization([0.0, 1.0])(L.Input((3,)))
    assert buckets.dtype == "int32" and buckets.shape == (None, 3)
    with pytest.raises(ValueError, match="height"):
        L.Resizing(0, 2)
    with pytest.raises(ValueError, match="data_format"):
        L.CenterCrop(2, 2, data_format="nhwc")


def test_adapted_normalization_round_trips(rng, tmp_path):
    layer = L.Normalization(axis=(1, 2), dtype="float64")
    layer.adapt(rng.normal(size=(6, 2, 3)))
    assert [w.dtype.name for w in layer.weights] == ["float64", "float64", "int64"]  # Keras's mean, variance, count
    x = tp.tensor(rng.normal(size=(3, 2, 3)))
    clone = L.deserialize(L.serialize(layer))
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x).numpy(), layer(x).numpy())
    graph = tp.freeze(layer, tp.TensorSpec((None, 2, 3), "float64"))
    np.testing.assert_allclose(graph(x).numpy(), layer(x).numpy())
