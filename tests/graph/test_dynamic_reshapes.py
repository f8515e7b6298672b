"""Reshapes of tensors whose batch size is known only at run time: inserting or dropping
size-1 axes moves the unknown size, and the simplifier never merges reshapes whose `None`
sizes refer to different inputs."""

import numpy as np
import pytest

import tapeflow as tp

CASES = [
    ("stack", lambda a: tp.stack([a, a]), (None, 4), (3, 4)),
    ("stack_last", lambda a: tp.stack([a, a * 2.0], axis=-1), (None, 4), (3, 4)),
    ("expand_front", lambda a: tp.expand_dims(a, 0) * 2.0, (None, 4), (3, 4)),
    ("squeeze_front", lambda a: tp.squeeze(tp.expand_dims(a, 0), 0) + 1.0, (None, 4), (3, 4)),
    ("reshape_then_expand", lambda a: tp.expand_dims(tp.reshape(a, (-1, 4)), 1), (None, 3, 4), (2, 3, 4)),
    ("two_unknowns_kept", lambda a: tp.expand_dims(a, -1) + 1.0, (None, None), (2, 5)),
    ("two_unknowns_moved", lambda a: tp.expand_dims(a, 1) * 3.0, (None, None, 4), (2, 5, 4)),
    ("two_unknowns_squeezed", lambda a: tp.squeeze(tp.expand_dims(a, 0), 0) - 1.0, (None, None), (2, 5)),
    ("three_unknowns_squeezed_inside", lambda a: tp.squeeze(a, 1) * 2.0, (None, 1, None, None), (2, 1, 3, 4)),
]


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("fn, spec, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_frozen_reshapes_with_a_dynamic_batch_equal_eager(fn, spec, shape, optimize):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    frozen = tp.freeze(fn, tp.TensorSpec(spec, "float32"), optimize=optimize)
    np.testing.assert_allclose(frozen(x).numpy(), fn(tp.tensor(x)).numpy(), rtol=1e-6)


@pytest.mark.parametrize("fn, spec, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gradients_through_reshapes_with_dynamic_sizes_equal_eager(fn, spec, shape):
    x = np.random.default_rng(1).normal(size=shape).astype("float32")

    def gradient(a):
        with tp.GradientTape() as tape:
            tape.watch(a)
            y = tp.sum(tp.sin(fn(a)))
        return tape.gradient(y, a)

    frozen = tp.freeze(gradient, tp.TensorSpec(spec, "float32"))
    np.testing.assert_allclose(frozen(x).numpy(), gradient(tp.tensor(x)).numpy(), rtol=1e-6)


def test_a_conv1d_over_sequences_of_unknown_length_trains_as_eagerly():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(8, 12, 3)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
    weights = {}
    for jit in (True, False):
        model = tp.Sequential(
            [tp.Input((None, 3)), tp.layers.Conv1D(4, 3), tp.layers.GlobalMaxPooling1D(), tp.layers.Dense(2)]
        )
        weights.setdefault("start", model.get_weights())
        model.set_weights(weights["start"])
        model.compile(tp.optimizers.SGD(0.1), "mse", jit=jit)
        model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        weights[jit] = model.get_weights()
    for a, b in zip(weights[True], weights[False], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
