"""Volumetric (3-D) convolution and pooling ops on NDHWC volumes; filters are DHWIO.

>>> import tapeflow as tp
>>> from tapeflow.ops.nn.conv3d import conv3d
>>> conv3d(tp.ones((1, 4, 4, 4, 2)), tp.ones((3, 3, 3, 2, 5)), padding="SAME").shape
(1, 4, 4, 4, 5)
"""

from __future__ import annotations

import functools

import numpy as np

from tapeflow.ops import shapes
from tapeflow.ops.half import in_float32
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor

__all__ = ["conv3d", "conv3d_transpose", "max_pool3d", "avg_pool3d"]


# ---------------------------------------------------------------- geometry
def _triple(name: str, label: str, value) -> tuple:
    """An int, three ints, or TensorFlow's [1, d, h, w, 1], as three positive ints."""
    values = (value,) * 3 if isinstance(value, int | np.integer) and not isinstance(value, bool) else value
    if not isinstance(values, list | tuple):
        raise ValueError(f"{name}: {label} must be a positive int or three of them, got {value!r}")
    values = tuple(values)
    if len(values) == 5:
        values = values[1:4]
    if len(values) != 3:
        raise ValueError(f"{name}: {label} must be a positive int or three of them, got {value!r}")
    return tuple(shapes.as_int(name, label, v, low=1) for v in values)


def _padding(name: str, padding) -> str:
    if not isinstance(padding, str) or padding.upper() not in ("SAME", "VALID"):
        raise ValueError(f"{name}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return padding.upper()


def _geometry(name: str, sizes, ksize, strides, padding, dilations) -> tuple:
    """(output sizes, (before, after) padding per spatial axis) of a 3-D window op."""
    outs, pads = [], []
    for size, k, s, d in zip(sizes, ksize, strides, dilations, strict=True):
        out, before = shapes.axis_geometry(name, size, k, s, d, padding, (0, 0))
        outs.append(out)
        if size is not None:
            pads.append((before, shapes.padded_extent(size, out, k, s, d, before) - size - before))
    return tuple(outs), tuple(pads)


def _taps(ksize, strides, dilations, outs):
    """(tap index, slices into the padded volume) for each kernel tap."""
    for tap in np.ndindex(*ksize):
        spans = zip(tap, strides, dilations, outs, strict=True)
        yield tap, (slice(None), *(slice(t * d, t * d + (o - 1) * s + 1, s) for t, s, d, o in spans), slice(None))


def _pad(x, pads, value=0.0):
    return np.pad(x, ((0, 0), *pads, (0, 0)), constant_values=value)


def _crop(xp, pads, sizes):
    return xp[(slice(None), *(slice(b, b + n) for (b, _), n in zip(pads, sizes, strict=True)), slice(None))]


def _check_volume(name: str, x, label: str = "input") -> None:
    if len(x.shape) != 5:
        raise ValueError(f"{name}: {label} must be 5-D NDHWC, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name}: {label} must be floating point, got {x.dtype}")


def _check_filter(name: str, w, dtype) -> None:
    if len(w.shape) != 5:
        raise ValueError(f"{name}: filter must be 5-D DHWIO, got shape {w.shape}")
    if w.dtype is not dtype:
        raise TypeError(f"{name}: input dtype {dtype} and filter dtype {w.dtype} differ")


# ------------------------------------------------------------- convolution
def _conv_infer(x, w, strides, padding, dilations):
    _check_volume("conv3d", x)
    _check_filter("conv3d", w, x.dtype)
    if x.shape[4] != w.shape[3]:
        raise ValueError(
            f"conv3d: input channels {x.shape[4]} (input {x.shape}) do not match filter in-channels "
            f"{w.shape[3]} (filter {w.shape})"
        )
    outs, _ = _geometry("conv3d", x.shape[1:4], w.shape[:3], strides, padding, dilations)
    return [((x.shape[0], *outs, w.shape[4]), x.dtype)]


def _conv_vjp(gs, xs, ys, strides, padding, dilations, needs=(True, True)):
    x, w = xs
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    dx = apply(_CONV3D_INPUT_GRAD, (gs[0], w), {"input_size": x.shape[1:4], **attrs}) if needs[0] else None
    dw = apply(_CONV3D_FILTER_GRAD, (x, gs[0]), {"filter_size": w.shape[:3], **attrs}) if needs[1] else None
    return dx, dw


@defop("conv3d", infer=_conv_infer, vjp=_conv_vjp, partial_vjp=True)
def _CONV3D(x, w, strides, padding, dilations):
    outs, pads = _geometry("conv3d", x.shape[1:4], w.shape[:3], strides, padding, dilations)
    xp = _pad(x, pads)
    out = np.zeros_like(x, shape=(x.shape[0], *outs, w.shape[4]))
    for tap, index in _taps(w.shape[:3], strides, dilations, outs):
        out += xp[index] @ w[tap]
    return out


def _input_grad_infer(dy, w, input_size, strides, padding, dilations):
    _check_volume("conv3d_transpose", dy)
    _check_filter("conv3d_transpose", w, dy.dtype)
    if dy.shape[4] != w.shape[4]:
        raise ValueError(
            f"conv3d_transpose: input channels {dy.shape[4]} do not match filter out-channels {w.shape[4]} "
            f"(filter {w.shape})"
        )
    outs, _ = _geometry("conv3d_transpose", input_size, w.shape[:3], strides, padding, dilations)
    if outs != tuple(dy.shape[1:4]):
        raise ValueError(
            f"conv3d_transpose: output size {tuple(input_size)} is inconsistent with input {dy.shape} "
            f"(a forward conv of that size gives {outs})"
        )
    return [((dy.shape[0], *input_size, w.shape[3]), dy.dtype)]


def _input_grad_vjp(gs, xs, ys, input_size, strides, padding, dilations):
    dy, w = xs
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    return (
        apply(_CONV3D, (gs[0], w), attrs),
        apply(_CONV3D_FILTER_GRAD, (gs[0], dy), {"filter_size": w.shape[:3], **attrs}),
    )


@defop("conv3d_input_grad", infer=_input_grad_infer, vjp=_input_grad_vjp)
def _CONV3D_INPUT_GRAD(dy, w, input_size, strides, padding, dilations):
    outs, pads = _geometry("conv3d_transpose", input_size, w.shape[:3], strides, padding, dilations)
    padded = [n + b + a for n, (b, a) in zip(input_size, pads, strict=True)]
    dxp = np.zeros_like(dy, shape=(dy.shape[0], *padded, w.shape[3]))
    for tap, index in _taps(w.shape[:3], strides, dilations, outs):
        dxp[index] += dy @ w[tap].T
    return _crop(dxp, pads, input_size)


def _filter_grad_infer(x, dy, filter_size, strides, padding, dilations):
    _check_volume("conv3d_filter_grad", x)
    outs, _ = _geometry("conv3d_filter_grad", x.shape[1:4], filter_size, strides, padding, dilations)
    if tuple(dy.shape[:4]) != (x.shape[0], *outs):
        raise ValueError(f"conv3d_filter_grad: output gradient {dy.shape} does not fit input {x.shape}")
    return [((*filter_size, x.shape[4], dy.shape[4]), x.dtype)]


def _filter_grad_vjp(gs, xs, ys, filter_size, strides, padding, dilations):
    x, dy = xs
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    return (
        apply(_CONV3D_INPUT_GRAD, (dy, gs[0]), {"input_size": x.shape[1:4], **attrs}),
        apply(_CONV3D, (x, gs[0]), attrs),
    )


@defop("conv3d_filter_grad", infer=_filter_grad_infer, vjp=_filter_grad_vjp)
def _CONV3D_FILTER_GRAD(x, dy, filter_size, strides, padding, dilations):
    outs, pads = _geometry("conv3d_filter_grad", x.shape[1:4], filter_size, strides, padding, dilations)
    xp = _pad(x, pads)
    dw = np.zeros_like(x, shape=(*filter_size, x.shape[4], dy.shape[4]))
    for tap, index in _taps(filter_size, strides, dilations, outs):
        dw[tap] = np.tensordot(xp[index], dy, axes=([0, 1, 2, 3], [0, 1, 2, 3]))
    return dw


def conv3d(x, filters, strides=1, padding="VALID", dilations=1) -> Tensor:
    """3-D convolution (cross-correlation) of NDHWC `x` with DHWIO `filters`; padding 'SAME' or 'VALID'.

    >>> import tapeflow as tp
    >>> conv3d(tp.ones((1, 4, 4, 4, 1)), tp.ones((2, 2, 2, 1, 3)), strides=2).shape
    (1, 2, 2, 2, 3)
    """
    attrs = {
        "strides": _triple("conv3d", "strides", strides),
        "padding": _padding("conv3d", padding),
        "dilations": _triple("conv3d", "dilations", dilations),
    }
    return apply(_CONV3D, (as_tensor(x, name="conv3d"), as_tensor(filters, name="conv3d")), attrs)


def conv3d_transpose(x, filters, output_shape, strides=1, padding="VALID", dilations=1) -> Tensor:
    """The gradient of conv3d with respect to its input, used to upsample volumes.

    `filters` is DHWIO of the forward conv: [kd, kh, kw, out_channels, in_channels of x];
    `output_shape` is (N, D, H, W, C) or (D, H, W).

    >>> import tapeflow as tp
    >>> conv3d_transpose(tp.ones((1, 2, 2, 2, 3)), tp.ones((2, 2, 2, 1, 3)), (4, 4, 4), strides=2).shape
    (1, 4, 4, 4, 1)
    """
    size = shapes.as_dims("conv3d_transpose", output_shape, label="output_shape")
    size = size[1:4] if len(size) == 5 else size
    if len(size) != 3:
        raise ValueError(f"conv3d_transpose: output_shape must be (N, D, H, W, C) or (D, H, W), got {output_shape}")
    attrs = {
        "input_size": size,
        "strides": _triple("conv3d_transpose", "strides", strides),
        "padding": _padding("conv3d_transpose", padding),
        "dilations": _triple("conv3d_transpose", "dilations", dilations),
    }
    x = as_tensor(x, name="conv3d_transpose")
    return apply(_CONV3D_INPUT_GRAD, (x, as_tensor(filters, name="conv3d_transpose")), attrs)


# ----------------------------------------------------------------- pooling
def _pool_infer(name):
    def infer(x, ksize, strides, padding):
        _check_volume(name, x)
        outs, _ = _geometry(name, x.shape[1:4], ksize, strides, padding, (1, 1, 1))
        return [((x.shape[0], *outs, x.shape[4]), x.dtype)]

    return infer


def _pool_taps(sizes, ksize, strides, padding, name):
    outs, pads = _geometry(name, sizes, ksize, strides, padding, (1, 1, 1))
    return list(_taps(ksize, strides, (1, 1, 1), outs)), pads


def _max_pool_windows(x, ksize, strides, padding):
    """The padded input, the taps, and the pooled maximum."""
    taps, pads = _pool_taps(x.shape[1:4], ksize, strides, padding, "max_pool3d")
    xp = _pad(x, pads, -np.inf)
    return xp, taps, pads, functools.reduce(np.maximum, (xp[index] for _, index in taps))


def _first_max_hits(x, ksize, strides, padding):
    """For each tap, the outputs whose first maximum sits at that tap (ties go to the first tap)."""
    xp, taps, pads, y = _max_pool_windows(x, ksize, strides, padding)
    taken = np.zeros_like(y, dtype=bool)
    for _, index in taps:
        hit = (xp[index] == y) & ~taken
        taken |= hit
        yield index, hit, pads


@defop(
    "max_pool3d",
    infer=_pool_infer("max_pool3d"),
    vjp=lambda gs, xs, ys, **a: (apply(_MAX_POOL3D_GRAD, (xs[0], gs[0]), a),),
)
def _MAX_POOL3D(x, ksize, strides, padding):
    return _max_pool_windows(x, ksize, strides, padding)[3]


@defop(
    "max_pool3d_grad",
    infer=lambda x, dy, ksize, strides, padding: [(x.shape, x.dtype)],
    vjp=lambda gs, xs, ys, **a: (None, apply(_MAX_POOL3D_GRAD_GRAD, (xs[0], gs[0]), a)),
)
def _MAX_POOL3D_GRAD(x, dy, ksize, strides, padding):
    _, pads = _pool_taps(x.shape[1:4], ksize, strides, padding, "max_pool3d")
    padded = [n + b + a for n, (b, a) in zip(x.shape[1:4], pads, strict=True)]
    dxp = np.zeros_like(x, shape=(x.shape[0], *padded, x.shape[4]))
    for index, hit, _ in _first_max_hits(x, ksize, strides, padding):
        dxp[index] += np.where(hit, dy, 0)
    return _crop(dxp, pads, x.shape[1:4])


def _grad_grad_infer(x, g, ksize, strides, padding):
    if tuple(g.shape) != tuple(x.shape):
        raise ValueError(f"max_pool3d_grad_grad: gradient shape {g.shape} differs from input shape {x.shape}")
    return _pool_infer("max_pool3d_grad_grad")(x, ksize, strides, padding)


@defop(
    "max_pool3d_grad_grad",
    infer=_grad_grad_infer,
    vjp=lambda gs, xs, ys, **a: (None, apply(_MAX_POOL3D_GRAD, (xs[0], gs[0]), a)),
)
def _MAX_POOL3D_GRAD_GRAD(x, g, ksize, strides, padding):
    out = None
    for index, hit, pads in _first_max_hits(x, ksize, strides, padding):
        part = np.where(hit, _pad(g, pads)[index], 0)
        out = part if out is None else out + part
    return out.astype(x.dtype, copy=False)


def _window_counts(like, sizes, ksize, strides, padding):
    """How many real (unpadded) cells each average-pool window covers."""
    taps, pads = _pool_taps(sizes, ksize, strides, padding, "avg_pool3d")
    ones = _pad(np.ones_like(like, shape=(1, *sizes, 1)), pads)
    return sum(ones[index] for _, index in taps)


@defop(
    "avg_pool3d",
    infer=_pool_infer("avg_pool3d"),
    vjp=lambda gs, xs, ys, **a: (apply(_AVG_POOL3D_GRAD, (gs[0],), {"input_size": xs[0].shape[1:4], **a}),),
)
def _AVG_POOL3D(x, ksize, strides, padding):
    taps, pads = _pool_taps(x.shape[1:4], ksize, strides, padding, "avg_pool3d")
    xp = _pad(x, pads)
    total = sum(xp[index] for _, index in taps)
    return (total / _window_counts(x, x.shape[1:4], ksize, strides, padding)).astype(x.dtype, copy=False)


@defop(
    "avg_pool3d_grad",
    infer=lambda dy, input_size, ksize, strides, padding: [((dy.shape[0], *input_size, dy.shape[4]), dy.dtype)],
    vjp=lambda gs, xs, ys, input_size, **a: (apply(_AVG_POOL3D, (gs[0],), a),),
)
def _AVG_POOL3D_GRAD(dy, input_size, ksize, strides, padding):
    taps, pads = _pool_taps(input_size, ksize, strides, padding, "avg_pool3d")
    scaled = dy / _window_counts(dy, input_size, ksize, strides, padding)
    padded = [n + b + a for n, (b, a) in zip(input_size, pads, strict=True)]
    dxp = np.zeros_like(dy, shape=(dy.shape[0], *padded, dy.shape[4]))
    for _, index in taps:
        dxp[index] += scaled
    return _crop(dxp, pads, input_size)


def _pool_attrs(name, ksize, strides, padding) -> dict:
    return {
        "ksize": _triple(name, "ksize", ksize),
        "strides": _triple(name, "strides", ksize if strides is None else strides),
        "padding": _padding(name, padding),
    }


def max_pool3d(x, ksize, strides=None, padding="VALID") -> Tensor:
    """Max over ksize windows of NDHWC `x` (strides default to ksize).

    >>> import tapeflow as tp
    >>> max_pool3d(tp.ones((1, 4, 4, 4, 2)), 2).shape
    (1, 2, 2, 2, 2)
    """
    return apply(_MAX_POOL3D, (as_tensor(x, name="max_pool3d"),), _pool_attrs("max_pool3d", ksize, strides, padding))


@in_float32
def avg_pool3d(x, ksize, strides=None, padding="VALID") -> Tensor:
    """Mean over ksize windows of NDHWC `x`; padded cells are not counted.

    >>> import tapeflow as tp
    >>> avg_pool3d(tp.ones((1, 3, 3, 3, 1)), 2, 2, "SAME").numpy().ravel().tolist()
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    """
    return apply(_AVG_POOL3D, (as_tensor(x, name="avg_pool3d"),), _pool_attrs("avg_pool3d", ksize, strides, padding))
