"""The channel kernels: joining arrays along the last axis and summing over every other axis,
against NumPy, on one and two threads, and through the CPU backend's `concat` and `sum` ops."""

from __future__ import annotations

import numpy as np
import pytest

from tapeflow import _kernels as K
from tapeflow.backends import numpy_backend

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_, np.float16])
@pytest.mark.parametrize("leading", [(3,), (16, 28, 28)], ids=["few rows", "many rows"])
def test_concat_last_is_numpys_concatenate(dtype, leading, threads):
    parts = [(RNG.standard_normal(leading + (width,)) * 10).astype(dtype) for width in (5, 1, 12, 3)]
    out = np.empty(leading + (21,), dtype)
    assert K.concat_last(parts, out) is out
    np.testing.assert_array_equal(out, np.concatenate(parts, axis=-1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, cols", [(1, 7), (5, 3), (50176, 64), (3000, 1)])
def test_sum_leading_adds_in_float64(dtype, rows, cols, threads):
    x = RNG.standard_normal((rows, cols)).astype(dtype) + 1.0
    got = K.sum_leading(x)
    want = x.astype(np.float64).sum(axis=0)
    assert got.dtype == dtype and got.shape == (cols,)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13)


def test_sum_leading_of_no_rows_and_special_values():
    assert K.sum_leading(np.zeros((0, 3), np.float32)).tolist() == [0.0, 0.0, 0.0]
    x = np.array([[np.inf, np.nan, 1.0], [1.0, 2.0, -np.inf]], np.float32)
    got = K.sum_leading(x)
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == -np.inf


def test_the_backend_takes_the_kernels_where_they_apply():
    """A bias gradient's sum (any size, C-contiguous, every axis but the last: the numbers of
    relu_bias_grad's sums) and an Inception module's join (large, C-contiguous, the last axis):
    the kernels' numbers there, NumPy's elsewhere."""
    x = RNG.standard_normal((8, 30, 30, 16)).astype(np.float32)
    small = RNG.standard_normal((3, 2, 5)).astype(np.float32)
    np.testing.assert_array_equal(
        numpy_backend.sum(small, (0, 1), False), K.relu_bias_grad(small, np.ones_like(small))[1]
    )
    for keepdims in (True, False):
        got = numpy_backend.sum(x, (0, 1, 2), keepdims)
        want = x.astype(np.float64).sum(axis=(0, 1, 2), keepdims=keepdims)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(numpy_backend.sum(x, (0, 1), False), np.add.reduce(x, axis=(0, 1)))
    parts = [RNG.standard_normal((8, 30, 30, c)).astype(np.float32) for c in (16, 8)]
    np.testing.assert_array_equal(numpy_backend.concat(*parts, axis=3), np.concatenate(parts, axis=3))
    strided = [p[:, ::2] for p in parts]
    np.testing.assert_array_equal(numpy_backend.concat(*strided, axis=3), np.concatenate(strided, axis=3))
    np.testing.assert_array_equal(numpy_backend.concat(*parts[:1], parts[0], axis=0), np.concatenate([parts[0]] * 2))
