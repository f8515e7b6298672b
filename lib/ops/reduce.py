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
from tapeflow.ops.math import cast, divide, equal, exp, sqrt, square, subtract, where
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor


def _reduce_infer(name, kinds="if"):
    def infer(x, axes, keepdims):
        if x.dtype.kind not in kinds:
            raise TypeError(f"{name}: dtype {x.dtype} is not supported")
        for a in axes:
            if not 0 <= a < builtins.max(len(x.shape), 1):
                raise ValueError(f"{name}: axis {a} is out of range for shape {x.shape}")
        out = dtypes.int64 if x.dtype.kind == "b" else x.dtype
        return [(shapes.reduced_shape(x.shape, axes, keepdims), out)]

    return infer


def _keep(g: Tensor, x_shape: tuple, axes: tuple, keepdims: bool) -> Tensor:
    """Reshape a reduced gradient so that it broadcasts against the input."""
    from tapeflow.ops.array import reshape

    if keepdims:
        return g
    return reshape(g, shapes.reduced_shape(x_shape, axes, True))


def _sum_vjp(gs, xs, ys, axes, keepdims):
    from tapeflow.ops.array import broadcast_to

    x = xs[0]
    g = _keep(gs[0], x.shape, axes, keepdims)
    if None in x.shape:  # a shape known only when a frozen graph runs: broadcast by adding zeros like x
        from tapeflow.ops.creation import full_like

        return (g + full_like(x, 0),)
    return (broadcast_to(g, x.shape),)


def _extreme_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    y = _keep(ys[0], x.shape, axes, keepdims)
    g = _keep(gs[0], x.shape, axes, keepdims)
    hit = cast(equal(x, y), x.dtype)
    count = apply(_SUM, (hit,), {"axes": axes, "keepdims": True})
    return (hit * divide(g, count),)


def _prod_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    g = _keep(gs[0], x.shape, axes, keepdims)
    out = _keep(ys[0], x.shape, axes, keepdims)
    is_zero = equal(x, 0.0)
    zeros = apply(_SUM, (cast(is_zero, x.dtype),), {"axes": axes, "keepdims": True})
    nonzero_x = where(is_zero, 1.0, x)
    prod_nonzero = apply(_PROD, (nonzero_x,), {"axes": axes, "keepdims": True})
    no_zero_grad = out / nonzero_x
    # With one zero the others' gradient is (that zero) * prod_nonzero / x_i: zero in
    # value, but its derivative with respect to the zero element is right.
    the_zero = apply(_SUM, (where(is_zero, x, 0.0),), {"axes": axes, "keepdims": True})
    one_zero_grad = where(is_zero, prod_nonzero, the_zero * prod_nonzero / nonzero_x)
    grad = where(equal(zeros, 0.0), no_zero_grad, where(equal(zeros, 1.0), one_zero_grad, 0.0))
    return (g * grad,)


def _logsumexp_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    y = _keep(ys[0], x.shape, axes, keepdims)
    return (_keep(gs[0], x.shape, axes, keepdims) * exp(subtract(x, y)),)


@defop("sum", infer=_reduce_infer("sum", "bif"), vjp=_sum_vjp)
def _SUM(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype if x.dtype != bool else np.int64)


@defop("max", infer=_reduce_infer("max"), vjp=_extreme_vjp)
def _MAX(x, axes, keepdims):
    return np.max(x, axis=axes, keepdims=keepdims)


@defop("min", infer=_reduce_infer("min"), vjp=_extreme_vjp)
def _MIN(x, axes, keepdims):
    return np.min(x, axis=axes, keepdims=keepdims)


@defop("prod", infer=_reduce_infer("prod"), vjp=_prod_vjp)
def _PROD(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


@defop("logsumexp", infer=_reduce_infer("logsumexp", "f"), vjp=_logsumexp_vjp)
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
    return np.argmax(x, axis=axis)


@defop("argmin", infer=_arg_infer("argmin"))
def _ARGMIN(x, axis):
    return np.argmin(x, axis=axis)


def _reduction(opdef, doc: str):
    def fn(x, axis=None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x, name=opdef.name)
        axes = shapes.normalize_axes(opdef.name, axis, x.ndim)
        return apply(opdef, (x,), {"axes": axes, "keepdims": bool(keepdims)})

    fn.__name__ = fn.__qualname__ = opdef.name
    fn.__doc__ = doc
    return fn


sum = _reduction(  # noqa: A001
    _SUM,
    """Sum over `axis`.

    >>> import tapeflow as tp
    >>> tp.sum(tp.ones((2, 3))).numpy().item()
    6.0
    """,
)
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
    axes = shapes.normalize_axes("mean", axis, x.ndim)
    total = apply(_SUM, (x,), {"axes": axes, "keepdims": bool(keepdims)})
    if any(x.shape[a] is None for a in axes):  # counted when a frozen graph runs
        from tapeflow.ops.creation import full_like

        return total / apply(_SUM, (full_like(x, 1),), {"axes": axes, "keepdims": bool(keepdims)})
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
    centered = x - mean(x, axis, keepdims=True)
    return mean(square(centered), axis, keepdims)


def std(x, axis=None, keepdims: bool = False) -> Tensor:
    """Population standard deviation over `axis`.

    >>> import tapeflow as tp
    >>> tp.std(tp.tensor([1.0, 3.0])).numpy().item()
    1.0
    """
    return sqrt(var(x, axis, keepdims))
