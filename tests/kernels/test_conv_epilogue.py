"""The forward convolution's bias and relu, applied by the kernel as it writes each block of
outputs (a fused_conv2d node), against a float64 NumPy correlation plus bias and max(., 0): on
every way the kernel has (1x1 products, im2col in many chunks, Winograd with chunks of each
thread's own or shared, the direct way for few input channels), one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow._kernels import conv

RNG = np.random.default_rng(11)


def correlate(x, w, stride, pad, out_h, out_w):
    """y[n, i, j, o] = sum of x[n, i*s + a - pad, j*s + b - pad, c] w[a, b, c, o] (zeros outside)."""
    n, h, wd, c = x.shape
    kh, kw = w.shape[:2]
    padded = np.zeros((n, h + 2 * pad + kh + stride * out_h, wd + 2 * pad + kw + stride * out_w, c))
    padded[:, pad : pad + h, pad : pad + wd] = x
    y = np.zeros((n, out_h, out_w, w.shape[3]))
    for a in range(kh):
        for b in range(kw):
            window = padded[:, a : a + stride * out_h : stride, b : b + stride * out_w : stride]
            y += window @ w[a, b]
    return y


# (input shape, filter shape, stride, pad, the limits that pick the way)
OWN, SHARED, NONE = (1, 1 << 40, 1), (1, 1, 1), (1 << 20, 1, 1 << 40)
WAYS = {
    "1x1 product": ((2, 7, 9, 24), (1, 1, 24, 40), 1, 0, NONE),
    "im2col": ((3, 9, 8, 12), (3, 3, 12, 20), 1, 1, NONE),
    "winograd, own chunks": ((2, 9, 10, 8), (3, 3, 8, 12), 1, 1, OWN),
    "winograd, shared chunks": ((2, 10, 9, 8), (3, 3, 8, 12), 1, 1, SHARED),
    "direct, few channels": ((2, 13, 13, 3), (5, 5, 3, 32), 2, 2, NONE),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("way", sorted(WAYS))
def test_bias_and_relu_as_the_outputs_are_written(way, dtype, relu, threads):
    shape, wshape, stride, pad, limits = WAYS[way]
    x, w, bias = RNG.standard_normal(shape), RNG.standard_normal(wshape), RNG.standard_normal(wshape[3])
    x[0, 1, 2, 0] = np.nan  # a NaN input spreads to its outputs and stays NaN through the relu
    out_h = (shape[1] + 2 * pad - wshape[0]) // stride + 1
    out_w = (shape[2] + 2 * pad - wshape[1]) // stride + 1
    want = correlate(x, w, stride, pad, out_h, out_w) + bias
    if relu:
        want = np.maximum(want, 0)
    old_limits, old_threads = conv._set_winograd_limits(*limits), tp.get_num_threads()
    old_chunk = conv._set_col_buffer_bytes(2048)
    tp.set_num_threads(threads)
    try:
        runs_before = conv._direct_runs()
        got = conv.conv2d_forward(
            x.astype(dtype), w.astype(dtype), stride, stride, pad, pad, 1, 1, out_h, out_w, bias.astype(dtype), relu
        )
        direct_ran = conv._direct_runs() > runs_before
    finally:
        conv._set_winograd_limits(*old_limits)
        conv._set_col_buffer_bytes(old_chunk)
        tp.set_num_threads(old_threads)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if relu:
        assert np.nanmin(got) == 0
    if way.startswith("direct"):
        assert direct_ran == (dtype == np.float32 and conv._direct_supported())


def test_relu_without_bias_and_a_bias_that_does_not_fit():
    x, w = RNG.standard_normal((1, 4, 4, 2)), RNG.standard_normal((1, 1, 2, 3))
    got = conv.conv2d_forward(x, w, 1, 1, 0, 0, 1, 1, 4, 4, None, True)
    np.testing.assert_allclose(got, np.maximum(x @ w[0, 0], 0), rtol=1e-12)
    with pytest.raises(ValueError, match=r"conv2d_forward: bias of shape \(4,\) does not match .* 3 outputs"):
        conv.conv2d_forward(x, w, 1, 1, 0, 0, 1, 1, 4, 4, np.zeros(4), False)


def test_an_empty_output_still_gets_its_bias_shape():
    x, w = np.zeros((0, 4, 4, 2)), RNG.standard_normal((1, 1, 2, 3))
    got = conv.conv2d_forward(x, w, 1, 1, 0, 0, 1, 1, 4, 4, np.ones(3), True)
    assert got.shape == (0, 4, 4, 3)
