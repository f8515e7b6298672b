"""Convolutions and poolings of any number of spatial axes written against an array module
`xp` (NumPy or CuPy), with no Python loop over the filter's taps: the input's windows are a
strided view ([n, *out, c, *kernel], im2col without a copy) that one tensordot or einsum
contracts (one GEMM); a gradient with respect to the input is one window sum or convolution
over the output gradient spread out by the strides (zeros between), and a max pool's
gradient is one scatter-add. The GPU backend runs its window ops through these.

Inputs are channels-last: [n, *spatial, c]; filters [*kernel, c_in, c_out] (depthwise:
[*kernel, c, multiplier]). `padding` is "SAME", "VALID" or one (before, after) pair per axis.

>>> import numpy as np
>>> conv(np, np.ones((1, 4, 4, 1)), np.ones((2, 2, 1, 1)), (1, 1), "VALID", (1, 1))[0, :, :, 0].tolist()
[[4.0, 4.0, 4.0], [4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]
"""

from __future__ import annotations

import numpy as np

from tapeflow.backends.geometry import axis_geometry, padded_extent


def geometry(name: str, sizes, ksize, strides, padding, dilations) -> tuple:
    """(output sizes, ((before, after) padding per axis)) of a window op.

    >>> geometry("pool", (7,), (3,), (2,), "SAME", (1,))
    ((4,), ((1, 1),))
    """
    explicit = not isinstance(padding, str)
    outs, pads = [], []
    for axis, (size, k, s, d) in enumerate(zip(sizes, ksize, strides, dilations, strict=True)):
        out, before = axis_geometry(name, size, k, s, d, padding, tuple(padding[axis]) if explicit else (0, 0))
        outs.append(out)
        pads.append((before, padded_extent(size, out, k, s, d, before) - size - before))
    return tuple(outs), tuple(pads)


def windows(xp, x, ksize, strides, padding, dilations, name: str, fill: float = 0.0):
    """The padded input's windows, [n, *out, c, *ksize], as a strided view."""
    rank = len(ksize)
    outs, pads = geometry(name, x.shape[1 : 1 + rank], ksize, strides, padding, dilations)
    padded = xp.pad(x, ((0, 0), *pads, (0, 0)), constant_values=fill)
    spans = tuple((k - 1) * d + 1 for k, d in zip(ksize, dilations, strict=True))
    view = xp.lib.stride_tricks.sliding_window_view(padded, spans, axis=tuple(range(1, 1 + rank)))
    starts = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides, strict=True))
    return view[(slice(None), *starts, slice(None), *(slice(None, None, d) for d in dilations))]


def _crop(xp, full, pads, sizes):
    index = tuple(slice(b, b + n) for (b, _), n in zip(pads, sizes, strict=True))
    return xp.ascontiguousarray(full[(slice(None), *index, slice(None))])


def _spread(xp, dy, sizes, ksize, strides, pads, dilations):
    """The output gradient at its strided positions (zeros between) inside room for the
    kernel's reach on both sides: a stride-1 window sum over it, with the flipped kernel,
    is the gradient for the padded input."""
    rank = len(ksize)
    reach = tuple((k - 1) * d for k, d in zip(ksize, dilations, strict=True))
    padded = tuple(n + b + a for n, (b, a) in zip(sizes, pads, strict=True))
    spread = xp.zeros(
        (dy.shape[0], *(p + r for p, r in zip(padded, reach, strict=True)), *dy.shape[1 + rank :]), dy.dtype
    )
    outs = dy.shape[1 : 1 + rank]
    index = tuple(slice(r, r + (o - 1) * s + 1, s) for r, o, s in zip(reach, outs, strides, strict=True))
    spread[(slice(None), *index)] = dy
    return spread


def _flip(w, rank: int):
    return w[(slice(None, None, -1),) * rank]


def conv(xp, x, w, strides, padding, dilations, name: str = "conv"):
    """Cross-correlation: the windows contracted with the filter in one tensordot."""
    rank = w.ndim - 2
    win = windows(xp, x, w.shape[:rank], strides, padding, dilations, name)
    axes_w = (rank, *range(rank))
    return xp.tensordot(win, w, axes=(tuple(range(rank + 1, 2 * rank + 2)), axes_w)).astype(x.dtype, copy=False)


def conv_filter_grad(xp, x, dy, filter_size, strides, padding, dilations, name: str = "conv_filter_grad"):
    rank = len(filter_size)
    win = windows(xp, x, filter_size, strides, padding, dilations, name)
    dw = xp.tensordot(win, dy, axes=(tuple(range(rank + 1)), tuple(range(rank + 1))))  # [c, *k, o]
    return xp.ascontiguousarray(xp.moveaxis(dw, 0, rank)).astype(x.dtype, copy=False)


def conv_input_grad(xp, dy, w, input_size, strides, padding, dilations, name: str = "conv_transpose"):
    """col2im as one convolution of the spread-out gradient with the flipped, transposed filter."""
    rank = w.ndim - 2
    _, pads = geometry(name, input_size, w.shape[:rank], strides, padding, dilations)
    spread = _spread(xp, dy, input_size, w.shape[:rank], strides, pads, dilations)
    flipped = xp.swapaxes(_flip(w, rank), rank, rank + 1)  # [*k, o, c]
    full = conv(xp, spread, flipped, (1,) * rank, "VALID", dilations, name)
    return _crop(xp, full, pads, input_size)


def depthwise(xp, x, w, strides, padding, dilations, name: str = "depthwise_conv2d"):
    """Channel c * multiplier + m of the result: channel c of `x` with filter [..., c, m]."""
    win = windows(xp, x, w.shape[:2], strides, padding, dilations, name)
    out = xp.einsum("nhwcij,ijcm->nhwcm", win, w)
    return out.reshape(*out.shape[:3], -1).astype(x.dtype, copy=False)


def depthwise_filter_grad(xp, x, dy, filter_size, strides, padding, dilations, name: str = "depthwise_conv2d"):
    win = windows(xp, x, filter_size, strides, padding, dilations, name)
    grad = dy.reshape(*dy.shape[:3], x.shape[3], -1)
    return xp.einsum("nhwcij,nhwcm->ijcm", win, grad).astype(x.dtype, copy=False)


def depthwise_input_grad(xp, dy, w, input_size, strides, padding, dilations, name: str = "depthwise_conv2d"):
    kh, kw, c, m = w.shape
    _, pads = geometry(name, input_size, (kh, kw), strides, padding, dilations)
    grad = dy.reshape(*dy.shape[:3], c, m)
    spread = _spread(xp, grad, input_size, (kh, kw), strides, pads, dilations)  # [n, H, W, c, m]
    win = xp.lib.stride_tricks.sliding_window_view(
        spread, ((kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1), axis=(1, 2)
    )[..., :: dilations[0], :: dilations[1]]
    full = xp.einsum("nhwcmij,ijcm->nhwc", win, _flip(w, 2))
    return _crop(xp, full, pads, input_size).astype(dy.dtype, copy=False)


# ------------------------------------------------------------ pooling
def max_pool(xp, x, ksize, strides, padding, name: str = "max_pool"):
    rank = len(ksize)
    win = windows(xp, x, ksize, strides, padding, (1,) * rank, name, -np.inf)
    return win.max(axis=tuple(range(rank + 2, 2 * rank + 2)))


def _first_max_taps(xp, x, ksize, strides, padding, name):
    """For each output, the row-major tap of its window's first maximum, [n, *out, c]."""
    rank = len(ksize)
    win = windows(xp, x, ksize, strides, padding, (1,) * rank, name, -np.inf)
    return win.reshape(*win.shape[: rank + 2], -1).argmax(axis=rank + 2)


def max_pool_grad(xp, x, dy, ksize, strides, padding, name: str = "max_pool"):
    """Each output's gradient added at the input cell of its first maximum: one scatter-add."""
    rank = len(ksize)
    taps = _first_max_taps(xp, x, ksize, strides, padding, name)
    sizes, outs = x.shape[1 : 1 + rank], dy.shape[1 : 1 + rank]
    _, pads = geometry(name, sizes, ksize, strides, padding, (1,) * rank)
    padded = tuple(n + b + a for n, (b, a) in zip(sizes, pads, strict=True))
    n, c = x.shape[0], x.shape[-1]
    flat = xp.arange(n).reshape(n, *(1,) * (rank + 1))
    remainder = taps
    offsets = []
    for k in reversed(ksize):  # the tap's index along each axis, last axis first
        offsets.append(remainder % k)
        remainder = remainder // k
    for axis, (o, s, offset) in enumerate(zip(outs, strides, reversed(offsets), strict=True)):
        position = xp.arange(o).reshape(*(1,) * (axis + 1), o, *(1,) * (rank - axis)) * s + offset
        flat = flat * padded[axis] + position
    flat = flat * c + xp.arange(c)
    out = xp.zeros(n * int(np.prod(padded)) * c, dtype=dy.dtype)
    xp.add.at(out, flat.reshape(-1), dy.reshape(-1))
    return _crop(xp, out.reshape(n, *padded, c), pads, sizes)


def max_pool_grad_grad(xp, x, g, ksize, strides, padding, name: str = "max_pool"):
    """The incoming gradient read at each window's first maximum."""
    rank = len(ksize)
    taps = _first_max_taps(xp, x, ksize, strides, padding, name)
    win = windows(xp, g, ksize, strides, padding, (1,) * rank, name)
    flat = win.reshape(*win.shape[: rank + 2], -1)
    return xp.take_along_axis(flat, taps[..., None], axis=rank + 2)[..., 0].astype(x.dtype, copy=False)


def _window_counts(xp, sizes, ksize, strides, padding, dtype, name):
    """How many real (unpadded) cells each window covers, [1, *out, 1]."""
    rank = len(ksize)
    ones = xp.ones((1, *sizes, 1), dtype=dtype)
    return windows(xp, ones, ksize, strides, padding, (1,) * rank, name).sum(axis=tuple(range(rank + 2, 2 * rank + 2)))


def avg_pool(xp, x, ksize, strides, padding, name: str = "avg_pool"):
    rank = len(ksize)
    total = windows(xp, x, ksize, strides, padding, (1,) * rank, name).sum(axis=tuple(range(rank + 2, 2 * rank + 2)))
    counts = _window_counts(xp, x.shape[1 : 1 + rank], ksize, strides, padding, x.dtype, name)
    return (total / counts).astype(x.dtype, copy=False)


def avg_pool_grad(xp, dy, input_size, ksize, strides, padding, name: str = "avg_pool"):
    """Each output's share spread over its window: one stride-1 window sum of the shares."""
    rank = len(ksize)
    _, pads = geometry(name, input_size, ksize, strides, padding, (1,) * rank)
    shares = dy / _window_counts(xp, input_size, ksize, strides, padding, dy.dtype, name)
    spread = _spread(xp, shares, input_size, ksize, strides, pads, (1,) * rank)
    win = xp.lib.stride_tricks.sliding_window_view(spread, tuple(ksize), axis=tuple(range(1, 1 + rank)))
    full = win.sum(axis=tuple(range(rank + 2, 2 * rank + 2)))
    return _crop(xp, full, pads, input_size).astype(dy.dtype, copy=False)
