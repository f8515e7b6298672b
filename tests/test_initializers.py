"""Initializers: fan-based variances and bounds, seeds, orthogonality, lookup."""

import math

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import initializers as inits

DENSE, CONV = (400, 300), (3, 3, 32, 64)

# (class, scale, mode, distribution): the variance asked for is scale / fan(mode)
FAN_BASED = [
    (inits.GlorotUniform, 1.0, "fan_avg", "uniform"),
    (inits.GlorotNormal, 1.0, "fan_avg", "truncated_normal"),
    (inits.HeNormal, 2.0, "fan_in", "truncated_normal"),
    (inits.HeUniform, 2.0, "fan_in", "uniform"),
    (inits.LecunNormal, 1.0, "fan_in", "truncated_normal"),
    (inits.LecunUniform, 1.0, "fan_in", "uniform"),
]


def _fan(shape, mode):
    receptive = math.prod(shape[:-2])
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    return {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]


@pytest.mark.parametrize("shape", [DENSE, CONV], ids=["dense", "conv"])
@pytest.mark.parametrize(("cls", "scale", "mode", "distribution"), FAN_BASED, ids=[c[0].__name__ for c in FAN_BASED])
def test_fan_based_variance(cls, scale, mode, distribution, shape):
    t = cls(seed=3)(shape)
    assert t.shape == shape and t.dtype == tp.float32
    w = t.numpy().astype(np.float64)
    variance = scale / _fan(shape, mode)
    # the sample variance of n draws has a relative standard error of about sqrt(2 / n) < 0.5% here
    assert w.var() == pytest.approx(variance, rel=0.03)
    assert abs(w.mean()) < 4 * math.sqrt(variance / w.size)
    if distribution == "uniform":
        assert np.abs(w).max() <= math.sqrt(3 * variance)
        assert np.abs(w).max() > 0.99 * math.sqrt(3 * variance)
    else:  # normal truncated at two of its (pre-truncation) standard deviations
        bound = 2 * math.sqrt(variance) / 0.87962566103423978
        assert np.abs(w).max() <= bound * (1 + 1e-6)


@pytest.mark.parametrize(
    ("init", "mean", "std", "bound"),
    [
        (inits.RandomNormal(0.5, 2.0, seed=1), 0.5, 2.0, None),
        (inits.RandomUniform(-1.0, 3.0, seed=1), 1.0, 4 / math.sqrt(12), (-1.0, 3.0)),
        (inits.TruncatedNormal(0.0, 1.0, seed=1), 0.0, 0.87962566103423978, (-2.0, 2.0)),
        (inits.VarianceScaling(4.0, "fan_out", "untruncated_normal", seed=1), 0.0, math.sqrt(4 / 300), None),
    ],
)
def test_plain_distributions(init, mean, std, bound):
    w = init(DENSE).numpy().astype(np.float64)
    assert w.mean() == pytest.approx(mean, abs=4 * std / math.sqrt(w.size))
    assert w.std() == pytest.approx(std, rel=0.02)
    if bound is not None:
        assert bound[0] <= w.min() and w.max() <= bound[1]


def test_keras_default_arguments():
    assert inits.RandomNormal().get_config() == {"mean": 0.0, "stddev": 0.05, "seed": None}
    assert inits.RandomUniform().get_config() == {"minval": -0.05, "maxval": 0.05, "seed": None}
    assert inits.TruncatedNormal().get_config() == {"mean": 0.0, "stddev": 0.05, "seed": None}
    assert inits.VarianceScaling().get_config() == {
        "scale": 1.0,
        "mode": "fan_in",
        "distribution": "truncated_normal",
        "seed": None,
    }
    assert inits.Orthogonal().get_config() == {"gain": 1.0, "seed": None}


def test_compute_fans():
    assert inits.compute_fans(()) == (1, 1)
    assert inits.compute_fans((7,)) == (7, 7)
    assert inits.compute_fans((784, 10)) == (784, 10)
    assert inits.compute_fans((5, 5, 1, 32)) == (25, 800)
    assert inits.compute_fans((3, 8, 16)) == (24, 48)  # a 1-D convolution filter [k, in, out]


# ------------------------------------------------------------------- seeds
@pytest.mark.parametrize("cls", [inits.GlorotUniform, inits.HeNormal, inits.Orthogonal])
def test_int_seed_repeats_and_differs_between_seeds(cls):
    a, b = cls(seed=11)((6, 5)).numpy(), cls(seed=11)((6, 5)).numpy()
    np.testing.assert_array_equal(a, b)
    init = cls(seed=11)
    np.testing.assert_array_equal(init((6, 5)).numpy(), init((6, 5)).numpy())  # Keras 3: same values each call
    assert not np.array_equal(a, cls(seed=12)((6, 5)).numpy())


def test_generator_seed_draws_on_and_global_stream_follows_tp_random_seed():
    init = inits.RandomNormal(seed=tp.random.Generator(4))
    first, second = init((3,)).numpy(), init((3,)).numpy()
    assert not np.array_equal(first, second)
    again = inits.RandomNormal(seed=tp.random.Generator(4))
    np.testing.assert_array_equal(again((3,)).numpy(), first)
    tp.random.seed(9)
    x = inits.GlorotNormal()((4, 4)).numpy()
    tp.random.seed(9)
    np.testing.assert_array_equal(inits.GlorotNormal()((4, 4)).numpy(), x)
    with pytest.raises(TypeError, match="seed"):
        inits.RandomNormal(seed="abc")


# -------------------------------------------------------------- orthogonal
@pytest.mark.parametrize("shape", [(8, 8), (20, 5), (5, 20), (3, 3, 4, 6)])
def test_orthogonal_is_orthogonal(shape):
    w = inits.Orthogonal(gain=2.0, seed=0)(shape, "float64").numpy()
    assert w.shape == shape
    flat = w.reshape(-1, shape[-1])
    gram = flat.T @ flat if flat.shape[0] >= flat.shape[1] else flat @ flat.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(gram.shape[0]), atol=1e-10)
    with pytest.raises(ValueError, match="rank >= 2"):
        inits.Orthogonal()((5,))


# --------------------------------------------------------------- constants
def test_constant_initializers():
    assert inits.Zeros()((2, 2)).numpy().tolist() == [[0.0, 0.0], [0.0, 0.0]]
    ones = inits.Ones()((3,), "int64")
    assert ones.dtype == tp.int64 and ones.numpy().tolist() == [1, 1, 1]
    assert inits.Constant(2.5)((2,), "float64").numpy().tolist() == [2.5, 2.5]
    assert inits.Identity()((2, 2)).numpy().tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_dtypes():
    assert inits.GlorotUniform(seed=0)((3, 3), "float64").dtype == tp.float64
    assert inits.HeNormal(seed=0)((3, 3), dtype=tp.float16).dtype == tp.float16
    with pytest.raises(TypeError, match="GlorotUniform: needs a floating-point dtype"):
        inits.GlorotUniform()((3, 3), "int32")


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        inits.VarianceScaling(mode="fan_sum")
    with pytest.raises(ValueError, match="distribution"):
        inits.VarianceScaling(distribution="laplace")
    with pytest.raises(ValueError, match="scale"):
        inits.VarianceScaling(scale=0.0)
    with pytest.raises(ValueError, match="minval"):
        inits.RandomUniform(1.0, 0.0)


# --------------------------------------------------------------------- get
@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("glorot_uniform", inits.GlorotUniform),
        ("GlorotNormal", inits.GlorotNormal),
        ("he_normal", inits.HeNormal),
        ("he_uniform", inits.HeUniform),
        ("lecun_normal", inits.LecunNormal),
        ("zeros", inits.Zeros),
        ("ones", inits.Ones),
        ("constant", inits.Constant),
        ("random_normal", inits.RandomNormal),
        ("uniform", inits.RandomUniform),
        ("truncated_normal", inits.TruncatedNormal),
        ("orthogonal", inits.Orthogonal),
    ],
)
def test_get_by_name(name, cls):
    assert type(inits.get(name)) is cls


def test_get_objects_configs_and_callables():
    init = inits.HeUniform(seed=5)
    assert inits.get(init) is init
    again = inits.get({"class_name": "HeUniform", "config": init.get_config()})
    np.testing.assert_array_equal(again((4, 4)).numpy(), init((4, 4)).numpy())

    def fn(shape, dtype=None):
        return tp.zeros(shape)

    assert inits.get(fn) is fn
    assert inits.get(None) is None
    with pytest.raises(ValueError, match=r"unknown initializer 'xavier'.*'glorot_uniform'"):
        inits.get("xavier")
