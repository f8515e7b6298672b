"""The counter-based uniform draws: bit for bit against SplitMix64 written in NumPy's wrapping
uint64 arithmetic, the same numbers on one thread and two and for any length, and the
statistics of a uniform distribution."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _kernels as K

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix_reference(key: int, draws: int) -> np.ndarray:
    """The 64-bit draws 0 .. draws - 1 of `key`'s stream, in NumPy (uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + np.arange(1, draws + 1, dtype=np.uint64) * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def reference_float32(key: int, size: int) -> np.ndarray:
    z = splitmix_reference(key, (size + 1) // 2)
    pairs = np.stack([z >> np.uint64(40), (z & np.uint64(0xFFFFFFFF)) >> np.uint64(8)], axis=1).reshape(-1)
    return (pairs[:size].astype(np.float64) * 2.0**-24).astype(np.float32)


def reference_float64(key: int, size: int) -> np.ndarray:
    return (splitmix_reference(key, size) >> np.uint64(11)).astype(np.float64) * 2.0**-53


@pytest.mark.parametrize("size", [0, 1, 2, 7, 16, 1001, 40_000])
@pytest.mark.parametrize("key", [0, 12345, 2**64 - 1])
def test_draws_equal_the_numpy_reference(size, key):
    np.testing.assert_array_equal(K.uniform(key, size, np.float32), reference_float32(key, size))
    np.testing.assert_array_equal(K.uniform(key, size, np.float64), reference_float64(key, size))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads_and_lengths_do_not_change_the_numbers(dtype):
    size = (1 << 20) + 3  # past the size where two threads share the work, odd
    K.set_num_threads(1)
    try:
        one = K.uniform(99, size, dtype)
    finally:
        K.set_num_threads(2)
    two = K.uniform(99, size, dtype)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(K.uniform(99, 1000, dtype), two[:1000])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_draws_look_uniform(dtype):
    n = 1 << 20
    u = K.uniform(2024, n, dtype).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.002
    counts = np.bincount((u * 256).astype(np.int64), minlength=256)
    expected = n / 256
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 255 + 6 * np.sqrt(2 * 255), chi2  # 255 degrees of freedom, six standard deviations
    lag1 = np.corrcoef(u[:-1], u[1:])[0, 1]
    assert abs(lag1) < 6 / np.sqrt(n), lag1
    other = K.uniform(2025, n, dtype).astype(np.float64)  # a neighbouring key: an unrelated stream
    assert abs(np.corrcoef(u, other)[0, 1]) < 6 / np.sqrt(n)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="uniform: dtype must be float32 or float64"):
        K.uniform(1, 4, np.int32)
    with pytest.raises(ValueError, match="uniform: size must be >= 0"):
        K.uniform(1, -1, np.float32)


def test_seeded_uniform_repeats_and_moves_on():
    g = tp.random.Generator(5)
    first, second = g.uniform((64, 3)).numpy(), g.uniform((64, 3)).numpy()
    again = tp.random.Generator(5)
    np.testing.assert_array_equal(again.uniform((64, 3)).numpy(), first)
    np.testing.assert_array_equal(again.uniform((64, 3)).numpy(), second)
    assert not np.array_equal(first, second)
    wide = tp.random.uniform((1000,), dtype="float64", seed=3).numpy()
    assert wide.dtype == np.float64 and 0.0 <= wide.min() and wide.max() < 1.0


def python_swap_order(draws) -> list[int]:
    rows = list(range(len(draws)))
    for last, j in zip(range(len(draws) - 1, -1, -1), draws, strict=True):
        rows[j], rows[last] = rows[last], rows[j]
    return rows[::-1]


@pytest.mark.parametrize("n", [0, 1, 2, 5, 1000])
def test_swap_order_is_the_fisher_yates_loop(n):
    draws = np.random.default_rng(n).integers(0, np.arange(n, 0, -1)) if n else np.zeros(0, np.int64)
    order = K.swap_order(np.asarray(draws, np.int64))
    assert order.dtype == np.intp and order.tolist() == python_swap_order([int(d) for d in draws])
    assert sorted(order.tolist()) == list(range(n))


def test_swap_order_refuses_a_draw_outside_the_rows_left():
    with pytest.raises(ValueError, match=r"swap_order: draw 3 at position 1 is outside \[0, 1\]"):
        K.swap_order(np.array([0, 3, 0], np.int64))
