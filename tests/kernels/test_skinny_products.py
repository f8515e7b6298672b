"""Products with a few rows against a large transposed operand (a dense layer's input gradient
at a small batch), which read the large operand once instead of packing it: checked against
float64, against the BLAS path, for every tail of rows and columns, and for the same bits on
one thread and two."""

from __future__ import annotations

import numpy as np
import pytest

from tapeflow import _kernels as K

skinny = pytest.mark.skipif(not K._gemm._skinny_supported(), reason="the skinny kernel needs AVX2 with FMA")


@pytest.fixture
def small_limits():
    """The skinny kernel for every product with up to 32 rows, however small its operands."""
    old = K._gemm._set_skinny_limits(32, 1)
    yield
    K._gemm._set_skinny_limits(*old)


def _products(g, w, threads):
    K.set_num_threads(threads)
    try:
        return K.matmul(g, w.T)
    finally:
        K.set_num_threads(2)


@skinny
@pytest.mark.parametrize("m", [2, 7, 16, 32])
@pytest.mark.parametrize("rows, width", [(4, 8), (9, 17), (130, 1000), (3, 5)])
def test_few_rows_times_a_transposed_matrix_match_float64(m, rows, width, small_limits):
    rng = np.random.default_rng(m * 100 + rows)
    g = rng.standard_normal((m, width)).astype(np.float32)
    w = rng.standard_normal((rows, width)).astype(np.float32)
    expected = g.astype(np.float64) @ w.astype(np.float64).T
    one, two = _products(g, w, 1), _products(g, w, 2)
    assert one.shape == (m, rows) and one.dtype == np.float32
    np.testing.assert_array_equal(one, two)  # each element summed in one order whatever the threads
    np.testing.assert_allclose(two, expected, rtol=1e-5, atol=1e-5 * np.sqrt(width))


@skinny
def test_the_skinny_kernel_agrees_with_blas_on_a_dense_layers_gradient():
    rng = np.random.default_rng(5)
    g = rng.standard_normal((16, 1024)).astype(np.float32)
    w = rng.standard_normal((2048, 1024)).astype(np.float32)  # 2^21 elements: the skinny kernel's size
    fast = K.matmul(g, w.T)
    old = K._gemm._set_skinny_limits(0, 1 << 62)
    try:
        blas = K.matmul(g, w.T)
    finally:
        K._gemm._set_skinny_limits(*old)
    np.testing.assert_allclose(fast, blas, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fast, g.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-4)


@skinny
def test_operands_at_any_offset(small_limits):
    """Rows of both operands at addresses with no alignment."""
    rng = np.random.default_rng(6)
    buffer = rng.standard_normal(1 + 5 * 37 + 11 * 37).astype(np.float32)
    g = buffer[1 : 1 + 5 * 37].reshape(5, 37)
    w = buffer[1 + 5 * 37 :].reshape(11, 37)
    assert g.ctypes.data % 32 and w.ctypes.data % 32
    np.testing.assert_allclose(K.matmul(g, w.T), g.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


def test_other_products_keep_to_blas(small_limits):
    """float64, a^T @ b and many rows take the other paths, with the same results."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((40, 20)), rng.standard_normal((30, 20))
    np.testing.assert_allclose(K.matmul(a, b.T), a @ b.T, rtol=1e-12)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_allclose(K.matmul(a32, b32.T), a @ b.T, rtol=1e-5, atol=1e-5)  # 40 rows: BLAS
    c32 = rng.standard_normal((40, 10)).astype(np.float32)
    np.testing.assert_allclose(K.matmul(a32.T, c32), a.T @ c32.astype(np.float64), rtol=1e-5, atol=1e-5)
