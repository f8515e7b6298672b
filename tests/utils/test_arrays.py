"""to_categorical, normalize, pad_sequences, split_dataset sizes and the random seeding
helpers, each against Keras 3's own function on the same inputs."""

from __future__ import annotations

import random

import keras
import numpy as np
import pytest
from keras.src.utils import dataset_utils as keras_dataset_utils

import tapeflow as tp


@pytest.mark.parametrize(
    "labels, num_classes",
    [([0, 1, 2, 3], 4), ([2, 0, 1], None), ([[1], [0], [3]], None), ([[0, 1], [2, 2]], 5), (np.array(3), 4)],
)
def test_to_categorical_matches_keras(labels, num_classes):
    ours = tp.utils.to_categorical(labels, num_classes)
    theirs = keras.utils.to_categorical(labels, num_classes)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def test_to_categorical_of_a_tensor_stays_a_tensor():
    out = tp.utils.to_categorical(tp.tensor([[2], [0]]), 3)
    assert isinstance(out, tp.Tensor)
    np.testing.assert_array_equal(out.numpy(), keras.utils.to_categorical([[2], [0]], 3))


def test_to_categorical_refuses_labels_out_of_range():
    with pytest.raises(IndexError, match="to_categorical.*\\[0, 3\\)"):
        tp.utils.to_categorical([0, 3], 3)


@pytest.mark.parametrize("axis, order", [(-1, 2), (1, 1), (-1, np.inf)])
def test_normalize_matches_keras(axis, order):
    x = np.random.default_rng(0).normal(size=(4, 3))
    x[1] = 0.0  # a zero row is left as zeros
    np.testing.assert_allclose(tp.utils.normalize(x, axis, order), keras.utils.normalize(x, axis, order))


def test_normalize_along_the_first_axis_matches_numpy():
    x = np.random.default_rng(2).normal(size=(4, 3))
    np.testing.assert_allclose(tp.utils.normalize(x, axis=0), x / np.linalg.norm(x, axis=0, keepdims=True))


def test_normalize_of_a_tensor_matches_numpy():
    x = np.random.default_rng(1).normal(size=(3, 5)).astype("float32")
    out = tp.utils.normalize(tp.tensor(x))
    np.testing.assert_allclose(out.numpy(), x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-6)


SEQUENCES = [[1, 2, 3, 4], [5], [], [6, 7]]


@pytest.mark.parametrize("padding", ["pre", "post"])
@pytest.mark.parametrize("truncating", ["pre", "post"])
@pytest.mark.parametrize("maxlen", [None, 2, 6])
def test_pad_sequences_matches_keras(padding, truncating, maxlen):
    kwargs = {"maxlen": maxlen, "padding": padding, "truncating": truncating, "value": -1}
    ours, theirs = tp.utils.pad_sequences(SEQUENCES, **kwargs), keras.utils.pad_sequences(SEQUENCES, **kwargs)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


def test_pad_sequences_of_vectors_and_strings_match_keras():
    vectors = [np.ones((3, 2)), np.zeros((1, 2))]
    np.testing.assert_array_equal(
        tp.utils.pad_sequences(vectors, dtype="float32"), keras.utils.pad_sequences(vectors, dtype="float32")
    )
    words = [["a", "b"], ["c"]]
    np.testing.assert_array_equal(
        tp.utils.pad_sequences(words, dtype=object, value="_"),
        keras.utils.pad_sequences(words, dtype=object, value="_"),
    )


@pytest.mark.parametrize(
    "bad, message",
    [({"padding": "middle"}, "padding"), ({"truncating": "x"}, "truncating"), ({"value": "a"}, "dtype")],
)
def test_pad_sequences_refuses_bad_arguments(bad, message):
    with pytest.raises(ValueError, match=f"pad_sequences.*{message}"):
        tp.utils.pad_sequences(SEQUENCES, **bad)


@pytest.mark.parametrize(
    "left, right", [(0.8, None), (None, 0.3), (3, None), (None, 4), (0.25, 0.5), (2, 5), (0.333, None)]
)
def test_split_sizes_match_keras(left, right):
    assert tp.utils.dataset_utils.split_sizes(left, right, 10) == keras_dataset_utils._rescale_dataset_split_sizes(
        left, right, 10
    )


@pytest.mark.parametrize("left, right", [(0, None), (10, None), (1.5, None), (0.7, 0.6), ("3", None), (None, None)])
def test_split_dataset_refuses_what_keras_refuses(left, right):
    with pytest.raises((TypeError, ValueError), match="split_dataset"):
        tp.utils.split_dataset(np.arange(10), left, right)


def test_split_dataset_takes_the_first_and_last_samples():
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    left, right = tp.utils.split_dataset((x, y), left_size=0.6)
    assert (len(left), len(right)) == keras_dataset_utils._rescale_dataset_split_sizes(0.6, None, 10)
    np.testing.assert_array_equal(np.stack([np.asarray(b) for _, b in left]), y[:6])
    np.testing.assert_array_equal(np.stack([np.asarray(a) for a, _ in right]), x[6:])


def test_split_dataset_shuffles_as_keras_seeded_python_shuffle():
    data = np.arange(12)
    left, right = tp.utils.split_dataset(data, left_size=5, shuffle=True, seed=3)
    expected = list(data)
    random.Random(3).shuffle(expected)  # Keras: random.seed(seed); random.shuffle(samples)
    assert [int(v) for v in left] == expected[:5] and [int(v) for v in right] == expected[5:]


def test_split_dataset_of_a_tapeflow_dataset():
    ds = tp.data.Dataset.from_tensor_slices({"a": np.arange(5), "b": np.arange(5) * 2})
    left, right = tp.utils.split_dataset(ds, right_size=2)
    assert [int(e["b"]) for e in right] == [6, 8] and len(left) == 3


def test_set_random_seed_seeds_tapeflow_numpy_and_python_as_keras_does():
    def draws():
        return tp.random.normal((3,)).numpy(), np.random.rand(), random.random()

    tp.utils.set_random_seed(11)
    first = draws()
    tp.utils.set_random_seed(11)
    second = draws()
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1:] == second[1:]
    keras.utils.set_random_seed(11)
    assert (np.random.rand(), random.random()) == first[1:]  # the same NumPy and Python streams as Keras
    with pytest.raises(ValueError, match="set_random_seed"):
        tp.utils.set_random_seed(1.5)


def test_seed_generator_follows_keras_semantics():
    a, b = tp.random.SeedGenerator(5), tp.random.SeedGenerator(5)
    first = tp.random.uniform((4,), seed=a).numpy()
    np.testing.assert_array_equal(first, tp.random.uniform((4,), seed=b).numpy())
    assert not np.array_equal(first, tp.random.uniform((4,), seed=a).numpy())  # the stream moves on
    # an int seed gives the same draw every call, as in Keras
    np.testing.assert_array_equal(tp.random.normal((3,), seed=9).numpy(), tp.random.normal((3,), seed=9).numpy())
    keras_config = keras.random.SeedGenerator(5, name="gen").get_config()
    assert tp.random.SeedGenerator(5, name="gen").get_config() == keras_config
    assert tp.random.SeedGenerator.from_config(keras_config).seed == 5
    with pytest.raises(ValueError, match="either seed= or generator="):
        tp.random.normal((2,), generator=1, seed=2)


def test_random_functions_take_keras_argument_names():
    gen = tp.random.SeedGenerator(0)
    assert tp.random.normal(shape=(2,), mean=1.0, stddev=0.5, dtype=None, seed=gen).dtype == tp.float32
    assert tp.random.truncated_normal((2,), dtype="float64", seed=gen).dtype == tp.float64
    assert tp.random.categorical(tp.zeros((2, 3)), 4, dtype="int32", seed=gen).shape == (2, 4)
    shuffled = tp.random.shuffle(tp.reshape(tp.arange(12), (3, 4)), axis=1, seed=gen).numpy()
    np.testing.assert_array_equal(np.sort(shuffled, axis=1), np.arange(12).reshape(3, 4))
