"""Fused elementwise updates: one pass over memory instead of one per NumPy operator."""

include "_common.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport prange
from libc.math cimport sqrt, sqrtf

# Below this many elements the parallel region costs more than it saves.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 15


cdef inline floating _sqrt(floating v) noexcept nogil:
    if floating is float:
        return sqrtf(v)
    else:
        return sqrt(v)


cdef void _adam(floating[::1] param, floating[::1] m, floating[::1] v,
                const floating[::1] grad, double lr, double beta1, double beta2, double eps,
                double bias_c1, double bias_c2) noexcept nogil:
    cdef Py_ssize_t n = param.shape[0], i
    cdef floating b1 = beta1, b2 = beta2, c1 = 1 - beta1, c2 = 1 - beta2, eps_ = eps
    cdef floating step = lr / bias_c1, inv_c2 = 1 / bias_c2, g, mi, vi
    cdef int threads = _num_threads if n >= _PARALLEL_MIN else 1
    for i in prange(n, schedule="static", num_threads=threads):
        g = grad[i]
        mi = b1 * m[i] + c1 * g
        vi = b2 * v[i] + c2 * g * g
        m[i] = mi
        v[i] = vi
        param[i] -= step * mi / (_sqrt(vi * inv_c2) + eps_)


def adam_update(param, m, v, grad, double lr, double beta1, double beta2, double eps,
                double bias_c1, double bias_c2):
    """One Adam step, in place on param, m and v (same shape and float dtype, C-contiguous).

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    param -= lr (m / bias_c1) / (sqrt(v / bias_c2) + eps)

    >>> import numpy as np
    >>> p, m, v = np.ones(2), np.zeros(2), np.zeros(2)
    >>> adam_update(p, m, v, np.array([1.0, -1.0]), 0.1, 0.9, 0.999, 0.0, 0.1, 0.001)
    >>> np.round(p, 6).tolist()
    [0.9, 1.1]
    """
    arrays = {"param": param, "m": m, "v": v, "grad": grad}
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"adam_update: {name} must be a numpy array, got {type(array)}")
        if array.dtype not in (np.float32, np.float64) or array.dtype != param.dtype:
            raise TypeError(f"adam_update: {name} has dtype {array.dtype}; all four arrays "
                            f"need the same float32 or float64 dtype as param ({param.dtype})")
        if array.shape != param.shape:
            raise ValueError(f"adam_update: {name} has shape {array.shape}, param {param.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"adam_update: {name} must be C-contiguous")
        if name != "grad" and not array.flags.writeable:
            raise ValueError(f"adam_update: {name} is read-only")
    if param.size == 0:
        return
    flat = [array.reshape(-1) for array in (param, m, v, grad)]
    if param.dtype == np.float32:
        _adam[float](*flat, lr, beta1, beta2, eps, bias_c1, bias_c2)
    else:
        _adam[double](*flat, lr, beta1, beta2, eps, bias_c1, bias_c2)
