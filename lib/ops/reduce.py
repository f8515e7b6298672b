"""Reductions: sum, mean, max, min, prod, arg-max/min, logsumexp, var, std.

`axis` is None (all axes), an int or a tuple; `keepdims` keeps reduced axes
as size 1.

>>> import tapeflow as tp
>>> tp.sum(tp.ones((2, 3)), axis=1).numpy().tolist()
[3.0, 3.0]
"""

from __future__ import annotations

import builtins

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import shapes
from tapeflow.ops.core import HALF_FLOATS, cast, full_like, restore_reduced_axes, sum
from tapeflow.ops.half import in_float32
from tapeflow.ops.math import divide, equal, exp, sqrt, square, subtract, where
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor

__all__ = ["argmax", "argmin", "logsumexp", "max", "mean", "min", "prod", "std", "sum", "var"]


def _extreme_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    y = restore_reduced_axes(ys[0], x.shape, axes, keepdims)
    g = restore_reduced_axes(gs[0], x.shape, axes, keepdims)
    hit = cast(equal(x, y), x.dtype)
    count = sum(hit, axes, keepdims=True)
    return (hit * divide(g, count),)


def _prod_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    g = restore_reduced_axes(gs[0], x.shape, axes, keepdims)
    out = restore_reduced_axes(ys[0], x.shape, axes, keepdims)
    is_zero = equal(x, 0.0)
    zeros = sum(cast(is_zero, x.dtype), axes, keepdims=True)
    nonzero_x = where(is_zero, 1.0, x)
    prod_nonzero = apply(_PROD, (nonzero_x,), {"axes": axes, "keepdims": True})
    no_zero_grad = out / nonzero_x
    # With one zero the others' gradient is (that zero) * prod_nonzero / x_i: zero in
    # value, but its derivative with respect to the zero element is right.
    the_zero = sum(where(is_zero, x, 0.0), axes, keepdims=True)
    one_zero_grad = where(is_zero, prod_nonzero, the_zero * prod_nonzero / nonzero_x)
    grad = where(equal(zeros, 0.0), no_zero_grad, where(equal(zeros, 1.0), one_zero_grad, 0.0))
    return (g * grad,)


def _logsumexp_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    y = restore_reduced_axes(ys[0], x.shape, axes, keepdims)
    return (restore_reduced_axes(gs[0], x.shape, axes, keepdims) * exp(subtract(x, y)),)


def _check_not_empty(name, x, axes):
    """An extreme of no values is undefined: refuse a reduction over an empty axis."""
    if x.size == 0 and any(x.shape[a] == 0 for a in (range(x.ndim) if axes is None else axes)):
        axis = axes[0] if axes is not None and len(axes) == 1 else axes
        raise ValueError(f"{name}: zero-size reduction over axis {axis} of the empty tensor of shape {x.shape}")


@defop("max", infer=shapes.reduction("max"), vjp=_extreme_vjp)
def _MAX(x, axes, keepdims):
    _check_not_empty("max", x, axes)
    return np.max(x, axis=axes, keepdims=keepdims)


@defop("min", infer=shapes.reduction("min"), vjp=_extreme_vjp)
def _MIN(x, axes, keepdims):
    _check_not_empty("min", x, axes)
    return np.min(x, axis=axes, keepdims=keepdims)


@defop("prod", infer=shapes.reduction("prod"), vjp=_prod_vjp)
def _PROD(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


@defop("logsumexp", infer=shapes.reduction("logsumexp", "f"), vjp=_logsumexp_vjp)
def _LOGSUMEXP(x, axes, keepdims):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axes, keepdims=keepdims))
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axes)


def _arg_infer(name):
    def infer(x, axis):
        if x.dtype.kind == "b":
            raise TypeError(f"{name}: expected a numeric tensor, got bool")
        if axis is None:
            return [((), dtypes.int64)]
        return [(tuple(d for i, d in enumerate(x.shape) if i != axis), dtypes.int64)]

    return infer


@defop("argmax", infer=_arg_infer("argmax"))
def _ARGMAX(x, axis):
    _check_not_empty("argmax", x, None if axis is None else (axis,))
    return np.argmax(x, axis=axis)


@defop("argmin", infer=_arg_infer("argmin"))
def _ARGMIN(x, axis):
    _check_not_empty("argmin", x, None if axis is None else (axis,))
    return np.argmin(x, axis=axis)


def _reduction(opdef, doc: str):
    def fn(x, axis=None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x, name=opdef.name)
        axes = shapes.normalize_axes(opdef.name, axis, x.ndim)
        return apply(opdef, (x,), {"axes": axes, "keepdims": bool(keepdims)})

    fn.__name__ = fn.__qualname__ = opdef.name
    fn.__doc__ = doc
    return fn


max = _reduction(  # noqa: A001
    _MAX,
    """Maximum over `axis`; ties share the gradient equally.

    >>> import tapeflow as tp
    >>> tp.max(tp.tensor([[1.0, 5.0], [7.0, 2.0]]), axis=1).numpy().tolist()
    [5.0, 7.0]
    """,
)
min = _reduction(  # noqa: A001
    _MIN,
    """Minimum over `axis`; ties share the gradient equally.

    >>> import tapeflow as tp
    >>> tp.min(tp.tensor([[1.0, 5.0], [7.0, 2.0]]), axis=0).numpy().tolist()
    [1.0, 2.0]
    """,
)
prod = _reduction(
    _PROD,
    """Product over `axis`; the gradient is exact when inputs contain zeros
    (second derivatives are exact for up to one zero per reduced slice).

    >>> import tapeflow as tp
    >>> tp.prod(tp.tensor([2.0, 3.0])).numpy().item()
    6.0
    """,
)
logsumexp = _reduction(
    _LOGSUMEXP,
    """log(sum(exp(x))) over `axis`, computed without overflow.

    >>> import tapeflow as tp
    >>> round(float(tp.logsumexp(tp.tensor([1000.0, 1000.0]))), 2)
    1000.69
    """,
)
prod, logsumexp = in_float32(prod), in_float32(logsumexp)  # half floats multiply and exponentiate in float32


def _arg(opdef, doc):
    def fn(x, axis=None) -> Tensor:
        x = as_tensor(x, name=opdef.name)
        ax = None if axis is None else shapes.normalize_axis(opdef.name, axis, x.ndim)
        return apply(opdef, (x,), {"axis": ax})

    fn.__name__ = fn.__qualname__ = opdef.name
    fn.__doc__ = doc
    return fn


argmax = _arg(
    _ARGMAX,
    """Index of the largest value along `axis` (of the flattened tensor for None).

    >>> import tapeflow as tp
    >>> tp.argmax(tp.tensor([[1.0, 5.0], [7.0, 2.0]]), axis=1).numpy().tolist()
    [1, 0]
    """,
)
argmin = _arg(
    _ARGMIN,
    """Index of the smallest value along `axis` (of the flattened tensor for None).

    >>> import tapeflow as tp
    >>> tp.argmin(tp.tensor([3.0, 1.0, 2.0])).numpy().item()
    1
    """,
)


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis`.

    >>> import tapeflow as tp
    >>> tp.mean(tp.tensor([1.0, 2.0, 6.0])).numpy().item()
    3.0
    """
    x = as_tensor(x, name="mean")
    if x.dtype.kind != "f":
        x = cast(x, dtypes.DEFAULT_FLOAT)
    if x.dtype.name in HALF_FLOATS:  # the sum and the division in float32, then back
        return cast(mean(cast(x, "float32"), axis, keepdims), x.dtype)
    axes = shapes.normalize_axes("mean", axis, x.ndim)
    total = sum(x, axes, keepdims)
    if any(x.shape[a] is None for a in axes):  # counted when a frozen graph runs
        return total / sum(full_like(x, 1), axes, keepdims)
    count = 1
    for a in axes:
        count *= x.shape[a]
    return total * (1.0 / builtins.max(count, 1)) if count else total * np.nan


def var(x, axis=None, keepdims: bool = False) -> Tensor:
    """Population variance over `axis` (divides by N, as NumPy's default).

    >>> import tapeflow as tp
    >>> tp.var(tp.tensor([1.0, 3.0])).numpy().item()
    1.0
    """
    x = as_tensor(x, name="var")
    if x.dtype.name in HALF_FLOATS:  # statistics in float32, then back
        return cast(var(cast(x, "float32"), axis, keepdims), x.dtype)
    centered = x - mean(x, axis, keepdims=True)
    return mean(square(centered), axis, keepdims)


@in_float32
def std(x, axis=None, keepdims: bool = False) -> Tensor:
    """Population standard deviation over `axis`.

    >>> import tapeflow as tp
    >>> tp.std(tp.tensor([1.0, 3.0])).numpy().item()
    1.0
    """
    return sqrt(var(x, axis, keepdims))
