"""The whole-sequence LSTM and GRU kernels, forward and back, split over threads by batch rows
give what one thread gives."""

import numpy as np
import pytest

from tapeflow._kernels import recurrent


@pytest.fixture
def one_thread_then_many():
    old = recurrent._set_parallel_min(1 << 62)
    yield lambda: recurrent._set_parallel_min(0)
    recurrent._set_parallel_min(old)


def _run(dtype, masked, backwards):
    rng = np.random.default_rng(0)
    nb, nt, nu = 37, 9, 6
    xp = rng.standard_normal((nb, nt, 4 * nu)).astype(dtype)
    h0, c0 = (rng.standard_normal((nb, nu)).astype(dtype) for _ in range(2))
    kernel = (rng.standard_normal((nu, 4 * nu)) * 0.3).astype(dtype)
    mask = (rng.random((nb, nt)) > 0.3).astype(np.uint8) if masked else None
    ys, cs = np.empty((nb, nt, nu), dtype), np.empty((nb, nt, nu), dtype)
    acts, h, c = np.empty_like(xp), np.empty((nb, nu), dtype), np.empty((nb, nu), dtype)
    recurrent.lstm_forward(xp, h0, c0, kernel, mask, backwards, ys, cs, acts, h, c)
    gys, gh, gc = rng.standard_normal(ys.shape).astype(dtype), rng.standard_normal(h.shape).astype(dtype), h * 0
    dxp, dh0, dc0, dkernel = np.empty_like(xp), np.empty_like(h0), np.empty_like(c0), np.empty_like(kernel)
    recurrent.lstm_backward(gys, gh, gc, h0, c0, kernel, ys, cs, acts, mask, backwards, dxp, dh0, dc0, dkernel)
    return ys, cs, acts, h, c, dxp, dh0, dc0, dkernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("backwards", [False, True])
def test_threads_split_the_batch_without_changing_the_results(one_thread_then_many, dtype, masked, backwards):
    alone = _run(dtype, masked, backwards)
    one_thread_then_many()
    split = _run(dtype, masked, backwards)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for k, (a, b) in enumerate(zip(alone, split, strict=True)):
        np.testing.assert_allclose(b, a, rtol=tolerance, atol=tolerance, err_msg=f"output {k}")


def _run_gru(dtype, masked, backwards, reset_after):
    rng = np.random.default_rng(1)
    nb, nt, nu = 37, 9, 6
    xp = rng.standard_normal((nb, nt, 3 * nu)).astype(dtype)
    h0 = rng.standard_normal((nb, nu)).astype(dtype)
    kernel = (rng.standard_normal((nu, 3 * nu)) * 0.3).astype(dtype)
    bias = rng.standard_normal(3 * nu).astype(dtype)
    mask = (rng.random((nb, nt)) > 0.3).astype(np.uint8) if masked else None
    ys, acts, h = np.empty((nb, nt, nu), dtype), np.empty((nb, nt, 4 * nu), dtype), np.empty((nb, nu), dtype)
    recurrent.gru_forward(xp, h0, kernel, bias, mask, reset_after, backwards, ys, acts, h)
    gys, gh = rng.standard_normal(ys.shape).astype(dtype), rng.standard_normal(h.shape).astype(dtype)
    dxp, dh0, dkernel, dbias = np.empty_like(xp), np.empty_like(h0), np.empty_like(kernel), np.empty_like(bias)
    recurrent.gru_backward(gys, gh, h0, kernel, ys, acts, mask, reset_after, backwards, dxp, dh0, dkernel, dbias)
    return ys, acts, h, dxp, dh0, dkernel, dbias


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("reset_after", [False, True])
def test_the_gru_splits_the_batch_without_changing_the_results(one_thread_then_many, dtype, masked, reset_after):
    alone = _run_gru(dtype, masked, True, reset_after)
    one_thread_then_many()
    split = _run_gru(dtype, masked, True, reset_after)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for k, (a, b) in enumerate(zip(alone, split, strict=True)):
        np.testing.assert_allclose(b, a, rtol=tolerance, atol=tolerance, err_msg=f"output {k}")
