"""Depthwise 2-D convolution of NHWC images: each input channel convolved with its own
filters. The filter is (kh, kw, C, multiplier) and output channel c * multiplier + m comes
from filter [:, :, c, m], as in TensorFlow's `tf.nn.depthwise_conv2d`.

>>> import tapeflow as tp
>>> tp.nn.depthwise_conv2d(tp.ones((1, 5, 5, 2)), tp.ones((3, 3, 2, 2)), padding="SAME").shape
(1, 5, 5, 4)
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops.nn.functions import _check_image, _pad_image, _padding, _pair, _windows
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.ops.shapes import conv_geometry
from tapeflow.tensor import Tensor

__all__ = ["depthwise_conv2d"]

_NAME = "depthwise_conv2d"


def _check_filter(name: str, w, dtype) -> None:
    if len(w.shape) != 4:
        raise ValueError(f"{name}: filter must be 4-D (kh, kw, channels, multiplier), got shape {w.shape}")
    if w.dtype is not dtype:
        raise TypeError(f"{name}: input dtype {dtype} and filter dtype {w.dtype} differ")


def _infer(x, w, strides, padding, dilations):
    _check_image(_NAME, x)
    _check_filter(_NAME, w, x.dtype)
    if x.shape[3] != w.shape[2]:
        raise ValueError(
            f"{_NAME}: input channels {x.shape[3]} (input {x.shape}) do not match the filter's {w.shape[2]} "
            f"(filter {w.shape})"
        )
    oh, ow, _, _ = conv_geometry(_NAME, x.shape[1], x.shape[2], w.shape[0], w.shape[1], strides, padding, dilations)
    return [((x.shape[0], oh, ow, w.shape[2] * w.shape[3]), x.dtype)]


def _vjp(gs, xs, ys, strides, padding, dilations, needs=(True, True)):
    x, w = xs
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    dx = apply(_INPUT_GRAD, (gs[0], w), {"input_size": x.shape[1:3], **attrs}) if needs[0] else None
    dw = apply(_FILTER_GRAD, (x, gs[0]), {"filter_size": w.shape[0:2], **attrs}) if needs[1] else None
    return dx, dw


@defop(_NAME, infer=_infer, vjp=_vjp, partial_vjp=True)
def _DEPTHWISE_CONV2D(x, w, strides, padding, dilations):
    kh, kw, c, m = w.shape
    taps, rows, cols, (oh, ow) = _windows(x.shape[1], x.shape[2], kh, kw, strides, padding, dilations, _NAME)
    xp = _pad_image(x, rows, cols)
    out = np.zeros_like(x, shape=(x.shape[0], oh, ow, c, m))
    for i, j, rs, cs in taps:
        out += xp[:, rs, cs, :, None] * w[i, j]
    return out.reshape(x.shape[0], oh, ow, c * m)


def _input_grad_infer(dy, w, input_size, strides, padding, dilations):
    name = "depthwise_conv2d_input_grad"
    _check_image(name, dy)
    _check_filter(name, w, dy.dtype)
    if dy.shape[3] != w.shape[2] * w.shape[3]:
        raise ValueError(
            f"{name}: gradient channels {dy.shape[3]} do not match the filter's {w.shape[2]} x {w.shape[3]} "
            f"(filter {w.shape})"
        )
    oh, ow, _, _ = conv_geometry(name, *input_size, w.shape[0], w.shape[1], strides, padding, dilations)
    if (oh, ow) != tuple(dy.shape[1:3]):
        raise ValueError(
            f"{name}: input size {tuple(input_size)} is inconsistent with the gradient {dy.shape} "
            f"(a forward conv of that size gives {oh}x{ow})"
        )
    return [((dy.shape[0], *input_size, w.shape[2]), dy.dtype)]


def _input_grad_vjp(gs, xs, ys, input_size, strides, padding, dilations):
    dy, w = xs
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    return (
        apply(_DEPTHWISE_CONV2D, (gs[0], w), attrs),
        apply(_FILTER_GRAD, (gs[0], dy), {"filter_size": w.shape[0:2], **attrs}),
    )


@defop("depthwise_conv2d_input_grad", infer=_input_grad_infer, vjp=_input_grad_vjp)
def _INPUT_GRAD(dy, w, input_size, strides, padding, dilations):
    kh, kw, c, m = w.shape
    in_h, in_w = input_size
    taps, rows, cols, (oh, ow) = _windows(in_h, in_w, kh, kw, strides, padding, dilations, _NAME)
    grad = dy.reshape(dy.shape[0], oh, ow, c, m)
    dxp = np.zeros_like(dy, shape=(dy.shape[0], in_h + sum(rows), in_w + sum(cols), c))
    for i, j, rs, cs in taps:
        dxp[:, rs, cs, :] += (grad * w[i, j]).sum(axis=-1)
    return dxp[:, rows[0] : rows[0] + in_h, cols[0] : cols[0] + in_w, :]


def _filter_grad_infer(x, dy, filter_size, strides, padding, dilations):
    name = "depthwise_conv2d_filter_grad"
    _check_image(name, x)
    oh, ow, _, _ = conv_geometry(name, x.shape[1], x.shape[2], *filter_size, strides, padding, dilations)
    if len(dy.shape) != 4 or tuple(dy.shape[:3]) != (x.shape[0], oh, ow) or dy.shape[3] % max(x.shape[3], 1):
        raise ValueError(f"{name}: output gradient {dy.shape} does not fit input {x.shape}")
    return [((*filter_size, x.shape[3], dy.shape[3] // max(x.shape[3], 1)), x.dtype)]


def _filter_grad_vjp(gs, xs, ys, filter_size, strides, padding, dilations):
    x, dy = xs
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    return (
        apply(_INPUT_GRAD, (dy, gs[0]), {"input_size": x.shape[1:3], **attrs}),
        apply(_DEPTHWISE_CONV2D, (x, gs[0]), attrs),
    )


@defop("depthwise_conv2d_filter_grad", infer=_filter_grad_infer, vjp=_filter_grad_vjp)
def _FILTER_GRAD(x, dy, filter_size, strides, padding, dilations):
    kh, kw = filter_size
    c = x.shape[3]
    m = dy.shape[3] // max(c, 1)
    taps, rows, cols, (oh, ow) = _windows(x.shape[1], x.shape[2], kh, kw, strides, padding, dilations, _NAME)
    xp = _pad_image(x, rows, cols)
    grad = dy.reshape(dy.shape[0], oh, ow, c, m)
    dw = np.zeros_like(x, shape=(kh, kw, c, m))
    for i, j, rs, cs in taps:
        dw[i, j] = np.einsum("nhwc,nhwcm->cm", xp[:, rs, cs, :], grad)
    return dw


def depthwise_conv2d(x, filters, strides=1, padding="VALID", dilations=1) -> Tensor:
    """Depthwise 2-D convolution of NHWC `x` with `filters` (kh, kw, C, multiplier): channel
    c * multiplier + m of the output is channel c of `x` convolved with filters[:, :, c, m].

    `padding` is 'SAME', 'VALID' or explicit ((top, bottom), (left, right)).

    >>> import tapeflow as tp
    >>> tp.nn.depthwise_conv2d(tp.ones((1, 4, 4, 3)), tp.ones((2, 2, 3, 1)), strides=2).numpy()[0, 0, 0].tolist()
    [4.0, 4.0, 4.0]
    """
    attrs = {
        "strides": _pair(_NAME, strides),
        "padding": _padding(_NAME, padding),
        "dilations": _pair(_NAME, dilations),
    }
    return apply(_DEPTHWISE_CONV2D, (as_tensor(x, name=_NAME), as_tensor(filters, name=_NAME)), attrs)
