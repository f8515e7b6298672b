"""The activations Keras 3 added to `keras.activations`, against Keras (torch backend):
values, finite-difference gradients in float64, and serialization by name."""

import numpy as np
import pytest

import tapeflow as tp

keras = pytest.importorskip("keras")

CASES = [
    ("celu", {}),
    ("celu", {"alpha": 0.5}),
    ("glu", {}),
    ("glu", {"axis": 0}),
    ("hard_shrink", {}),
    ("hard_shrink", {"threshold": 1.0}),
    ("hard_silu", {}),
    ("hard_swish", {}),
    ("hard_tanh", {}),
    ("log_sigmoid", {}),
    ("log_softmax", {}),
    ("log_softmax", {"axis": 0}),
    ("mish", {}),
    ("soft_shrink", {}),
    ("soft_shrink", {"threshold": 1.0}),
    ("sparse_plus", {}),
    ("sparse_sigmoid", {}),
    ("sparsemax", {}),
    ("squareplus", {}),
    ("squareplus", {"b": 1}),
    ("tanh_shrink", {}),
    ("threshold", {"threshold": 0.5, "default_value": -1.0}),
]


@pytest.mark.parametrize("name, kwargs", CASES)
def test_values_match_keras(name, kwargs):
    x = (np.random.default_rng(0).standard_normal((4, 6)) * 2).astype("float32")
    want = keras.ops.convert_to_numpy(getattr(keras.activations, name)(x, **kwargs))
    got = getattr(tp.activations, name)(tp.tensor(x), **kwargs)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, kwargs", CASES)
def test_gradients_match_finite_differences(name, kwargs):
    x = np.random.default_rng(1).standard_normal((2, 4)) * 2
    cot = np.random.default_rng(2).standard_normal(getattr(tp.activations, name)(tp.tensor(x), **kwargs).shape)
    xt = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        y = getattr(tp.activations, name)(xt, **kwargs)
    got = tape.gradient(y, xt, output_gradients=tp.tensor(cot)).numpy()
    eps = 1e-6
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        f = getattr(tp.activations, name)
        numeric[i] = np.sum((f(tp.tensor(hi), **kwargs).numpy() - f(tp.tensor(lo), **kwargs).numpy()) * cot) / (2 * eps)
    np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted({n for n, _ in CASES}))
def test_serialized_by_name_like_keras(name):
    fn = tp.activations.get(name)
    assert tp.activations.deserialize(tp.activations.serialize(fn)) is fn
    assert tp.activations.serialize(fn) == keras.activations.serialize(keras.activations.get(name))
    layer = tp.layers.Dense(2, activation=name)
    assert layer.get_config()["activation"] == keras.layers.Dense(2, activation=name).get_config()["activation"]
