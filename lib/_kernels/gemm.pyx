"""Matrix products on BLAS gemm.

A large 2-D product is cut into bands of the result, one single-threaded gemm per OpenMP
thread; a batch of products runs one single-threaded gemm per item across the threads. An
operand may be C-contiguous or the transpose of a C-contiguous array (as the gradient of a
matmul produces); that is passed to BLAS as a flag, never copied.
"""

include "_common.pxi"
include "_blas.pxi"
include "_row_dense.pxi"

import numpy as np

cimport numpy as cnp

cnp.import_array()


def _matmul2d(const floating[:, ::1] a, const floating[:, ::1] b, floating[:, ::1] c,
              bint trans_a, bint trans_b):
    cdef Py_ssize_t m = c.shape[0], n = c.shape[1]
    cdef Py_ssize_t k = a.shape[0] if trans_a else a.shape[1]
    cdef char ta = b'T' if trans_a else b'N', tb = b'T' if trans_b else b'N'
    if m == 0 or n == 0:
        return
    if k == 0:
        c[:, :] = 0
        return
    cdef int threads
    if m == 1:
        threads = _threads_for(n * k, _GEMV_PARALLEL_MIN) if _blas_single() else 1
        with nogil:
            _vec_mat(trans_b, n, k, &a[0, 0], &b[0, 0], b.shape[1], &c[0, 0], threads)
        return
    threads = _gemm_threads(m * n * k)
    with nogil:
        _gemm_split(ta, tb, m, n, k, 1, &a[0, 0], a.shape[1], &b[0, 0], b.shape[1], 0, &c[0, 0],
                    n, threads)


def _matmul3d(const floating[:, :, ::1] a, const floating[:, :, ::1] b, floating[:, :, ::1] c,
              bint trans_a, bint trans_b):
    cdef Py_ssize_t batch = c.shape[0], m = c.shape[1], n = c.shape[2]
    cdef Py_ssize_t k = a.shape[1] if trans_a else a.shape[2]
    cdef Py_ssize_t lda = a.shape[2], ldb = b.shape[2], i
    cdef Py_ssize_t sa = a.shape[1] * a.shape[2], sb = b.shape[1] * b.shape[2], sc = m * n
    cdef char ta = b'T' if trans_a else b'N', tb = b'T' if trans_b else b'N'
    cdef int threads = _gemm_threads(batch * m * n * k)
    if batch == 0 or m == 0 or n == 0:
        return
    if k == 0:
        c[:, :, :] = 0
        return
    cdef const floating* ap = &a[0, 0, 0]
    cdef const floating* bp = &b[0, 0, 0]
    cdef floating* cp = &c[0, 0, 0]
    if batch < threads:  # few large products: each split over the threads
        with nogil:
            for i in range(batch):
                _gemm_split(ta, tb, m, n, k, 1, ap + i * sa, lda, bp + i * sb, ldb, 0,
                            cp + i * sc, n, threads)
        return
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for i in prange(batch, schedule="static"):
            _gemm(ta, tb, m, n, k, 1, ap + i * sa, lda, bp + i * sb, ldb, 0, cp + i * sc, n)
        tapeflow_fpenv_swap(own)


cdef tuple _stored(x):
    """(buffer, transposed): x itself if C-contiguous, else the C-contiguous array x transposes."""
    if x.flags.c_contiguous:
        return x, False
    swapped = np.swapaxes(x, x.ndim - 1, x.ndim - 2)
    if swapped.flags.c_contiguous:
        return swapped, True
    return np.ascontiguousarray(x), False


def matmul(a, b):
    """a @ b for float32/float64 arrays of rank 2, or rank 3 with equal batch sizes.

    >>> import numpy as np
    >>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    >>> matmul(a, b).tolist(), matmul(b.T, a.T).tolist()
    ([[3.0, 3.0], [12.0, 12.0]], [[3.0, 12.0], [3.0, 12.0]])
    """
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
        raise TypeError(f"matmul: need two float32 or two float64 arrays, got {a.dtype} and {b.dtype}")
    cdef int nd = a.ndim
    if b.ndim != nd or nd not in (2, 3) or (nd == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"matmul: unsupported shapes {a.shape} and {b.shape}")
    if a.shape[nd - 1] != b.shape[nd - 2]:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    abuf, ta = _stored(a)
    bbuf, tb = _stored(b)
    out = np.empty(a.shape[:nd - 1] + (b.shape[nd - 1],), dtype=a.dtype)
    _blas_enter()
    try:
        if a.ndim == 2:
            _matmul2d(abuf, bbuf, out, ta, tb)
        else:
            _matmul3d(abuf, bbuf, out, ta, tb)
    finally:
        _blas_leave()
    return out


cdef inline bint _plain_f32(object x, int ndim):
    return (cnp.PyArray_CheckExact(x) and cnp.PyArray_NDIM(<cnp.ndarray>x) == ndim
            and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT32
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x))


cdef object _row_dense(object a, object w, object bias, bint relu):
    """dense of one float32 row with C-contiguous operands, or None for any other case."""
    if not (_plain_f32(a, 2) and _plain_f32(w, 2) and _plain_f32(bias, 1)):
        return None
    cdef cnp.npy_intp* a_dims = cnp.PyArray_DIMS(<cnp.ndarray>a)
    cdef cnp.npy_intp* w_dims = cnp.PyArray_DIMS(<cnp.ndarray>w)
    cdef cnp.npy_intp k = w_dims[0], n = w_dims[1]
    if a_dims[0] != 1 or a_dims[1] != k or cnp.PyArray_DIMS(<cnp.ndarray>bias)[0] != n:
        return None
    cdef cnp.npy_intp out_dims[2]
    out_dims[0], out_dims[1] = 1, n
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, out_dims, cnp.NPY_FLOAT32, 0)
    cdef int threads = _threads_for(n * k, _ROW_PARALLEL_MIN) if n >= 128 else 1
    cdef const float* xp = <const float*>cnp.PyArray_DATA(<cnp.ndarray>a)
    cdef const float* wp = <const float*>cnp.PyArray_DATA(<cnp.ndarray>w)
    cdef const float* bp = <const float*>cnp.PyArray_DATA(<cnp.ndarray>bias)
    cdef float* yp = <float*>cnp.PyArray_DATA(out)
    with nogil:
        tapeflow_row_dense(xp, wp, bp, yp, k, n, relu, threads)
    return out


cdef class DenseKernel:
    """dense(a, w, bias, relu) with relu fixed, as a graph's executor calls it: one float32
    row goes straight to the one-row kernel, anything else to `general(a, w, bias)`.

    >>> import numpy as np
    >>> DenseKernel(True, None)(np.ones((1, 3), np.float32), np.ones((3, 1), np.float32),
    ...                         np.array([-1.0], np.float32)).tolist()
    [[2.0]]
    """

    cdef readonly bint relu
    cdef object general

    def __init__(self, bint relu, general):
        self.relu = relu
        self.general = general

    def __call__(self, a, w, bias):
        out = _row_dense(a, w, bias, self.relu)
        return out if out is not None else self.general(a, w, bias)


def _bias_activation(floating[:, ::1] c, const floating[::1] bias, bint relu):
    cdef Py_ssize_t rows = c.shape[0], cols = c.shape[1], i, j
    cdef floating v
    cdef int threads = _threads_for(rows * cols, 1 << 16)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for i in prange(rows, schedule="static"):
            for j in range(cols):
                v = c[i, j] + bias[j]
                c[i, j] = (0 if v <= 0 else v) if relu else v  # NaN stays NaN, as np.maximum keeps it
        tapeflow_fpenv_swap(own)


def dense(a, w, bias, bint relu):
    """a @ w + bias, then relu when asked, in one call: the layer an inference graph runs.

    >>> import numpy as np
    >>> dense(np.ones((2, 3)), np.ones((3, 2)), np.array([-4.0, 1.0]), True).tolist()
    [[0.0, 4.0], [0.0, 4.0]]
    """
    out = _row_dense(a, w, bias, relu)
    if out is not None:
        return out
    if bias.ndim != 1 or bias.shape[0] != w.shape[1] or bias.dtype != a.dtype:
        raise ValueError(f"dense: bias of shape {bias.shape} and dtype {bias.dtype} for {a.dtype} outputs of {w.shape[1]}")
    out = matmul(a, w)
    if out.ndim != 2:
        raise ValueError(f"dense: need 2-D operands, got {a.shape} and {w.shape}")
    _bias_activation(out, np.ascontiguousarray(bias), relu)
    return out
