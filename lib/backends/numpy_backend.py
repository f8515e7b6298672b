"""The CPU backend: compiled kernels for the hot ops, by op name.

Ops without an entry here run their NumPy reference. Each function takes the
op's input arrays and attrs, exactly as the reference does. `bind_<op>` functions
fix an op's attrs once, for graphs (see tapeflow.backends).

>>> import numpy as np
>>> from tapeflow.backends import numpy_backend
>>> numpy_backend.gather(np.eye(3), np.array([2]), 0).tolist()
[[0.0, 0.0, 1.0]]
"""

from __future__ import annotations

import builtins
import functools
import math

import numpy as np

from tapeflow import _kernels
from tapeflow._kernels import elementwise as _elementwise
from tapeflow.backends.common import all_but_last, check_distinct, check_index_range, check_labels
from tapeflow.backends.geometry import MAX_EXTENT as MAX_DIM
from tapeflow.backends.geometry import axis_geometry, conv_geometry
from tapeflow.backends.numpy_recurrent import (  # noqa: F401 (kernels by op name)
    gru_sequence,
    gru_sequence_grad,
    lstm_sequence,
    lstm_sequence_grad,
)

_FAST = (np.float32, np.float64)

# The numerics every kernel runs under: subnormals flushed to zero, as TensorFlow does
# (they would cost ~100x); `enter_numerics()` returns what `leave_numerics` restores.
_flush_denormals_enter = _kernels.flush_denormals_enter
leave_numerics = _kernels.flush_denormals_leave


def enter_numerics(index: int = 0):
    """Flush subnormals (the CPU is one device: `index` is always 0)."""
    return _flush_denormals_enter()


set_num_threads = _kernels.set_num_threads
get_num_threads = _kernels.get_num_threads
build_info = _kernels.build_info
# Array data reused across the steps of a graph run (see tapeflow._kernels.allocator).
reusing_blocks = _kernels.reusing_blocks
release_cached_blocks = _kernels.release_cached_blocks

# ------------------------------------------------------------ the device boundary
FALLS_BACK_TO_REFERENCE = True  # the NumPy references are this backend's own code
HOLDS_NUMPY = True  # its arrays are NumPy arrays
RUNS_ON_HOST: frozenset = frozenset()  # every op runs here


def from_host(array, index: int = 0) -> np.ndarray:
    return np.asarray(array)


def to_host(array) -> np.ndarray:
    return np.asarray(array)


def conform(array, npdtype, index: int | None = None) -> np.ndarray:
    return np.asarray(array, dtype=npdtype)


def dtype_of(array) -> np.dtype:
    return np.asarray(array).dtype


def stats(index: int = 0) -> dict:
    return {}


def memory_stats(index: int = 0) -> dict:
    return {}  # NumPy allocates from the C heap: no pool to report


def _ready(*arrays):
    """Arrays as C-contiguous float32/float64 for the kernels (float16 widened)."""
    out = []
    for a in arrays:
        if a.dtype not in _FAST:
            a = a.astype(np.float32)
        out.append(np.ascontiguousarray(a))
    return out


def _geometry(name, in_h, in_w, kh, kw, strides, padding, dilations):
    oh, ow, top, left = conv_geometry(name, in_h, in_w, kh, kw, strides, padding, dilations)
    return (*strides, top, left, *dilations, oh, ow)


def conv2d(x, w, strides, padding, dilations):
    return _conv2d(x, w, None, False, strides, padding, dilations)


def _conv2d(x, w, bias, relu, strides, padding, dilations):
    """conv2d, plus `bias` (of the computing dtype, or None) and relu as the kernel writes it."""
    xc, wc = _ready(x, w)
    sh, sw, top, left, dh, dw, oh, ow = _geometry(
        "conv2d", x.shape[1], x.shape[2], w.shape[0], w.shape[1], strides, padding, dilations
    )
    y = _kernels.conv2d_forward(xc, wc, sh, sw, top, left, dh, dw, oh, ow, bias, relu)
    return y.astype(x.dtype, copy=False)


def conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    dyc, wc = _ready(dy, w)
    sh, sw, top, left, dh, dw, _, _ = _geometry(
        "conv2d_transpose", *input_size, w.shape[0], w.shape[1], strides, padding, dilations
    )
    dx = _kernels.conv2d_backward_input(dyc, wc, input_size[0], input_size[1], sh, sw, top, left, dh, dw)
    return dx.astype(dy.dtype, copy=False)


def conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    xc, dyc = _ready(x, dy)
    sh, sw, top, left, dh, dw, _, _ = _geometry(
        "conv2d", x.shape[1], x.shape[2], *filter_size, strides, padding, dilations
    )
    dw_ = _kernels.conv2d_backward_filter(xc, dyc, filter_size[0], filter_size[1], sh, sw, top, left, dh, dw)
    return dw_.astype(x.dtype, copy=False)


def _pool_geometry(name, shape, ksize, strides, padding):
    oh, ow, top, left = conv_geometry(name, shape[1], shape[2], *ksize, strides, padding, (1, 1))
    return top, left, oh, ow


def max_pool2d(x, ksize, strides, padding):
    (xc,) = _ready(x)
    top, left, oh, ow = _pool_geometry("max_pool2d", x.shape, ksize, strides, padding)
    return _kernels.max_pool2d_forward(xc, *ksize, *strides, top, left, oh, ow).astype(x.dtype, copy=False)


def max_pool2d_grad(x, dy, ksize, strides, padding):
    xc, dyc = _ready(x, dy)
    top, left, _, _ = _pool_geometry("max_pool2d", x.shape, ksize, strides, padding)
    return _kernels.max_pool2d_backward(xc, dyc, *ksize, *strides, top, left).astype(x.dtype, copy=False)


def avg_pool2d(x, ksize, strides, padding):
    (xc,) = _ready(x)
    top, left, oh, ow = _pool_geometry("avg_pool2d", x.shape, ksize, strides, padding)
    return _kernels.avg_pool2d_forward(xc, *ksize, *strides, top, left, oh, ow).astype(x.dtype, copy=False)


def avg_pool2d_grad(dy, input_size, ksize, strides, padding):
    (dyc,) = _ready(dy)
    shape = (dy.shape[0], *input_size, dy.shape[3])
    top, left, _, _ = _pool_geometry("avg_pool2d", shape, ksize, strides, padding)
    dx = _kernels.avg_pool2d_backward(dyc, input_size[0], input_size[1], *ksize, *strides, top, left)
    return dx.astype(dy.dtype, copy=False)


def _volume_geometry(name, sizes, ksize, strides, padding, dilations):
    """(output sizes, front/top/left padding) of a 3-D window op with 'SAME' or 'VALID' padding."""
    outs, befores = [], []
    for size, k, s, d in zip(sizes, ksize, strides, dilations, strict=True):
        out, before = axis_geometry(name, size, k, s, d, padding, (0, 0))
        outs.append(out)
        befores.append(before)
    return tuple(outs), tuple(befores)


def conv3d(x, w, strides, padding, dilations):
    xc, wc = _ready(x, w)
    outs, pads = _volume_geometry("conv3d", x.shape[1:4], w.shape[:3], strides, padding, dilations)
    return _kernels.conv3d_forward(xc, wc, tuple(strides), pads, tuple(dilations), outs).astype(x.dtype, copy=False)


def conv3d_input_grad(dy, w, input_size, strides, padding, dilations):
    dyc, wc = _ready(dy, w)
    size = tuple(input_size)
    _, pads = _volume_geometry("conv3d_transpose", size, w.shape[:3], strides, padding, dilations)
    dx = _kernels.conv3d_backward_input(dyc, wc, size, tuple(strides), pads, tuple(dilations))
    return dx.astype(dy.dtype, copy=False)


def conv3d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    xc, dyc = _ready(x, dy)
    ksize = tuple(filter_size)
    _, pads = _volume_geometry("conv3d_filter_grad", x.shape[1:4], ksize, strides, padding, dilations)
    dw = _kernels.conv3d_backward_filter(xc, dyc, ksize, tuple(strides), pads, tuple(dilations))
    return dw.astype(x.dtype, copy=False)


def max_pool3d(x, ksize, strides, padding):
    (xc,) = _ready(x)
    outs, pads = _volume_geometry("max_pool3d", x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    return _kernels.max_pool3d_forward(xc, tuple(ksize), tuple(strides), pads, outs).astype(x.dtype, copy=False)


def max_pool3d_grad(x, dy, ksize, strides, padding):
    xc, dyc = _ready(x, dy)
    _, pads = _volume_geometry("max_pool3d", x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    return _kernels.max_pool3d_backward(xc, dyc, tuple(ksize), tuple(strides), pads).astype(x.dtype, copy=False)


def avg_pool3d(x, ksize, strides, padding):
    (xc,) = _ready(x)
    outs, pads = _volume_geometry("avg_pool3d", x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    return _kernels.avg_pool3d_forward(xc, tuple(ksize), tuple(strides), pads, outs).astype(x.dtype, copy=False)


def avg_pool3d_grad(dy, input_size, ksize, strides, padding):
    (dyc,) = _ready(dy)
    size = tuple(input_size)
    _, pads = _volume_geometry("avg_pool3d", size, ksize, strides, padding, (1, 1, 1))
    dx = _kernels.avg_pool3d_backward(dyc, size, tuple(ksize), tuple(strides), pads)
    return dx.astype(dy.dtype, copy=False)


def depthwise_conv2d(x, w, strides, padding, dilations):
    xc, wc = _ready(x, w)
    sh, sw, top, left, dh, dw, oh, ow = _geometry(
        "depthwise_conv2d", x.shape[1], x.shape[2], w.shape[0], w.shape[1], strides, padding, dilations
    )
    y = _kernels.depthwise_conv2d_forward(xc, wc, sh, sw, top, left, dh, dw, oh, ow)
    return y.astype(x.dtype, copy=False)


def depthwise_conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    dyc, wc = _ready(dy, w)
    sh, sw, top, left, dh, dw, _, _ = _geometry(
        "depthwise_conv2d_input_grad", *input_size, w.shape[0], w.shape[1], strides, padding, dilations
    )
    dx = _kernels.depthwise_conv2d_backward_input(dyc, wc, input_size[0], input_size[1], sh, sw, top, left, dh, dw)
    return dx.astype(dy.dtype, copy=False)


def depthwise_conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    xc, dyc = _ready(x, dy)
    sh, sw, top, left, dh, dw, _, _ = _geometry(
        "depthwise_conv2d_filter_grad", x.shape[1], x.shape[2], *filter_size, strides, padding, dilations
    )
    dw_ = _kernels.depthwise_conv2d_backward_filter(xc, dyc, filter_size[0], filter_size[1], sh, sw, top, left, dh, dw)
    return dw_.astype(x.dtype, copy=False)


def sparse_softmax_cross_entropy_with_logits(logits, labels):
    ids = np.ascontiguousarray(labels, dtype=np.int64)
    if ids.ndim != 1 or _kernels.first_label_outside(ids, logits.shape[1]) >= 0:
        check_labels("sparse_softmax_cross_entropy_with_logits", labels, logits.shape[1])  # names the label
    if logits.dtype in _FAST:
        return _kernels.sparse_softmax_xent(np.ascontiguousarray(logits), ids)
    loss, backprop = _kernels.sparse_softmax_xent(logits.astype(np.float32), ids)
    return loss.astype(logits.dtype, copy=False), backprop.astype(logits.dtype, copy=False)


def _rows_ok(params, ids, axis):
    return axis == 0 and params.ndim == 2 and params.dtype in _FAST


def gather(x, indices, axis):
    check_index_range("gather", indices, x.shape[axis], axis)
    if not _rows_ok(x, indices, axis):
        return np.take(x, indices, axis=axis)
    ids = np.ascontiguousarray(indices.reshape(-1), dtype=np.int64)
    ids = np.where(ids < 0, ids + x.shape[0], ids)
    rows = _kernels.gather_rows(np.ascontiguousarray(x), ids)
    return rows.reshape(indices.shape + x.shape[1:])


def scatter_add(x, indices, updates, axis):
    check_index_range("scatter_add", indices, x.shape[axis], axis)
    out = np.array(x, copy=True, order="C")
    if not _rows_ok(x, indices, axis) or updates.dtype != x.dtype:
        np.add.at(out, (slice(None),) * axis + (indices,), updates)
        return out
    ids = np.ascontiguousarray(indices.reshape(-1), dtype=np.int64)
    ids = np.where(ids < 0, ids + x.shape[0], ids)
    _kernels.scatter_add_rows(out, ids, np.ascontiguousarray(updates.reshape(ids.shape[0], x.shape[1])))
    return out


def unique_sum(indices, values, num_rows):
    check_index_range("unique_sum", indices, num_rows, 0)
    rows = indices.astype(np.int64, copy=False)
    unique, inverse = np.unique(np.where(rows < 0, rows + num_rows, rows), return_inverse=True)
    inverse = np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64)
    sums = np.zeros((unique.shape[0], *values.shape[1:]), dtype=values.dtype)
    if values.ndim == 2 and values.dtype in _FAST:
        _kernels.scatter_add_rows(sums, inverse, np.ascontiguousarray(values))
    else:
        np.add.at(sums, inverse, values)
    return unique, inverse, sums


def adam_update(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    step = float(step)
    bias1, bias2 = 1.0 - beta1**step, 1.0 - beta2**step
    if epsilon_on_sqrt_v:
        epsilon = epsilon / bias2**0.5
    dtype = param.dtype
    if dtype in _FAST and m.dtype == dtype and v.dtype == dtype and grad.dtype == dtype:
        return _kernels.adam_update(param, m, v, grad, float(lr), beta1, beta2, epsilon, bias1, bias2)
    p, m, v, g = _ready(param, m, v, grad)
    outs = _kernels.adam_update(p, m, v, g, float(lr), beta1, beta2, epsilon, bias1, bias2)
    return tuple(o.astype(dtype, copy=False) for o in outs)


def sgd_momentum_update_in_place(param, m, grad, lr, momentum, nesterov=False):
    """`sgd_momentum_update` writing param and m themselves (the executor's form for variables
    it owns), with its arithmetic in param's dtype; returns them."""
    lr = float(lr)
    if not (m.dtype == grad.dtype == param.dtype and param.shape == m.shape == grad.shape):
        raise ValueError(
            f"sgd_momentum_update: param {param.dtype}{param.shape}, m {m.dtype}{m.shape} and "
            f"grad {grad.dtype}{grad.shape} must agree to be written in place"
        )
    if not (param.flags.writeable and m.flags.writeable):
        param, m = param.copy(), m.copy()
    step = grad * lr
    np.multiply(m, momentum, out=m)
    np.subtract(m, step, out=m)
    if nesterov:
        ahead = m * momentum
        ahead -= step
        param += ahead
    else:
        param += m
    return param, m


def adam_update_in_place(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """`adam_update` writing param, m and v themselves (the executor's form for variables it
    owns); returns them."""
    step = float(step)
    bias1, bias2 = 1.0 - beta1**step, 1.0 - beta2**step
    eps = epsilon / bias2**0.5 if epsilon_on_sqrt_v else epsilon
    dtype = param.dtype
    if dtype in _FAST and m.dtype == v.dtype == grad.dtype == dtype and param.shape == grad.shape:
        if all(t.flags.c_contiguous and t.flags.writeable for t in (param, m, v)):
            _kernels.adam_update_in_place(param, m, v, grad, float(lr), beta1, beta2, eps, bias1, bias2)
            return param, m, v
    for table, new in zip(
        (param, m, v), adam_update(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v), strict=True
    ):
        table[...] = new
    return param, m, v


def adamw_update_in_place(param, m, v, grad, lr, step, weight_decay, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """`adamw_update` writing param, m and v themselves; returns them."""
    decay = (np.asarray(lr) * weight_decay).astype(param.dtype)
    np.subtract(param, param * decay, out=param)
    rate = param.dtype.type(float(lr))
    return adam_update_in_place(param, m, v, grad, rate, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)


def sparse_adam_update(param, m, v, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """The rows' Adam step on copies of the tables (the executor writes a variable it owns in
    place, through `sparse_adam_update_in_place`)."""
    tables = tuple(np.array(t, copy=True, order="C") for t in (param, m, v))
    return sparse_adam_update_in_place(*tables, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)


def sparse_adam_update_in_place(param, m, v, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """`sparse_adam_update` writing the rows of param, m and v themselves; returns them."""
    rows = check_index_range("sparse_adam_update", indices, param.shape[0], 0).astype(np.int64, copy=False)
    rows = np.ascontiguousarray(np.where(rows < 0, rows + param.shape[0], rows))
    dtype = param.dtype
    fast = dtype in _FAST and m.dtype == v.dtype == grad.dtype == dtype
    if fast and all(t.flags.c_contiguous and t.flags.writeable for t in (param, m, v)):
        step = float(step)
        bias1, bias2 = 1.0 - beta1**step, 1.0 - beta2**step
        eps = epsilon / bias2**0.5 if epsilon_on_sqrt_v else epsilon
        grad = np.ascontiguousarray(grad)
        try:
            _kernels.adam_update_rows(param, m, v, rows, grad, float(lr), beta1, beta2, eps, bias1, bias2)
        except ValueError:  # a repeated row: the op's own error names it
            check_distinct("sparse_adam_update", rows)
            raise
        return param, m, v
    check_distinct("sparse_adam_update", rows)
    old = (np.take(t, rows, axis=0) for t in (param, m, v))
    parts = adam_update(*old, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    for table, part in zip((param, m, v), parts, strict=True):
        table[rows] = part
    return param, m, v


def adamw_update(param, m, v, grad, lr, step, weight_decay, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """The weight decay in NumPy (lr * weight_decay in lr's float type, rounded to the parameters'
    dtype), then the compiled Adam step with the learning rate in that dtype, as `adam_update` gets it."""
    decay = (np.asarray(lr) * weight_decay).astype(param.dtype)
    decayed = (param - param * decay).astype(param.dtype, copy=False)
    rate = param.dtype.type(float(lr))
    return adam_update(decayed, m, v, grad, rate, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)


def word2vec_sgns_train(syn0, syn1, ids, offsets, keep, cum, alpha_start, alpha_end, seed, window, negative, threads):
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= syn0.shape[0]):
        raise IndexError(f"word2vec_sgns_train: word ids must lie in [0, {syn0.shape[0]})")
    syn0, syn1 = np.array(syn0, order="C", copy=True), np.array(syn1, order="C", copy=True)
    counts = _kernels.sgns_train(
        syn0,
        syn1,
        np.ascontiguousarray(ids, dtype=np.int32),
        np.ascontiguousarray(offsets, dtype=np.int64),
        np.ascontiguousarray(keep, dtype=np.float64),
        np.ascontiguousarray(cum, dtype=np.int64),
        window,
        negative,
        float(alpha_start),
        float(alpha_end),
        int(seed) & 0xFFFFFFFFFFFFFFFF,
        threads,
    )
    return syn0, syn1, np.array(counts, dtype=np.int64)


def relu(x):
    if isinstance(x, np.ndarray) and x.dtype in _FAST:
        return _kernels.relu(x)
    return np.maximum(x, 0)


def _float_pair(g, y) -> bool:
    """Whether g and y are NumPy arrays of one float dtype and shape (the relu kernels' own)."""
    return (
        isinstance(g, np.ndarray)
        and isinstance(y, np.ndarray)
        and g.dtype in _FAST
        and g.dtype == y.dtype
        and g.shape == y.shape
    )


def relu_grad(g, y):
    if _float_pair(g, y):
        return _kernels.relu_grad(g, y)
    return np.where(y > 0, g, 0).astype(g.dtype, copy=False)


def relu_bias_grad(g, y):
    """relu_grad and its sum over every axis but the last in one pass (the kernel), for float
    arrays of one shape; the reference otherwise."""
    if _float_pair(g, y) and g.ndim >= 1:
        return _kernels.relu_bias_grad(g, y)
    gz = relu_grad(g, y)
    return gz, np.sum(gz, axis=tuple(range(gz.ndim - 1))).astype(g.dtype, copy=False)


def _blas_sized(a, b) -> bool:
    """Both operands of one float dtype the kernels take, every dimension within the C ints
    BLAS takes (NumPy's own matmul takes the rest): no dimension of an array with at most
    MAX_DIM elements exceeds it, and a larger one is checked dimension by dimension."""
    if a.dtype != b.dtype or a.dtype not in _FAST:
        return False
    return (a.size <= MAX_DIM and b.size <= MAX_DIM) or all(d <= MAX_DIM for x in (a, b) for d in x.shape[-2:])


def matmul(a, b):
    if _blas_sized(a, b):
        nd = a.ndim
        if nd == b.ndim and (nd == 2 or (nd == 3 and a.shape[0] == b.shape[0])):
            return _kernels.matmul(a, b)
        if nd > 2 and b.ndim == 2 and a.flags.c_contiguous:
            return _over_rows(_kernels.matmul, a, b)
    return np.matmul(a, b)


# From this many numbers a join along the last axis takes the channel kernel; fewer go through
# NumPy.
_CHANNELS_MIN = 1 << 16


def sum(x, axes, keepdims):  # noqa: A001 - the op's name
    """The reference's sum, float arrays straight through NumPy's add.reduce (what np.sum
    calls, without its Python layers), or over every axis but the last (a bias gradient) by
    the channel kernel in float64, as relu_bias_grad sums; booleans are counted in int64."""
    if type(x) is np.ndarray and x.dtype in _FAST:
        if x.ndim >= 2 and x.flags.c_contiguous and all_but_last(axes, x.ndim):
            sums = _kernels.sum_leading(x.reshape(-1, x.shape[-1]))
            return sums.reshape((1,) * (x.ndim - 1) + sums.shape) if keepdims else sums
        return np.add.reduce(x, axis=axes, keepdims=keepdims)
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype if x.dtype != np.bool_ else np.int64)


def concat(*xs, axis):
    """The reference's join, large C-contiguous arrays of one dtype along the last axis by the
    channel kernel (an Inception module's branches)."""
    first = xs[0]
    if (
        axis == first.ndim - 1
        and first.ndim >= 2
        and all(type(x) is np.ndarray and x.flags.c_contiguous and x.dtype == first.dtype for x in xs)
        and first.dtype.kind in "fiub"
        and all(x.shape[:-1] == first.shape[:-1] for x in xs)
        and first.size * len(xs) >= _CHANNELS_MIN
    ):
        out = np.empty(first.shape[:-1] + (builtins.sum(x.shape[-1] for x in xs),), first.dtype)
        return _kernels.concat_last(list(xs), out)
    return np.concatenate(xs, axis=axis)


def _over_rows(kernel, a, *operands):
    """`kernel` on the rows of a C-contiguous `a` of rank above 2 as one matrix (a dense layer
    over a sequence), its result given `a`'s leading axes back."""
    out = kernel(a.reshape(math.prod(a.shape[:-1]), a.shape[-1]), *operands)
    return out.reshape(a.shape[:-1] + out.shape[-1:])


# ------------------------------------------------------------ fused layer ops
def _bias_activation(out, bias, activation):
    """Bias and activation in place on `out`, a product the kernel has just allocated."""
    out += bias
    if activation == "relu":
        np.maximum(out, 0, out=out)
    return out


def fused_matmul(a, w, b, activation):
    if a.ndim >= 2 and w.ndim == 2 and b.dtype == a.dtype and _blas_sized(a, w):
        if a.ndim == 2:
            return _kernels.dense(a, w, b, activation == "relu")  # product, bias and relu in one kernel call
        if a.flags.c_contiguous:
            return _over_rows(_kernels.dense, a, w, b, activation == "relu")
    return _bias_activation(matmul(a, w), b, activation)


def sgd_matmul_update(param, a, b, lr):
    """`param - lr * (a @ b)` in a new array: the gemm writes into a copy of param."""
    return sgd_matmul_update_in_place(param.copy(), a, b, lr)


def sgd_matmul_update_in_place(param, a, b, lr):
    """`sgd_matmul_update` writing param itself (the executor's form for a variable it owns):
    one gemm that reads and writes param once, where the dtypes and layout allow; returns param."""
    if not param.flags.writeable:
        param = param.copy()
    if _kernels.descend_product(param, a, b, float(lr)) is None:
        np.copyto(param, param - np.matmul(a, b) * lr, casting="unsafe")  # the op's reference
    return param


def bind_fused_matmul(reference, activation):
    """One float32 row goes straight to the one-row dense kernel, with no Python in between."""
    return _kernels.DenseKernel(activation == "relu", functools.partial(fused_matmul, activation=activation))


# The graph executor's run loop, compiled.
Schedule = _kernels.Schedule

# The most dense layers one `dense_chain` kernel runs.
DENSE_CHAIN_MAX = _kernels.DenseChain.MAX_LAYERS


def dense_chain(kernels):
    """One kernel for dense layers that feed one another, from their bound `fused_matmul`
    kernels: `chain(x, w1, b1, w2, b2, ...)` gives the last layer's output for one float32
    row, or None for the layers to run one by one. None where a kernel is not such a layer's."""
    if not all(type(k) is _kernels.DenseKernel for k in kernels):
        return None
    return _kernels.DenseChain([k.relu for k in kernels])


def fused_conv2d(x, w, b, activation, **conv):
    if x.dtype in _FAST and w.dtype == x.dtype and b.dtype == x.dtype and b.ndim == 1:
        return _conv2d(x, w, np.ascontiguousarray(b), activation == "relu", **conv)
    return _bias_activation(conv2d(x, w, **conv), b, activation)


# ------------------------------------------------------------ elementwise programs
def _encode(program: tuple):
    """The program as the kernel's int32 opcode/argument arrays and float64 constants."""
    bits = tuple(np.float64(ins[1]).tobytes() for ins in program if ins[0] == "const")
    return _encode_program(program, bits)


@functools.lru_cache(maxsize=512)
def _encode_program(program: tuple, const_bits: tuple):
    """_encode, cached by the constants' bits too: programs with 0.0 and -0.0 compare equal."""
    ops, args_a, args_b, consts = [], [], [], []
    for ins in program:
        ops.append(_elementwise.OPCODES[ins[0]])
        if ins[0] == "const":
            consts.append(float(ins[1]))
            args_a.append(len(consts) - 1)
        else:
            args_a.append(ins[1])
        args_b.append(ins[2] if len(ins) > 2 else 0)
    as32 = functools.partial(np.asarray, dtype=np.int32)
    return as32(ops), as32(args_a), as32(args_b), np.asarray(consts or [0.0])


def fused_elementwise_into(kernel, position: int):
    """A bound program's form that writes its result into its input `position` (an array of
    the result's shape and dtype) where it can, else gives a new array; None where the kernel
    has no such form."""
    into = getattr(kernel, "into", None)
    if into is None:
        return None

    def run(*arrays):
        written = into(position, *arrays)
        return written if written is not None else kernel(*arrays)

    return run


def bind_fused_elementwise(reference, program):
    """One pass over memory when each input is the result's shape, one value or one row of
    the last axis (made contiguous first if need be); the reference for other broadcasts."""
    encoded = _encode(program)
    contiguous = _elementwise.Program(*encoded, reference)
    return _elementwise.Program(*encoded, lambda *arrays: contiguous(*(np.asarray(a, order="C") for a in arrays)))
