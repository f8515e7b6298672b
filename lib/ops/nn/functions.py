"""Neural-network ops of `tp.nn`: activations, softmax, convolution, pooling,
cross-entropies, dropout, embeddings and moments.

Images are NHWC and convolution filters HWIO, as in TensorFlow.

>>> import tapeflow as tp
>>> x = tp.ones((1, 5, 5, 2))
>>> tp.nn.conv2d(x, tp.ones((3, 3, 2, 4)), strides=1, padding="SAME").shape
(1, 5, 5, 4)
"""

from __future__ import annotations

import numpy as np

from tapeflow.backends.common import check_labels
from tapeflow.ops import random, shapes
from tapeflow.ops.array import gather, reshape
from tapeflow.ops.core import zeros_like
from tapeflow.ops.half import in_float32
from tapeflow.ops.math import (
    equal,
    erf,
    exp,
    greater,
    multiply,
    sigmoid,
    tanh,
    where,
)
from tapeflow.ops.reduce import logsumexp, mean, var
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.ops.shapes import conv_geometry, padded_extent
from tapeflow.tensor import Tensor

__all__ = [
    "relu",
    "leaky_relu",
    "elu",
    "gelu",
    "softplus",
    "sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "conv2d",
    "conv2d_transpose",
    "max_pool2d",
    "avg_pool2d",
    "sparse_softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits",
    "sigmoid_cross_entropy_with_logits",
    "dropout",
    "embedding_lookup",
    "moments",
]


# ------------------------------------------------------------- activations
@defop(
    "relu_grad",
    infer=lambda g, y: [(g.shape, g.dtype)],
    vjp=lambda gs, xs, ys: (apply(_RELU_GRAD, (gs[0], xs[1]), {}), None),
)
def _RELU_GRAD(g, y):
    return np.where(y > 0, g, 0).astype(g.dtype, copy=False)


@defop("relu", infer=shapes.numeric("relu"), vjp=lambda gs, xs, ys: (apply(_RELU_GRAD, (gs[0], ys[0]), {}),))
def _RELU(x):
    return np.maximum(x, 0)


def relu(x) -> Tensor:
    """max(x, 0).

    >>> import tapeflow as tp
    >>> tp.nn.relu(tp.tensor([-1.0, 2.0])).numpy().tolist()
    [0.0, 2.0]
    """
    return apply(_RELU, (as_tensor(x, name="relu"),), {})


def leaky_relu(x, alpha: float = 0.2) -> Tensor:
    """x for x > 0, alpha * x otherwise.

    >>> import tapeflow as tp
    >>> tp.nn.leaky_relu(tp.tensor([-1.0, 2.0]), 0.1).numpy().tolist()
    [-0.10000000149011612, 2.0]
    """
    x = as_tensor(x, name="leaky_relu")
    return where(greater(x, 0.0), x, multiply(x, alpha))


def elu(x, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise.

    >>> import tapeflow as tp
    >>> round(tp.nn.elu(tp.tensor([-1.0])).numpy().item(), 4)
    -0.6321
    """
    x = as_tensor(x, name="elu")
    negative = alpha * (exp(where(greater(x, 0.0), 0.0, x)) - 1.0)
    return where(greater(x, 0.0), x, negative)


def gelu(x, approximate: bool = False) -> Tensor:
    """Gaussian error linear unit (exact erf form, or the tanh approximation).

    >>> import tapeflow as tp
    >>> round(tp.nn.gelu(tp.tensor([1.0])).numpy().item(), 4)
    0.8413
    """
    x = as_tensor(x, name="gelu")
    if approximate:
        inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + tanh(inner))
    return 0.5 * x * (1.0 + erf(x * (1.0 / np.sqrt(2.0))))


@defop("softplus", infer=shapes.floating("softplus"), vjp=lambda gs, xs, ys: (gs[0] * sigmoid(xs[0]),))
def _SOFTPLUS(x):
    return np.logaddexp(0, x).astype(x.dtype, copy=False)


def softplus(x) -> Tensor:
    """log(1 + exp(x)), computed without overflow.

    >>> import tapeflow as tp
    >>> tp.nn.softplus(tp.tensor([1000.0])).numpy().item()
    1000.0
    """
    return apply(_SOFTPLUS, (as_tensor(x, name="softplus"),), {})


@in_float32
def log_softmax(logits, axis: int = -1) -> Tensor:
    """logits - logsumexp(logits) along `axis`.

    >>> import tapeflow as tp
    >>> round(float(tp.nn.log_softmax(tp.tensor([0.0, 0.0]))[0]), 4)
    -0.6931
    """
    x = as_tensor(logits, name="log_softmax")
    return x - logsumexp(x, axis, keepdims=True)


@in_float32
def softmax(logits, axis: int = -1) -> Tensor:
    """exp(logits) normalized to sum to one along `axis`.

    >>> import tapeflow as tp
    >>> tp.nn.softmax(tp.tensor([1.0, 1.0])).numpy().tolist()
    [0.5, 0.5]
    """
    return exp(log_softmax(logits, axis))


# ------------------------------------------------------------- convolution
def _pair(name: str, value) -> tuple:
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a positive int or a pair of them, got {value!r}")
    if isinstance(value, int | np.integer):
        return (int(value), int(value))
    if not isinstance(value, list | tuple):
        raise ValueError(f"{name}: expected a positive int or a pair of them, got {value!r}")
    value = tuple(value)
    if len(value) == 4:  # TensorFlow's NHWC form [1, sh, sw, 1]
        value = value[1:3]
    if len(value) != 2:
        raise ValueError(f"{name}: expected an int or a pair, got {value!r}")
    for v in value:
        if not isinstance(v, int | np.integer) or isinstance(v, bool):
            raise ValueError(f"{name}: expected integers, got {value!r}")
    return tuple(int(v) for v in value)


def _padding(name: str, padding):
    if isinstance(padding, str):
        p = padding.upper()
        if p not in ("SAME", "VALID"):
            raise ValueError(f"{name}: padding must be 'SAME', 'VALID' or explicit pairs, got {padding!r}")
        return p
    try:
        pairs = tuple(tuple(pair) for pair in padding)
    except TypeError:
        raise ValueError(f"{name}: padding must be 'SAME', 'VALID' or ((top, bottom), (left, right))") from None
    pairs = tuple(tuple(shapes.as_int(name, "padding", v) for v in pair) for pair in pairs)
    if len(pairs) == 4:  # [[0, 0], [t, b], [l, r], [0, 0]]
        pairs = pairs[1:3]
    if len(pairs) != 2 or any(len(p) != 2 for p in pairs) or any(v < 0 for p in pairs for v in p):
        raise ValueError(f"{name}: bad explicit padding {padding!r}")
    return pairs


def _check_image(name: str, x, rank_name: str = "input"):
    if len(x.shape) != 4:
        raise ValueError(f"{name}: {rank_name} must be 4-D NHWC, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name}: {rank_name} must be floating point, got {x.dtype}")


def _conv_infer(x, w, strides, padding, dilations):
    _check_image("conv2d", x)
    if len(w.shape) != 4:
        raise ValueError(f"conv2d: filter must be 4-D HWIO, got shape {w.shape}")
    if w.dtype is not x.dtype:
        raise TypeError(f"conv2d: input dtype {x.dtype} and filter dtype {w.dtype} differ")
    if x.shape[3] != w.shape[2]:
        raise ValueError(
            f"conv2d: input channels {x.shape[3]} (input {x.shape}) do not match filter in-channels "
            f"{w.shape[2]} (filter {w.shape})"
        )
    oh, ow, _, _ = conv_geometry("conv2d", x.shape[1], x.shape[2], w.shape[0], w.shape[1], strides, padding, dilations)
    return [((x.shape[0], oh, ow, w.shape[3]), x.dtype)]


def _windows(in_h, in_w, kh, kw, strides, padding, dilations, name):
    """Yield (i, j, row slice, col slice) into the padded input for each tap."""
    oh, ow, top, left = conv_geometry(name, in_h, in_w, kh, kw, strides, padding, dilations)
    (sh, sw), (dh, dw) = strides, dilations
    ph = padded_extent(in_h, oh, kh, sh, dh, top)
    pw = padded_extent(in_w, ow, kw, sw, dw, left)
    taps = [
        (i, j, slice(i * dh, i * dh + (oh - 1) * sh + 1, sh), slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
        for i in range(kh)
        for j in range(kw)
    ]
    return taps, (top, ph - in_h - top), (left, pw - in_w - left), (oh, ow)


def _pad_image(x, rows, cols, value=0.0):
    return np.pad(x, ((0, 0), rows, cols, (0, 0)), constant_values=value)


def _conv_vjp(gs, xs, ys, strides, padding, dilations, needs=(True, True)):
    x, w = xs
    g = gs[0]
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    dx = apply(_CONV_INPUT_GRAD, (g, w), {"input_size": x.shape[1:3], **attrs}) if needs[0] else None
    dw = apply(_CONV_FILTER_GRAD, (x, g), {"filter_size": w.shape[0:2], **attrs}) if needs[1] else None
    return dx, dw


@defop("conv2d", infer=_conv_infer, vjp=_conv_vjp, partial_vjp=True)
def _CONV2D(x, w, strides, padding, dilations):
    kh, kw, _, o = w.shape
    taps, rows, cols, (oh, ow) = _windows(x.shape[1], x.shape[2], kh, kw, strides, padding, dilations, "conv2d")
    xp = _pad_image(x, rows, cols)
    out = np.zeros((x.shape[0], oh, ow, o), dtype=x.dtype)
    for i, j, rs, cs in taps:
        out += xp[:, rs, cs, :] @ w[i, j]
    return out


def _conv_input_grad_infer(dy, w, input_size, strides, padding, dilations):
    _check_image("conv2d_transpose", dy)
    if len(w.shape) != 4 or w.dtype is not dy.dtype:
        raise ValueError(f"conv2d_transpose: filter must be 4-D HWIO of dtype {dy.dtype}, got {w.shape} {w.dtype}")
    if dy.shape[3] != w.shape[3]:
        raise ValueError(
            f"conv2d_transpose: input channels {dy.shape[3]} do not match filter out-channels {w.shape[3]} "
            f"(filter {w.shape})"
        )
    oh, ow, _, _ = conv_geometry(
        "conv2d_transpose", input_size[0], input_size[1], w.shape[0], w.shape[1], strides, padding, dilations
    )
    if (oh, ow) != tuple(dy.shape[1:3]):
        raise ValueError(
            f"conv2d_transpose: output size {tuple(input_size)} is inconsistent with input {dy.shape} "
            f"(a forward conv of that size gives {oh}x{ow})"
        )
    return [((dy.shape[0], *input_size, w.shape[2]), dy.dtype)]


def _conv_input_grad_vjp(gs, xs, ys, input_size, strides, padding, dilations):
    dy, w = xs
    g = gs[0]
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    return (
        apply(_CONV2D, (g, w), attrs),
        apply(_CONV_FILTER_GRAD, (g, dy), {"filter_size": w.shape[0:2], **attrs}),
    )


@defop("conv2d_input_grad", infer=_conv_input_grad_infer, vjp=_conv_input_grad_vjp)
def _CONV_INPUT_GRAD(dy, w, input_size, strides, padding, dilations):
    kh, kw, c, _ = w.shape
    in_h, in_w = input_size
    taps, rows, cols, _ = _windows(in_h, in_w, kh, kw, strides, padding, dilations, "conv2d_transpose")
    dxp = np.zeros_like(dy, shape=(dy.shape[0], in_h + sum(rows), in_w + sum(cols), c))
    for i, j, rs, cs in taps:
        dxp[:, rs, cs, :] += dy @ w[i, j].T
    return dxp[:, rows[0] : rows[0] + in_h, cols[0] : cols[0] + in_w, :]


def _conv_filter_grad_infer(x, dy, filter_size, strides, padding, dilations):
    _check_image("conv2d_filter_grad", x)
    oh, ow, _, _ = conv_geometry(
        "conv2d_filter_grad", x.shape[1], x.shape[2], *filter_size, strides, padding, dilations
    )
    if tuple(dy.shape[:3]) != (x.shape[0], oh, ow):
        raise ValueError(f"conv2d_filter_grad: output gradient {dy.shape} does not fit input {x.shape}")
    return [((*filter_size, x.shape[3], dy.shape[3]), x.dtype)]


def _conv_filter_grad_vjp(gs, xs, ys, filter_size, strides, padding, dilations):
    x, dy = xs
    g = gs[0]
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    return (
        apply(_CONV_INPUT_GRAD, (dy, g), {"input_size": x.shape[1:3], **attrs}),
        apply(_CONV2D, (x, g), attrs),
    )


@defop("conv2d_filter_grad", infer=_conv_filter_grad_infer, vjp=_conv_filter_grad_vjp)
def _CONV_FILTER_GRAD(x, dy, filter_size, strides, padding, dilations):
    kh, kw = filter_size
    taps, rows, cols, _ = _windows(x.shape[1], x.shape[2], kh, kw, strides, padding, dilations, "conv2d")
    xp = _pad_image(x, rows, cols)
    dw = np.zeros_like(x, shape=(kh, kw, x.shape[3], dy.shape[3]))  # where x lives
    for i, j, rs, cs in taps:
        dw[i, j] = np.tensordot(xp[:, rs, cs, :], dy, axes=([0, 1, 2], [0, 1, 2]))
    return dw


def conv2d(x, filters, strides=1, padding="VALID", dilations=1) -> Tensor:
    """2-D convolution (cross-correlation) of NHWC `x` with HWIO `filters`.

    `padding` is 'SAME', 'VALID' or explicit ((top, bottom), (left, right)).

    >>> import tapeflow as tp
    >>> tp.nn.conv2d(tp.ones((1, 4, 4, 1)), tp.ones((2, 2, 1, 3)), strides=2).shape
    (1, 2, 2, 3)
    """
    x = as_tensor(x, name="conv2d")
    w = as_tensor(filters, name="conv2d")
    attrs = {
        "strides": _pair("conv2d", strides),
        "padding": _padding("conv2d", padding),
        "dilations": _pair("conv2d", dilations),
    }
    return apply(_CONV2D, (x, w), attrs)


def conv2d_transpose(x, filters, output_shape, strides=1, padding="VALID", dilations=1) -> Tensor:
    """The gradient of conv2d with respect to its input, used as an upsampling layer.

    `filters` is HWIO of the forward conv: [kh, kw, out_channels, in_channels of x].
    `output_shape` is (N, H, W, C) or (H, W).

    >>> import tapeflow as tp
    >>> tp.nn.conv2d_transpose(tp.ones((1, 2, 2, 3)), tp.ones((2, 2, 1, 3)), (4, 4), strides=2).shape
    (1, 4, 4, 1)
    """
    x = as_tensor(x, name="conv2d_transpose")
    w = as_tensor(filters, name="conv2d_transpose")
    size = shapes.as_dims("conv2d_transpose", output_shape, label="output_shape")
    size = size[1:3] if len(size) == 4 else size
    if len(size) != 2:
        raise ValueError(f"conv2d_transpose: output_shape must be (N, H, W, C) or (H, W), got {output_shape}")
    attrs = {
        "input_size": size,
        "strides": _pair("conv2d_transpose", strides),
        "padding": _padding("conv2d_transpose", padding),
        "dilations": _pair("conv2d_transpose", dilations),
    }
    return apply(_CONV_INPUT_GRAD, (x, w), attrs)


# ----------------------------------------------------------------- pooling
def _pool_infer(name):
    def infer(x, ksize, strides, padding):
        _check_image(name, x)
        oh, ow, _, _ = conv_geometry(name, x.shape[1], x.shape[2], *ksize, strides, padding, (1, 1))
        return [((x.shape[0], oh, ow, x.shape[3]), x.dtype)]

    return infer


def _pool_taps(x_shape, ksize, strides, padding, name):
    return _windows(x_shape[1], x_shape[2], ksize[0], ksize[1], strides, padding, (1, 1), name)


def _max_pool_vjp(gs, xs, ys, ksize, strides, padding):
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    return (apply(_MAX_POOL_GRAD, (xs[0], gs[0]), attrs),)


@defop("max_pool2d", infer=_pool_infer("max_pool2d"), vjp=_max_pool_vjp)
def _MAX_POOL(x, ksize, strides, padding):
    taps, rows, cols, _ = _pool_taps(x.shape, ksize, strides, padding, "max_pool2d")
    xp = _pad_image(x, rows, cols, -np.inf)
    out = None
    for _, _, rs, cs in taps:
        out = xp[:, rs, cs, :].copy() if out is None else np.maximum(out, xp[:, rs, cs, :])
    return out


def _first_max_masks(x, ksize, strides, padding, name):
    """For each tap, the outputs whose (first) maximum sits at that tap (a NaN is a window's
    maximum, as the kernels take it)."""
    taps, rows, cols, _ = _pool_taps(x.shape, ksize, strides, padding, name)
    xp = _pad_image(x, rows, cols, -np.inf)
    y = _MAX_POOL.reference(x, ksize, strides, padding)
    taken = np.zeros_like(y, dtype=bool)
    for _, _, rs, cs in taps:
        tap = xp[:, rs, cs, :]
        hit = ((tap == y) | (np.isnan(tap) & np.isnan(y))) & ~taken
        taken |= hit
        yield rs, cs, hit, rows, cols


def _max_pool_grad_infer(x, dy, ksize, strides, padding):
    return [(x.shape, x.dtype)]


@defop(
    "max_pool2d_grad",
    infer=_max_pool_grad_infer,
    vjp=lambda gs, xs, ys, **a: (None, apply(_MAX_POOL_GRAD_GRAD, (xs[0], gs[0]), a)),
)
def _MAX_POOL_GRAD(x, dy, ksize, strides, padding):
    dxp = None
    for rs, cs, hit, rows, cols in _first_max_masks(x, ksize, strides, padding, "max_pool2d"):
        if dxp is None:
            dxp = np.zeros_like(x, shape=(x.shape[0], x.shape[1] + sum(rows), x.shape[2] + sum(cols), x.shape[3]))
        dxp[:, rs, cs, :] += np.where(hit, dy, 0)
    return dxp[:, rows[0] : rows[0] + x.shape[1], cols[0] : cols[0] + x.shape[2], :]


def _max_pool_grad_grad_infer(x, g, ksize, strides, padding):
    if tuple(g.shape) != tuple(x.shape):
        raise ValueError(f"max_pool2d_grad_grad: gradient shape {g.shape} differs from input shape {x.shape}")
    return _pool_infer("max_pool2d_grad_grad")(x, ksize, strides, padding)


@defop(
    "max_pool2d_grad_grad",
    infer=_max_pool_grad_grad_infer,
    vjp=lambda gs, xs, ys, **a: (None, apply(_MAX_POOL_GRAD, (xs[0], gs[0]), a)),
)
def _MAX_POOL_GRAD_GRAD(x, g, ksize, strides, padding):
    out = None
    for rs, cs, hit, rows, cols in _first_max_masks(x, ksize, strides, padding, "max_pool2d"):
        gp = _pad_image(g, rows, cols)
        part = np.where(hit, gp[:, rs, cs, :], 0)
        out = part if out is None else out + part
    return out.astype(x.dtype, copy=False)


def _avg_counts(like, in_shape, ksize, strides, padding):
    """How many input pixels each output of an average pool covers, as an array of the
    array module and dtype of `like`."""
    ones = np.ones_like(like, shape=(1, in_shape[1], in_shape[2], 1))
    taps, rows, cols, _ = _pool_taps(in_shape, ksize, strides, padding, "avg_pool2d")
    op = _pad_image(ones, rows, cols)
    return sum(op[:, rs, cs, :] for _, _, rs, cs in taps)


@defop(
    "avg_pool2d",
    infer=_pool_infer("avg_pool2d"),
    vjp=lambda gs, xs, ys, **a: (apply(_AVG_POOL_GRAD, (gs[0],), {"input_size": xs[0].shape[1:3], **a}),),
)
def _AVG_POOL(x, ksize, strides, padding):
    taps, rows, cols, _ = _pool_taps(x.shape, ksize, strides, padding, "avg_pool2d")
    xp = _pad_image(x, rows, cols)
    total = sum(xp[:, rs, cs, :] for _, _, rs, cs in taps)
    return (total / _avg_counts(x, x.shape, ksize, strides, padding)).astype(x.dtype)


def _avg_pool_grad_infer(dy, input_size, ksize, strides, padding):
    return [((dy.shape[0], *input_size, dy.shape[3]), dy.dtype)]


@defop(
    "avg_pool2d_grad",
    infer=_avg_pool_grad_infer,
    vjp=lambda gs, xs, ys, input_size, **a: (apply(_AVG_POOL, (gs[0],), a),),
)
def _AVG_POOL_GRAD(dy, input_size, ksize, strides, padding):
    shape = (dy.shape[0], *input_size, dy.shape[3])
    taps, rows, cols, _ = _pool_taps(shape, ksize, strides, padding, "avg_pool2d")
    scaled = dy / _avg_counts(dy, shape, ksize, strides, padding)
    dxp = np.zeros_like(dy, shape=(shape[0], shape[1] + sum(rows), shape[2] + sum(cols), shape[3]))
    for _, _, rs, cs in taps:
        dxp[:, rs, cs, :] += scaled
    return dxp[:, rows[0] : rows[0] + shape[1], cols[0] : cols[0] + shape[2], :]


def _pool_attrs(name, ksize, strides, padding):
    padding = _padding(name, padding)
    if not isinstance(padding, str):
        raise ValueError(f"{name}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return {
        "ksize": _pair(name, ksize),
        "strides": _pair(name, strides if strides is not None else ksize),
        "padding": padding,
    }


def max_pool2d(x, ksize, strides=None, padding="VALID") -> Tensor:
    """Max over ksize windows of NHWC `x` (strides default to ksize).

    >>> import tapeflow as tp
    >>> tp.nn.max_pool2d(tp.ones((1, 4, 4, 2)), 2).shape
    (1, 2, 2, 2)
    """
    attrs = _pool_attrs("max_pool2d", ksize, strides, padding)
    return apply(_MAX_POOL, (as_tensor(x, name="max_pool2d"),), attrs)


def avg_pool2d(x, ksize, strides=None, padding="VALID") -> Tensor:
    """Mean over ksize windows of NHWC `x`; padded cells are not counted.

    >>> import tapeflow as tp
    >>> tp.nn.avg_pool2d(tp.ones((1, 3, 3, 1)), 2, 2, "SAME").numpy().ravel().tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    attrs = _pool_attrs("avg_pool2d", ksize, strides, padding)
    return apply(_AVG_POOL, (as_tensor(x, name="avg_pool2d"),), attrs)


# ------------------------------------------------------------------ losses
def _sparse_xent_infer(logits, labels):
    name = "sparse_softmax_cross_entropy_with_logits"
    if len(logits.shape) != 2:
        raise ValueError(f"{name}: logits must be [batch, classes], got shape {logits.shape}")
    if logits.dtype.kind != "f":
        raise TypeError(f"{name}: logits must be floating point, got {logits.dtype}")
    if labels.dtype.kind != "i":
        raise TypeError(f"{name}: labels must be integers, got {labels.dtype}")
    if tuple(labels.shape) != tuple(logits.shape[:1]):
        raise ValueError(f"{name}: labels shape {labels.shape} does not match logits shape {logits.shape}")
    return [(tuple(logits.shape[:1]), logits.dtype), (tuple(logits.shape), logits.dtype)]


def _sparse_xent_vjp(gs, xs, ys):
    g_loss, g_back = gs
    logits = xs[0]
    grad = None
    if g_loss is not None:
        grad = reshape(g_loss, (-1, 1)) * ys[1]
    if g_back is not None:  # second order: the backprop output is softmax - onehot
        p = softmax(logits)
        term = p * (g_back - reduce_sum(g_back * p, axis=-1, keepdims=True))
        grad = term if grad is None else grad + term
    return grad, None


@defop("sparse_softmax_cross_entropy_with_logits", infer=_sparse_xent_infer, vjp=_sparse_xent_vjp, num_outputs=2)
def _SPARSE_XENT(logits, labels):
    labels = check_labels("sparse_softmax_cross_entropy_with_logits", labels, logits.shape[1])
    m = logits.max(axis=1, keepdims=True)
    shifted = logits - m
    lse = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(logits.shape[0])
    loss = lse[:, 0] - shifted[rows, labels]
    backprop = np.exp(shifted - lse)
    backprop[rows, labels] -= 1
    return loss, backprop


def sparse_softmax_cross_entropy_with_logits(labels, logits) -> Tensor:
    """Per-example cross-entropy of integer class labels against unnormalized logits.

    Labels have the logits' shape without its last axis and lie in [0, classes).

    >>> import tapeflow as tp
    >>> loss = tp.nn.sparse_softmax_cross_entropy_with_logits(labels=[0], logits=tp.tensor([[0.0, 0.0]]))
    >>> round(loss.numpy().item(), 4)
    0.6931
    """
    logits = as_tensor(logits, name="sparse_softmax_cross_entropy_with_logits")
    labels = as_tensor(labels, name="sparse_softmax_cross_entropy_with_logits")
    if logits.ndim == 2 or logits.ndim < 1:
        return apply(_SPARSE_XENT, (logits, labels), {})[0]
    if tuple(labels.shape) != logits.shape[:-1]:
        raise ValueError(
            f"sparse_softmax_cross_entropy_with_logits: labels shape {labels.shape} does not match "
            f"logits shape {logits.shape}"
        )
    flat = apply(_SPARSE_XENT, (reshape(logits, (-1, logits.shape[-1])), reshape(labels, (-1,))), {})[0]
    return reshape(flat, labels.shape)


def softmax_cross_entropy_with_logits(labels, logits, axis: int = -1) -> Tensor:
    """Per-example cross-entropy of probability rows `labels` against logits.

    Computed as logsumexp(logits) - sum(labels * logits), stable for large logits;
    gradients flow to both logits and labels.

    >>> import tapeflow as tp
    >>> loss = tp.nn.softmax_cross_entropy_with_logits(labels=[[1.0, 0.0]], logits=[[0.0, 0.0]])
    >>> round(loss.numpy().item(), 4)
    0.6931
    """
    logits = as_tensor(logits, name="softmax_cross_entropy_with_logits")
    labels = as_tensor(labels, dtype=logits.dtype, name="softmax_cross_entropy_with_logits")
    if labels.shape != logits.shape:
        raise ValueError(
            f"softmax_cross_entropy_with_logits: labels shape {labels.shape} differs from logits {logits.shape}"
        )
    scale = reduce_sum(labels, axis)
    # a class with label 0 adds nothing, even where its logit is -inf (0 * -inf would be NaN)
    read = where(equal(labels, 0.0), zeros_like(logits), logits)
    return logsumexp(logits, axis) * scale - reduce_sum(labels * read, axis)


def sigmoid_cross_entropy_with_logits(labels, logits) -> Tensor:
    """Elementwise binary cross-entropy against logits, stable for large |logits|.

    >>> import tapeflow as tp
    >>> round(tp.nn.sigmoid_cross_entropy_with_logits(labels=[1.0], logits=[0.0]).numpy().item(), 4)
    0.6931
    """
    x = as_tensor(logits, name="sigmoid_cross_entropy_with_logits")
    z = as_tensor(labels, dtype=x.dtype, name="sigmoid_cross_entropy_with_logits")
    if z.shape != x.shape:
        raise ValueError(f"sigmoid_cross_entropy_with_logits: labels shape {z.shape} differs from logits {x.shape}")
    return softplus(x) - x * z


# ---------------------------------------------------------- misc nn pieces
def dropout(x, rate: float, training: bool = True, rng=None, noise_shape=None) -> Tensor:
    """Zero each element with probability `rate` and scale the rest by 1/(1-rate).

    `rng` is a tp.random.Generator, an int seed, or None for the global stream.

    >>> import tapeflow as tp
    >>> y = tp.nn.dropout(tp.ones((1000,)), 0.5, rng=tp.random.Generator(0))
    >>> 400 < int(tp.sum(tp.cast(y > 0, "int32"))) < 600
    True
    """
    x = as_tensor(x, name="dropout")
    if not 0.0 <= float(rate) < 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1), got {rate}")
    if not training or rate == 0.0:
        return x
    return random.dropout(x, rate, noise_shape, seed=rng)


def embedding_lookup(params, ids) -> Tensor:
    """Rows of `params` picked by integer `ids`; the gradient of `params` is an IndexedSlices.

    >>> import tapeflow as tp
    >>> tp.nn.embedding_lookup(tp.eye(3), [2, 0]).numpy().tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    return gather(params, ids, axis=0)


def moments(x, axes, keepdims: bool = False) -> tuple[Tensor, Tensor]:
    """Mean and (population) variance over `axes`.

    >>> import tapeflow as tp
    >>> m, v = tp.nn.moments(tp.tensor([1.0, 3.0]), axes=[0])
    >>> m.numpy().item(), v.numpy().item()
    (2.0, 1.0)
    """
    return mean(x, axes, keepdims), var(x, axes, keepdims)
