"""Direct convolution for inputs with few channels (an image's first layer): the forward product
and the filter gradient against float64 PyTorch, against im2col, for odd widths (pixel blocks
cut short), strides, padding on every side, and the same bits on one thread and two."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tapeflow import _kernels as K

direct = pytest.mark.skipif(not K._conv._direct_supported(), reason="the direct kernels need AVX2 with FMA")

# (batch, height, width, channels, kernel, stride, pads (top, left, bottom, right), outputs)
CASES = [
    (2, 17, 23, 3, 7, 2, (3, 3, 3, 3), 32),  # GoogLeNet's first layer in small
    (3, 27, 27, 3, 11, 4, (0, 0, 0, 0), 64),  # AlexNet's
    (1, 13, 11, 1, 3, 1, (1, 0, 2, 1), 96),  # one channel, uneven padding
    (2, 9, 31, 7, 5, 3, (2, 2, 2, 2), 32),  # 7 channels: the most the band path takes
]


def _reference(x, w, dy, stride, pads):
    top, left, bottom, right = pads
    tx = torch.nn.functional.pad(torch.tensor(x.transpose(0, 3, 1, 2), dtype=torch.float64), (left, right, top, bottom))
    tw = torch.tensor(w.transpose(3, 2, 0, 1), dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw, stride=stride)
    y.backward(torch.tensor(dy.transpose(0, 3, 1, 2), dtype=torch.float64))
    return y.detach().numpy().transpose(0, 2, 3, 1), tw.grad.numpy().transpose(2, 3, 1, 0)


def _output_size(size, kernel, stride, low, high):
    return (size + low + high - kernel) // stride + 1


@direct
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])))
def test_direct_convolution_matches_float64_and_im2col(case):
    n, h, w_, c, k, s, pads, o = case
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((n, h, w_, c)).astype(np.float32)
    w = rng.standard_normal((k, k, c, o)).astype(np.float32)
    oh, ow = _output_size(h, k, s, pads[0], pads[2]), _output_size(w_, k, s, pads[1], pads[3])
    dy = rng.standard_normal((n, oh, ow, o)).astype(np.float32)
    geom = (s, s, pads[0], pads[1], 1, 1)
    runs = {}
    for threads, way in ((1, True), (2, True), (2, False)):
        K.set_num_threads(threads)
        old = K._conv._set_direct(way)
        before = K._conv._direct_runs()
        try:
            runs[threads, way] = (K.conv2d_forward(x, w, *geom, oh, ow), K.conv2d_backward_filter(x, dy, k, k, *geom))
            assert K._conv._direct_runs() - before == (2 if way else 0)  # both products took the way asked for
        finally:
            K._conv._set_direct(old)
            K.set_num_threads(2)
    y_ref, dw_ref = _reference(x, w, dy, s, pads)
    y, dw = runs[2, True]
    np.testing.assert_array_equal(runs[1, True][0], y)  # one chain of multiply-adds per output
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5 * np.abs(y_ref).max())
    np.testing.assert_allclose(dw, dw_ref, rtol=1e-4, atol=1e-5 * np.abs(dw_ref).max())
    np.testing.assert_allclose(runs[1, True][1], dw_ref, rtol=1e-4, atol=1e-5 * np.abs(dw_ref).max())
    y_col, dw_col = runs[2, False]
    np.testing.assert_allclose(y, y_col, rtol=1e-5, atol=1e-5 * np.abs(y_col).max())
    np.testing.assert_allclose(dw, dw_col, rtol=1e-4, atol=1e-5 * np.abs(dw_col).max())


def test_float64_and_other_widths_keep_to_im2col():
    """float64, output channels that are not a multiple of 32, and many input channels take
    im2col, with the float64 reference's numbers."""
    rng = np.random.default_rng(9)
    for dtype, c, o in ((np.float64, 3, 32), (np.float32, 3, 24), (np.float32, 16, 32)):
        x = rng.standard_normal((2, 10, 10, c)).astype(dtype)
        w = rng.standard_normal((3, 3, c, o)).astype(dtype)
        dy = rng.standard_normal((2, 4, 4, o)).astype(dtype)
        y_ref, dw_ref = _reference(x, w, dy, 2, (0, 0, 0, 0))
        tol = 1e-10 if dtype == np.float64 else 1e-4
        np.testing.assert_allclose(K.conv2d_forward(x, w, 2, 2, 0, 0, 1, 1, 4, 4), y_ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(K.conv2d_backward_filter(x, dy, 3, 3, 2, 2, 0, 0, 1, 1), dw_ref, rtol=tol, atol=tol)
