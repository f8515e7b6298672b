"""3x3 and 5x5, stride-1 convolutions by Winograd's F(2x2, 3x3), F(4x4, 3x3) and F(2x2, 5x5)
against a float64 NumPy correlation and against the im2col kernel: the forward product and both
gradients, for odd and even output sizes, every padding the layers use, one and two threads,
with each thread taking chunks of its own and with the threads sharing chunks."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow._kernels import conv

RNG = np.random.default_rng(3)


def correlate(x, w, pad_top, pad_left, out_h, out_w):
    """y[n, i, j, o] = sum over (a, b, c) of x[n, i + a - pad_top, j + b - pad_left, c] w[a, b, c, o]."""
    n, h, wd, c = x.shape
    k = w.shape[0]
    padded = np.zeros((n, out_h + k - 1, out_w + k - 1, c))
    rows = slice(max(0, pad_top), min(h + pad_top, out_h + k - 1))
    cols = slice(max(0, pad_left), min(wd + pad_left, out_w + k - 1))
    padded[:, rows, cols] = x[
        :, rows.start - pad_top : rows.stop - pad_top, cols.start - pad_left : cols.stop - pad_left
    ]
    y = np.zeros((n, out_h, out_w, w.shape[3]))
    for a in range(k):
        for b in range(k):
            y += padded[:, a : a + out_h, b : b + out_w] @ w[a, b]
    return y


IM2COL = (1 << 20, 1, 1 << 40)  # limits no convolution meets
OWN_CHUNKS, SHARED_CHUNKS = (1, 1 << 40, 1), (1, 1, 1)


def correlate_shift(x, a, b, pad_top, pad_left, out_h, out_w):
    """x[n, i + a - pad_top, j + b - pad_left, :] for i < out_h, j < out_w (zeros outside)."""
    n, h, wd, c = x.shape
    out = np.zeros((n, out_h, out_w, c))
    for i in range(out_h):
        for j in range(out_w):
            r, s = i + a - pad_top, j + b - pad_left
            if 0 <= r < h and 0 <= s < wd:
                out[:, i, j] = x[:, r, s]
    return out


@pytest.fixture(params=["own chunks", "shared chunks"])
def winograd_everywhere(request, tile):
    old = conv._set_winograd_limits(*(OWN_CHUNKS if request.param == "own chunks" else SHARED_CHUNKS))
    yield
    conv._set_winograd_limits(*old)


@pytest.fixture(params=["2x2 tiles", "4x4 tiles", "tiles that pay"])
def tile(request):
    """F(2x2, 3x3) everywhere, F(4x4, 3x3) everywhere, or each where it is chosen."""
    limits = {"2x2 tiles": (0.0, 0, 0), "4x4 tiles": (float("inf"), 0, 0), "tiles that pay": None}[request.param]
    old = conv._set_winograd_big_tiles(*limits) if limits is not None else None
    yield request.param
    if old is not None:
        conv._set_winograd_big_tiles(*old)


def _im2col(fn, *args):
    old = conv._set_winograd_limits(*IM2COL)
    try:
        return fn(*args)
    finally:
        conv._set_winograd_limits(*old)


CASES = [  # (n, h, w, c, o, pad_top, pad_left, out_h, out_w): same, valid, odd, asymmetric, 1x1
    (2, 7, 9, 5, 6, 1, 1, 7, 9),
    (1, 6, 6, 3, 4, 0, 0, 4, 4),
    (3, 5, 8, 4, 2, 2, 1, 6, 8),
    (2, 8, 8, 3, 3, 0, 1, 6, 7),
    (1, 1, 1, 2, 2, 1, 1, 1, 1),
    (2, 12, 10, 33, 17, 1, 1, 12, 10),
]
CASES_5X5 = [  # the same for 5x5 filters
    (2, 7, 9, 5, 6, 2, 2, 7, 9),
    (1, 8, 8, 3, 4, 0, 0, 4, 4),
    (3, 5, 8, 4, 2, 3, 1, 6, 8),
    (2, 8, 8, 3, 3, 0, 1, 4, 5),
    (1, 1, 1, 2, 2, 2, 2, 1, 1),
    (2, 12, 10, 33, 17, 2, 2, 12, 10),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k, case", [(3, c) for c in CASES] + [(5, c) for c in CASES_5X5])
def test_forward_and_input_gradient_match_a_float64_correlation(k, case, threads, winograd_everywhere):
    n, h, wd, c, o, pt, pl, oh, ow = case
    x, w = RNG.standard_normal((n, h, wd, c)), RNG.standard_normal((k, k, c, o))
    dy = RNG.standard_normal((n, oh, ow, o))
    old = tp.get_num_threads()
    tp.set_num_threads(threads)
    try:
        y = conv.conv2d_forward(x, w, 1, 1, pt, pl, 1, 1, oh, ow)
        dx = conv.conv2d_backward_input(dy, w, h, wd, 1, 1, pt, pl, 1, 1)
        y32 = conv.conv2d_forward(x.astype(np.float32), w.astype(np.float32), 1, 1, pt, pl, 1, 1, oh, ow)
    finally:
        tp.set_num_threads(old)
    np.testing.assert_allclose(y, correlate(x, w, pt, pl, oh, ow), rtol=1e-12, atol=1e-12)
    # the input gradient is the adjoint of the forward product: <forward(x), dy> = <x, dx>, and
    # it is what the im2col kernel's col2im gives
    np.testing.assert_allclose(np.vdot(correlate(x, w, pt, pl, oh, ow), dy), np.vdot(x, dx), rtol=1e-10)
    np.testing.assert_allclose(
        dx, _im2col(conv.conv2d_backward_input, dy, w, h, wd, 1, 1, pt, pl, 1, 1), rtol=1e-11, atol=1e-11
    )
    # the filter gradient: sum over (n, i, j) of x[n, i + a - pad_top, j + b - pad_left, c] dy[n, i, j, o]
    dw = conv.conv2d_backward_filter(x, dy, k, k, 1, 1, pt, pl, 1, 1)
    expected = np.stack(
        [
            np.stack(
                [
                    np.tensordot(correlate_shift(x, a, b, pt, pl, oh, ow), dy, axes=([0, 1, 2], [0, 1, 2]))
                    for b in range(k)
                ]
            )
            for a in range(k)
        ]
    )
    np.testing.assert_allclose(dw, expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(y32, y, rtol=2e-5, atol=2e-5 * np.abs(y).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("shape", [(8, 15, 14, 64, 48), (11, 12, 12, 272, 256)], ids=["own chunks", "shared chunks"])
def test_it_agrees_with_im2col_where_it_is_chosen(shape, k, dtype, tile):
    """Shapes for which Winograd's way is the default (448 and 396 tiles; 3,072 and 69,632
    channel pairs), 3x3 and 5x5 filters with "same" padding: the numbers of im2col, to the
    rounding of the dtype."""
    n, h, w_, c, o = shape
    x = RNG.standard_normal((n, h, w_, c)).astype(dtype)
    w = RNG.standard_normal((k, k, c, o)).astype(dtype)
    dy = RNG.standard_normal((n, h, w_, o)).astype(dtype)
    p = k // 2
    calls = [
        (conv.conv2d_forward, x, w, 1, 1, p, p, 1, 1, h, w_),
        (conv.conv2d_backward_input, dy, w, h, w_, 1, 1, p, p, 1, 1),
        (conv.conv2d_backward_filter, x, dy, k, k, 1, 1, p, p, 1, 1),
    ]
    ours = [call[0](*call[1:]) for call in calls]
    theirs = [_im2col(*call) for call in calls]
    assert not np.array_equal(ours[0], theirs[0])  # the two ways ran: they round differently
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


def test_the_filter_gradient_takes_it_from_half_the_tiles():
    """196 tiles: the filter gradient goes Winograd's way (it pays from half the forward's
    tiles), the forward product stays with im2col."""
    x = RNG.standard_normal((4, 14, 14, 64)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 64, 48)).astype(np.float32)
    dy = RNG.standard_normal((4, 14, 14, 48)).astype(np.float32)
    forward = (conv.conv2d_forward, x, w, 1, 1, 1, 1, 1, 1, 14, 14)
    filter_grad = (conv.conv2d_backward_filter, x, dy, 3, 3, 1, 1, 1, 1, 1, 1)
    np.testing.assert_array_equal(forward[0](*forward[1:]), _im2col(*forward))
    ours, theirs = filter_grad[0](*filter_grad[1:]), _im2col(*filter_grad)
    assert not np.array_equal(ours, theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())


def test_threads_summing_their_own_tiles_give_the_filter_gradient(tile):
    """4,608 2x2 tiles or 1,152 4x4 ones: on two threads each sums the products of its own
    tiles, a chunk of the per-thread bound at a time, and the sums are added at the end; the
    result is im2col's and one thread's, to float32 rounding."""
    x = RNG.standard_normal((8, 48, 48, 32)).astype(np.float32)
    dy = RNG.standard_normal((8, 48, 48, 40)).astype(np.float32)
    call = (conv.conv2d_backward_filter, x, dy, 3, 3, 1, 1, 1, 1, 1, 1)
    old = tp.get_num_threads()
    try:
        tp.set_num_threads(2)
        two = call[0](*call[1:])
        tp.set_num_threads(1)
        one = call[0](*call[1:])
    finally:
        tp.set_num_threads(old)
    theirs = _im2col(*call)
    for ours in (two, one):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())


def test_a_conv_layer_trains_the_same_either_way(winograd_everywhere):
    """A Conv2D(3x3) layer's output and gradients through the op, Winograd's way against im2col."""
    x = tp.tensor(RNG.standard_normal((2, 9, 9, 40)).astype(np.float32))
    layer = tp.layers.Conv2D(36, 3, padding="same")

    def run():
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tp.sum(y * y)
        return [y.numpy(), *(g.numpy() for g in tape.gradient(loss, [x, layer.kernel]))]

    ours, theirs = run(), _im2col(run)
    assert not np.array_equal(ours[0], theirs[0])  # the two ways ran: they round differently
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())


@pytest.mark.parametrize(
    "kernel, pad, stride",
    [(3, 1, 1), (1, 0, 1), (3, 1, 2)],
    ids=["winograd", "1x1 product", "col2im"],
)
def test_the_input_gradient_fills_every_element_of_a_reused_block(kernel, pad, stride, tile):
    """dx is left unzeroed where its way writes every element (Winograd, a 1x1 product): in a
    block that held NaNs before, nothing of them is left."""
    from tapeflow._kernels import allocator

    n, h, c, o = 8, 16, 40, 36  # dx of 320 KiB: a block the allocator keeps
    out = (h + 2 * pad - kernel) // stride + 1
    w = RNG.standard_normal((kernel, kernel, c, o)).astype(np.float32)
    dy = RNG.standard_normal((n, out, out, o)).astype(np.float32)
    old = conv._set_winograd_limits(1, 1 << 40, 1)
    try:
        with allocator.reusing_blocks():
            stale = np.full((n, h, h, c), np.nan, np.float32)
            del stale
            reused = allocator.reused_blocks()
            dx = conv.conv2d_backward_input(dy, w, h, h, stride, stride, pad, pad, 1, 1)
            assert allocator.reused_blocks() > reused
    finally:
        conv._set_winograd_limits(*old)
    assert np.isfinite(dx).all()
    want = _im2col(conv.conv2d_backward_input, dy, w, h, h, stride, stride, pad, pad, 1, 1)
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_the_transformed_filters_zero_rows_are_zeroed_in_a_reused_block(tile):
    """The forward product's transformed filters are left unzeroed but for the row of zeros
    the padding reads: blocks that held NaNs before leave no trace in the output."""
    from tapeflow._kernels import allocator

    c = o = 96
    x = RNG.standard_normal((2, 8, 8, c)).astype(np.float32)
    w = RNG.standard_normal((3, 3, c, o)).astype(np.float32)
    old = conv._set_winograd_limits(1, 1 << 40, 1)
    try:
        with allocator.reusing_blocks():
            stale = [np.full(p * c * o + c + o, np.nan, np.float32) for p in (16, 36)]
            del stale
            y = conv.conv2d_forward(x, w, 1, 1, 1, 1, 1, 1, 8, 8)
    finally:
        conv._set_winograd_limits(*old)
    want = _im2col(conv.conv2d_forward, x, w, 1, 1, 1, 1, 1, 1, 8, 8)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
