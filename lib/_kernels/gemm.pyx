"""Matrix products on BLAS gemm.

A large 2-D product is cut into bands of the result, one per OpenMP thread: a float32 one of
up to 2^29 multiply-adds with at least 6 rows and 16 columns on the packed-panel kernel
(_panel_gemm.pxi), any other as a single-threaded BLAS gemm; a batch of products runs one
single-threaded gemm per item across the threads. An
operand may be C-contiguous or the transpose of a C-contiguous array (as the gradient of a
matmul produces); that is passed to BLAS as a flag, never copied.
"""

include "_common.pxi"
include "_panel_gemm.pxi"
include "_blas.pxi"
include "_team.pxi"
include "_row_dense.pxi"
include "_skinny.pxi"

import numpy as np

cimport numpy as cnp

cnp.import_array()


cdef void _matmul2d(floating* a, floating* b, floating* c, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                    Py_ssize_t lda, Py_ssize_t ldb, bint trans_a, bint trans_b) noexcept nogil:
    """Row-major c[m, n] = op(a) @ op(b), a and b stored with row strides lda and ldb."""
    cdef char ta = b'T' if trans_a else b'N', tb = b'T' if trans_b else b'N'
    cdef Py_ssize_t i
    if m == 0 or n == 0:
        return
    if k == 0:
        for i in range(m * n):
            c[i] = 0
        return
    cdef int threads
    if m == 1:
        threads = _threads_for(n * k, _GEMV_PARALLEL_MIN) if _blas_single() else 1
        _vec_mat(trans_b, n, k, a, b, ldb, c, threads)
        return
    if floating is float:
        if _skinny_product(a, b, c, m, n, k, lda, ldb, trans_a, trans_b):
            return
    threads = _gemm_threads(m * n * k)
    _gemm_split(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n, threads)


cdef void _matmul3d(floating* a, floating* b, floating* c, Py_ssize_t batch, Py_ssize_t m, Py_ssize_t n,
                    Py_ssize_t k, Py_ssize_t lda, Py_ssize_t ldb, Py_ssize_t sa, Py_ssize_t sb,
                    bint trans_a, bint trans_b) noexcept nogil:
    """c[i] = op(a[i]) @ op(b[i]) for each of `batch` products, item strides sa, sb and m * n."""
    cdef Py_ssize_t sc = m * n, i
    cdef char ta = b'T' if trans_a else b'N', tb = b'T' if trans_b else b'N'
    if batch == 0 or m == 0 or n == 0:
        return
    if k == 0:
        for i in range(batch * sc):
            c[i] = 0
        return
    cdef int threads = _gemm_threads(batch * m * n * k)
    if batch < threads:  # few large products: each split over the threads
        for i in range(batch):
            _gemm_split(ta, tb, m, n, k, 1, a + i * sa, lda, b + i * sb, ldb, 0, c + i * sc, n, threads)
        return
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for i in prange(batch, schedule="static"):
            _gemm(ta, tb, m, n, k, 1, a + i * sa, lda, b + i * sb, ldb, 0, c + i * sc, n)
        tapeflow_fpenv_swap(own)


cdef tuple _stored(x):
    """(buffer, transposed): x itself if C-contiguous, else the C-contiguous array x transposes."""
    if cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x):
        return x, False
    swapped = np.swapaxes(x, x.ndim - 1, x.ndim - 2)
    if cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>swapped):
        return swapped, True
    return np.ascontiguousarray(x), False


def matmul(a, b):
    """a @ b for float32/float64 arrays of rank 2, or rank 3 with equal batch sizes.

    >>> import numpy as np
    >>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    >>> matmul(a, b).tolist(), matmul(b.T, a.T).tolist()
    ([[3.0, 3.0], [12.0, 12.0]], [[3.0, 12.0], [3.0, 12.0]])
    """
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise TypeError(f"matmul: need numpy arrays, got {type(a).__name__} and {type(b).__name__}")
    cdef int kind = cnp.PyArray_TYPE(<cnp.ndarray>a)
    if kind != cnp.PyArray_TYPE(<cnp.ndarray>b) or (kind != cnp.NPY_FLOAT32 and kind != cnp.NPY_FLOAT64):
        raise TypeError(f"matmul: need two float32 or two float64 arrays, got {a.dtype} and {b.dtype}")
    cdef int nd = cnp.PyArray_NDIM(<cnp.ndarray>a)
    cdef cnp.npy_intp* ad = cnp.PyArray_DIMS(<cnp.ndarray>a)
    cdef cnp.npy_intp* bd = cnp.PyArray_DIMS(<cnp.ndarray>b)
    if cnp.PyArray_NDIM(<cnp.ndarray>b) != nd or nd not in (2, 3) or (nd == 3 and ad[0] != bd[0]):
        raise ValueError(f"matmul: unsupported shapes {a.shape} and {b.shape}")
    if ad[nd - 1] != bd[nd - 2]:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    abuf, ta = _stored(a)
    bbuf, tb = _stored(b)
    cdef cnp.npy_intp dims[3]
    cdef int i
    for i in range(nd - 1):
        dims[i] = ad[i]
    dims[nd - 1] = bd[nd - 1]
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(nd, dims, kind, 0)
    cdef cnp.npy_intp* sa = cnp.PyArray_DIMS(<cnp.ndarray>abuf)
    cdef cnp.npy_intp* sb = cnp.PyArray_DIMS(<cnp.ndarray>bbuf)
    cdef Py_ssize_t m = ad[nd - 2], n = bd[nd - 1], k = ad[nd - 1], lda = sa[nd - 1], ldb = sb[nd - 1]
    cdef void* ap = cnp.PyArray_DATA(<cnp.ndarray>abuf)
    cdef void* bp = cnp.PyArray_DATA(<cnp.ndarray>bbuf)
    cdef void* cp = cnp.PyArray_DATA(out)
    cdef Py_ssize_t batch = ad[0] if nd == 3 else 1, step_a = m * k, step_b = k * n
    cdef bint trans_a = ta, trans_b = tb
    _blas_enter()
    try:
        with nogil:
            if nd == 2 and kind == cnp.NPY_FLOAT32:
                _matmul2d(<float*>ap, <float*>bp, <float*>cp, m, n, k, lda, ldb, trans_a, trans_b)
            elif nd == 2:
                _matmul2d(<double*>ap, <double*>bp, <double*>cp, m, n, k, lda, ldb, trans_a, trans_b)
            elif kind == cnp.NPY_FLOAT32:
                _matmul3d(<float*>ap, <float*>bp, <float*>cp, batch, m, n, k, lda, ldb, step_a, step_b,
                          trans_a, trans_b)
            else:
                _matmul3d(<double*>ap, <double*>bp, <double*>cp, batch, m, n, k, lda, ldb, step_a, step_b,
                          trans_a, trans_b)
    finally:
        _blas_leave()
    return out


def descend_product(param, a, b, double rate):
    """param -= rate * (a @ b) in place, as one gemm that reads and writes param once (a and b
    2-D of param's dtype, float32 or float64, param C-contiguous and writeable); returns param,
    or None where the arrays are not such (then nothing is written).

    >>> import numpy as np
    >>> w = np.ones((2, 2))
    >>> descend_product(w, np.ones((2, 3)), np.ones((3, 2)), 0.5).tolist()
    [[-0.5, -0.5], [-0.5, -0.5]]
    """
    if not all(isinstance(x, np.ndarray) and x.ndim == 2 for x in (param, a, b)):
        return None
    cdef int kind = cnp.PyArray_TYPE(<cnp.ndarray>param)
    if (kind != cnp.NPY_FLOAT32 and kind != cnp.NPY_FLOAT64) or cnp.PyArray_TYPE(<cnp.ndarray>a) != kind \
            or cnp.PyArray_TYPE(<cnp.ndarray>b) != kind:
        return None
    if not (cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>param) and param.flags.writeable):
        return None
    cdef Py_ssize_t m = a.shape[0], k = a.shape[1], n = b.shape[1]
    if b.shape[0] != k or param.shape[0] != m or param.shape[1] != n:
        return None
    if m == 0 or n == 0 or k == 0:
        return param
    abuf, ta = _stored(a)
    bbuf, tb = _stored(b)
    cdef Py_ssize_t lda = abuf.shape[1], ldb = bbuf.shape[1]
    cdef void* ap = cnp.PyArray_DATA(<cnp.ndarray>abuf)
    cdef void* bp = cnp.PyArray_DATA(<cnp.ndarray>bbuf)
    cdef void* cp = cnp.PyArray_DATA(<cnp.ndarray>param)
    cdef char trans_a = b'T' if ta else b'N', trans_b = b'T' if tb else b'N'
    cdef int threads = _gemm_threads(m * n * k)
    _blas_enter()
    try:
        with nogil:
            if kind == cnp.NPY_FLOAT32:
                _gemm_split(trans_a, trans_b, m, n, k, <float>-rate, <float*>ap, lda, <float*>bp, ldb, <float>1,
                            <float*>cp, n, threads)
            else:
                _gemm_split(trans_a, trans_b, m, n, k, -rate, <double*>ap, lda, <double*>bp, ldb, <double>1,
                            <double*>cp, n, threads)
    finally:
        _blas_leave()
    return param


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


# The most layers one DenseChain runs, and how many floats of the layers' outputs between
# them it keeps on the stack (more go to an array).
cdef enum:
    _CHAIN_MAX = 16
    _CHAIN_STACK_FLOATS = 4096


cdef class DenseChain:
    """Dense layers applied one after another, `chain(x, w1, b1, w2, b2, ...)`, each layer's
    relu fixed: one float32 row goes through all of them in one call of the one-row kernel
    (one parallel region, no array between the layers handed back to Python) and comes out
    as the last layer's output; any other input gives None, for the layers to run one by one.

    >>> import numpy as np
    >>> w = np.ones((2, 2), np.float32)
    >>> DenseChain([True, False])(np.ones((1, 2), np.float32), w, np.full(2, -3.0, np.float32),
    ...                           w, np.ones(2, np.float32)).tolist()
    [[1.0, 1.0]]
    """

    cdef readonly tuple relus
    MAX_LAYERS = _CHAIN_MAX

    def __init__(self, relus):
        self.relus = tuple(bool(r) for r in relus)
        if not 1 <= len(self.relus) <= _CHAIN_MAX:
            raise ValueError(f"DenseChain: takes 1 to {_CHAIN_MAX} layers, got {len(self.relus)}")

    def __call__(self, x, *params):
        cdef int layers = len(self.relus), l
        if len(params) != 2 * layers or not _plain_f32(x, 2) or cnp.PyArray_DIMS(<cnp.ndarray>x)[0] != 1:
            return None
        cdef Py_ssize_t width = cnp.PyArray_DIMS(<cnp.ndarray>x)[1], total = 0, scratch = 0, widest = 0
        for l in range(layers):
            w, b = params[2 * l], params[2 * l + 1]
            if not (_plain_f32(w, 2) and _plain_f32(b, 1)):
                return None
            if cnp.PyArray_DIMS(<cnp.ndarray>w)[0] != width:
                return None
            width = cnp.PyArray_DIMS(<cnp.ndarray>w)[1]
            if cnp.PyArray_DIMS(<cnp.ndarray>b)[0] != width:
                return None
            total += cnp.PyArray_DIMS(<cnp.ndarray>w)[0] * width
            widest = max(widest, width)
            if l + 1 < layers:
                scratch += width
        cdef cnp.npy_intp out_dims[2]
        out_dims[0], out_dims[1] = 1, width
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, out_dims, cnp.NPY_FLOAT32, 0)
        # the layers' outputs between them: on the stack when they fit
        cdef float on_stack[_CHAIN_STACK_FLOATS]
        cdef cnp.ndarray between = None if scratch <= _CHAIN_STACK_FLOATS else np.empty(scratch, np.float32)
        cdef const float* ws[_CHAIN_MAX]
        cdef const float* bs[_CHAIN_MAX]
        cdef float* ys[_CHAIN_MAX + 1]
        cdef Py_ssize_t dims[_CHAIN_MAX + 1]
        cdef int relus[_CHAIN_MAX]
        cdef float* free_at = &on_stack[0]
        if between is not None:
            free_at = <float*>cnp.PyArray_DATA(between)
        ys[0] = <float*>cnp.PyArray_DATA(<cnp.ndarray>x)
        dims[0] = cnp.PyArray_DIMS(<cnp.ndarray>x)[1]
        for l in range(layers):
            ws[l] = <const float*>cnp.PyArray_DATA(<cnp.ndarray>params[2 * l])
            bs[l] = <const float*>cnp.PyArray_DATA(<cnp.ndarray>params[2 * l + 1])
            dims[l + 1] = cnp.PyArray_DIMS(<cnp.ndarray>params[2 * l])[1]
            relus[l] = self.relus[l]
            if l + 1 < layers:
                ys[l + 1] = free_at
                free_at += dims[l + 1]
        ys[layers] = <float*>cnp.PyArray_DATA(out)
        cdef int threads = _threads_for(total, _ROW_PARALLEL_MIN) if widest >= 128 else 1
        with nogil:
            tapeflow_row_dense_chain(layers, ws, bs, ys, dims, relus, threads)
        return out


cdef void _bias_activation(floating* c, const floating* bias, Py_ssize_t rows, Py_ssize_t cols,
                           bint relu) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef floating v
    cdef int threads = _threads_for(rows * cols, 1 << 16)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for i in prange(rows, schedule="static"):
            for j in range(cols):
                v = c[i * cols + j] + bias[j]
                c[i * cols + j] = (0 if v <= 0 else v) if relu else v  # NaN stays NaN, as np.maximum keeps it
        tapeflow_fpenv_swap(own)


cdef object _panel_dense(object a, object w, object bias, bint relu):
    """dense of float32 2-D operands by the packed-panel product, the bias and relu applied as
    each block of the result is stored; None where that product does not take them."""
    if not (isinstance(a, np.ndarray) and isinstance(w, np.ndarray) and a.ndim == 2 and w.ndim == 2
            and a.dtype == np.float32 and w.dtype == np.float32 and _plain_f32(bias, 1)
            and a.shape[1] == w.shape[0]):
        return None
    abuf, ta = _stored(a)
    wbuf, tw = _stored(w)
    cdef Py_ssize_t m = a.shape[0], k = a.shape[1], n = w.shape[1]
    cdef Py_ssize_t lda = abuf.shape[1], ldw = wbuf.shape[1]
    cdef cnp.npy_intp dims[2]
    dims[0], dims[1] = m, n
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_FLOAT32, 0)
    cdef const float* ap = <const float*>cnp.PyArray_DATA(<cnp.ndarray>abuf)
    cdef const float* wp = <const float*>cnp.PyArray_DATA(<cnp.ndarray>wbuf)
    cdef const float* bp = <const float*>cnp.PyArray_DATA(<cnp.ndarray>bias)
    cdef float* op = <float*>cnp.PyArray_DATA(out)
    cdef bint trans_a = ta, trans_w = tw, done
    if k == 0:
        return None
    with nogil:
        done = _panel_split(b'T' if trans_a else b'N', b'T' if trans_w else b'N', m, n, k, ap, lda, wp, ldw, False,
                            op, n, _gemm_threads(m * n * k), bp, relu)
    return out if done else None


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
    bias = np.ascontiguousarray(bias)
    out = _panel_dense(a, w, bias, relu)
    if out is not None:
        return out
    out = matmul(a, w)
    if out.ndim != 2:
        raise ValueError(f"dense: need 2-D operands, got {a.shape} and {w.shape}")
    cdef void* op = cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef void* bp = cnp.PyArray_DATA(<cnp.ndarray>bias)
    cdef Py_ssize_t rows = out.shape[0], cols = out.shape[1]
    with nogil:
        if cnp.PyArray_TYPE(<cnp.ndarray>out) == cnp.NPY_FLOAT32:
            _bias_activation(<float*>op, <const float*>bp, rows, cols, relu)
        else:
            _bias_activation(<double*>op, <const double*>bp, rows, cols, relu)
    return out
