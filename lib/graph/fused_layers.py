"""Layer-shaped fused ops for inference graphs: matmul or conv2d, then a bias add,
then optionally relu, in one node. The bias and relu run in place on the freshly
allocated product, so the two elementwise passes need no new arrays and the
executor runs one step instead of three. In a graph, fused_matmul is bound to a
compiled kernel that sends a single float32 row (batch-1 inference) straight to the
one-row dense kernel, with no Python in between.

Their VJPs are written with the primitive ops, like any op's.

>>> import numpy as np
>>> from tapeflow.ops.registry import apply
>>> a, w, b = (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), -np.full(4, 5, np.float32))
>>> import tapeflow as tp
>>> apply(FUSED_MATMUL, (tp.tensor(a), tp.tensor(w), tp.tensor(b)), {"activation": "relu"}).numpy().tolist()
[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import functools

import numpy as np

from tapeflow import _kernels
from tapeflow.ops.math import matmul
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import apply, defop, get_op

ACTIVATIONS = ("linear", "relu")
_DENSE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _epilogue(out: np.ndarray, bias: np.ndarray, activation: str) -> np.ndarray:
    """Bias and activation in place on `out`, a product the kernel has just allocated."""
    out += bias
    if activation == "relu":
        np.maximum(out, 0, out=out)
    return out


def _check_bias(name, y_shape, b, dtype):
    if len(b.shape) != 1 or (y_shape[-1] is not None and b.shape[0] != y_shape[-1]):
        raise ValueError(f"{name}: bias of shape {b.shape} does not match output channels {y_shape[-1]}")
    if b.dtype is not dtype:
        raise TypeError(f"{name}: bias dtype {b.dtype} differs from {dtype}")


def _check_activation(name, activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"{name}: activation must be one of {ACTIVATIONS}, got {activation!r}")


# ------------------------------------------------------------ matmul
def _fused_matmul_infer(a, w, b, activation):
    _check_activation("fused_matmul", activation)
    if len(w.shape) != 2:
        raise ValueError(f"fused_matmul: the weight must be 2-D, got shape {w.shape}")
    ((shape, dtype),) = get_op("matmul").infer(a, w)
    _check_bias("fused_matmul", shape, b, dtype)
    return [(shape, dtype)]


def _pre_activation_grad(g, y, activation):
    return apply(get_op("relu_grad"), (g, y), {}) if activation == "relu" else g


def _transposed(t):
    from tapeflow.ops.array import transpose

    return transpose(t, (1, 0))


def _fused_matmul_vjp(gs, xs, ys, activation):
    a, w, b = xs
    gz = _pre_activation_grad(gs[0], ys[0], activation)
    if a.ndim != 2 or w.ndim != 2:
        raise NotImplementedError("fused_matmul: gradients are defined for 2-D operands only")
    return matmul(gz, _transposed(w)), matmul(_transposed(a), gz), reduce_sum(gz, 0)


def _fused_matmul(a, w, b, activation):
    if a.ndim == 2 and a.dtype == w.dtype == b.dtype and a.dtype in _DENSE_DTYPES:
        return _kernels.dense(a, w, b, activation == "relu")  # product, bias and relu in one kernel call
    return _epilogue(_MATMUL_KERNEL(a, w), b, activation)


def _bind_fused_matmul(activation):
    return _kernels.DenseKernel(activation == "relu", functools.partial(_fused_matmul, activation=activation))


_FUSED_MATMUL = defop("fused_matmul", infer=_fused_matmul_infer, vjp=_fused_matmul_vjp, bind=_bind_fused_matmul)(
    _fused_matmul
)


# ------------------------------------------------------------ conv2d
def _fused_conv_infer(x, w, b, activation, **conv):
    _check_activation("fused_conv2d", activation)
    ((shape, dtype),) = get_op("conv2d").infer(x, w, **conv)
    _check_bias("fused_conv2d", shape, b, dtype)
    return [(shape, dtype)]


def _fused_conv_vjp(gs, xs, ys, activation, **conv):
    x, w, b = xs
    gz = _pre_activation_grad(gs[0], ys[0], activation)
    gx, gw = get_op("conv2d").vjp([gz], (x, w), (ys[0],), needs=(True, True), **conv)
    return gx, gw, reduce_sum(gz, (0, 1, 2))


@defop("fused_conv2d", infer=_fused_conv_infer, vjp=_fused_conv_vjp)
def _FUSED_CONV2D(x, w, b, activation, **conv):
    return _epilogue(_CONV_KERNEL(x, w, **conv), b, activation)


_MATMUL_KERNEL = get_op("matmul").kernel("cpu")
_CONV_KERNEL = get_op("conv2d").kernel("cpu")


FUSED_MATMUL, FUSED_CONV2D = _FUSED_MATMUL, _FUSED_CONV2D
