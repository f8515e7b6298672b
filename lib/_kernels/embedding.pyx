"""Embedding rows: gather for lookups, scatter-add for their gradients."""

include "_common.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.string cimport memcpy


cdef Py_ssize_t _first_bad_id(const int64_t[::1] ids, Py_ssize_t vocab) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(ids.shape[0]):
        if ids[i] < 0 or ids[i] >= vocab:
            return i
    return -1


cdef _check_ids(str op, const int64_t[::1] ids, Py_ssize_t vocab):
    cdef Py_ssize_t bad
    with nogil:
        bad = _first_bad_id(ids, vocab)
    if bad >= 0:
        raise IndexError(f"{op}: id {ids[bad]} at position {bad} is out of range [0, {vocab})")


def gather_rows(const floating[:, ::1] params, const int64_t[::1] ids):
    """out[n, D] = params[ids]; every id must lie in [0, V) (IndexError otherwise).

    >>> import numpy as np
    >>> gather_rows(np.arange(6.0).reshape(3, 2), np.array([2, 0])).tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """
    cdef Py_ssize_t vocab = params.shape[0], dim = params.shape[1], n = ids.shape[0], i
    _check_ids("gather_rows", ids, vocab)
    out = np.empty((n, dim), dtype=np.float32 if floating is float else np.float64)
    if n == 0 or dim == 0:
        return out
    cdef floating[:, ::1] out_v = out
    cdef size_t row_bytes = dim * sizeof(floating)
    cdef int threads = _threads_for(n * dim, 1 << 22)
    for i in prange(n, nogil=True, schedule="static", num_threads=threads):
        memcpy(&out_v[i, 0], &params[ids[i], 0], row_bytes)
    return out


def scatter_add_rows(floating[:, ::1] out, const int64_t[::1] ids,
                     const floating[:, ::1] updates):
    """out[ids[i]] += updates[i] in place, summing repeated ids; out is untouched on error.

    >>> import numpy as np
    >>> table = np.zeros((3, 2))
    >>> scatter_add_rows(table, np.array([1, 1]), np.ones((2, 2)))
    >>> table.tolist()
    [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]]
    """
    cdef Py_ssize_t vocab = out.shape[0], dim = out.shape[1], n = ids.shape[0], i, d
    if updates.shape[0] != n or updates.shape[1] != dim:
        raise ValueError(f"scatter_add_rows: updates {(updates.shape[0], updates.shape[1])} "
                         f"do not match {n} ids of rows of width {dim}")
    _check_ids("scatter_add_rows", ids, vocab)
    cdef floating* dst
    cdef const floating* src
    if n == 0 or dim == 0:
        return
    with nogil:
        for i in range(n):
            dst = &out[ids[i], 0]
            src = &updates[i, 0]
            for d in range(dim):
                dst[d] += src[d]
