# Shared by every kernel module through `include "_common.pxi"`: build facts, the OpenMP
# thread count that the module's prange loops use, and the floating-point environment.
#
# OpenMP worker threads keep whatever flush-to-zero setting they were started with, so each
# parallel region hands them the caller's: every thread count then gives the same result
# (`own = tapeflow_fpenv_swap(env)` on entry, `tapeflow_fpenv_swap(own)` on exit, where `env`
# is `tapeflow_fpenv_get()` read by the calling thread).

cdef extern from *:
    """
    #if defined(__SSE__) || defined(_M_X64) || defined(__x86_64__)
    #include <xmmintrin.h>
    #define TAPEFLOW_HAS_MXCSR 1
    static inline unsigned int tapeflow_fpenv_get(void) { return _mm_getcsr(); }
    static inline unsigned int tapeflow_fpenv_swap(unsigned int env) {
        unsigned int old = _mm_getcsr();
        if (old != env) _mm_setcsr(env);
        return old;
    }
    #else
    #define TAPEFLOW_HAS_MXCSR 0
    static inline unsigned int tapeflow_fpenv_get(void) { return 0; }
    static inline unsigned int tapeflow_fpenv_swap(unsigned int env) { (void)env; return 0; }
    #endif
    #define TAPEFLOW_FLUSH_BITS 0x8040u  /* MXCSR: flush-to-zero (bit 15) | denormals-are-zero (bit 6) */
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
    int TAPEFLOW_HAS_MXCSR
    unsigned int TAPEFLOW_FLUSH_BITS
    int tapeflow_max_threads() noexcept nogil
    unsigned int tapeflow_fpenv_get() noexcept nogil
    unsigned int tapeflow_fpenv_swap(unsigned int env) noexcept nogil

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
