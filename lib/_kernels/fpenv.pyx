"""The floating-point environment kernels run in: subnormal numbers flushed to zero.

Subnormals (magnitudes below about 1e-38 in float32) cost some CPUs a hundred cycles per
operation. Training makes them routinely (a squared tiny gradient, the probabilities of a
confident softmax), so ops run with flush-to-zero and denormals-are-zero set, as TensorFlow
does, and the caller's setting is restored afterwards.
"""

include "_common.pxi"

SUPPORTED = bool(TAPEFLOW_HAS_MXCSR)


def current():
    """This thread's floating-point control word (0 where it cannot be read)."""
    return tapeflow_fpenv_get()


def flush_denormals_enter():
    """Turn on flush-to-zero in this thread; returns the setting to give back to leave().

    >>> import numpy as np
    >>> old = flush_denormals_enter()
    >>> float(np.float32(1e-30) * np.float32(1e-10)) == 0.0 or not SUPPORTED
    True
    >>> flush_denormals_leave(old)
    """
    return tapeflow_fpenv_swap(tapeflow_fpenv_get() | TAPEFLOW_FLUSH_BITS)


def flush_denormals_leave(unsigned int old):
    """Restore the setting that flush_denormals_enter() returned."""
    tapeflow_fpenv_swap(old)
