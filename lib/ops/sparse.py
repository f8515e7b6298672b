"""Sparse row updates: the ops behind `tp.IndexedSlices` (densifying, summing
repeated rows, replacing rows) and the Variable writes that touch only those rows.

A Variable's rows are written in place when nothing but the Variable holds its array
(checked by reference count, as TensorFlow checks a buffer's), so a sparse step on a
large embedding costs the rows it touches; a tape, a tensor or a NumPy view still
holding the array makes the write go to a copy, and what they hold stays as it was.

>>> import tapeflow as tp
>>> g = tp.IndexedSlices(tp.tensor([[1.0], [2.0], [3.0]]), [4, 1, 4], (5, 1))
>>> s = tp.ops.sparse.coalesce(g)
>>> s.indices.numpy().tolist(), s.values.numpy().tolist()
([1, 4], [[2.0], [4.0]])
"""

from __future__ import annotations

import sys

import numpy as np

from tapeflow import dtypes
from tapeflow.backends.common import check_index_range, checked_index_range, ufunc_at
from tapeflow.ops.array import concat, gather, scatter_add
from tapeflow.ops.creation import ones_like, zeros
from tapeflow.ops.math import cast, multiply
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import TRACING, IndexedSlices, Tensor, Variable


def _rows_check(name: str, x, indices, updates) -> None:
    if indices.dtype.kind != "i" or len(indices.shape) != 1:
        raise TypeError(f"{name}: indices must be a 1-D integer tensor, got shape {indices.shape} and {indices.dtype}")
    if len(x.shape) < 1 or tuple(updates.shape[1:]) != tuple(x.shape[1:]) or len(updates.shape) != len(x.shape):
        raise ValueError(f"{name}: updates of shape {updates.shape} are not rows of shape {x.shape}")
    if updates.shape[0] is not None and indices.shape[0] is not None and updates.shape[0] != indices.shape[0]:
        raise ValueError(f"{name}: {indices.shape[0]} indices for {updates.shape[0]} rows of updates")
    if updates.dtype is not x.dtype:
        raise TypeError(f"{name}: updates have dtype {updates.dtype}, the tensor {x.dtype}")


# ------------------------------------------------------------ unique_sum
def _unique_sum_infer(indices, values, num_rows):
    if indices.dtype.kind != "i" or len(indices.shape) != 1:
        raise TypeError(f"unique_sum: indices must be a 1-D integer tensor, got {indices.shape} {indices.dtype}")
    if not values.shape or values.shape[0] != indices.shape[0]:
        raise ValueError(f"unique_sum: values of shape {values.shape} do not match {indices.shape[0]} indices")
    return [((None,), dtypes.int64), (indices.shape, dtypes.int64), ((None, *values.shape[1:]), values.dtype)]


def _unique_sum_vjp(gs, xs, ys, num_rows):
    g = gs[2]
    return None, None if g is None else gather(g, ys[1], axis=0)


@defop("unique_sum", infer=_unique_sum_infer, vjp=_unique_sum_vjp, num_outputs=3)
def _UNIQUE_SUM(indices, values, num_rows):
    """(sorted distinct row numbers, the position of each index among them, the values of
    equal rows summed in order of appearance); indices lie in [-num_rows, num_rows)."""
    indices = check_index_range("unique_sum", indices, num_rows, 0)
    rows = indices.astype(np.int64, copy=False)
    unique, inverse = np.unique(np.where(rows < 0, rows + num_rows, rows), return_inverse=True)
    sums = np.zeros_like(values, shape=(unique.shape[0], *values.shape[1:]))
    ufunc_at(np.add, sums, inverse.reshape(-1), values)
    return unique, inverse.reshape(-1), sums


def coalesce(slices: IndexedSlices) -> IndexedSlices:
    """The same IndexedSlices with each row once: sorted indices, repeated rows summed.

    >>> import tapeflow as tp
    >>> coalesce(tp.IndexedSlices(tp.ones((2, 1)), [3, 3], (4, 1))).values.numpy().tolist()
    [[2.0]]
    """
    attrs = {"num_rows": slices.dense_shape[0]}
    unique, _, sums = apply(_UNIQUE_SUM, (slices.indices, slices.values), attrs)
    return IndexedSlices(sums, unique, slices.dense_shape)


def coalesces_on(device) -> bool:
    """Whether `coalesce` runs on `device`: its output's length depends on the values, which
    a backend that compiles fixed shapes (XLA) cannot give; there, `touched_rows` and a
    dense gradient stand in for it."""
    return _UNIQUE_SUM.runs_on(device.family)


def touched_rows(slices: IndexedSlices) -> Tensor:
    """A bool tensor with one entry per row of `slices.dense_shape`: true where a slice
    writes that row (computed with fixed shapes, so it compiles once on XLA).

    >>> import tapeflow as tp
    >>> touched_rows(tp.IndexedSlices(tp.ones((2, 1)), [3, 3], (4, 1))).numpy().tolist()
    [False, False, False, True]
    """
    counts = zeros((slices.dense_shape[0],), "int64", device=slices.values.device)
    return scatter_add(counts, slices.indices, ones_like(slices.indices)) > 0


# ------------------------------------------------------------ scatter_update
def _scatter_update_infer(x, indices, updates):
    _rows_check("scatter_update", x, indices, updates)
    return [(x.shape, x.dtype)]


def _scatter_update_vjp(gs, xs, ys):
    g, idx = gs[0], xs[1]
    rows = gather(g, idx, axis=0)
    return scatter_update(g, idx, rows * 0.0), None, rows


@defop("scatter_update", infer=_scatter_update_infer, vjp=_scatter_update_vjp)
def _SCATTER_UPDATE(x, indices, updates):
    """`x` with rows `indices` replaced by `updates` (indices distinct)."""
    indices = check_index_range("scatter_update", indices, x.shape[0], 0)
    out = x.copy()
    out[indices] = updates
    return out


def scatter_update(x, indices, updates) -> Tensor:
    """`x` with the rows `indices` replaced by `updates` (give each index once).

    >>> import tapeflow as tp
    >>> tp.scatter_update(tp.zeros((3,)), [1], tp.ones((1,))).numpy().tolist()
    [0.0, 1.0, 0.0]
    """
    x = as_tensor(x, name="scatter_update")
    upd = updates if isinstance(updates, Tensor) else as_tensor(updates, dtype=x.dtype, name="scatter_update")
    return apply(_SCATTER_UPDATE, (x, as_tensor(indices, name="scatter_update"), upd), {})


# ------------------------------------------------------------ densifying
def convert_to_tensor(value, dtype=None) -> Tensor:
    """A Tensor from a tensor, an IndexedSlices (densified), an array or a nested list.

    >>> import tapeflow as tp
    >>> tp.convert_to_tensor(tp.IndexedSlices(tp.ones((1, 2)), [1], (2, 2))).numpy().tolist()
    [[0.0, 0.0], [1.0, 1.0]]
    """
    if isinstance(value, IndexedSlices):
        dense = indexed_slices_to_dense(value)
        return dense if dtype is None or dense.dtype is dtypes.as_dtype(dtype) else cast(dense, dtype)
    return as_tensor(value, dtype=dtype, name="convert_to_tensor")


def indexed_slices_to_dense(slices: IndexedSlices) -> Tensor:
    """The dense tensor an IndexedSlices stands for (differentiable in its values)."""
    if any(d is None for d in slices.dense_shape):
        raise ValueError(f"IndexedSlices: cannot densify with the unknown dense_shape {slices.dense_shape}")
    base = zeros(slices.dense_shape, slices.dtype, device=slices.values.device)
    return scatter_add(base, slices.indices, slices.values)


def add_gradients(a, b):
    """a + b where either may be an IndexedSlices: two sparse ones concatenate their
    rows, a sparse and a dense one give a dense sum."""
    a_sparse, b_sparse = isinstance(a, IndexedSlices), isinstance(b, IndexedSlices)
    if a_sparse and b_sparse:
        return IndexedSlices(
            concat([a.values, b.values], axis=0), concat([a.indices, b.indices], axis=0), a.dense_shape
        )
    if a_sparse:
        return scatter_add(b, a.indices, a.values)
    if b_sparse:
        return scatter_add(a, b.indices, b.values)
    return a + b


def cast_gradient(g, dtype):
    """`g` (dense or IndexedSlices) as `dtype`."""
    if isinstance(g, IndexedSlices):
        return IndexedSlices(cast(g.values, dtype), g.indices, g.dense_shape)
    return cast(g, dtype)


def scale_gradient(g, factor):
    """`g` (dense or IndexedSlices) times a scalar."""
    if isinstance(g, IndexedSlices):
        return IndexedSlices(multiply(g.values, factor), g.indices, g.dense_shape)
    return multiply(g, factor)


# ------------------------------------------------------------ variable rows
def _refcount(array) -> int:
    return sys.getrefcount(array)


_CALL_REFS = _refcount(np.empty(1))  # the references `_refcount` itself adds (its argument is a temporary here)


def sole_owner(array, holders: int) -> bool:
    """True when only `holders` references (those the caller knows of) hold `array`:
    no tape, tensor or NumPy view shares it, so it may be written in place."""
    own = _refcount(array) - _CALL_REFS - 1  # less this function's own parameter
    flags = array.flags  # a device array's flags have no writeable: it always is
    return own <= holders and getattr(flags, "writeable", True) and flags.owndata


def write_rows_in_place(out: np.ndarray, indices: np.ndarray, rows: np.ndarray, mode: str) -> None:
    """out[indices] = rows ("update"), += rows ("add") or -= rows ("sub"); `indices` distinct."""
    if mode == "update":
        out[indices] = rows
    elif mode == "add":
        out[indices] += rows
    else:
        out[indices] -= rows


def write_rows(var: Variable, sparse_delta: IndexedSlices, mode: str) -> Variable:
    """What `Variable.scatter_update` / `scatter_add` / `scatter_sub` do."""
    if not isinstance(sparse_delta, IndexedSlices):
        raise TypeError(f"Variable.scatter_{mode}: expected an IndexedSlices, got {type(sparse_delta).__name__}")
    if tuple(sparse_delta.dense_shape[1:]) != tuple(var.shape[1:]) or len(sparse_delta.dense_shape) != var.ndim:
        raise ValueError(
            f"Variable.scatter_{mode}: rows of shape {sparse_delta.dense_shape} for variable '{var.name}' "
            f"of shape {var.shape}"
        )
    values = sparse_delta.values
    if values.dtype is not var.dtype:
        raise TypeError(f"Variable.scatter_{mode}: variable '{var.name}' has dtype {var.dtype}, rows {values.dtype}")
    delta = sparse_delta if mode == "update" else coalesce(sparse_delta)
    indices, values = delta.indices, delta.values
    if TRACING.tracer is not None:
        if mode != "update":
            current = gather(var, indices, axis=0)
            values = current + values if mode == "add" else current - values
        return var.assign(scatter_update(var, indices, values))
    table = var._value
    ids = indices._value.astype(np.int64, copy=False)
    ids, ok = checked_index_range(f"Variable.scatter_{mode}", ids, table.shape[0], 0)
    if not sole_owner(table, holders=2):  # the variable and the local name `table`
        table = np.array(table, copy=True)
    write_rows_in_place(table, ids, _whole_or_nothing(ok, table, ids, values._value, mode), mode)
    var._value = table
    return var


def in_place_rows(x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """scatter_update into `x` itself (the graph executor's form for a variable it owns)."""
    indices, ok = checked_index_range("scatter_update", indices, x.shape[0], 0)
    write_rows_in_place(x, indices, _whole_or_nothing(ok, x, indices, updates, "update"), "update")
    return x


def _whole_or_nothing(ok, table, indices, rows, mode: str):
    """`rows` to write into `table` where the device flag `ok` says every index was in range,
    else rows that leave the table as it was (None: checked on the host already)."""
    if ok is None:
        return rows
    return np.where(ok, rows, table[indices] if mode == "update" else 0)


__all__ = ["IndexedSlices", "coalesce", "convert_to_tensor", "scatter_update"]
