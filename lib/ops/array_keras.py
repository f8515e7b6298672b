"""Keras 3's array functions (`keras.ops`): sorting, searching, indexing, stacking,
splitting and rearranging, with Keras's names and argument names.

Most are compositions of tapeflow's primitives and take their gradients from them. The
new primitives are `sort`, `argsort`, `take_along_axis` and its adjoint
`put_along_axis_add`, `searchsorted`, `unravel_index` and `view`. Index outputs are
int32, as Keras gives them.

>>> import tapeflow as tp
>>> tp.ops.sort(tp.tensor([3.0, 1.0, 2.0])).numpy().tolist()
[1.0, 2.0, 3.0]
>>> tp.ops.flip(tp.tensor([[1, 2], [3, 4]]), axis=1).numpy().tolist()
[[2, 1], [4, 3]]
"""

from __future__ import annotations

import builtins
import math as _pymath

import numpy as np

from tapeflow import dtypes, tree
from tapeflow.backends.common import check_index_range, ufunc_at
from tapeflow.ops import array, control, creation, math, reduce, shapes, sparse
from tapeflow.ops.core import broadcast_to, cast, expand_dims, reshape, transpose, zeros_like
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import FreezeError, Tensor, TracedTensor

__all__ = [
    "append",
    "argpartition",
    "argsort",
    "array_split",
    "associative_scan",
    "diag",
    "diagflat",
    "diagonal",
    "diff",
    "digitize",
    "dsplit",
    "dstack",
    "dtype",
    "flip",
    "fliplr",
    "flipud",
    "fori_loop",
    "get_item",
    "hsplit",
    "hstack",
    "is_tensor",
    "map",
    "meshgrid",
    "moveaxis",
    "nonzero",
    "pad",
    "ravel",
    "rearrange",
    "repeat",
    "roll",
    "rot90",
    "saturate_cast",
    "scan",
    "scatter",
    "scatter_update",
    "searchsorted",
    "select",
    "slice",
    "slice_update",
    "sort",
    "split",
    "swapaxes",
    "switch",
    "take",
    "take_along_axis",
    "tile",
    "trace",
    "tril",
    "triu",
    "unique",
    "unravel_index",
    "unstack",
    "vander",
    "vectorized_map",
    "view",
    "vsplit",
    "vstack",
]

_INDEX = dtypes.int32  # the dtype of the index results, as Keras gives them


def _traced(*values) -> bool:
    return builtins.any(isinstance(v, TracedTensor) for v in values)


def _static(name: str, x: Tensor, what: str) -> None:
    """Refuse a traced or symbolic tensor where the result's shape would depend on its values."""
    if isinstance(x, TracedTensor):
        raise FreezeError(
            f"{name}: the size of the result depends on the values of {what}, which a symbolic or traced "
            f"tensor (shape {x.shape}) does not have; call it eagerly"
        )


def _axis_or_flat(name: str, x: Tensor, axis):
    """(x, axis): with axis None, x flattened and axis 0."""
    if axis is None:
        return reshape(x, (-1,)), 0
    return x, shapes.normalize_axis(name, axis, builtins.max(x.ndim, 1))


def _promote(name: str, xs) -> list[Tensor]:
    """The tensors cast to their common dtype (as NumPy promotes them)."""
    xs = list(xs)
    if not xs:
        raise ValueError(f"{name}: needs at least one tensor")
    ts = [as_tensor(x, name=name) for x in xs]
    weak = (bool, int, float)  # Python numbers take the dtype of the tensors, as in NumPy
    common = dtypes.result_type(*[x if isinstance(x, weak) else t.dtype for x, t in zip(xs, ts, strict=True)])
    return [cast(t, common) for t in ts]


# ============================================================ sorting
def _sort_infer(x, axis):
    if x.dtype.kind == "b":
        raise TypeError("sort: bool tensors cannot be sorted; cast them to a number first")
    shapes.normalize_axis("sort", axis, builtins.max(len(x.shape), 1))
    return [(tuple(x.shape), x.dtype)]


def _sort_vjp(gs, xs, ys, axis):
    order = apply(_ARGSORT, (xs[0],), {"axis": axis})
    return (apply(_PUT_ALONG_AXIS_ADD, (zeros_like(xs[0]), order, gs[0]), {"axis": axis}),)


@defop("sort", infer=_sort_infer, vjp=_sort_vjp)
def _SORT(x, axis):
    """Values in ascending order along `axis` (a stable sort, so ties keep their order)."""
    return np.sort(x, axis=axis, kind="stable")


def _argsort_infer(x, axis):
    _sort_infer(x, axis)
    return [(tuple(x.shape), _INDEX)]


@defop("argsort", infer=_argsort_infer)
def _ARGSORT(x, axis):
    """The indices that sort `x` along `axis` (stable: equal values keep their order)."""
    return np.argsort(x, axis=axis, kind="stable").astype(np.int32)


def sort(x, axis=-1) -> Tensor:
    """`x` sorted in ascending order along `axis` (the flattened tensor when None); the
    gradient goes back to the position each value came from.

    >>> import tapeflow as tp
    >>> tp.ops.sort(tp.tensor([[3, 1, 2], [0, 5, 4]])).numpy().tolist()
    [[1, 2, 3], [0, 4, 5]]
    """
    x = as_tensor(x, name="sort")
    if x.ndim == 0:
        return x
    x, a = _axis_or_flat("sort", x, axis)
    return apply(_SORT, (x,), {"axis": a})


def argsort(x, axis=-1) -> Tensor:
    """The int32 indices that sort `x` along `axis` (the flattened tensor when None).

    >>> import tapeflow as tp
    >>> tp.ops.argsort(tp.tensor([3.0, 1.0, 2.0])).numpy().tolist()
    [1, 2, 0]
    """
    x = as_tensor(x, name="argsort")
    if x.ndim == 0:
        return creation.zeros((), _INDEX)
    x, a = _axis_or_flat("argsort", x, axis)
    return apply(_ARGSORT, (x,), {"axis": a})


def argpartition(x, kth, axis=-1) -> Tensor:
    """Indices that partition `x` along `axis` around its `kth` smallest value: the entries
    before position `kth` are no larger, those after no smaller. (tapeflow sorts fully, which
    is one such partition.)

    >>> import tapeflow as tp
    >>> i = tp.ops.argpartition(tp.tensor([3.0, 1.0, 2.0, 0.0]), 1)
    >>> sorted(i.numpy().tolist()[:2])
    [1, 3]
    """
    x = as_tensor(x, name="argpartition")
    x, a = _axis_or_flat("argpartition", x, axis)
    n = x.shape[a]
    if n is not None:
        shapes.as_int("argpartition", f"kth (for axis {a} of size {n})", kth, low=-n, high=n - 1)
    return apply(_ARGSORT, (x,), {"axis": a})


# ======================================================= take_along_axis
def _along_check(name: str, x, indices, axis):
    if indices.dtype.kind != "i":
        raise TypeError(f"{name}: indices must be int32 or int64, got {indices.dtype}")
    if len(x.shape) != len(indices.shape) or not 0 <= axis < len(x.shape):
        raise ValueError(
            f"{name}: indices of shape {indices.shape} do not fit a tensor of shape {x.shape} on axis {axis}"
        )
    for i, (a, b) in enumerate(zip(x.shape, indices.shape, strict=True)):
        if i != axis and a is not None and b is not None and a != b:
            raise ValueError(
                f"{name}: indices of shape {indices.shape} and a tensor of shape {x.shape} differ off axis {axis}"
            )


def _take_along_axis_infer(x, indices, axis):
    _along_check("take_along_axis", x, indices, axis)
    return [(tuple(indices.shape), x.dtype)]


def _take_along_axis_vjp(gs, xs, ys, axis):
    return apply(_PUT_ALONG_AXIS_ADD, (zeros_like(xs[0]), xs[1], gs[0]), {"axis": axis}), None


def _along_index(indices, axis: int) -> tuple:
    """The full integer index that puts `indices` on `axis` and each position elsewhere."""
    out = []
    for i, n in enumerate(indices.shape):
        if i == axis:
            out.append(indices)
        else:
            shape = [1] * indices.ndim
            shape[i] = n
            out.append(np.arange(n, like=indices).reshape(shape))
    return tuple(out)


@defop("take_along_axis", infer=_take_along_axis_infer, vjp=_take_along_axis_vjp)
def _TAKE_ALONG_AXIS(x, indices, axis):
    """x[..., indices[i], ...] at each position i (negative indices count from the end)."""
    indices = check_index_range("take_along_axis", indices, x.shape[axis], axis)
    return x[_along_index(indices, axis)]


def _put_along_axis_add_infer(x, indices, updates, axis):
    _along_check("put_along_axis_add", x, indices, axis)
    if tuple(updates.shape) != tuple(indices.shape):
        raise ValueError(f"put_along_axis_add: updates of shape {updates.shape} differ from indices {indices.shape}")
    if updates.dtype is not x.dtype:
        raise TypeError(f"put_along_axis_add: updates dtype {updates.dtype} differs from {x.dtype}")
    return [(tuple(x.shape), x.dtype)]


@defop(
    "put_along_axis_add",
    infer=_put_along_axis_add_infer,
    vjp=lambda gs, xs, ys, axis: (gs[0], None, apply(_TAKE_ALONG_AXIS, (gs[0], xs[1]), {"axis": axis})),
)
def _PUT_ALONG_AXIS_ADD(x, indices, updates, axis):
    """`x` with `updates` added at the positions take_along_axis reads; repeats accumulate."""
    indices = check_index_range("put_along_axis_add", indices, x.shape[axis], axis)
    out = x.copy()
    ufunc_at(np.add, out, _along_index(indices, axis), updates)
    return out


def take_along_axis(x, indices, axis=None) -> Tensor:
    """The entries of `x` that `indices` picks along `axis` (of the flattened tensor when
    None); the other axes of `indices` and `x` broadcast. Negative indices count from the end.

    >>> import tapeflow as tp
    >>> x = tp.tensor([[10.0, 30.0, 20.0], [60.0, 40.0, 50.0]])
    >>> tp.ops.take_along_axis(x, tp.ops.argsort(x, axis=1)[:, :1], axis=1).numpy().tolist()
    [[10.0], [40.0]]
    """
    x = as_tensor(x, name="take_along_axis")
    idx = as_tensor(indices, name="take_along_axis")
    if idx.dtype.kind != "i":
        raise TypeError(f"take_along_axis: indices must be integers, got {idx.dtype}")
    if axis is None:
        x, a = reshape(x, (-1,)), 0
        idx = reshape(idx, (-1,))
    else:
        a = shapes.normalize_axis("take_along_axis", axis, builtins.max(x.ndim, 1))
        if idx.ndim != x.ndim:
            raise ValueError(
                f"take_along_axis: indices of rank {idx.ndim} (shape {idx.shape}) for a tensor of rank {x.ndim} "
                f"(shape {x.shape})"
            )
        try:
            outer = shapes.broadcast("take_along_axis", _without(x.shape, a), _without(idx.shape, a))
        except ValueError:
            raise ValueError(
                f"take_along_axis: indices of shape {idx.shape} do not broadcast against a tensor of shape {x.shape} "
                f"off axis {a}"
            ) from None
        if None not in outer:
            x = broadcast_to(x, _with(outer, a, x.shape[a]))
            idx = broadcast_to(idx, _with(outer, a, idx.shape[a]))
    return apply(_TAKE_ALONG_AXIS, (x, idx), {"axis": a})


def _without(shape: tuple, axis: int) -> tuple:
    return tuple(shape[:axis]) + tuple(shape[axis + 1 :])


def _with(shape: tuple, axis: int, size) -> tuple:
    return tuple(shape[:axis]) + (size,) + tuple(shape[axis:])


# ======================================================== searching
def _searchsorted_infer(sorted_sequence, values, side):
    if len(sorted_sequence.shape) != 1:
        raise ValueError(f"searchsorted: sorted_sequence must be 1-D, got shape {sorted_sequence.shape}")
    if sorted_sequence.dtype is not values.dtype:
        raise TypeError(f"searchsorted: dtypes differ: {sorted_sequence.dtype} and {values.dtype}")
    return [(tuple(values.shape), _INDEX)]


@defop("searchsorted", infer=_searchsorted_infer)
def _SEARCHSORTED(sorted_sequence, values, side):
    """Where each value would go in the ascending `sorted_sequence` to keep it sorted."""
    return np.searchsorted(sorted_sequence, values, side=side).astype(np.int32)


def searchsorted(sorted_sequence, values, side="left") -> Tensor:
    """The int32 positions at which `values` would be inserted into the ascending 1-D
    `sorted_sequence` to keep it sorted: before equal entries ("left") or after them ("right").

    >>> import tapeflow as tp
    >>> tp.ops.searchsorted(tp.tensor([1.0, 2.0, 3.0]), tp.tensor([2.0, 0.5]), side="right").numpy().tolist()
    [2, 0]
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    seq, vals = _promote("searchsorted", [sorted_sequence, values])
    return apply(_SEARCHSORTED, (seq, vals), {"side": side})


def digitize(x, bins) -> Tensor:
    """The int32 index of the bin each value of `x` falls in, for increasing `bins`: i with
    bins[i-1] <= x < bins[i] (0 below the first edge, len(bins) from the last one on).

    >>> import tapeflow as tp
    >>> tp.ops.digitize(tp.tensor([0.5, 1.0, 2.5]), [1.0, 2.0]).numpy().tolist()
    [0, 1, 2]
    """
    return searchsorted(bins, x, side="right")


def nonzero(x) -> tuple[Tensor, ...]:
    """The indices of the non-zero entries of `x`, one int32 tensor per axis (eager only: the
    count depends on the values).

    >>> import tapeflow as tp
    >>> [i.numpy().tolist() for i in tp.ops.nonzero(tp.tensor([[0, 3], [5, 0]]))]
    [[0, 1], [1, 0]]
    """
    x = as_tensor(x, name="nonzero")
    _static("nonzero", x, "x")
    return tuple(creation.tensor(i.astype(np.int32)) for i in np.nonzero(x.numpy()))


def unique(
    x,
    sorted=True,  # noqa: A002 - Keras's argument name
    return_index=False,
    return_inverse=False,
    return_counts=False,
    axis=None,
    size=None,  # noqa: A002
    fill_value=None,
):
    """The distinct values of `x` (ascending; in order of first appearance when `sorted` is
    False), optionally with the index of each one's first appearance, the inverse map and the
    counts (int32). With `size`, exactly `size` values: padded with `fill_value` (default the
    smallest value) or cut. Eager only: the count depends on the values.

    >>> import tapeflow as tp
    >>> tp.ops.unique(tp.tensor([3, 1, 3, 2])).numpy().tolist()
    [1, 2, 3]
    >>> values, counts = tp.ops.unique(tp.tensor([3, 1, 3]), sorted=False, return_counts=True)
    >>> values.numpy().tolist(), counts.numpy().tolist()
    ([3, 1], [2, 1])
    """
    x = as_tensor(x, name="unique")
    _static("unique", x, "x")
    arr = x.numpy()
    if axis is not None:
        axis = shapes.normalize_axis("unique", axis, builtins.max(arr.ndim, 1))
    values, first, inverse, counts = np.unique(
        arr, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    if size is not None:
        size = shapes.as_int("unique", "size", size)
        ax = 0 if axis is None else axis
        n = values.shape[ax]
        if size <= n:
            keep = np.arange(size)
            values, first, counts = np.take(values, keep, axis=ax), first[:size], counts[:size]
        else:
            fill = values.min(initial=0) if fill_value is None and values.size == 0 else fill_value
            fill = np.min(arr) if fill is None else fill
            pad_shape = list(values.shape)
            pad_shape[ax] = size - n
            values = np.concatenate([values, np.full(pad_shape, fill, dtype=values.dtype)], axis=ax)
            first = np.concatenate([first, np.zeros(size - n, first.dtype)])
            counts = np.concatenate([counts, np.zeros(size - n, counts.dtype)])
    out = [creation.tensor(values)]
    for wanted, extra in ((return_index, first), (return_inverse, inverse), (return_counts, counts)):
        if wanted:
            out.append(creation.tensor(np.asarray(extra).astype(np.int32)))
    return out[0] if len(out) == 1 else tuple(out)


def _unravel_infer(indices, shape):
    if indices.dtype.kind != "i":
        raise TypeError(f"unravel_index: indices must be integers, got {indices.dtype}")
    return [(tuple(indices.shape), _INDEX)] * len(shape)


@defop("unravel_index", infer=_unravel_infer, num_outputs=None)
def _UNRAVEL_INDEX(indices, shape):
    """The coordinates in an array of `shape` of each flat index."""
    total = _pymath.prod(shape)
    if indices.size and (indices.min() < 0 or indices.max() >= total):
        raise ValueError(f"unravel_index: an index is out of range for shape {tuple(shape)} ({total} entries)")
    return tuple(c.astype(np.int32) for c in np.unravel_index(indices, shape))


def unravel_index(indices, shape) -> tuple[Tensor, ...]:
    """The coordinates, in an array of `shape`, of flat (C-order) indices: one int32 tensor
    per axis.

    >>> import tapeflow as tp
    >>> [c.numpy().tolist() for c in tp.ops.unravel_index(tp.tensor([5, 1]), (2, 3))]
    [[1, 0], [2, 1]]
    """
    idx = as_tensor(indices, name="unravel_index")
    dims = shapes.as_dims("unravel_index", shape)
    return tuple(apply(_UNRAVEL_INDEX, (idx,), {"shape": dims}))


# ============================================================ shape
def ravel(x) -> Tensor:
    """`x` flattened to one axis (C order).

    >>> import tapeflow as tp
    >>> tp.ops.ravel(tp.ones((2, 3))).shape
    (6,)
    """
    return reshape(as_tensor(x, name="ravel"), (-1,))


def dtype(x) -> str:
    """The name of the dtype of `x` ("float32", "int64" ...).

    >>> import tapeflow as tp
    >>> tp.ops.dtype(tp.ones((2,)))
    'float32'
    """
    return x.dtype.name if isinstance(x, Tensor) else as_tensor(x, name="dtype").dtype.name


def is_tensor(x) -> bool:
    """Whether `x` is a tapeflow tensor.

    >>> import tapeflow as tp
    >>> tp.ops.is_tensor(tp.ones((2,))), tp.ops.is_tensor([1.0])
    (True, False)
    """
    return isinstance(x, Tensor)


def get_item(x, key) -> Tensor:
    """`x[key]` (NumPy indexing).

    >>> import tapeflow as tp
    >>> tp.ops.get_item(tp.tensor([[1, 2], [3, 4]]), (1, 0)).item()
    3
    """
    return array.getitem(x, key)


def _axes_list(name: str, axes, ndim: int) -> list[int]:
    axes = [axes] if isinstance(axes, int) else list(axes)
    return [shapes.normalize_axis(name, a, ndim) for a in axes]


def moveaxis(x, source, destination) -> Tensor:
    """`x` with the axes `source` moved to positions `destination` (ints or sequences), the
    others keeping their order.

    >>> import tapeflow as tp
    >>> tp.ops.moveaxis(tp.ones((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    x = as_tensor(x, name="moveaxis")
    src = _axes_list("moveaxis", source, x.ndim)
    dst = _axes_list("moveaxis", destination, x.ndim)
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"moveaxis: source {source!r} and destination {destination!r} must be distinct axes, as many")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in builtins.sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def swapaxes(x, axis1, axis2) -> Tensor:
    """`x` with two axes exchanged.

    >>> import tapeflow as tp
    >>> tp.ops.swapaxes(tp.ones((2, 3, 4)), 0, 2).shape
    (4, 3, 2)
    """
    x = as_tensor(x, name="swapaxes")
    a = shapes.normalize_axis("swapaxes", axis1, x.ndim)
    b = shapes.normalize_axis("swapaxes", axis2, x.ndim)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, tuple(perm))


# ====================================================== flips and rolls
def flip(x, axis=None) -> Tensor:
    """`x` with the order of its entries reversed along `axis` (an int, a sequence, or None
    for every axis).

    >>> import tapeflow as tp
    >>> tp.ops.flip(tp.tensor([[1, 2], [3, 4]])).numpy().tolist()
    [[4, 3], [2, 1]]
    """
    x = as_tensor(x, name="flip")
    axes = shapes.normalize_axes("flip", axis, x.ndim)
    if not axes or x.ndim == 0:
        return x
    return array.getitem(
        x, tuple(builtins.slice(None, None, -1) if i in axes else builtins.slice(None) for i in range(x.ndim))
    )


def fliplr(x) -> Tensor:
    """`x` flipped along axis 1 (left to right).

    >>> import tapeflow as tp
    >>> tp.ops.fliplr(tp.tensor([[1, 2]])).numpy().tolist()
    [[2, 1]]
    """
    x = as_tensor(x, name="fliplr")
    if x.ndim < 2:
        raise ValueError(f"fliplr: needs a tensor of rank >= 2, got shape {x.shape}")
    return flip(x, 1)


def flipud(x) -> Tensor:
    """`x` flipped along axis 0 (up to down).

    >>> import tapeflow as tp
    >>> tp.ops.flipud(tp.tensor([[1], [2]])).numpy().tolist()
    [[2], [1]]
    """
    x = as_tensor(x, name="flipud")
    if x.ndim < 1:
        raise ValueError("flipud: needs a tensor of rank >= 1, got a scalar")
    return flip(x, 0)


def rot90(array, k=1, axes=(0, 1)) -> Tensor:  # noqa: A002 - Keras's argument name
    """`array` rotated by 90 degrees `k` times in the plane of `axes`, from the first axis
    towards the second.

    >>> import tapeflow as tp
    >>> tp.ops.rot90(tp.tensor([[1, 2], [3, 4]])).numpy().tolist()
    [[2, 4], [1, 3]]
    """
    x = as_tensor(array, name="rot90")
    if x.ndim < 2 or len(axes) != 2:
        raise ValueError(f"rot90: needs a tensor of rank >= 2 and two axes, got shape {x.shape} and axes {axes!r}")
    a, b = (shapes.normalize_axis("rot90", ax, x.ndim) for ax in axes)
    if a == b:
        raise ValueError(f"rot90: the axes {axes!r} must differ")
    k = shapes.as_int("rot90", "k", k, low=-(2**31)) % 4
    if k == 0:
        return x
    if k == 2:
        return flip(x, (a, b))
    if k == 1:
        return swapaxes(flip(x, b), a, b)
    return flip(swapaxes(x, a, b), b)


def roll(x, shift, axis=None) -> Tensor:
    """`x` with its entries shifted by `shift` places along `axis` (of the flattened tensor
    when None), those pushed past the end coming back at the start; `shift` and `axis` may be
    sequences.

    >>> import tapeflow as tp
    >>> tp.ops.roll(tp.tensor([1, 2, 3, 4]), 1).numpy().tolist()
    [4, 1, 2, 3]
    """
    x = as_tensor(x, name="roll")
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    shifts = np.atleast_1d(np.asarray(shift))
    axes = np.atleast_1d(np.asarray(axis))
    if shifts.dtype.kind not in "iu" or axes.dtype.kind not in "iu":
        raise TypeError(f"roll: shift and axis must be integers, got {shift!r} and {axis!r}")
    try:
        shifts, axes = np.broadcast_arrays(shifts, axes)
    except ValueError:
        raise ValueError(f"roll: shift {shift!r} and axis {axis!r} do not match") from None
    total = {}
    for s, a in zip(shifts.tolist(), axes.tolist(), strict=True):
        a = shapes.normalize_axis("roll", a, builtins.max(x.ndim, 1))
        total[a] = total.get(a, 0) + s
    for a, s in total.items():
        n = x.shape[a]
        if n is None:
            raise ValueError(f"roll: axis {a} of shape {x.shape} has a size known only at run time")
        s = s % n if n else 0
        if s:
            lead = (builtins.slice(None),) * a
            x = array.concat([x[lead + (builtins.slice(n - s, None),)], x[lead + (builtins.slice(0, n - s),)]], a)
    return x


# ================================================== triangles, diagonals
def _triangle(name: str, x, k, lower: bool) -> Tensor:
    x = as_tensor(x, name=name)
    if x.ndim < 2 or None in x.shape[-2:]:
        raise ValueError(f"{name}: needs a tensor of rank >= 2 with known last two sizes, got shape {x.shape}")
    k = shapes.as_int(name, "k", k, low=-(2**31))
    mask = np.tri(*x.shape[-2:], k=k, dtype=bool) if lower else ~np.tri(*x.shape[-2:], k=k - 1, dtype=bool)
    return math.where(creation.tensor(mask), x, creation.zeros((), x.dtype))


def tril(x, k=0) -> Tensor:
    """`x` with the entries above the `k`-th diagonal of its last two axes set to zero.

    >>> import tapeflow as tp
    >>> tp.ops.tril(tp.ones((2, 2))).numpy().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return _triangle("tril", x, k, lower=True)


def triu(x, k=0) -> Tensor:
    """`x` with the entries below the `k`-th diagonal of its last two axes set to zero.

    >>> import tapeflow as tp
    >>> tp.ops.triu(tp.ones((2, 2))).numpy().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    return _triangle("triu", x, k, lower=False)


def diagonal(x, offset=0, axis1=0, axis2=1) -> Tensor:
    """The `offset`-th diagonal of the planes of `axis1` and `axis2`, as a new last axis.

    >>> import tapeflow as tp
    >>> tp.ops.diagonal(tp.tensor([[1, 2], [3, 4]])).numpy().tolist()
    [1, 4]
    """
    x = as_tensor(x, name="diagonal")
    if x.ndim < 2:
        raise ValueError(f"diagonal: needs a tensor of rank >= 2, got shape {x.shape}")
    a = shapes.normalize_axis("diagonal", axis1, x.ndim)
    b = shapes.normalize_axis("diagonal", axis2, x.ndim)
    if a == b:
        raise ValueError(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}")
    offset = shapes.as_int("diagonal", "offset", offset, low=-(2**31))
    x = moveaxis(x, (a, b), (-2, -1))
    rows, cols = x.shape[-2:]
    if rows is None or cols is None:
        raise ValueError(f"diagonal: the sizes of axes {a} and {b} must be known, got shape {x.shape}")
    n = builtins.max(0, builtins.min(rows + builtins.min(offset, 0), cols - builtins.max(offset, 0)))
    r = np.arange(n) + builtins.max(-offset, 0)
    c = np.arange(n) + builtins.max(offset, 0)
    return array.getitem(x, (Ellipsis, r, c))


def trace(x, offset=0, axis1=0, axis2=1) -> Tensor:
    """The sum of the `offset`-th diagonal of the planes of `axis1` and `axis2`.

    >>> import tapeflow as tp
    >>> tp.ops.trace(tp.tensor([[1, 2], [3, 4]])).item()
    5
    """
    return reduce.sum(diagonal(x, offset, axis1, axis2), -1)


def diag(x, k=0) -> Tensor:
    """For a vector, the square matrix with it on the `k`-th diagonal; for a matrix, its
    `k`-th diagonal.

    >>> import tapeflow as tp
    >>> tp.ops.diag(tp.tensor([1, 2])).numpy().tolist()
    [[1, 0], [0, 2]]
    """
    x = as_tensor(x, name="diag")
    k = shapes.as_int("diag", "k", k, low=-(2**31))
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"diag: needs a vector or a matrix, got shape {x.shape}")
    n = x.shape[0]
    square = expand_dims(x, 1) * creation.eye(n, dtype=x.dtype) if x.dtype.kind != "b" else None
    if square is None:
        square = math.logical_and(expand_dims(x, 1), creation.tensor(np.eye(n, dtype=bool)))
    a = builtins.abs(k)
    return array.pad(square, ((0, a), (a, 0)) if k >= 0 else ((a, 0), (0, a)))


def diagflat(x, k=0) -> Tensor:
    """The square matrix with the flattened `x` on its `k`-th diagonal.

    >>> import tapeflow as tp
    >>> tp.ops.diagflat(tp.tensor([[1, 2]]), k=1).numpy().tolist()
    [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    """
    return diag(ravel(x), k)


# ======================================================== concatenation
def _at_least(x: Tensor, rank: int) -> Tensor:
    """NumPy's atleast_1d / 2d / 3d."""
    if x.ndim >= rank:
        return x
    if x.ndim == 0:
        return reshape(x, (1,) * rank)
    if x.ndim == 1:
        return reshape(x, (1, x.shape[0], 1) if rank == 3 else (1, x.shape[0]))
    return expand_dims(x, -1)


def append(x1, x2, axis=None) -> Tensor:
    """`x2` joined after `x1` along `axis` (both flattened when None), in their common dtype.

    >>> import tapeflow as tp
    >>> tp.ops.append(tp.tensor([1, 2]), tp.tensor([[3, 4]])).numpy().tolist()
    [1, 2, 3, 4]
    """
    a, b = _promote("append", [x1, x2])
    if axis is None:
        return array.concat([ravel(a), ravel(b)], 0)
    return array.concat([a, b], axis)


def hstack(xs) -> Tensor:
    """Tensors joined along axis 1 (axis 0 for vectors), in their common dtype.

    >>> import tapeflow as tp
    >>> tp.ops.hstack([tp.ones((2, 1)), tp.zeros((2, 2))]).shape
    (2, 3)
    """
    ts = [_at_least(t, 1) for t in _promote("hstack", xs)]
    return array.concat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(xs) -> Tensor:
    """Tensors joined along axis 0, vectors taken as rows, in their common dtype.

    >>> import tapeflow as tp
    >>> tp.ops.vstack([tp.ones((3,)), tp.zeros((3,))]).shape
    (2, 3)
    """
    return array.concat([_at_least(t, 2) for t in _promote("vstack", xs)], 0)


def dstack(xs) -> Tensor:
    """Tensors joined along axis 2 (depth), vectors and matrices given a third axis first.

    >>> import tapeflow as tp
    >>> tp.ops.dstack([tp.ones((2, 2)), tp.zeros((2, 2))]).shape
    (2, 2, 2)
    """
    return array.concat([_at_least(t, 3) for t in _promote("dstack", xs)], 2)


def unstack(x, num=None, axis=0) -> list[Tensor]:
    """The slices of `x` along `axis`, as a list (`num`, when given, must be that axis's size).

    >>> import tapeflow as tp
    >>> [t.shape for t in tp.ops.unstack(tp.ones((2, 3)), axis=1)]
    [(2,), (2,), (2,)]
    """
    x = as_tensor(x, name="unstack")
    a = shapes.normalize_axis("unstack", axis, x.ndim)
    n = x.shape[a]
    if n is None:
        if num is None:
            raise ValueError(f"unstack: axis {a} of shape {x.shape} has a size known only at run time; pass num")
        n = shapes.as_int("unstack", "num", num)
    elif num is not None and num != n:
        raise ValueError(f"unstack: num={num} but axis {a} of shape {x.shape} has size {n}")
    lead = (builtins.slice(None),) * a
    return [array.getitem(x, lead + (i,)) for i in range(n)]


def meshgrid(*x, indexing="xy") -> list[Tensor]:
    """Coordinate grids from 1-D tensors: with "xy" (Cartesian) the first two outputs' axes
    are swapped, with "ij" (matrix) they follow the inputs' order.

    >>> import tapeflow as tp
    >>> [g.shape for g in tp.ops.meshgrid(tp.ones((2,)), tp.ones((3,)))]
    [(3, 2), (3, 2)]
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ts = [ravel(as_tensor(t, name="meshgrid")) for t in x]
    sizes = [t.shape[0] for t in ts]
    if indexing == "xy" and len(ts) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, t in enumerate(ts):
        pos = (1 - i if i < 2 else i) if indexing == "xy" and len(ts) >= 2 else i
        shape = [1] * len(ts)
        shape[pos] = t.shape[0]
        out.append(broadcast_to(reshape(t, tuple(shape)), tuple(sizes)))
    return out


# ============================================================ splitting
_UNSET = object()


def _split_at(name: str, x: Tensor, indices_or_sections, axis: int, even: bool) -> list[Tensor]:
    """NumPy's split: `indices_or_sections` an int (that many parts; `even` requires equal
    ones, else the first parts are one longer) or the indices to cut before."""
    n = x.shape[axis]
    if n is None:
        raise ValueError(f"{name}: axis {axis} of shape {x.shape} has a size known only at run time")
    if hasattr(type(indices_or_sections), "__index__") and not isinstance(indices_or_sections, bool):
        parts = shapes.as_int(name, "the number of sections", indices_or_sections, low=1)
        if even and n % parts:
            raise ValueError(f"{name}: axis {axis} of size {n} cannot be split into {parts} equal sections")
        q, r = divmod(n, parts)
        sizes = [q + 1] * r + [q] * (parts - r)
        cuts = np.cumsum([0] + sizes).tolist()
        bounds = list(zip(cuts[:-1], cuts[1:], strict=True))
    else:
        cuts = [shapes.as_int(name, "each index", i, low=-(2**31)) for i in indices_or_sections]
        edges = [0] + [builtins.min(builtins.max(c + n if c < 0 else c, 0), n) for c in cuts] + [n]
        bounds = list(zip(edges[:-1], edges[1:], strict=True))
    lead = (builtins.slice(None),) * axis
    return [array.getitem(x, lead + (builtins.slice(a, builtins.max(a, b)),)) for a, b in bounds]


def split(x, num_or_size_splits=_UNSET, axis=0, *, indices_or_sections=_UNSET) -> list[Tensor]:
    """Cut `x` along `axis`. Keras's `indices_or_sections=` follows NumPy: an int N gives N
    equal parts, a list gives the indices to cut before. tapeflow's (and TensorFlow's)
    positional `num_or_size_splits` gives N equal parts for an int and the parts' sizes for a
    list, so a list passed positionally means sizes.

    >>> import tapeflow as tp
    >>> [t.shape for t in tp.ops.split(tp.ones((6, 2)), indices_or_sections=[1, 4])]
    [(1, 2), (3, 2), (2, 2)]
    >>> [t.shape for t in tp.split(tp.ones((6, 2)), [2, 4])]
    [(2, 2), (4, 2)]
    """
    if (num_or_size_splits is _UNSET) == (indices_or_sections is _UNSET):
        raise TypeError("split: give one of num_or_size_splits (positional) and indices_or_sections=")
    if num_or_size_splits is not _UNSET:
        return array.split(x, num_or_size_splits, axis)
    x = as_tensor(x, name="split")
    return _split_at("split", x, indices_or_sections, shapes.normalize_axis("split", axis, x.ndim), even=True)


def array_split(x, indices_or_sections, axis=0) -> list[Tensor]:
    """Cut `x` along `axis` as NumPy does: an int N gives N parts, the first ones one longer
    when they cannot be equal; a list gives the indices to cut before.

    >>> import tapeflow as tp
    >>> [t.shape[0] for t in tp.ops.array_split(tp.ones((7,)), 3)]
    [3, 2, 2]
    """
    x = as_tensor(x, name="array_split")
    a = shapes.normalize_axis("array_split", axis, builtins.max(x.ndim, 1))
    return _split_at("array_split", x, indices_or_sections, a, even=False)


def _split_along(name: str, x, indices_or_sections, axis: int, min_rank: int) -> list[Tensor]:
    x = as_tensor(x, name=name)
    if x.ndim < min_rank:
        raise ValueError(f"{name}: needs a tensor of rank >= {min_rank}, got shape {x.shape}")
    return _split_at(name, x, indices_or_sections, axis, even=True)


def hsplit(x, indices_or_sections) -> list[Tensor]:
    """`split` along axis 1 (axis 0 for a vector).

    >>> import tapeflow as tp
    >>> [t.shape for t in tp.ops.hsplit(tp.ones((2, 4)), 2)]
    [(2, 2), (2, 2)]
    """
    x = as_tensor(x, name="hsplit")
    return _split_along("hsplit", x, indices_or_sections, 0 if x.ndim == 1 else 1, 1)


def vsplit(x, indices_or_sections) -> list[Tensor]:
    """`split` along axis 0 of a tensor of rank >= 2.

    >>> import tapeflow as tp
    >>> [t.shape for t in tp.ops.vsplit(tp.ones((4, 2)), [1])]
    [(1, 2), (3, 2)]
    """
    return _split_along("vsplit", x, indices_or_sections, 0, 2)


def dsplit(x, indices_or_sections) -> list[Tensor]:
    """`split` along axis 2 of a tensor of rank >= 3.

    >>> import tapeflow as tp
    >>> [t.shape for t in tp.ops.dsplit(tp.ones((1, 1, 4)), 2)]
    [(1, 1, 2), (1, 1, 2)]
    """
    return _split_along("dsplit", x, indices_or_sections, 2, 3)


# ================================================= repeat, tile, pad
def repeat(x, repeats, axis=None) -> Tensor:
    """Each entry of `x` repeated `repeats` times along `axis` (of the flattened tensor when
    None); `repeats` is an int or one count per entry.

    >>> import tapeflow as tp
    >>> tp.ops.repeat(tp.tensor([[1, 2]]), 2, axis=1).numpy().tolist()
    [[1, 1, 2, 2]]
    """
    x = as_tensor(x, name="repeat")
    x, a = _axis_or_flat("repeat", x, axis)
    if isinstance(repeats, Tensor):
        _static("repeat", repeats, "repeats")
        repeats = repeats.numpy()
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iu" or counts.ndim > 1 or (counts.size and counts.min() < 0):
        raise ValueError(f"repeat: repeats must be a non-negative int or a 1-D list of them, got {repeats!r}")
    n = x.shape[a]
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(-1)[0])
        if None not in x.shape and r != 1:
            expanded = expand_dims(x, a + 1)
            target = expanded.shape[: a + 1] + (r,) + expanded.shape[a + 2 :]
            return reshape(broadcast_to(expanded, target), x.shape[:a] + (n * r,) + x.shape[a + 1 :])
        if r == 1:
            return x
        counts = np.full(n, r) if n is not None else counts
    if n is None or counts.size != n:
        raise ValueError(f"repeat: {counts.size} repeats for axis {a} of size {n} (shape {x.shape})")
    return array.gather(x, np.repeat(np.arange(n), counts), a)


def tile(x, repeats=_UNSET, *, multiples=_UNSET) -> Tensor:
    """`x` repeated whole `repeats[i]` times along each axis, as NumPy's tile: a shorter
    `repeats` counts from the last axis, a longer one adds leading axes (`multiples=` is
    accepted for `repeats=`).

    >>> import tapeflow as tp
    >>> tp.tile(tp.ones((2, 3)), 2).shape
    (2, 6)
    """
    if (repeats is _UNSET) == (multiples is _UNSET):
        raise TypeError("tile: give one of repeats and multiples")
    reps = repeats if repeats is not _UNSET else multiples
    x = as_tensor(x, name="tile")
    reps = shapes.as_dims("tile", reps, label="repeats")
    if len(reps) > x.ndim:
        x = reshape(x, (1,) * (len(reps) - x.ndim) + tuple(x.shape))
    reps = (1,) * (x.ndim - len(reps)) + tuple(reps)
    if builtins.all(r == 1 for r in reps):
        return x
    return array.tile(x, reps)


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "circular")


def pad(x, pad_width=_UNSET, mode="constant", constant_values=None, *, paddings=_UNSET) -> Tensor:
    """`x` padded by `pad_width`: one (before, after) pair per axis, one pair for all, or one
    int for both sides of every axis (`paddings=` is accepted for `pad_width=`). `mode` as
    NumPy's: "constant" (with `constant_values`, default 0), "edge", "reflect", "symmetric",
    or "wrap" (alias "circular"). The other modes raise.

    >>> import tapeflow as tp
    >>> tp.ops.pad(tp.tensor([1, 2, 3]), 2, mode="reflect").numpy().tolist()
    [3, 2, 1, 2, 3, 2, 1]
    """
    if (pad_width is _UNSET) == (paddings is _UNSET):
        raise TypeError("pad: give one of pad_width and paddings")
    width = pad_width if pad_width is not _UNSET else paddings
    if not isinstance(mode, str):
        raise TypeError(f"pad: mode must be a string (one of {_PAD_MODES}), got {mode!r}; pass constant_values=")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad: mode {mode!r} is not supported; use one of {_PAD_MODES}")
    if constant_values is not None and mode != "constant":
        raise ValueError(f"pad: constant_values is only used with mode='constant', got mode={mode!r}")
    x = as_tensor(x, name="pad")
    if isinstance(width, Tensor):
        width = width.numpy()
    try:
        items = np.asarray(width, dtype=object)
        pairs = np.broadcast_to(items, (x.ndim, 2))
    except ValueError:
        raise ValueError(f"pad: pad_width {width!r} does not fit a tensor of shape {x.shape}") from None
    pairs = tuple(
        tuple(shapes.as_int("pad", "padding", v.item() if isinstance(v, np.generic) else v) for v in pair)
        for pair in pairs
    )
    if mode == "constant":
        return array.pad(x, pairs, 0 if constant_values is None else constant_values)
    for axis, (before, after) in enumerate(pairs):
        if before or after:
            n = x.shape[axis]
            if n is None or n == 0:
                raise ValueError(f"pad: mode {mode!r} needs a known, non-empty axis {axis}, got shape {x.shape}")
            source = np.pad(np.arange(n), (before, after), mode="wrap" if mode == "circular" else mode)
            x = array.gather(x, source, axis)
    return x


# ============================================================ indexing
def take(x, indices, axis=None) -> Tensor:
    """The entries (or slices along `axis`) of `x` at `indices` (of the flattened tensor when
    `axis` is None); negative indices count from the end.

    >>> import tapeflow as tp
    >>> tp.ops.take(tp.tensor([[1, 2], [3, 4]]), [3, -4]).numpy().tolist()
    [4, 1]
    """
    x = as_tensor(x, name="take")
    idx = as_tensor(indices, name="take")
    if idx.dtype.kind != "i":
        raise TypeError(f"take: indices must be integers, got {idx.dtype}")
    x, a = _axis_or_flat("take", x, axis)
    return array.gather(x, idx, a)


def _starts(name: str, start_indices, rank: int) -> list[int]:
    if isinstance(start_indices, Tensor):
        _static(name, start_indices, "start_indices")
        start_indices = start_indices.numpy()
    starts = [
        shapes.as_int(name, "each start index", s.item() if isinstance(s, Tensor | np.ndarray) else s)
        for s in np.asarray(start_indices, dtype=object).reshape(-1)
    ]
    if len(starts) != rank:
        raise ValueError(f"{name}: {len(starts)} start indices for a tensor of rank {rank}")
    return starts


def slice(inputs, start_indices, shape) -> Tensor:  # noqa: A001 - Keras's name
    """The block of `inputs` of size `shape` starting at `start_indices` (one per axis).

    >>> import tapeflow as tp
    >>> tp.ops.slice(tp.tensor([[1, 2, 3], [4, 5, 6]]), (0, 1), (2, 2)).numpy().tolist()
    [[2, 3], [5, 6]]
    """
    x = as_tensor(inputs, name="slice")
    starts = _starts("slice", start_indices, x.ndim)
    sizes = shapes.as_dims("slice", shape)
    if len(sizes) != x.ndim:
        raise ValueError(f"slice: shape {tuple(sizes)} does not have the rank of the input (shape {x.shape})")
    for s, n, d in zip(starts, sizes, x.shape, strict=True):
        if d is not None and s + n > d:
            raise ValueError(f"slice: the block at {tuple(starts)} of shape {tuple(sizes)} overruns shape {x.shape}")
    return array.getitem(x, tuple(builtins.slice(s, s + n) for s, n in zip(starts, sizes, strict=True)))


def slice_update(inputs, start_indices, updates) -> Tensor:
    """`inputs` with the block starting at `start_indices` replaced by `updates`.

    >>> import tapeflow as tp
    >>> tp.ops.slice_update(tp.zeros((2, 3)), (1, 1), tp.ones((1, 2))).numpy().tolist()
    [[0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    """
    x = as_tensor(inputs, name="slice_update")
    upd = cast(as_tensor(updates, name="slice_update"), x.dtype)
    starts = _starts("slice_update", start_indices, x.ndim)
    if upd.ndim != x.ndim or None in x.shape or None in upd.shape:
        raise ValueError(f"slice_update: updates of shape {upd.shape} for inputs of shape {x.shape}")
    if builtins.any(s + u > d for s, u, d in zip(starts, upd.shape, x.shape, strict=True)):
        raise ValueError(f"slice_update: updates of shape {upd.shape} at {tuple(starts)} overrun shape {x.shape}")
    widths = tuple((s, d - s - u) for s, u, d in zip(starts, upd.shape, x.shape, strict=True))
    mask = np.zeros(x.shape, dtype=bool)
    mask[tuple(builtins.slice(s, s + u) for s, u in zip(starts, upd.shape, strict=True))] = True
    return math.where(creation.tensor(mask), array.pad(upd, widths), x)


def select(condlist, choicelist, default=0) -> Tensor:
    """For each entry, the value from the first choice whose condition holds, else `default`.

    >>> import tapeflow as tp
    >>> x = tp.tensor([-2.0, 0.5, 3.0])
    >>> tp.ops.select([x < 0, x > 1], [-x, 10 * x], default=0.0).numpy().tolist()
    [2.0, 0.0, 30.0]
    """
    conds = [as_tensor(c, name="select") for c in condlist]
    choices = _promote("select", list(choicelist) + [default])
    if len(conds) != len(choices) - 1 or not conds:
        raise ValueError(f"select: {len(conds)} conditions for {len(choices) - 1} choices")
    out = choices[-1]
    for c, v in zip(reversed(conds), reversed(choices[:-1]), strict=True):
        if c.dtype.kind != "b":
            raise TypeError(f"select: conditions must be bool, got {c.dtype}")
        out = math.where(c, v, out)
    return out


def _index_tuples(name: str, indices, rank: int) -> Tensor:
    idx = as_tensor(indices, name=name)
    if idx.dtype.kind != "i":
        raise TypeError(f"{name}: indices must be integers, got {idx.dtype}")
    if idx.ndim < 1 or idx.shape[-1] is None or idx.shape[-1] > rank:
        raise ValueError(f"{name}: indices of shape {idx.shape} do not index a tensor of rank {rank}")
    return idx


def scatter(indices, values, shape) -> Tensor:
    """A tensor of zeros of `shape` with `values` added at the index tuples `indices` (the last
    axis of `indices` indexes the leading axes; repeated indices add up).

    >>> import tapeflow as tp
    >>> tp.ops.scatter([[0, 1], [1, 0], [0, 1]], tp.tensor([1.0, 2.0, 3.0]), (2, 2)).numpy().tolist()
    [[0.0, 4.0], [2.0, 0.0]]
    """
    dims = shapes.as_dims("scatter", shape)
    vals = as_tensor(values, name="scatter")
    idx = _index_tuples("scatter", indices, len(dims))
    return array.scatter_nd_add(creation.zeros(dims, vals.dtype), idx, vals)


def scatter_update(inputs, indices, updates, reduction=None) -> Tensor:
    """`inputs` with the entries (or slices) at the index tuples `indices` (shape (n, k))
    replaced by `updates`, or combined with them when `reduction` is "add", "mul", "max" or
    "min". 1-D `indices` keep tapeflow's meaning: rows of the first axis replaced.

    >>> import tapeflow as tp
    >>> tp.ops.scatter_update(tp.zeros((2, 3)), [[0, 1], [1, 2]], tp.tensor([1.0, 2.0])).numpy().tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]
    """
    x = as_tensor(inputs, name="scatter_update")
    idx = as_tensor(indices, name="scatter_update")
    upd = cast(as_tensor(updates, name="scatter_update"), x.dtype)
    if idx.ndim == 1:
        if reduction is not None:
            raise ValueError(f"scatter_update: reduction={reduction!r} needs index tuples (indices of rank 2)")
        return sparse.scatter_update(x, idx, upd)
    idx = _index_tuples("scatter_update", idx, x.ndim)
    if reduction == "add":
        return array.scatter_nd_add(x, idx, upd)
    if reduction not in (None, "mul", "max", "min"):
        raise ValueError(f"scatter_update: reduction must be None, 'add', 'mul', 'max' or 'min', got {reduction!r}")
    hit = array.scatter_nd_add(zeros_like(x, dtype=dtypes.int32), idx, creation.ones_like(upd, dtype=dtypes.int32))
    hit = math.greater(hit, 0)
    placed = array.scatter_nd_add(zeros_like(x), idx, upd)
    if reduction == "mul":
        placed = x * placed
    elif reduction == "max":
        placed = math.maximum(x, placed)
    elif reduction == "min":
        placed = math.minimum(x, placed)
    return math.where(hit, placed, x)


# ======================================================== differences
def diff(a, n=1, axis=-1) -> Tensor:
    """The `n`-th discrete difference along `axis`: out[i] = a[i+1] - a[i], repeated n times.

    >>> import tapeflow as tp
    >>> tp.ops.diff(tp.tensor([1, 4, 9, 16]), n=2).numpy().tolist()
    [2, 2]
    """
    x = as_tensor(a, name="diff")
    n = shapes.as_int("diff", "n", n)
    ax = shapes.normalize_axis("diff", axis, x.ndim)
    lead = (builtins.slice(None),) * ax
    for _ in range(n):
        x = x[lead + (builtins.slice(1, None),)] - x[lead + (builtins.slice(None, -1),)]
    return x


def vander(x, N=None, increasing=False) -> Tensor:  # noqa: N803 - Keras's argument name
    """The Vandermonde matrix of the vector `x`: columns x^(N-1), ..., x, 1 (ascending powers
    when `increasing`); N defaults to len(x).

    >>> import tapeflow as tp
    >>> tp.ops.vander(tp.tensor([1, 2, 3]), 3).numpy().tolist()
    [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
    """
    x = as_tensor(x, name="vander")
    if x.ndim != 1:
        raise ValueError(f"vander: needs a vector, got shape {x.shape}")
    n = x.shape[0] if N is None else shapes.as_int("vander", "N", N)
    col = expand_dims(x, 1)
    powers = [creation.ones_like(col)] if n else []
    for _ in range(1, n):
        powers.append(powers[-1] * col)
    if not increasing:
        powers = powers[::-1]
    if not powers:
        return reshape(col, (x.shape[0], 0))
    return array.concat(powers, 1)


# ============================================================ dtypes
def saturate_cast(x, dtype) -> Tensor:
    """`x` cast to `dtype`, values beyond its range clipped to its limits first.

    >>> import tapeflow as tp
    >>> tp.ops.saturate_cast(tp.tensor([3e9, -1.5], dtype="float64"), "int32").numpy().tolist()
    [2147483647, -1]
    """
    x = as_tensor(x, name="saturate_cast")
    d = dtypes.as_dtype(dtype)
    if d.kind == "b" or x.dtype.kind == "b":
        return cast(x, d)
    target = np.iinfo(d.np) if d.kind == "i" else np.finfo(d.np)
    source = np.iinfo(x.dtype.np) if x.dtype.kind == "i" else np.finfo(x.dtype.np)
    if source.min >= target.min and source.max <= target.max:
        return cast(x, d)
    lo, hi = target.min, target.max
    if x.dtype.kind == "f" and d.kind == "i":  # the floats of x's dtype nearest the limits, inside them
        ftype = x.dtype.np.type
        lo = float(ftype(lo)) if float(ftype(lo)) >= lo else float(np.nextafter(ftype(lo), ftype(0)))
        hi = float(ftype(hi)) if float(ftype(hi)) <= hi else float(np.nextafter(ftype(hi), ftype(0)))
    return cast(math.clip(x, lo, hi), d)


def _view_infer(x, dtype):
    to = dtypes.as_dtype(dtype)
    a, b = x.dtype.np.itemsize, to.np.itemsize
    if a == b:
        return [(tuple(x.shape), to)]
    if not x.shape or x.shape[-1] is None or (x.shape[-1] * a) % b:
        raise ValueError(f"view: a tensor of shape {x.shape} and dtype {x.dtype} cannot be viewed as {to}")
    return [((*x.shape[:-1], x.shape[-1] * a // b), to)]


@defop("view", infer=_view_infer)
def _VIEW(x, dtype):
    """The bytes of `x` read as another dtype (the last axis rescaled when the sizes differ)."""
    return np.copy(x, order="C").view(dtypes.as_dtype(dtype).np)


def view(x, dtype=None) -> Tensor:
    """The bytes of `x` read as `dtype` (the last axis rescaled when the item sizes differ);
    `x` itself when dtype is None.

    >>> import tapeflow as tp
    >>> tp.ops.view(tp.tensor([1.0], dtype="float32"), "int32").numpy().tolist()
    [1065353216]
    """
    x = as_tensor(x, name="view")
    if dtype is None or dtypes.as_dtype(dtype) is x.dtype:
        return x
    return apply(_VIEW, (x,), {"dtype": dtypes.as_dtype(dtype).name})


# ============================================================ rearrange
def _rearrange_side(name: str, text: str) -> list[list[str]]:
    """The groups of one side of a pattern: "b (h w) c" -> [["b"], ["h", "w"], ["c"]]."""
    groups, current = [], None
    for token in text.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            if current is not None:
                raise ValueError(f"{name}: nested parentheses in {text!r}")
            current = []
        elif token == ")":
            if current is None:
                raise ValueError(f"{name}: unbalanced parentheses in {text!r}")
            groups.append(current)
            current = None
        elif token.isidentifier():
            (groups if current is None else current).append(token if current is not None else [token])
        else:
            raise ValueError(f"{name}: {token!r} in {text!r} is not an axis name (ellipsis and 1 are not supported)")
    if current is not None:
        raise ValueError(f"{name}: unbalanced parentheses in {text!r}")
    return groups


def rearrange(tensor, pattern, **axes_lengths) -> Tensor:
    """Reorder, merge and split axes by an einops pattern such as "b h w c -> b (h w) c",
    "b (h w) c -> b h w c" (with h= or w=) or "b c h w -> b h w c": one transpose between
    two reshapes.

    >>> import tapeflow as tp
    >>> tp.ops.rearrange(tp.ones((2, 3, 4)), "b h w -> b (w h)").shape
    (2, 12)
    >>> tp.ops.rearrange(tp.ones((2, 12)), "b (h w) -> w b h", h=3).shape
    (4, 2, 3)
    """
    x = as_tensor(tensor, name="rearrange")
    if not isinstance(pattern, str) or pattern.count("->") != 1:
        raise ValueError(f"rearrange: the pattern must read 'inputs -> outputs', got {pattern!r}")
    left_text, right_text = pattern.split("->")
    left, right = _rearrange_side("rearrange", left_text), _rearrange_side("rearrange", right_text)
    left_names = [n for g in left for n in g]
    right_names = [n for g in right for n in g]
    if len(set(left_names)) != len(left_names) or builtins.sorted(left_names) != builtins.sorted(right_names):
        raise ValueError(f"rearrange: {pattern!r} must name each axis once on each side")
    if len(left) != x.ndim:
        raise ValueError(f"rearrange: {pattern!r} names {len(left)} axes for a tensor of shape {x.shape}")
    sizes = {}
    for group, dim in zip(left, x.shape, strict=True):
        unknown = [n for n in group if n not in axes_lengths]
        if len(unknown) > 1 or (unknown and dim is None and len(group) > 1):
            raise ValueError(f"rearrange: give the sizes of all but one of {group} (axis of size {dim})")
        known = _pymath.prod(
            shapes.as_int("rearrange", f"the size of {n}", axes_lengths[n], low=1) for n in group if n in axes_lengths
        )
        if unknown:
            if dim is not None and dim % known:
                raise ValueError(f"rearrange: an axis of size {dim} cannot be split into {group} with {axes_lengths}")
            sizes[unknown[0]] = None if dim is None else dim // known
        elif dim is not None and known != dim:
            raise ValueError(f"rearrange: the sizes of {group} multiply to {known}, not the axis size {dim}")
        sizes.update({n: axes_lengths[n] for n in group if n in axes_lengths})
    if (
        builtins.any(len(g) > 1 and None in [sizes[n] for n in g] for g in right)
        or builtins.sum(sizes[n] is None for n in left_names) > 1
    ):
        raise ValueError(f"rearrange: {pattern!r} needs the sizes known only at run time to stay ungrouped")
    elementary = reshape(x, tuple(-1 if sizes[n] is None else sizes[n] for n in left_names))
    moved = transpose(elementary, tuple(left_names.index(n) for n in right_names))
    merged = tuple(-1 if None in (d := [sizes[n] for n in g]) else _pymath.prod(d) for g in right)
    return reshape(moved, merged)


# ========================================================= control flow
def _leading(name: str, leaves: list) -> int:
    sizes = {t.shape[0] if t.ndim else None for t in leaves}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            f"{name}: the inputs need one known leading axis to loop over, got shapes {[t.shape for t in leaves]}"
        )
    return sizes.pop()


def _stack_outputs(name: str, outputs: list):
    """The per-step results (one structure each) stacked along a new leading axis."""
    if not outputs:
        raise ValueError(f"{name}: nothing to stack: the loop ran zero times")
    flat = [tree.flatten(o) for o in outputs]
    stacked = [array.stack(list(parts), 0) for parts in zip(*flat, strict=True)]
    return tree.pack_sequence_as(outputs[0], stacked)


def _tensors(name: str, structure):
    return tree.map_structure(lambda v: v if isinstance(v, Tensor) else as_tensor(v, name=name), structure)


def map(f, xs):  # noqa: A001 - Keras's name
    """`f` applied to each slice of `xs` (a tensor or a structure of them) along the leading
    axis, the results stacked. A loop over that axis, so it also runs frozen when its size
    is known.

    >>> import tapeflow as tp
    >>> tp.ops.map(lambda row: tp.sum(row), tp.ones((3, 2))).numpy().tolist()
    [2.0, 2.0, 2.0]
    """
    xs = _tensors("map", xs)
    n = _leading("map", tree.flatten(xs))
    return _stack_outputs("map", [f(tree.map_structure(lambda t, i=i: t[i], xs)) for i in range(n)])


def vectorized_map(function, elements):
    """`function` applied to each slice of `elements` along the leading axis, the results
    stacked (as `map`).

    >>> import tapeflow as tp
    >>> tp.ops.vectorized_map(lambda v: v * 2.0, tp.ones((2, 3))).shape
    (2, 3)
    """
    return map(function, elements)


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """Loop `carry, y = f(carry, x)` over the slices of `xs` along its leading axis (or
    `length` times with x None), from the end when `reverse`; returns the last carry and the
    ys stacked in the order of xs. It also runs frozen when the length is known.

    >>> import tapeflow as tp
    >>> carry, ys = tp.ops.scan(lambda c, x: (c + x, c * x), tp.tensor(0.0), tp.tensor([1.0, 2.0, 3.0]))
    >>> carry.item(), ys.numpy().tolist()
    (6.0, [0.0, 2.0, 9.0])
    """
    if not isinstance(unroll, int | bool) or (not isinstance(unroll, bool) and unroll < 1):
        raise ValueError(f"scan: unroll must be a positive int or a bool, got {unroll!r}")
    carry = _tensors("scan", init)
    if xs is not None:
        xs = _tensors("scan", xs)
        n = _leading("scan", tree.flatten(xs))
        if length is not None and length != n:
            raise ValueError(f"scan: length={length} but xs has {n} slices")
    elif length is None:
        raise ValueError("scan: give xs or length")
    else:
        n = shapes.as_int("scan", "length", length)
    order = range(n - 1, -1, -1) if reverse else range(n)
    ys = {}
    for i in order:
        carry, y = f(carry, None if xs is None else tree.map_structure(lambda t, i=i: t[i], xs))
        ys[i] = y
    if not n or builtins.all(y is None for y in ys.values()):
        return carry, None
    return carry, _stack_outputs("scan", [ys[i] for i in range(n)])


def associative_scan(f, elems, reverse=False, axis=0):
    """The inclusive scan of `elems` (a tensor or a structure) along `axis` with the
    associative `f` (out[i] = f(out[i-1], elems[i])), in log2(n) rounds of `f` applied to
    whole shifted tensors; from the end when `reverse`.

    >>> import tapeflow as tp
    >>> tp.ops.associative_scan(lambda a, b: a + b, tp.tensor([1, 2, 3, 4])).numpy().tolist()
    [1, 3, 6, 10]
    """
    elems = _tensors("associative_scan", elems)
    leaves = tree.flatten(elems)
    axes = {shapes.normalize_axis("associative_scan", axis, builtins.max(t.ndim, 1)) for t in leaves}
    sizes = {t.shape[a] for t in leaves for a in axes}
    if len(axes) != 1 or len(sizes) != 1 or None in sizes:
        raise ValueError(
            f"associative_scan: the elems need one known size on axis {axis}, got {[t.shape for t in leaves]}"
        )
    a, n = axes.pop(), sizes.pop()
    lead = (builtins.slice(None),) * a

    def part(t, start, stop):
        return t[lead + (builtins.slice(start, stop),)]

    values = tree.map_structure(lambda t: flip(t, a), elems) if reverse else elems
    step = 1
    while step < n:
        combined = f(
            tree.map_structure(lambda t, s=step: part(t, 0, n - s), values),
            tree.map_structure(lambda t, s=step: part(t, s, n), values),
        )
        values = tree.map_structure(
            lambda t, c, s=step: array.concat([part(t, 0, s), cast(as_tensor(c), t.dtype)], a), values, combined
        )
        step *= 2
    return tree.map_structure(lambda t: flip(t, a), values) if reverse else values


def fori_loop(lower, upper, body_fun, init_val):
    """`val = body_fun(i, val)` for i from `lower` to `upper` - 1; returns the final val. Python
    int bounds unroll (also when frozen); traced bounds make a `tp.while_loop`.

    >>> import tapeflow as tp
    >>> tp.ops.fori_loop(0, 4, lambda i, v: v + i, tp.tensor(0)).item()
    6
    """
    if _traced(lower, upper):
        leaves = [as_tensor(v, name="fori_loop") for v in tree.flatten(init_val)]
        start = cast(as_tensor(lower, name="fori_loop"), dtypes.int64)
        stop = cast(as_tensor(upper, name="fori_loop"), dtypes.int64)

        def body(i, *vals):
            out = body_fun(i, tree.pack_sequence_as(init_val, list(vals)))
            return (
                i + 1,
                *[cast(as_tensor(o, name="fori_loop"), v.dtype) for o, v in zip(tree.flatten(out), vals, strict=True)],
            )

        final = control.while_loop(lambda i, *vals: math.less(i, stop), body, (start, *leaves))
        return tree.pack_sequence_as(init_val, list(final[1:]))
    lo = int(lower.numpy()) if isinstance(lower, Tensor) else shapes.as_int("fori_loop", "lower", lower, low=-(2**62))
    hi = int(upper.numpy()) if isinstance(upper, Tensor) else shapes.as_int("fori_loop", "upper", upper, low=-(2**62))
    val = init_val
    for i in range(lo, hi):
        val = body_fun(i, val)
    return val


def switch(index, branches, *operands):
    """`branches[index](*operands)`, the index clamped to [0, len(branches) - 1]. A traced index
    makes nested `tp.cond`s (the branches must then return the same structure).

    >>> import tapeflow as tp
    >>> tp.ops.switch(1, [lambda x: x + 1, lambda x: x * 10], tp.tensor(2)).item()
    20
    """
    branches = list(branches)
    if not branches or not builtins.all(callable(b) for b in branches):
        raise TypeError("switch: branches must be a non-empty sequence of callables")
    last = len(branches) - 1
    if isinstance(index, TracedTensor):
        idx = math.clip(cast(index, dtypes.int64), 0, last)

        def pick(k):
            if k == last:
                return branches[k](*operands)
            return control.cond(math.equal(idx, k), lambda: branches[k](*operands), lambda: pick(k + 1))

        return pick(0)
    if isinstance(index, Tensor):
        if index.size != 1 or index.dtype.kind not in "iu":
            raise TypeError(f"switch: index must be an integer scalar, got {index.dtype} of shape {index.shape}")
        index = int(index.numpy().reshape(()))
    index = shapes.as_int("switch", "index", index, low=-(2**62), high=2**62)
    return branches[builtins.min(builtins.max(index, 0), last)](*operands)
