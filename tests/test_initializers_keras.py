"""Keras 3's names for the initializers, STFT, OrthogonalRegularizer and the random
distributions (gamma, beta, binomial, randint), against Keras where it gives values."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

ALIASES = {
    "constant": "Constant",
    "glorot_normal": "GlorotNormal",
    "glorot_uniform": "GlorotUniform",
    "he_normal": "HeNormal",
    "he_uniform": "HeUniform",
    "identity": "Identity",
    "lecun_normal": "LecunNormal",
    "lecun_uniform": "LecunUniform",
    "ones": "Ones",
    "orthogonal": "Orthogonal",
    "random_normal": "RandomNormal",
    "random_uniform": "RandomUniform",
    "truncated_normal": "TruncatedNormal",
    "variance_scaling": "VarianceScaling",
    "zeros": "Zeros",
    "IdentityInitializer": "Identity",
    "OrthogonalInitializer": "Orthogonal",
    "STFTInitializer": "STFT",
    "stft": "STFT",
}


@pytest.mark.parametrize(("alias", "cls"), sorted(ALIASES.items()))
def test_aliases_name_the_classes(alias, cls):
    assert getattr(tp.initializers, alias) is getattr(tp.initializers, cls)
    assert type(tp.initializers.get(alias)) is getattr(tp.initializers, cls)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"side": "imag"},
        {"window": "hamming", "scaling": "spectrum"},
        {"window": None},
        {"window": "hann", "periodic": True, "scaling": None},
    ],
)
def test_stft_matches_keras(kwargs):
    ours = tp.initializers.STFT(**kwargs)((16, 1, 9))
    theirs = keras.ops.convert_to_numpy(keras.initializers.STFT(**kwargs)((16, 1, 9)))
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-5, atol=1e-5)
    assert tp.initializers.STFT(**kwargs).get_config() == keras.initializers.STFT(**kwargs).get_config()
    again = tp.initializers.deserialize(tp.initializers.serialize(tp.initializers.STFT(**kwargs)))
    assert again.get_config() == tp.initializers.STFT(**kwargs).get_config()


def test_stft_rejects_bad_arguments():
    with pytest.raises(ValueError, match="side"):
        tp.initializers.STFT(side="both")
    with pytest.raises(ValueError, match="scaling"):
        tp.initializers.STFT(scaling="power")
    with pytest.raises(ValueError, match="shape"):
        tp.initializers.STFT()((4, 4))


@pytest.mark.parametrize("mode", ["rows", "columns"])
def test_orthogonal_regularizer_matches_keras(mode):
    w = np.random.default_rng(0).normal(size=(5, 7)).astype("float32")
    ours = tp.regularizers.OrthogonalRegularizer(factor=0.3, mode=mode)
    theirs = keras.regularizers.OrthogonalRegularizer(factor=0.3, mode=mode)
    want = float(keras.ops.convert_to_numpy(theirs(keras.ops.convert_to_tensor(w))))
    np.testing.assert_allclose(float(ours(w)), want, rtol=1e-5)
    assert ours.get_config() == pytest.approx(theirs.get_config())
    assert tp.regularizers.orthogonal_regularizer is tp.regularizers.OrthogonalRegularizer
    again = tp.regularizers.deserialize(tp.regularizers.serialize(ours))
    assert again.get_config() == ours.get_config()
    assert type(tp.regularizers.get("orthogonal_regularizer")) is tp.regularizers.OrthogonalRegularizer


def test_orthogonal_regularizer_trains_a_layer():
    layer = tp.layers.Dense(4, kernel_regularizer=tp.regularizers.OrthogonalRegularizer(0.5, mode="columns"))
    layer(tp.ones((2, 3)))
    assert len(layer.losses) == 1 and float(layer.losses[0]) > 0
    with pytest.raises(ValueError, match="mode"):
        tp.regularizers.OrthogonalRegularizer(mode="diagonal")
    with pytest.raises(ValueError, match="rank 2"):
        tp.regularizers.OrthogonalRegularizer()(tp.ones((2, 2, 2)))


# (function, kwargs, mean, variance)
DISTRIBUTIONS = [
    (tp.random.gamma, {"alpha": 0.5}, 0.5, 0.5),
    (tp.random.gamma, {"alpha": 4.0}, 4.0, 4.0),
    (tp.random.beta, {"alpha": 2.0, "beta": 5.0}, 2 / 7, 10 / (49 * 8)),
    (tp.random.beta, {"alpha": 0.5, "beta": 0.5}, 0.5, 0.125),
    (tp.random.binomial, {"counts": 20, "probabilities": 0.25}, 5.0, 3.75),
    (tp.random.randint, {"minval": -3, "maxval": 7}, 1.5, (10**2 - 1) / 12),
]


@pytest.mark.parametrize(("fn", "kwargs", "mean", "variance"), DISTRIBUTIONS)
def test_distributions(fn, kwargs, mean, variance):
    x = fn((40000,), seed=5, **kwargs).numpy().astype(np.float64)
    assert abs(x.mean() - mean) < 4 * np.sqrt(variance / x.size) + 1e-9
    assert abs(x.var() - variance) < 0.05 * variance


@pytest.mark.parametrize(("fn", "kwargs", "mean", "variance"), DISTRIBUTIONS)
def test_seeds(fn, kwargs, mean, variance):
    a = fn((50,), seed=3, **kwargs).numpy()
    np.testing.assert_array_equal(a, fn((50,), seed=3, **kwargs).numpy())
    g1, g2 = tp.random.SeedGenerator(9), tp.random.SeedGenerator(9)
    first = fn((50,), seed=g1, **kwargs).numpy()
    np.testing.assert_array_equal(first, fn((50,), seed=g2, **kwargs).numpy())
    assert not np.array_equal(first, fn((50,), seed=g1, **kwargs).numpy())
    tp.random.seed(4)
    b = fn((50,), **kwargs).numpy()
    tp.random.seed(4)
    np.testing.assert_array_equal(b, fn((50,), **kwargs).numpy())


def test_dtypes_and_shapes():
    assert tp.random.gamma((2, 3), 1.0).dtype == tp.float32
    assert tp.random.beta((2,), 1.0, 1.0, dtype="float64").dtype == tp.float64
    assert tp.random.binomial((2,), 3, 0.5).dtype == tp.float32
    assert tp.random.randint((2, 2), 0, 5).dtype == tp.int32
    assert tp.random.randint((2,), 0, 5, dtype="int64").dtype == tp.int64
    assert tp.random.gamma((2, 3), 1.0).shape == (2, 3)
    x = tp.random.beta((1000,), 2.0, 2.0, seed=0).numpy()
    assert x.min() >= 0 and x.max() <= 1
    y = tp.random.randint((1000,), 2, 4, seed=0).numpy()
    assert set(y.tolist()) == {2, 3}


def test_keras_draws_have_the_same_moments():
    """Keras's samplers and ours agree in distribution (their streams differ)."""
    k = keras.ops.convert_to_numpy(keras.random.gamma((40000,), alpha=2.0, seed=1))
    t = tp.random.gamma((40000,), alpha=2.0, seed=1).numpy()
    assert abs(k.mean() - t.mean()) < 0.05 and abs(k.var() - t.var()) < 0.1
    k = keras.ops.convert_to_numpy(keras.random.binomial((40000,), counts=10, probabilities=0.3, seed=1))
    t = tp.random.binomial((40000,), counts=10, probabilities=0.3, seed=1).numpy()
    assert abs(k.mean() - t.mean()) < 0.05 and k.dtype == t.dtype


def test_bad_arguments():
    with pytest.raises(ValueError, match="alpha"):
        tp.random.gamma((2,), alpha=0.0)
    with pytest.raises(ValueError, match="probabilities"):
        tp.random.binomial((2,), 3, 1.5)
    with pytest.raises(ValueError, match="counts"):
        tp.random.binomial((2,), 2.5, 0.5)
    with pytest.raises(ValueError, match="maxval"):
        tp.random.randint((2,), 5, 5)
    with pytest.raises(TypeError, match="integer"):
        tp.random.randint((2,), 0, 5, dtype="float32")
    with pytest.raises(NotImplementedError, match="single number"):
        tp.random.gamma((2,), alpha=[1.0, 2.0])


def test_random_ops_freeze():
    @tp.function
    def draw():
        return tp.random.gamma((4,), 2.0, seed=tp.random.SeedGenerator(1)) + tp.cast(
            tp.random.randint((4,), 0, 3), "float32"
        )

    assert draw().shape == (4,)
