"""Shape and indexing ops: reshape, transpose, concat, split, pad, tile,
indexing, gather/scatter and one_hot.

>>> import tapeflow as tp
>>> tp.reshape(tp.arange(6), (2, 3)).shape
(2, 3)
>>> tp.ones((2, 3))[:, ::-1].shape
(2, 3)
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.backends.common import IndexOutOfRange, check_index_range, ufunc_at
from tapeflow.ops import shapes
from tapeflow.ops.core import broadcast_to, expand_dims, reshape, squeeze, transpose, zeros_like
from tapeflow.ops.core import sum as reduce_sum
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import IndexedSlices, Tensor

__all__ = [
    "broadcast_to",
    "concat",
    "expand_dims",
    "flatten",
    "gather",
    "gather_nd",
    "getitem",
    "one_hot",
    "pad",
    "reshape",
    "scatter_add",
    "scatter_nd_add",
    "split",
    "squeeze",
    "stack",
    "tile",
    "transpose",
]


# ------------------------------------------------------------- reshaping
def flatten(x, start_axis: int = 0) -> Tensor:
    """Merge the axes from `start_axis` on into one.

    >>> import tapeflow as tp
    >>> tp.flatten(tp.ones((2, 3, 4)), 1).shape
    (2, 12)
    """
    x = as_tensor(x, name="flatten")
    a = shapes.normalize_axis("flatten", start_axis, max(x.ndim, 1))
    return reshape(x, x.shape[:a] + (-1,))


# ---------------------------------------------------------- concat / split
def _concat_infer(*xs, axis):
    first = xs[0]
    axis = shapes.normalize_axis("concat", axis, len(first.shape))  # as the public call checks it
    shape = list(first.shape)  # outside the axis, a known size fills in an unknown one
    for x in xs[1:]:
        if x.dtype is not first.dtype:
            raise TypeError(f"concat: dtypes differ: {first.dtype} and {x.dtype}")
        if len(x.shape) != len(shape) or any(
            a is not None and b is not None and a != b
            for i, (a, b) in enumerate(zip(x.shape, shape, strict=True))
            if i != axis
        ):
            raise ValueError(f"concat: shapes {[tuple(t.shape) for t in xs]} differ outside axis {axis}")
        shape = [b if a is None else a for a, b in zip(shape, x.shape, strict=True)]
    dims = [x.shape[axis] for x in xs]
    shape[axis] = None if None in dims else sum(dims)
    return [(tuple(shape), first.dtype)]


def _concat_vjp(gs, xs, ys, axis):
    return split(gs[0], [x.shape[axis] for x in xs], axis)


@defop("concat", infer=_concat_infer, vjp=_concat_vjp)
def _CONCAT(*xs, axis):
    return np.concatenate(xs, axis=axis)


def concat(values, axis: int = 0) -> Tensor:
    """Join tensors along an existing axis.

    >>> import tapeflow as tp
    >>> tp.concat([tp.ones((2, 3)), tp.zeros((1, 3))], axis=0).shape
    (3, 3)
    """
    xs = [as_tensor(v, name="concat") for v in values]
    if not xs:
        raise ValueError("concat: needs at least one tensor")
    a = shapes.normalize_axis("concat", axis, xs[0].ndim)
    if len(xs) == 1:
        return xs[0]
    return apply(_CONCAT, tuple(xs), {"axis": a})


def stack(values, axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis.

    >>> import tapeflow as tp
    >>> tp.stack([tp.ones((2,)), tp.zeros((2,))], axis=1).shape
    (2, 2)
    """
    xs = [as_tensor(v, name="stack") for v in values]
    if not xs:
        raise ValueError("stack: needs at least one tensor")
    if any(x.shape != xs[0].shape for x in xs):
        raise ValueError(f"stack: shapes differ: {[x.shape for x in xs]}")
    a = shapes.normalize_axis("stack", axis, xs[0].ndim + 1)
    return concat([expand_dims(x, a) for x in xs], a)


def _split_infer(x, sizes, axis):
    if x.shape[axis] is not None and sum(sizes) != x.shape[axis]:
        raise ValueError(f"split: sizes {list(sizes)} do not add up to {x.shape[axis]} (axis {axis} of {x.shape})")
    return [(x.shape[:axis] + (s,) + x.shape[axis + 1 :], x.dtype) for s in sizes]


def _split_vjp(gs, xs, ys, sizes, axis):
    parts = [g if g is not None else zeros_like(y) for g, y in zip(gs, ys, strict=True)]
    return (concat(parts, axis),)


@defop("split", infer=_split_infer, vjp=_split_vjp, num_outputs=None)
def _SPLIT(x, sizes, axis):
    return tuple(np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))  # cut points as ints: CuPy takes no host array


def split(x, num_or_size_splits, axis: int = 0) -> list[Tensor]:
    """Cut a tensor along `axis` into equal parts or parts of given sizes.

    >>> import tapeflow as tp
    >>> [t.shape for t in tp.split(tp.ones((5, 2)), [2, 3])]
    [(2, 2), (3, 2)]
    """
    x = as_tensor(x, name="split")
    a = shapes.normalize_axis("split", axis, x.ndim)
    if isinstance(num_or_size_splits, int):
        n = num_or_size_splits
        if n <= 0 or x.shape[a] % n:
            raise ValueError(f"split: axis {a} of size {x.shape[a]} cannot be split into {n} equal parts")
        sizes = (x.shape[a] // n,) * n
    else:
        sizes = tuple(shapes.as_int("split", "each size", s, low=-1) for s in num_or_size_splits)
    return list(apply(_SPLIT, (x,), {"sizes": sizes, "axis": a}))


# ------------------------------------------------------------- pad / tile
def _pad_infer(x, paddings, constant_value):
    if len(paddings) != len(x.shape):
        raise ValueError(f"pad: {len(paddings)} (before, after) pairs for a tensor of rank {len(x.shape)}")
    for pair in paddings:
        if len(pair) != 2:
            raise ValueError(f"pad: paddings must be (before, after) pairs, got {paddings!r}")
        for p in pair:
            shapes.as_int("pad", "padding", p)
    out = tuple(None if d is None else d + a + b for d, (a, b) in zip(x.shape, paddings, strict=True))
    return [(out, x.dtype)]


def _pad_vjp(gs, xs, ys, paddings, constant_value):
    index = tuple(slice(a, a + d) for (a, _), d in zip(paddings, xs[0].shape, strict=True))
    return (getitem(gs[0], index),)


@defop("pad", infer=_pad_infer, vjp=_pad_vjp)
def _PAD(x, paddings, constant_value):
    return np.pad(x, paddings, mode="constant", constant_values=constant_value)


def pad(x, paddings, constant_values=0) -> Tensor:
    """Pad with a constant; `paddings` is one (before, after) pair per axis.

    >>> import tapeflow as tp
    >>> tp.pad(tp.ones((2, 2)), [(1, 1), (0, 2)]).shape
    (4, 4)
    """
    x = as_tensor(x, name="pad")
    try:
        pairs = tuple((shapes.as_int("pad", "padding", a), shapes.as_int("pad", "padding", b)) for a, b in paddings)
    except (TypeError, ValueError):
        raise ValueError(f"pad: paddings must be (before, after) integer pairs, got {paddings!r}") from None
    return apply(_PAD, (x,), {"paddings": pairs, "constant_value": float(constant_values)})


def _tile_infer(x, multiples):
    multiples = shapes.as_dims("tile", multiples, label="multiples")
    if len(multiples) != len(x.shape):
        raise ValueError(f"tile: multiples {multiples} do not fit a tensor of shape {x.shape}")
    return [(tuple(None if d is None else d * m for d, m in zip(x.shape, multiples, strict=True)), x.dtype)]


def _tile_vjp(gs, xs, ys, multiples):
    split_shape = []
    for m, d in zip(multiples, xs[0].shape, strict=True):
        split_shape += [m, d]
    g = reshape(gs[0], tuple(split_shape))
    return (reduce_sum(g, tuple(range(0, 2 * len(multiples), 2))),)


@defop("tile", infer=_tile_infer, vjp=_tile_vjp)
def _TILE(x, multiples):
    return np.tile(x, multiples)


def tile(x, multiples) -> Tensor:
    """Repeat the whole tensor `multiples[i]` times along each axis.

    >>> import tapeflow as tp
    >>> tp.tile(tp.ones((2, 3)), (2, 1)).shape
    (4, 3)
    """
    x = as_tensor(x, name="tile")
    return apply(_TILE, (x,), {"multiples": shapes.as_dims("tile", multiples, label="multiples")})


# ---------------------------------------------------------------- indexing
def _normalize_index(index) -> tuple:
    """Check an index and turn tensors inside it into NumPy arrays."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for item in items:
        if isinstance(item, Tensor):
            item = item._value
        if item is None or item is Ellipsis or isinstance(item, slice):
            if isinstance(item, slice):
                for part in (item.start, item.stop, item.step):
                    if part is not None and not isinstance(part, int | np.integer):
                        raise TypeError(f"getitem: slice bounds must be integers, got {item}")
                if item.step == 0:
                    raise ValueError("getitem: slice step cannot be zero")
            out.append(item)
        elif isinstance(item, bool | np.bool_):
            out.append(np.asarray(item))
        elif isinstance(item, int | np.integer):
            out.append(shapes.as_int("getitem", "an index", item, low=-(2**63), high=2**63 - 1))
        else:
            arr = np.asarray(item)
            if arr.dtype.kind not in "iub":
                raise TypeError(f"getitem: indices must be integers, slices or bool masks, got dtype {arr.dtype}")
            if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
                raise ValueError(f"getitem: index {arr.max()} does not fit int64")
            out.append(arr.astype(np.int64) if arr.dtype.kind in "iu" else arr)
    return tuple(out)


_DYNAMIC_PROBES = (1_000_003, 1_000_033)  # stand-ins for dimensions known only at run time


def _getitem_infer(x, index):
    try:
        if None not in x.shape:
            return [(np.broadcast_to(np.empty((), dtype=np.int8), x.shape)[index].shape, x.dtype)]
        # Index a view twice, with two stand-in sizes for each dynamic dimension:
        # output dimensions that differ between the two depend on them.
        probes = [
            np.broadcast_to(np.empty((), dtype=np.int8), tuple(p if d is None else d for d in x.shape))[index].shape
            for p in _DYNAMIC_PROBES
        ]
    except IndexError as err:
        raise IndexOutOfRange(f"getitem: index {_show(index)} is invalid for shape {x.shape}: {err}") from None
    return [(tuple(a if a == b else None for a, b in zip(*probes, strict=True)), x.dtype)]


def _show(index) -> str:
    return "[" + ", ".join("<array>" if isinstance(i, np.ndarray) and i.ndim else repr(i) for i in index) + "]"


def _has_arrays(index) -> bool:
    return any(isinstance(i, np.ndarray) for i in index)


def _getitem_vjp(gs, xs, ys, index):
    if None in xs[0].shape:  # a dynamic shape: the gradient takes it from x when the graph runs
        return (apply(_GETITEM_GRAD, (gs[0], xs[0]), {"shape": xs[0].shape, "index": index}),)
    return (apply(_GETITEM_GRAD, (gs[0],), {"shape": xs[0].shape, "index": index}),)


@defop("getitem", infer=_getitem_infer, vjp=_getitem_vjp)
def _GETITEM(x, index):
    return x[index].copy() if not _has_arrays(index) else x[index]  # a copy, not a view


def _getitem_grad_infer(g, *like, shape, index):
    return [(tuple(shape), g.dtype)]


@defop(
    "getitem_grad",
    infer=_getitem_grad_infer,
    vjp=lambda gs, xs, ys, shape, index: (apply(_GETITEM, (gs[0],), {"index": index}),) + (None,) * (len(xs) - 1),
)
def _GETITEM_GRAD(g, *like, shape, index):
    """The gradient of getitem: `g` scattered into zeros of `shape` (or of the
    shape of `like`, the indexed tensor, when `shape` has dynamic dimensions)."""
    out = np.zeros_like(g, shape=like[0].shape if like else shape)  # in g's array module
    if _has_arrays(index):
        ufunc_at(np.add, out, index, g)
    else:
        out[index] = g
    return out


def getitem(x, index) -> Tensor:
    """NumPy-style indexing: ints, slices (negative steps too), None, Ellipsis,
    integer arrays and bool masks. Repeated integer indices add up in the gradient.

    >>> import tapeflow as tp
    >>> tp.arange(10)[[1, 1, 3]].numpy().tolist()
    [1, 1, 3]
    """
    x = as_tensor(x, name="getitem")
    return apply(_GETITEM, (x,), {"index": _normalize_index(index)})


def _index_check(name: str, x, indices):
    if indices.dtype.kind != "i":
        raise TypeError(f"{name}: indices must be int32 or int64, got {indices.dtype}")


def _gather_infer(x, indices, axis):
    _index_check("gather", x, indices)
    if not 0 <= axis < len(x.shape):
        raise ValueError(f"gather: axis {axis} is out of range for shape {x.shape}")
    return [(x.shape[:axis] + tuple(indices.shape) + x.shape[axis + 1 :], x.dtype)]


def _gather_vjp(gs, xs, ys, axis):
    """Rows of axis 0 give an IndexedSlices (the rows gathered, no table-sized zeros)."""
    x, idx = xs
    if axis == 0 and None not in x.shape:
        rows = reshape(gs[0], (-1, *x.shape[1:]))
        return IndexedSlices(rows, reshape(idx, (-1,)), x.shape), None
    return apply(_SCATTER_ADD, (zeros_like(x), idx, gs[0]), {"axis": axis}), None


@defop("gather", infer=_gather_infer, vjp=_gather_vjp)
def _GATHER(x, indices, axis):
    indices = check_index_range("gather", indices, x.shape[axis], axis)
    return np.take(x, indices, axis=axis)


def gather(x, indices, axis: int = 0) -> Tensor:
    """Pick slices of `x` along `axis` by integer indices.

    >>> import tapeflow as tp
    >>> tp.gather(tp.tensor([[1.0, 2.0], [3.0, 4.0]]), [1, 1, 0]).numpy().tolist()
    [[3.0, 4.0], [3.0, 4.0], [1.0, 2.0]]
    """
    x = as_tensor(x, name="gather")
    idx = as_tensor(indices, name="gather")
    a = shapes.normalize_axis("gather", axis, x.ndim)
    return apply(_GATHER, (x, idx), {"axis": a})


def _scatter_add_infer(x, indices, updates, axis):
    _index_check("scatter_add", x, indices)
    want = x.shape[:axis] + tuple(indices.shape) + x.shape[axis + 1 :]
    if tuple(updates.shape) != want:
        raise ValueError(f"scatter_add: updates have shape {updates.shape}, expected {want}")
    if updates.dtype is not x.dtype:
        raise TypeError(f"scatter_add: updates dtype {updates.dtype} differs from {x.dtype}")
    return [(x.shape, x.dtype)]


def _scatter_add_vjp(gs, xs, ys, axis):
    g = gs[0]
    return g, None, apply(_GATHER, (g, xs[1]), {"axis": axis})


@defop("scatter_add", infer=_scatter_add_infer, vjp=_scatter_add_vjp)
def _SCATTER_ADD(x, indices, updates, axis):
    indices = check_index_range("scatter_add", indices, x.shape[axis], axis)
    out = x.copy()  # (copy, not np.array: a reference also runs on CuPy arrays)
    index = (slice(None),) * axis + (indices,)
    ufunc_at(np.add, out, index, updates)
    return out


def scatter_add(x, indices, updates, axis: int = 0) -> Tensor:
    """`x` with `updates` added at `indices` along `axis`; repeats accumulate.

    >>> import tapeflow as tp
    >>> tp.scatter_add(tp.zeros((3,)), [0, 0, 2], tp.ones((3,))).numpy().tolist()
    [2.0, 0.0, 1.0]
    """
    x = as_tensor(x, name="scatter_add")
    idx = as_tensor(indices, name="scatter_add")
    upd = as_tensor(updates, dtype=x.dtype, name="scatter_add") if not isinstance(updates, Tensor) else updates
    a = shapes.normalize_axis("scatter_add", axis, x.ndim)
    return apply(_SCATTER_ADD, (x, idx, upd), {"axis": a})


def _gather_nd_infer(x, indices):
    _index_check("gather_nd", x, indices)
    k = indices.shape[-1] if len(indices.shape) else None
    if k is None or k > len(x.shape):
        raise ValueError(f"gather_nd: indices of shape {indices.shape} do not fit params of shape {x.shape}")
    return [(tuple(indices.shape[:-1]) + x.shape[k:], x.dtype)]


def _nd_index(indices: np.ndarray, shape: tuple, name: str) -> tuple:
    return tuple(check_index_range(name, indices[..., axis], shape[axis], axis) for axis in range(indices.shape[-1]))


@defop(
    "gather_nd",
    infer=_gather_nd_infer,
    vjp=lambda gs, xs, ys: (_scatter_nd_into_zeros(xs[0], xs[1], gs[0]), None),
)
def _GATHER_ND(x, indices):
    return x[_nd_index(indices, x.shape, "gather_nd")]


def _scatter_nd_add_infer(x, indices, updates):
    ((want, _),) = _gather_nd_infer(x, indices)
    if tuple(updates.shape) != want:
        raise ValueError(f"scatter_nd_add: updates have shape {updates.shape}, expected {want}")
    return [(x.shape, x.dtype)]


@defop(
    "scatter_nd_add",
    infer=_scatter_nd_add_infer,
    vjp=lambda gs, xs, ys: (gs[0], None, apply(_GATHER_ND, (gs[0], xs[1]), {})),
)
def _SCATTER_ND_ADD(x, indices, updates):
    out = x.copy()
    ufunc_at(np.add, out, _nd_index(indices, x.shape, "scatter_nd_add"), updates)
    return out


def _scatter_nd_into_zeros(x, indices, g):
    return apply(_SCATTER_ND_ADD, (zeros_like(x), indices, g), {})


def gather_nd(x, indices) -> Tensor:
    """Gather by index tuples: the last axis of `indices` indexes the leading axes of `x`.

    >>> import tapeflow as tp
    >>> tp.gather_nd(tp.tensor([[1.0, 2.0], [3.0, 4.0]]), [[0, 1], [1, 0]]).numpy().tolist()
    [2.0, 3.0]
    """
    return apply(_GATHER_ND, (as_tensor(x, name="gather_nd"), as_tensor(indices, name="gather_nd")), {})


def scatter_nd_add(x, indices, updates) -> Tensor:
    """`x` with `updates` added at index tuples `indices` (the inverse of gather_nd).

    >>> import tapeflow as tp
    >>> tp.scatter_nd_add(tp.zeros((2, 2)), [[0, 1]], tp.ones((1,))).numpy().tolist()
    [[0.0, 1.0], [0.0, 0.0]]
    """
    x = as_tensor(x, name="scatter_nd_add")
    upd = updates if isinstance(updates, Tensor) else as_tensor(updates, dtype=x.dtype)
    return apply(_SCATTER_ND_ADD, (x, as_tensor(indices, name="scatter_nd_add"), upd), {})


def _one_hot_infer(indices, depth, on_value, off_value, dtype):
    _index_check("one_hot", None, indices)
    depth = shapes.as_int("one_hot", "depth", depth)
    for what, value in (("on_value", on_value), ("off_value", off_value)):
        if not isinstance(value, int | float | np.number):
            raise TypeError(f"one_hot: {what} must be a number, got {value!r:.40}")
    return [(tuple(indices.shape) + (depth,), dtypes.as_dtype(dtype))]


@defop("one_hot", infer=_one_hot_infer)
def _ONE_HOT(indices, depth, on_value, off_value, dtype):
    hot = indices[..., None] == np.arange(depth, like=indices)
    return np.where(hot, on_value, off_value).astype(dtypes.as_dtype(dtype).np)


def one_hot(indices, depth: int, on_value=1.0, off_value=0.0, dtype="float32") -> Tensor:
    """One-hot rows along a new last axis; out-of-range indices give all-off rows.

    >>> import tapeflow as tp
    >>> tp.one_hot([0, 2], 3).numpy().tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    idx = as_tensor(indices, name="one_hot")
    attrs = {
        "depth": int(depth) if isinstance(depth, np.integer) else depth,
        "on_value": float(on_value),
        "off_value": float(off_value),
        "dtype": dtypes.as_dtype(dtype).name,
    }
    return apply(_ONE_HOT, (idx,), attrs)
