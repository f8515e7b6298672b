"""Products against a matrix packed in panels of 16 columns: a recurrent step's against its kernel,
and matmul's (which packs blocks of its right operand on each call). Every tail of rows and
columns against float64, and the LSTM and GRU sequences with them against the BLAS path."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tapeflow import _kernels as K
from tapeflow._kernels import recurrent

panels = pytest.mark.skipif(not recurrent._panel_supported(), reason="the panel products need AVX2 with FMA")


@pytest.fixture
def blas_then_panels():
    old = recurrent._set_panels(False)
    yield lambda: recurrent._set_panels(True)
    recurrent._set_panels(old)


@panels
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 13])
@pytest.mark.parametrize("k, n", [(1, 1), (7, 15), (128, 16), (5, 17), (33, 40)])
@pytest.mark.parametrize("add", [False, True])
def test_rows_times_a_packed_matrix_match_float64(m, k, n, add):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    expected = (c.astype(np.float64) if add else 0.0) + a.astype(np.float64) @ b.astype(np.float64)
    assert recurrent._panel_product(a, b, c, add)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@panels
def test_a_product_that_does_not_fit_is_refused():
    a, b = np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"_panel_product: shapes \(3, 4\), \(5, 2\)"):
        recurrent._panel_product(a, b, np.zeros((3, 2), np.float32), False)


def _lstm(masked, backwards):
    rng = np.random.default_rng(3)
    nb, nt, nu = 19, 7, 6  # 24 gate columns: a full panel and a part; 6 units: part of one
    xp = rng.standard_normal((nb, nt, 4 * nu)).astype(np.float32)
    h0, c0 = (rng.standard_normal((nb, nu)).astype(np.float32) for _ in range(2))
    kernel = (rng.standard_normal((nu, 4 * nu)) * 0.4).astype(np.float32)
    mask = (rng.random((nb, nt)) > 0.3).astype(np.uint8) if masked else None
    ys, cs = np.empty((nb, nt, nu), np.float32), np.empty((nb, nt, nu), np.float32)
    acts, h, c = np.empty_like(xp), np.empty_like(h0), np.empty_like(c0)
    recurrent.lstm_forward(xp, h0, c0, kernel, mask, backwards, ys, cs, acts, h, c)
    gys, gh, gc = (rng.standard_normal(a.shape).astype(np.float32) for a in (ys, h, c))
    dxp, dh0, dc0, dkernel = np.empty_like(xp), np.empty_like(h0), np.empty_like(c0), np.empty_like(kernel)
    recurrent.lstm_backward(gys, gh, gc, h0, c0, kernel, ys, cs, acts, mask, backwards, dxp, dh0, dc0, dkernel)
    return ys, cs, acts, h, c, dxp, dh0, dc0, dkernel


def _gru(masked, reset_after):
    rng = np.random.default_rng(4)
    nb, nt, nu = 19, 7, 6
    xp = rng.standard_normal((nb, nt, 3 * nu)).astype(np.float32)
    h0 = rng.standard_normal((nb, nu)).astype(np.float32)
    kernel = (rng.standard_normal((nu, 3 * nu)) * 0.4).astype(np.float32)
    bias = rng.standard_normal(3 * nu).astype(np.float32)
    mask = (rng.random((nb, nt)) > 0.3).astype(np.uint8) if masked else None
    ys, acts, h = np.empty((nb, nt, nu), np.float32), np.empty((nb, nt, 4 * nu), np.float32), np.empty_like(h0)
    recurrent.gru_forward(xp, h0, kernel, bias, mask, reset_after, False, ys, acts, h)
    gys, gh = rng.standard_normal(ys.shape).astype(np.float32), rng.standard_normal(h.shape).astype(np.float32)
    dxp, dh0, dkernel, dbias = np.empty_like(xp), np.empty_like(h0), np.empty_like(kernel), np.empty_like(bias)
    recurrent.gru_backward(gys, gh, h0, kernel, ys, acts, mask, reset_after, False, dxp, dh0, dkernel, dbias)
    return ys, acts, h, dxp, dh0, dkernel, dbias


@panels
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("run, option", [(_lstm, False), (_lstm, True), (_gru, False), (_gru, True)],
                         ids=["lstm", "lstm-backwards", "gru", "gru-reset-after"])  # fmt: skip
def test_the_sequences_on_panels_match_the_blas_path(blas_then_panels, masked, run, option):
    blas = run(masked, option)
    blas_then_panels()
    packed = run(masked, option)
    for k, (a, b) in enumerate(zip(blas, packed, strict=True)):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=f"output {k}")


def _matmul_on(a, b, threads):
    K.set_num_threads(threads)
    try:
        return K.matmul(a, b)
    finally:
        K.set_num_threads(2)


@panels
@pytest.mark.parametrize("m", [6, 7, 13, 80])
@pytest.mark.parametrize("k, n", [(1, 16), (5, 17), (300, 40), (33, 300)])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True)])
def test_matmul_on_panels_matches_float64_and_blas_with_the_same_bits_on_any_threads(m, k, n, trans_a, trans_b):
    rng = np.random.default_rng(m * 7 + k * 3 + n)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    one, two = _matmul_on(a, b, 1), _matmul_on(a, b, 2)
    old = K._gemm._set_panels(False)
    try:
        blas = K.matmul(a, b)
    finally:
        K._gemm._set_panels(old)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    np.testing.assert_allclose(one, blas, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@panels
def test_beyond_the_work_limit_only_products_of_few_rows_keep_to_panels():
    """Past the limit of multiply-adds a product of at most 72 rows (a dense layer's forward
    at a small batch) still takes the panel kernel; one of more rows takes BLAS."""
    rng = np.random.default_rng(11)
    few, many = (rng.standard_normal((m, 300)).astype(np.float32) for m in (16, 80))
    b = rng.standard_normal((300, 40)).astype(np.float32)
    on_panels = [K.matmul(a, b) for a in (few, many)]
    old = K._gemm._set_panels(False)
    try:
        on_blas = [K.matmul(a, b) for a in (few, many)]
    finally:
        K._gemm._set_panels(old)
    old = K._gemm._set_panel_max_work(1000)
    try:
        limited = [K.matmul(a, b) for a in (few, many)]
    finally:
        K._gemm._set_panel_max_work(old)
    assert all(p.tobytes() != q.tobytes() for p, q in zip(on_panels, on_blas, strict=True))  # told apart
    assert limited[0].tobytes() == on_panels[0].tobytes()
    assert limited[1].tobytes() == on_blas[1].tobytes()
    np.testing.assert_allclose(limited[0], few.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


@panels
@pytest.mark.parametrize("m, k, n", [(6, 5, 16), (13, 300, 17), (80, 33, 300)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("transposed_w", [False, True])
def test_dense_adds_the_bias_and_relu_as_it_stores_and_keeps_nans(m, k, n, relu, transposed_w):
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    a[1, 0] = np.nan  # row 1 of the output is NaN throughout; relu keeps it so
    w = rng.standard_normal((n, k) if transposed_w else (k, n)).astype(np.float32)
    w = w.T if transposed_w else w
    bias = rng.standard_normal(n).astype(np.float32)
    fused = K._gemm.dense(a, w, bias, relu)
    old = K._gemm._set_panels(False)
    try:
        apart = K._gemm.dense(a, w, bias, relu)
    finally:
        K._gemm._set_panels(old)
    expected = a.astype(np.float64) @ w.astype(np.float64) + bias
    expected = np.where(expected > 0, expected, 0.0) if relu else expected
    expected[1] = np.nan
    np.testing.assert_allclose(fused, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    np.testing.assert_allclose(fused, apart, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@panels
def test_products_from_several_python_threads_each_pack_into_their_own_buffer():
    rng = np.random.default_rng(11)
    pairs = [
        (rng.standard_normal((70, 300)).astype(np.float32), rng.standard_normal((300, 90)).astype(np.float32))
        for _ in range(6)
    ]
    expected = [a.astype(np.float64) @ b.astype(np.float64) for a, b in pairs]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda ab: [K.matmul(*ab) for _ in range(20)], pairs))
    for got, want in zip(results, expected, strict=True):
        for one in got:
            np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-4)
