# Shared by the modules that call BLAS (`include "_blas.pxi"` after _common.pxi): row-major
# gemm on scipy's cython_blas, and control of OpenBLAS's own thread pool so that it does not
# fight the OpenMP threads of our parallel loops.

import ctypes

import scipy.linalg.cython_blas

from cython cimport floating
from scipy.linalg.cython_blas cimport dgemm, sgemm

ctypedef int (*get_threads_fn)() noexcept nogil
ctypedef void (*set_threads_fn)(int) noexcept nogil
cdef get_threads_fn _blas_get_threads = NULL
cdef set_threads_fn _blas_set_threads = NULL


def _bind_blas_threading():
    """Find the thread-count functions of the OpenBLAS that scipy's cython_blas calls."""
    global _blas_get_threads, _blas_set_threads
    try:
        lib = ctypes.CDLL(scipy.linalg.cython_blas.__file__)
    except OSError:
        return False
    for prefix in ("scipy_openblas", "openblas"):
        try:
            get_fn = getattr(lib, prefix + "_get_num_threads")
            set_fn = getattr(lib, prefix + "_set_num_threads")
        except AttributeError:
            continue
        _blas_get_threads = <get_threads_fn><size_t>ctypes.cast(get_fn, ctypes.c_void_p).value
        _blas_set_threads = <set_threads_fn><size_t>ctypes.cast(set_fn, ctypes.c_void_p).value
        return True
    return False


BLAS_THREAD_CONTROL = _bind_blas_threading()


def _set_blas_threads(int n):
    """Give OpenBLAS's own pool `n` threads (used for gemms run outside our parallel loops)."""
    if BLAS_THREAD_CONTROL:
        _blas_set_threads(max(1, n))


def _blas_num_threads():
    """OpenBLAS's current thread count, or None when it cannot be controlled."""
    return _blas_get_threads() if BLAS_THREAD_CONTROL else None


cdef int _blas_users = 0, _blas_saved_threads = 0


cdef void _enter_parallel(int threads):
    """Make BLAS single-threaded while `threads` of ours run gemms in parallel.

    Called with the GIL held, which makes the count of concurrent users safe: the first
    saves BLAS's thread count and the last restores it.
    """
    global _blas_users, _blas_saved_threads
    if threads > 1:
        if _blas_users == 0:
            _blas_saved_threads = _blas_get_threads()
            _blas_set_threads(1)
        _blas_users += 1


cdef void _leave_parallel(int threads):
    global _blas_users
    if threads > 1:
        _blas_users -= 1
        if _blas_users == 0:
            _blas_set_threads(_blas_saved_threads)


cdef inline void _gemm(char transa, char transb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                       floating alpha, const floating* a, Py_ssize_t lda, const floating* b,
                       Py_ssize_t ldb, floating beta, floating* c, Py_ssize_t ldc) noexcept nogil:
    """Row-major C[m, n] = alpha op(A) op(B) + beta C: column-major BLAS on the transposes."""
    cdef int m_ = <int>m, n_ = <int>n, k_ = <int>k, lda_ = <int>lda, ldb_ = <int>ldb
    cdef int ldc_ = <int>ldc
    if floating is float:
        sgemm(&transb, &transa, &n_, &m_, &k_, &alpha, <float*>b, &ldb_, <float*>a, &lda_,
              &beta, c, &ldc_)
    else:
        dgemm(&transb, &transa, &n_, &m_, &k_, &alpha, <double*>b, &ldb_, <double*>a, &lda_,
              &beta, c, &ldc_)


