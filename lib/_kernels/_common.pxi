# Shared by every kernel module through `include "_common.pxi"`: build facts and the
# OpenMP thread count that the module's prange loops use.

cdef extern from *:
    """
    #ifndef TAPEFLOW_SOURCE_SHA256
    #define TAPEFLOW_SOURCE_SHA256 "unknown"
    #endif
    #ifdef _OPENMP
    #include <omp.h>
    #define TAPEFLOW_OPENMP 1
    static int tapeflow_max_threads(void) { return omp_get_max_threads(); }
    #else
    #define TAPEFLOW_OPENMP 0
    static int tapeflow_max_threads(void) { return 1; }
    #endif
    """
    const char* TAPEFLOW_SOURCE_SHA256
    int TAPEFLOW_OPENMP
    int tapeflow_max_threads() noexcept nogil

OPENMP = bool(TAPEFLOW_OPENMP)
SOURCE_SHA256 = TAPEFLOW_SOURCE_SHA256.decode("ascii")

cdef int _num_threads = max(1, tapeflow_max_threads())


def _set_num_threads(int n):
    """Set the thread count of this module's prange loops (always 1 without OpenMP)."""
    global _num_threads
    if n < 1:
        raise ValueError(f"set_num_threads: need n >= 1, got {n}")
    _num_threads = n if TAPEFLOW_OPENMP else 1


def _get_num_threads():
    return _num_threads
