"""The primitives every op family builds on, and the gradients of the others use: cast,
reshape, transpose, broadcast_to, sum, full_like and the rules that undo a broadcast or a
reduction. The families (math, array, reduce, creation, nn ...) import them from here and
re-export them under their public names.

>>> import tapeflow as tp
>>> unbroadcast(tp.ones((4, 2, 3)), (2, 1)).numpy().tolist()
[[12.0], [12.0]]
"""

from __future__ import annotations

import math as _pymath

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import shapes
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor

__all__ = [
    "broadcast_to",
    "cast",
    "expand_dims",
    "full_like",
    "ones_like",
    "reshape",
    "restore_reduced_axes",
    "squeeze",
    "sum",
    "transpose",
    "unbroadcast",
    "zeros_like",
]


# -------------------------------------------------------------------- cast
def _cast_infer(x, dtype):
    return [(x.shape, dtypes.as_dtype(dtype))]


def _cast_vjp(gs, xs, ys, dtype):
    x = xs[0]
    if x.dtype.kind != "f" or dtypes.as_dtype(dtype).kind != "f":
        return (None,)
    return (cast(gs[0], x.dtype),)


@defop("cast", infer=_cast_infer, vjp=_cast_vjp)
def _CAST(x, dtype):
    return x.astype(dtypes.as_dtype(dtype).np)


def cast(x, dtype) -> Tensor:
    """Convert to another dtype; floats to ints truncate toward zero.

    >>> import tapeflow as tp
    >>> tp.cast(tp.tensor([1.7, -1.7]), "int32").numpy().tolist()
    [1, -1]
    """
    d = dtypes.as_dtype(dtype)
    x = as_tensor(x, name="cast")
    if x.dtype is d:
        return x
    return apply(_CAST, (x,), {"dtype": d.name})


# ----------------------------------------------------------------- reshape
def _resolve_shape(name: str, in_shape: tuple, shape: tuple) -> tuple:
    """The output shape of reshape; None in `shape` keeps the input's dimension at
    that position, and None in the result marks a dimension known only at run time."""
    if shape.count(-1) > 1:
        raise ValueError(f"{name}: at most one -1 is allowed in shape {shape}")
    for i, d in enumerate(shape):
        if d is None:
            if i >= len(in_shape):
                raise ValueError(f"{name}: None at position {i} of {shape} has no input dimension {in_shape} to keep")
        else:
            shapes.as_int(name, "each dimension of shape (or -1)", d, low=-1)
    shape = tuple(in_shape[i] if d is None else d for i, d in enumerate(shape))
    if None in shape or None in in_shape:
        return tuple(None if d == -1 else d for d in shape)
    size = _pymath.prod(in_shape)
    known = _pymath.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or size % known:
            raise ValueError(f"{name}: cannot reshape a tensor of shape {in_shape} into {shape}")
        shape = tuple(size // known if d == -1 else int(d) for d in shape)
    elif known != size:
        raise ValueError(f"{name}: cannot reshape a tensor of shape {in_shape} ({size} elements) into {shape}")
    return tuple(int(d) for d in shape)


def _reshape_infer(x, shape):
    return [(_resolve_shape("reshape", x.shape, shape), x.dtype)]


def _reshape_vjp(gs, xs, ys, shape):
    """The gradient in the input's shape; sizes known only at run time come from the input
    itself where more than one is unknown (a None in `reshape` would name the gradient's)."""
    target = xs[0].shape
    if target.count(None) <= 1:
        return (reshape(gs[0], tuple(-1 if d is None else d for d in target)),)
    return (reshape_like(gs[0], xs[0]),)


@defop("reshape", infer=_reshape_infer, vjp=_reshape_vjp)
def _RESHAPE(x, shape):
    if None in shape:
        shape = tuple(x.shape[i] if d is None else d for i, d in enumerate(shape))
    return np.reshape(x, shape)


@defop(
    "reshape_like",
    infer=lambda x, like: [(like.shape, x.dtype)],
    vjp=lambda gs, xs, ys: (reshape_like(gs[0], xs[0]), None),
)
def _RESHAPE_LIKE(x, like):
    return x.reshape(like.shape)


def reshape_like(x, like) -> Tensor:
    """`x`'s values in the shape of `like` (known when it runs): the reshape a gradient takes
    back to its input when several of the input's sizes are unknown while tracing.

    >>> import tapeflow as tp
    >>> tp.ops.core.reshape_like(tp.ones((6,)), tp.zeros((2, 3))).shape
    (2, 3)
    """
    x, like = as_tensor(x, name="reshape_like"), as_tensor(like, name="reshape_like")
    if None not in like.shape and None not in x.shape and _pymath.prod(x.shape) != _pymath.prod(like.shape):
        raise ValueError(f"reshape_like: cannot reshape a tensor of shape {x.shape} into {like.shape}")
    return apply(_RESHAPE_LIKE, (x, like), {})


def reshape(x, shape) -> Tensor:
    """The same values in a new shape; one dimension may be -1, and None keeps
    the input's dimension at that position (a batch size known only at run time).

    >>> import tapeflow as tp
    >>> tp.reshape(tp.ones((2, 3)), (-1,)).shape
    (6,)
    """
    x = as_tensor(x, name="reshape")
    if hasattr(type(shape), "__index__") and not isinstance(shape, bool):
        shape = (shape,)
    shape = tuple(
        None if d is None else shapes.as_int("reshape", "each dimension of shape (or -1)", d, low=-1) for d in shape
    )
    if shape == x.shape:
        return x
    return apply(_RESHAPE, (x,), {"shape": shape})


def expand_dims(x, axis: int) -> Tensor:
    """Insert a size-1 axis at `axis`.

    >>> import tapeflow as tp
    >>> tp.expand_dims(tp.ones((2, 3)), -1).shape
    (2, 3, 1)
    """
    x = as_tensor(x, name="expand_dims")
    a = shapes.normalize_axis("expand_dims", axis, x.ndim + 1)
    sources = (*range(a), None, *range(a, x.ndim))
    moved = _sized_from(x, sources)
    if moved is None:  # append the axis, where no size moves, then move it
        return transpose(reshape(x, x.shape + (1,)), (*range(a), x.ndim, *range(a, x.ndim)))
    return reshape(x, moved)


def squeeze(x, axis=None) -> Tensor:
    """Remove size-1 axes (all of them, or those in `axis`).

    >>> import tapeflow as tp
    >>> tp.squeeze(tp.ones((2, 1, 3))).shape
    (2, 3)
    """
    x = as_tensor(x, name="squeeze")
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = shapes.normalize_axes("squeeze", axis, x.ndim)
        bad = [a for a in axes if x.shape[a] != 1]
        if bad:
            raise ValueError(f"squeeze: axis {bad[0]} of shape {x.shape} has size {x.shape[bad[0]]}, not 1")
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = _sized_from(x, kept)
    if moved is None:  # move the size-1 axes last, where dropping them moves no size
        return reshape(transpose(x, (*kept, *axes)), tuple(x.shape[i] for i in kept))
    return reshape(x, moved)


def _sized_from(x, sources) -> tuple | None:
    """The shape for `reshape` of an output whose axis i is input axis sources[i] (None: a new
    size-1 axis). `reshape` reads None as "the input's size at this position", so an unknown
    size that changes position is written -1; None when more than one would have to be."""
    moved = [i for i, s in enumerate(sources) if s is not None and s != i and x.shape[s] is None]
    if len(moved) > 1:
        return None
    return tuple(1 if s is None else (-1 if i in moved else x.shape[s]) for i, s in enumerate(sources))


# --------------------------------------------------------------- transpose
def _transpose_infer(x, perm):
    if sorted(perm) != list(range(len(x.shape))):
        raise ValueError(f"transpose: perm {perm} is not a permutation of the axes of shape {x.shape}")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


def _transpose_vjp(gs, xs, ys, perm):
    return (transpose(gs[0], tuple(int(i) for i in np.argsort(perm))),)


@defop("transpose", infer=_transpose_infer, vjp=_transpose_vjp)
def _TRANSPOSE(x, perm):
    return np.transpose(x, perm)


def transpose(x, perm=None) -> Tensor:
    """Permute axes; by default reverse them.

    >>> import tapeflow as tp
    >>> tp.transpose(tp.ones((2, 3, 4)), (0, 2, 1)).shape
    (2, 4, 3)
    """
    x = as_tensor(x, name="transpose")
    if perm is None:
        perm = tuple(range(x.ndim - 1, -1, -1))
    else:
        perm = tuple(shapes.as_int("transpose", "perm", p, low=-shapes.MAX_DIM) for p in perm)
    return apply(_TRANSPOSE, (x,), {"perm": perm})


# --------------------------------------------------------------------- sum
def restore_reduced_axes(g: Tensor, x_shape: tuple, axes: tuple, keepdims: bool) -> Tensor:
    """A reduced gradient reshaped so that it broadcasts against the input again.

    >>> import tapeflow as tp
    >>> restore_reduced_axes(tp.ones((2,)), (2, 3), (1,), False).shape
    (2, 1)
    """
    if keepdims:
        return g
    return reshape(g, shapes.reduced_shape(x_shape, axes, True))


def _sum_vjp(gs, xs, ys, axes, keepdims):
    x = xs[0]
    g = restore_reduced_axes(gs[0], x.shape, axes, keepdims)
    if None in x.shape:  # a shape known only when a frozen graph runs: broadcast by adding zeros like x
        return (g + full_like(x, 0),)
    return (broadcast_to(g, x.shape),)


@defop("sum", infer=shapes.reduction("sum", "bif"), vjp=_sum_vjp)
def _SUM(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype if x.dtype != bool else np.int64)


def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over `axis`.

    >>> import tapeflow as tp
    >>> tp.sum(tp.ones((2, 3))).numpy().item()
    6.0
    """
    x = as_tensor(x, name="sum")
    axes = shapes.normalize_axes("sum", axis, x.ndim)
    if x.dtype.name in HALF_FLOATS:  # accumulate in float32: half precision loses counts past 256 or 2048
        total = apply(_SUM, (cast(x, "float32"),), {"axes": axes, "keepdims": bool(keepdims)})
        return cast(total, x.dtype)
    return apply(_SUM, (x,), {"axes": axes, "keepdims": bool(keepdims)})


HALF_FLOATS = ("float16", "bfloat16")  # reductions over them accumulate in float32


# ------------------------------------------------------------- broadcasting
def unbroadcast(g: Tensor, shape: tuple) -> Tensor:
    """Sum a broadcast gradient back down to `shape`."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    out = apply(_SUM, (g,), {"axes": axes, "keepdims": True}) if axes else g
    return reshape(out, shape)


def _broadcast_to_infer(x, shape):
    shape = shapes.as_dims("broadcast_to", shape)
    out = shapes.broadcast("broadcast_to", x.shape, shape)
    if out != tuple(shape):
        raise ValueError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    return [(out, x.dtype)]


@defop(
    "broadcast_to",
    infer=_broadcast_to_infer,
    vjp=lambda gs, xs, ys, shape: (unbroadcast(gs[0], xs[0].shape),),
)
def _BROADCAST_TO(x, shape):
    return np.broadcast_to(x, shape)


def broadcast_to(x, shape) -> Tensor:
    """Broadcast to `shape`; the gradient sums back over broadcast axes.

    >>> import tapeflow as tp
    >>> tp.broadcast_to(tp.ones((3,)), (2, 3)).shape
    (2, 3)
    """
    x = as_tensor(x, name="broadcast_to")
    shape = shapes.as_dims("broadcast_to", shape)
    if shape == x.shape:
        return x
    return apply(_BROADCAST_TO, (x,), {"shape": shape})


# ------------------------------------------------------------ filled like x
def _like_infer(x, value, dtype):
    if not isinstance(value, bool | int | float | np.number):
        raise TypeError(f"full_like: the fill value must be a number, got {value!r:.40}")
    return [(x.shape, dtypes.as_dtype(dtype) if dtype is not None else x.dtype)]


@defop("full_like", infer=_like_infer)
def _FULL_LIKE(x, value, dtype):
    return np.full_like(x, value, dtype=dtypes.as_dtype(dtype).np if dtype is not None else x.dtype)


def full_like(x, fill_value, dtype=None) -> Tensor:
    """A tensor shaped like `x`, filled with one value.

    >>> import tapeflow as tp
    >>> tp.full_like(tp.ones((2,)), 3.0).numpy().tolist()
    [3.0, 3.0]
    """
    x = as_tensor(x, name="full_like")
    d = None if dtype is None else dtypes.as_dtype(dtype).name
    return apply(_FULL_LIKE, (x,), {"value": fill_value, "dtype": d})


def zeros_like(x, dtype=None) -> Tensor:
    """Zeros shaped like `x`.

    >>> import tapeflow as tp
    >>> tp.zeros_like(tp.ones((2,))).numpy().tolist()
    [0.0, 0.0]
    """
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None) -> Tensor:
    """Ones shaped like `x`.

    >>> import tapeflow as tp
    >>> tp.ones_like(tp.zeros((2,))).numpy().tolist()
    [1.0, 1.0]
    """
    return full_like(x, 1, dtype)
