"""A frozen training step writes Adam's, AdamW's and SGD's new weights and moments into the arrays
the variables already hold (nothing else holding them), with the eager step's numbers; an array
that something else holds is left as it was and the variable gets a new one."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(5)
OPTIMIZERS = {
    "adam": lambda: tp.optimizers.Adam(0.01),
    "adamw": lambda: tp.optimizers.AdamW(0.01, weight_decay=0.1),
    "sgd": lambda: tp.optimizers.SGD(0.01),  # a fused elementwise program written into the weight
    "sgd-momentum": lambda: tp.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
}


def _model(jit, optimizer):
    model = tp.Sequential([tp.Input((6,)), tp.layers.Dense(5, activation="relu"), tp.layers.Dense(3)])
    model.compile(optimizer=optimizer, loss="mse", jit=jit)
    return model


def _address(variable) -> int:
    return variable._value.__array_interface__["data"][0]  # no reference to the array kept


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_frozen_step_updates_weights_and_moments_in_place(name):
    x = RNG.standard_normal((16, 6)).astype(np.float32)
    y = RNG.standard_normal((16, 3)).astype(np.float32)
    eager, frozen = _model(False, OPTIMIZERS[name]()), _model(True, OPTIMIZERS[name]())
    frozen.set_weights(eager.get_weights())
    eager.train_on_batch(x, y)
    frozen.train_on_batch(x, y)  # builds the slots and the frozen step
    kernel = frozen.layers[0].kernel
    held = [kernel, *frozen.optimizer.slots(kernel).values()]
    addresses = [_address(v) for v in held]
    eager.train_on_batch(x, y)
    frozen.train_on_batch(x, y)  # a copy would be made while the old array lives: a new address
    assert [_address(v) for v in held] == addresses
    for _ in range(2):
        eager.train_on_batch(x, y)
        frozen.train_on_batch(x, y)
    for ours, theirs in zip(frozen.get_weights(), eager.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    eager_slots = eager.optimizer.slots(eager.layers[0].kernel)
    for slot, value in frozen.optimizer.slots(kernel).items():
        np.testing.assert_allclose(value.numpy(), eager_slots[slot].numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_a_weight_held_elsewhere_keeps_its_values(name):
    x = RNG.standard_normal((16, 6)).astype(np.float32)
    y = RNG.standard_normal((16, 3)).astype(np.float32)
    model = _model(True, OPTIMIZERS[name]())
    model.train_on_batch(x, y)
    kernel = model.layers[0].kernel
    view = kernel._value[:]  # a NumPy view of the weight's array
    before = view.copy()
    model.train_on_batch(x, y)
    np.testing.assert_array_equal(view, before)
    assert not np.array_equal(kernel.numpy(), before)


def test_the_in_place_kernel_has_the_out_of_place_arithmetic():
    from tapeflow import _kernels

    p, m, v, g = (RNG.standard_normal((33, 17)).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    expected = _kernels.adam_update(p, m, v, g, 0.01, 0.9, 0.999, 1e-7, 0.19, 0.003)
    _kernels.adam_update_in_place(p, m, v, g, 0.01, 0.9, 0.999, 1e-7, 0.19, 0.003)
    for actual, want in zip((p, m, v), expected, strict=True):
        np.testing.assert_array_equal(actual, want)
    with pytest.raises(ValueError, match="C-contiguous"):
        _kernels.adam_update_in_place(p.T, m.T, v.T, g.T, 0.01, 0.9, 0.999, 1e-7, 1, 1)
    frozen = np.ones(3)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        _kernels.adam_update_in_place(frozen, np.ones(3), np.ones(3), np.ones(3), 0.01, 0.9, 0.999, 1e-7, 1, 1)


def test_an_elementwise_program_written_into_an_input_has_the_same_bits():
    """`Program.into` writes the result into the input it names, through each block's scratch,
    with the bits of the program run into a new array; it declines (None, nothing written)
    where that input is broadcast or read-only."""
    from tapeflow.backends import numpy_backend

    program = (("input", 0), ("input", 1), ("input", 2), ("multiply", 1, 2), ("subtract", 0, 3), ("tanh", 4))
    kernel = numpy_backend.bind_fused_elementwise(None, program)
    w = RNG.standard_normal((700, 33)).astype(np.float32)  # blocks over both threads
    lr, g = np.array(0.1, np.float32), RNG.standard_normal((700, 33)).astype(np.float32)
    expected = kernel(w, lr, g)
    written = w.copy()
    assert kernel.into(0, written, lr, g) is written
    np.testing.assert_array_equal(written, expected)
    row = RNG.standard_normal(33).astype(np.float32)
    assert kernel.into(0, row, lr, g) is None  # a broadcast row cannot hold the result
    frozen = w.copy()
    frozen.flags.writeable = False
    assert kernel.into(0, frozen, lr, g) is None
    np.testing.assert_array_equal(frozen, w)
    assert kernel.into(5, w, lr, g) is None
