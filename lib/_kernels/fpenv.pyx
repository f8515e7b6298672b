"""The floating-point environment kernels run in: subnormal numbers flushed to zero.

Subnormals (magnitudes below about 1e-38 in float32) cost some CPUs a hundred cycles per
operation. Training makes them routinely (a squared tiny gradient, the probabilities of a
confident softmax), so ops run with flush-to-zero and denormals-are-zero set, as TensorFlow
does, and the caller's setting is restored afterwards.
"""

include "_common.pxi"

cdef extern from *:
    """
    #if defined(__SSE__) || defined(_M_X64) || defined(__x86_64__)
    #include <xmmintrin.h>
    #define TAPEFLOW_HAS_MXCSR 1
    static unsigned int tapeflow_flush_enter(void) {
        unsigned int old = _mm_getcsr();
        _mm_setcsr(old | 0x8040);  /* FTZ (bit 15) | DAZ (bit 6) */
        return old;
    }
    static void tapeflow_flush_leave(unsigned int old) { _mm_setcsr(old); }
    #else
    #define TAPEFLOW_HAS_MXCSR 0
    static unsigned int tapeflow_flush_enter(void) { return 0; }
    static void tapeflow_flush_leave(unsigned int old) { (void)old; }
    #endif
    """
    int TAPEFLOW_HAS_MXCSR
    unsigned int tapeflow_flush_enter() noexcept nogil
    void tapeflow_flush_leave(unsigned int old) noexcept nogil

SUPPORTED = bool(TAPEFLOW_HAS_MXCSR)


def flush_denormals_enter():
    """Turn on flush-to-zero in this thread; returns the setting to give back to leave().

    >>> import numpy as np
    >>> old = flush_denormals_enter()
    >>> float(np.float32(1e-30) * np.float32(1e-10)) == 0.0 or not SUPPORTED
    True
    >>> flush_denormals_leave(old)
    """
    return tapeflow_flush_enter()


def flush_denormals_leave(unsigned int old):
    """Restore the setting that flush_denormals_enter() returned."""
    tapeflow_flush_leave(old)
