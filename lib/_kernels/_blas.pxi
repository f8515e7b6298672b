# Shared by the modules that call BLAS (`include "_blas.pxi"` after _common.pxi and
# _panel_gemm.pxi): row-major gemm, and who threads it.
#
# OpenBLAS's thread count is process-wide: SciPy, NumPy and threadpoolctl limits set by other
# threads all share it, so tapeflow never sets it. Its gemms call a private, single-threaded
# copy of that OpenBLAS (private_blas.py), and our OpenMP threads split every large gemm
# between them (one single-threaded BLAS call each). Where no private copy can be loaded they
# call SciPy's shared library and read its thread count afresh at each call: while it is one,
# our threads split the gemms as above; while OpenBLAS runs threaded, each gemm is one BLAS
# call that OpenBLAS threads itself, since its spinning worker threads and ours would
# otherwise take the cores from each other. Behind another BLAS, whose thread count cannot be
# read, each gemm likewise runs alone and that BLAS threads it.

import ctypes

import scipy.linalg.cython_blas

from tapeflow._kernels.blas_scope import ADDRESS as _SCOPE_ADDRESS
from tapeflow._kernels.private_blas import private_blas as _private_blas

from cython cimport floating
from cython.parallel cimport parallel, prange
from scipy.linalg.cython_blas cimport dgemm, dgemv, sgemm, sgemv

ctypedef void (*sgemm_fn)(char*, char*, int*, int*, int*, float*, float*, int*, float*, int*, float*,
                          float*, int*) noexcept nogil
ctypedef void (*dgemm_fn)(char*, char*, int*, int*, int*, double*, double*, int*, double*, int*, double*,
                          double*, int*) noexcept nogil
ctypedef void (*sgemv_fn)(char*, int*, int*, float*, float*, int*, float*, int*, float*, float*,
                          int*) noexcept nogil
ctypedef void (*dgemv_fn)(char*, int*, int*, double*, double*, int*, double*, int*, double*, double*,
                          int*) noexcept nogil
ctypedef int (*get_threads_fn)() noexcept nogil

# The BLAS the kernels call: SciPy's shared library unless a private copy loads.
cdef sgemm_fn _sgemm = sgemm
cdef dgemm_fn _dgemm = dgemm
cdef sgemv_fn _sgemv = sgemv
cdef dgemv_fn _dgemv = dgemv
cdef get_threads_fn _blas_get_threads = NULL
# [kernel calls running]: one record for every module (blas_scope.py).
cdef int* _blas_scope = <int*><size_t>_SCOPE_ADDRESS

# Below this many multiply-adds a gemm runs on one thread.
cdef Py_ssize_t _GEMM_PARALLEL_MIN = 1 << 20


def _bind_private_blas():
    """Point the kernels at the private single-threaded OpenBLAS, where one loads."""
    global _sgemm, _dgemm, _sgemv, _dgemv
    found = _private_blas()
    if found is None:
        return False
    _sgemm = <sgemm_fn><size_t>found["sgemm"]
    _dgemm = <dgemm_fn><size_t>found["dgemm"]
    _sgemv = <sgemv_fn><size_t>found["sgemv"]
    _dgemv = <dgemv_fn><size_t>found["dgemv"]
    return True


BLAS_PRIVATE = _bind_private_blas()
cdef bint _blas_private = BLAS_PRIVATE


def _bind_blas_threading():
    """Find the thread-count getter of the OpenBLAS that scipy's cython_blas calls."""
    global _blas_get_threads
    try:
        lib = ctypes.CDLL(scipy.linalg.cython_blas.__file__)
    except OSError:
        return False
    for prefix in ("scipy_openblas", "openblas"):
        try:
            get_fn = getattr(lib, prefix + "_get_num_threads")
        except AttributeError:
            continue
        _blas_get_threads = <get_threads_fn><size_t>ctypes.cast(get_fn, ctypes.c_void_p).value
        return True
    return False


BLAS_THREADS_KNOWN = _bind_blas_threading()


# Whether the kernels' BLAS is single-threaded or its thread count can be read (not whether
# it is one now: see _blas_single).
cdef bint _blas_controlled = BLAS_PRIVATE or BLAS_THREADS_KNOWN


cdef inline bint _blas_single() noexcept nogil:
    """Whether the kernels' BLAS runs each call on the calling thread alone now, so that our
    OpenMP threads may run gemms side by side."""
    return _blas_private or (_blas_get_threads != NULL and _blas_get_threads() == 1)


def _blas_num_threads():
    """The thread count of SciPy's shared OpenBLAS, or None when it cannot be read."""
    return _blas_get_threads() if _blas_get_threads != NULL else None


cdef void _blas_enter() noexcept:
    """Count one kernel call that uses BLAS as running (called with the GIL held).

    Only the count changes: OpenBLAS's own settings stay as the process set them.
    """
    _blas_scope[0] += 1


cdef void _blas_leave() noexcept:
    """End what _blas_enter began (called with the GIL held)."""
    if _blas_scope[0] > 0:
        _blas_scope[0] -= 1


def _blas_calls_running():
    """How many kernel calls that use BLAS are running now (0 between calls)."""
    return _blas_scope[0]


cdef int _gemm_threads(Py_ssize_t work) noexcept nogil:
    """How many of our threads to give `work` multiply-adds of gemm (1: one plain BLAS call)."""
    if not _blas_single():
        return 1
    return _threads_for(work, _GEMM_PARALLEL_MIN)


cdef inline void _gemm(char transa, char transb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                       floating alpha, const floating* a, Py_ssize_t lda, const floating* b,
                       Py_ssize_t ldb, floating beta, floating* c, Py_ssize_t ldc) noexcept nogil:
    """Row-major C[m, n] = alpha op(A) op(B) + beta C: column-major BLAS on the transposes."""
    cdef int m_ = <int>m, n_ = <int>n, k_ = <int>k, lda_ = <int>lda, ldb_ = <int>ldb
    cdef int ldc_ = <int>ldc
    if floating is float:
        _sgemm(&transb, &transa, &n_, &m_, &k_, &alpha, <float*>b, &ldb_, <float*>a, &lda_,
              &beta, c, &ldc_)
    else:
        _dgemm(&transb, &transa, &n_, &m_, &k_, &alpha, <double*>b, &ldb_, <double*>a, &lda_,
              &beta, c, &ldc_)


# The float32 products the packed-panel kernel takes (beside 6 rows and 16 columns at least): up
# to this many multiply-adds, or any number with at most one block of rows of A
# (TAPEFLOW_PANEL_MC: a dense layer's forward at a small batch, which reading B bounds, and
# the panel kernel then reads B once, along its rows); beyond, BLAS's blocking for the caches
# does as well, or better where writing the output bounds the product.
cdef Py_ssize_t _PANEL_MAX_WORK = 1 << 29


def _set_panel_max_work(Py_ssize_t work):
    """Set the multiply-adds beyond which only products of few rows take the packed-panel
    kernel; returns the old setting (for tests)."""
    global _PANEL_MAX_WORK
    old, _PANEL_MAX_WORK = _PANEL_MAX_WORK, work
    return old


cdef bint _panel_split(char transa, char transb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float* a,
                       Py_ssize_t lda, const float* b, Py_ssize_t ldb, bint add, float* c, Py_ssize_t ldc,
                       int threads, const float* bias, bint relu) noexcept nogil:
    """Row-major C[m, n] = op(A) op(B) (+ C with `add`; then + bias where not NULL, then relu) by
    the packed-panel product where it takes the product (True), else nothing (False). The threads
    take bands along C's longer side, as _gemm_split's: of 16-column panels, or of 6-row blocks."""
    if not _panels_ok or m < 6 or n < 16 or k < 1:
        return False
    if m * n * k > _PANEL_MAX_WORK and m > TAPEFLOW_PANEL_MC:
        return False
    cdef Py_ssize_t sar = 1 if transa == c'T' else lda, sap = lda if transa == c'T' else 1
    cdef Py_ssize_t sbp = 1 if transb == c'T' else ldb, sbj = ldb if transb == c'T' else 1
    if threads < 2:
        return tapeflow_panel_product(a, sar, sap, b, sbp, sbj, c, ldc, m, n, k, add, bias, relu) != 0
    cdef bint by_cols = n >= m
    cdef Py_ssize_t unit = 16 if by_cols else 6, extent = n if by_cols else m
    cdef Py_ssize_t step = ((extent + unit - 1) // unit + threads - 1) // threads * unit
    return tapeflow_panel_split(a, sar, sap, b, sbp, sbj, c, ldc, m, n, k, add, bias, relu, by_cols, step,
                                threads) != 0


cdef void _gemm_split(char transa, char transb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                      floating alpha, const floating* a, Py_ssize_t lda, const floating* b,
                      Py_ssize_t ldb, floating beta, floating* c, Py_ssize_t ldc,
                      int threads) noexcept nogil:
    """_gemm with C cut into `threads` bands, each a single-threaded gemm on its own thread
    (float32 products with alpha 1 and beta 0 or 1 on the packed-panel kernel where it takes them).

    The bands run along C's longer side: each thread then packs all of the operand that
    spans the shorter side, the smaller one to pack twice. Column bands are multiples of 16
    wide so that every band but the last fills the vector kernels.
    """
    if floating is float:
        if alpha == 1 and (beta == 0 or beta == 1) and _panel_split(transa, transb, m, n, k, a, lda, b, ldb,
                                                                    beta == 1, c, ldc, threads, NULL, False):
            return
    cdef bint by_cols = n >= m
    cdef Py_ssize_t extent = n if by_cols else m, step, part, lo, hi
    if threads < 2 or extent < 2:
        _gemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    step = (extent + threads - 1) // threads
    if by_cols:
        step = (step + 15) // 16 * 16
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for part in prange(threads, schedule="static"):
            lo = part * step
            hi = min(lo + step, extent)
            if lo >= hi:
                continue
            if by_cols:
                _gemm(transa, transb, m, hi - lo, k, alpha, a, lda,
                      b + (lo * ldb if transb == c'T' else lo), ldb, beta, c + lo, ldc)
            else:
                _gemm(transa, transb, hi - lo, n, k, alpha, a + (lo if transa == c'T' else lo * lda),
                      lda, b, ldb, beta, c + lo * ldc, ldc)
        tapeflow_fpenv_swap(own)


# Below this many multiply-adds a matrix-vector product runs on one thread.
cdef Py_ssize_t _GEMV_PARALLEL_MIN = 1 << 20


cdef inline void _gemv_part(bint trans_b, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t k, const floating* a,
                            const floating* b, Py_ssize_t ldb, floating* c) noexcept nogil:
    """Outputs c[lo:hi] of c[1, n] = a[1, k] @ op(B), as one BLAS matrix-vector product."""
    cdef int part = <int>(hi - lo), k_ = <int>k, ldb_ = <int>ldb, one = 1
    cdef floating alpha = 1, beta = 0
    cdef char t = b'T' if trans_b else b'N'
    # Read column-major, the buffer of B is B^T (n x k), or with trans_b (it holds B^T) B itself (k x n).
    cdef const floating* block = b + (lo * ldb if trans_b else lo)
    cdef int rows = k_ if trans_b else part, cols = part if trans_b else k_
    if floating is float:
        _sgemv(&t, &rows, &cols, &alpha, <float*>block, &ldb_, <float*>a, &one, &beta, c + lo, &one)
    else:
        _dgemv(&t, &rows, &cols, &alpha, <double*>block, &ldb_, <double*>a, &one, &beta, c + lo, &one)


cdef inline void _vec_mat(bint trans_b, Py_ssize_t n, Py_ssize_t k, const floating* a, const floating* b,
                          Py_ssize_t ldb, floating* c, int threads) noexcept nogil:
    """Row-major c[1, n] = a[1, k] @ op(B) as matrix-vector products (gemm would pack all of
    B), the outputs split into `threads` bands when the product is large enough."""
    cdef Py_ssize_t part, step, lo, hi
    if threads < 2 or n * k < _GEMV_PARALLEL_MIN or n < 32:
        _gemv_part(trans_b, 0, n, k, a, b, ldb, c)
        return
    step = ((n + threads - 1) // threads + 15) // 16 * 16
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for part in prange(threads, schedule="static"):
            lo = part * step
            hi = min(lo + step, n)
            if lo < hi:
                _gemv_part(trans_b, lo, hi, k, a, b, ldb, c)
        tapeflow_fpenv_swap(own)
