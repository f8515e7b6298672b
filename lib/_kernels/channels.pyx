"""Kernels over the channels (last) axis of C-contiguous arrays, shared among threads: joining
arrays along it (an Inception module's branches) and summing over every other axis (a bias
gradient). NumPy runs both on one thread, at a few GB/s for such layouts."""

include "_common.pxi"

import numpy as np

cimport numpy as cnp
from cython cimport floating
from cython.parallel cimport parallel, prange
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy

cnp.import_array()

# Below this many bytes moved (or numbers summed) the work stays on the calling thread (the
# same bound as fused.relu_bias_grad's, which sums the same shares of rows).
cdef Py_ssize_t _PARALLEL_MIN = 1 << 18


def concat_last(list arrays, cnp.ndarray out):
    """Fill C-contiguous `out` with C-contiguous `arrays` side by side along the last axis (the
    caller checks that their leading shapes and dtype are out's and their widths add up).

    >>> import numpy as np
    >>> out = np.empty((2, 3), np.int64)
    >>> concat_last([np.zeros((2, 1), np.int64), np.ones((2, 2), np.int64)], out).tolist()
    [[0, 1, 1], [0, 1, 1]]
    """
    cdef Py_ssize_t parts = len(arrays), item = cnp.PyArray_ITEMSIZE(out), k, r
    cdef Py_ssize_t width = cnp.PyArray_DIMS(out)[cnp.PyArray_NDIM(out) - 1] * item
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(out) // max(1, cnp.PyArray_DIMS(out)[cnp.PyArray_NDIM(out) - 1])
    if parts == 0 or rows == 0 or width == 0:
        return out
    sources = np.empty(parts, np.uintp)
    spans = np.empty(parts, np.intp)
    cdef size_t[::1] src = sources
    cdef Py_ssize_t[::1] span = spans
    for k in range(parts):
        src[k] = <size_t>cnp.PyArray_DATA(<cnp.ndarray>arrays[k])
        span[k] = cnp.PyArray_DIMS(<cnp.ndarray>arrays[k])[cnp.PyArray_NDIM(<cnp.ndarray>arrays[k]) - 1] * item
    cdef char* dst = <char*>cnp.PyArray_DATA(out)
    cdef int threads = _threads_for(rows * width, _PARALLEL_MIN)
    cdef Py_ssize_t at
    with nogil:
        for r in prange(rows, schedule="static", num_threads=threads):
            at = 0
            for k in range(parts):
                memcpy(dst + r * width + at, <char*>src[k] + r * span[k], span[k])
                at = at + span[k]
    return out


# Rows a block of a thread's sums in the array's own dtype, as fused.relu_bias_grad sums.
cdef Py_ssize_t _SUM_ROWS = 32


def sum_leading(const floating[:, ::1] x):
    """The sums over the rows of x[rows, C], in x's dtype: each thread sums its share of the
    rows in blocks of 32 in x's dtype and the blocks in float64, the shares added in order
    (fused.relu_bias_grad's order, so that a frozen bias gradient is the eager one).

    >>> import numpy as np
    >>> sum_leading(np.arange(6.0).reshape(3, 2)).tolist()
    [6.0, 9.0]
    """
    cdef Py_ssize_t rows = x.shape[0], cols = x.shape[1], r, r0, r1, q, t
    out = np.zeros(cols, np.float32 if floating is float else np.float64)
    if rows == 0 or cols == 0:
        return out
    cdef int threads = <int>max(1, min(<Py_ssize_t>_threads_for(rows * cols, _PARALLEL_MIN), rows))
    cdef double* partial = <double*>calloc(threads * cols, sizeof(double))
    cdef floating* scratch = <floating*>malloc(threads * cols * sizeof(floating))
    if partial == NULL or scratch == NULL:
        free(partial)
        free(scratch)
        raise MemoryError("sum_leading: cannot allocate the partial sums")
    cdef floating[::1] o = out
    cdef const floating* first = &x[0, 0]
    cdef const floating* row
    cdef floating* block
    cdef double* acc
    cdef double total
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for t in prange(threads, schedule="static"):
            acc = partial + t * cols
            block = scratch + t * cols
            r0 = rows * t // threads
            while r0 < rows * (t + 1) // threads:
                r1 = min(r0 + _SUM_ROWS, rows * (t + 1) // threads)
                for q in range(cols):
                    block[q] = 0
                for r in range(r0, r1):
                    row = first + r * cols
                    for q in range(cols):
                        block[q] += row[q]
                for q in range(cols):
                    acc[q] += block[q]
                r0 = r1
        tapeflow_fpenv_swap(own)
    with nogil:
        for q in range(cols):
            total = 0
            for t in range(threads):
                total += partial[t * cols + q]
            o[q] = <floating>total
    free(partial)
    free(scratch)
    return out
