"""Fused elementwise kernels: one pass over memory instead of one per NumPy operator."""

include "_common.pxi"

import numpy as np

from cython cimport floating

cdef extern from *:
    """
    #include <math.h>
    #ifdef _OPENMP
    #include <omp.h>
    #endif
    /* One thread's share, in a function of its own: with restrict parameters the
       compiler vectorizes it, which it does not inside an OpenMP-outlined loop body. */
    #define TAPEFLOW_ADAM(NAME, T, SQRT)                                                    \\
    static void NAME##_chunk(const T* restrict p, const T* restrict m, const T* restrict v, \\
                             const T* restrict g, T* restrict p_out, T* restrict m_out,     \\
                             T* restrict v_out, Py_ssize_t n, T b1, T b2, T c1, T c2,       \\
                             T step, T inv_c2, T e)                                         \\
    {                                                                                      \\
        for (Py_ssize_t i = 0; i < n; i++) {                                               \\
            T gi = g[i];                                                                   \\
            T mi = b1 * m[i] + c1 * gi;                                                    \\
            T vi = b2 * v[i] + c2 * gi * gi;                                               \\
            m_out[i] = mi;                                                                 \\
            v_out[i] = vi;                                                                 \\
            p_out[i] = p[i] - step * mi / (SQRT(vi * inv_c2) + e);                         \\
        }                                                                                  \\
    }                                                                                      \\
    static void NAME(const T* p, const T* m, const T* v, const T* g, T* p_out, T* m_out,   \\
                     T* v_out, Py_ssize_t n, double lr, double beta1, double beta2,         \\
                     double eps, double bias_c1, double bias_c2, int threads)               \\
    {                                                                                      \\
        const T b1 = (T)beta1, b2 = (T)beta2, c1 = (T)(1 - beta1), c2 = (T)(1 - beta2);    \\
        const T step = (T)(lr / bias_c1), inv_c2 = (T)(1 / bias_c2), e = (T)eps;           \\
        const unsigned int env = tapeflow_fpenv_get();                                    \\
        _Pragma("omp parallel num_threads(threads) if(threads > 1)")                       \\
        {                                                                                  \\
            const unsigned int own = tapeflow_fpenv_swap(env);                             \\
            Py_ssize_t lo = 0, hi = n;                                                     \\
            TAPEFLOW_THREAD_SHARE(lo, hi);                                                 \\
            NAME##_chunk(p + lo, m + lo, v + lo, g + lo, p_out + lo, m_out + lo,           \\
                         v_out + lo, hi - lo, b1, b2, c1, c2, step, inv_c2, e);            \\
            tapeflow_fpenv_swap(own);                                                      \\
        }                                                                                  \\
    }
    #ifdef _OPENMP
    #define TAPEFLOW_THREAD_SHARE(lo, hi) do {                                             \\
        Py_ssize_t t_ = omp_get_thread_num(), nt_ = omp_get_num_threads();                \\
        lo = n * t_ / nt_; hi = n * (t_ + 1) / nt_; } while (0)
    #else
    #define TAPEFLOW_THREAD_SHARE(lo, hi) do { } while (0)
    #endif
    TAPEFLOW_ADAM(tapeflow_adam_f32, float, sqrtf)
    TAPEFLOW_ADAM(tapeflow_adam_f64, double, sqrt)

    /* relu and its gradient, as NumPy computes them: max(x, 0) keeps NaN and turns -0.0
       into 0.0, and the gradient passes g where y > 0 (never where y is NaN). */
    #define TAPEFLOW_RELU(NAME, T)                                                          \
    static void NAME##_chunk(const T* restrict x, T* restrict out, Py_ssize_t n)            \
    {                                                                                      \
        for (Py_ssize_t i = 0; i < n; i++) {                                               \
            T xi = x[i];                                                                   \
            out[i] = xi > 0 || xi != xi ? xi : (T)0;                                       \
        }                                                                                  \
    }                                                                                      \
    static void NAME##_grad_chunk(const T* restrict g, const T* restrict y,                \
                                  T* restrict out, Py_ssize_t n)                           \
    {                                                                                      \
        for (Py_ssize_t i = 0; i < n; i++) {  /* g read always: a select, not a branch */ \
            T gi = g[i];                                                                   \
            out[i] = y[i] > 0 ? gi : (T)0;                                                 \
        }                                                                                  \
    }                                                                                      \
    static void NAME(const T* x, T* out, Py_ssize_t n, int threads)                        \
    {                                                                                      \
        const unsigned int env = tapeflow_fpenv_get();                                    \
        _Pragma("omp parallel num_threads(threads) if(threads > 1)")                       \
        {                                                                                  \
            const unsigned int own = tapeflow_fpenv_swap(env);                             \
            Py_ssize_t lo = 0, hi = n;                                                     \
            TAPEFLOW_THREAD_SHARE(lo, hi);                                                 \
            NAME##_chunk(x + lo, out + lo, hi - lo);                                       \
            tapeflow_fpenv_swap(own);                                                      \
        }                                                                                  \
    }                                                                                      \
    static void NAME##_grad(const T* g, const T* y, T* out, Py_ssize_t n, int threads)     \
    {                                                                                      \
        const unsigned int env = tapeflow_fpenv_get();                                    \
        _Pragma("omp parallel num_threads(threads) if(threads > 1)")                       \
        {                                                                                  \
            const unsigned int own = tapeflow_fpenv_swap(env);                             \
            Py_ssize_t lo = 0, hi = n;                                                     \
            TAPEFLOW_THREAD_SHARE(lo, hi);                                                 \
            NAME##_grad_chunk(g + lo, y + lo, out + lo, hi - lo);                          \
            tapeflow_fpenv_swap(own);                                                      \
        }                                                                                  \
    }
    TAPEFLOW_RELU(tapeflow_relu_f32, float)
    TAPEFLOW_RELU(tapeflow_relu_f64, double)
    """
    void tapeflow_adam_f32(const float* p, const float* m, const float* v, const float* g,
                           float* p_out, float* m_out, float* v_out, Py_ssize_t n, double lr,
                           double beta1, double beta2, double eps, double bias_c1,
                           double bias_c2, int threads) noexcept nogil
    void tapeflow_adam_f64(const double* p, const double* m, const double* v, const double* g,
                           double* p_out, double* m_out, double* v_out, Py_ssize_t n, double lr,
                           double beta1, double beta2, double eps, double bias_c1,
                           double bias_c2, int threads) noexcept nogil
    void tapeflow_relu_f32(const float* x, float* out, Py_ssize_t n, int threads) noexcept nogil
    void tapeflow_relu_f64(const double* x, double* out, Py_ssize_t n, int threads) noexcept nogil
    void tapeflow_relu_f32_grad(const float* g, const float* y, float* out, Py_ssize_t n,
                                int threads) noexcept nogil
    void tapeflow_relu_f64_grad(const double* g, const double* y, double* out, Py_ssize_t n,
                                int threads) noexcept nogil

# Below this many elements the parallel region costs more than it saves.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 20
cdef Py_ssize_t _RELU_PARALLEL_MIN = 1 << 17


def _check_same(name, **arrays):
    """Every array a C-contiguous numpy array of the first one's shape and float dtype."""
    first_label, first = next(iter(arrays.items()))
    for label, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name}: {label} must be a numpy array, got {type(array)}")
        if array.dtype not in (np.float32, np.float64) or array.dtype != first.dtype:
            raise TypeError(f"{name}: {label} has dtype {array.dtype}; {', '.join(arrays)} "
                            f"need one float32 or float64 dtype ({first_label} is {first.dtype})")
        if array.shape != first.shape:
            raise ValueError(f"{name}: shapes differ: {label} has shape {array.shape}, {first_label} {first.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{name}: {label} must be C-contiguous")


def _adam(const floating[::1] p, const floating[::1] m, const floating[::1] v,
          const floating[::1] g, floating[::1] po, floating[::1] mo, floating[::1] vo,
          double lr, double b1, double b2, double eps, double c1, double c2):
    cdef Py_ssize_t n = p.shape[0]
    cdef int threads = _threads_for(n, _PARALLEL_MIN)
    with nogil:
        if floating is float:
            tapeflow_adam_f32(&p[0], &m[0], &v[0], &g[0], &po[0], &mo[0], &vo[0], n, lr, b1,
                              b2, eps, c1, c2, threads)
        else:
            tapeflow_adam_f64(&p[0], &m[0], &v[0], &g[0], &po[0], &mo[0], &vo[0], n, lr, b1,
                              b2, eps, c1, c2, threads)


def adam_update(param, m, v, grad, double lr, double beta1, double beta2, double eps,
                double bias_c1, double bias_c2):
    """One Adam step in one pass; returns new (param, m, v) and leaves the inputs as they were.

    m' = b1 m + (1 - b1) g;  v' = b2 v + (1 - b2) g^2;
    param' = param - lr (m' / bias_c1) / (sqrt(v' / bias_c2) + eps)

    >>> import numpy as np
    >>> p, m, v = adam_update(np.ones(2), np.zeros(2), np.zeros(2), np.array([1.0, -1.0]),
    ...                       0.1, 0.9, 0.999, 0.0, 0.1, 0.001)
    >>> np.round(p, 6).tolist()
    [0.9, 1.1]
    """
    _check_same("adam_update", param=param, m=m, v=v, grad=grad)
    flat = [array.reshape(-1) for array in (param, m, v, grad)]
    outs = [np.empty_like(param) for _ in range(3)]
    if param.size:
        _adam(*flat, *(o.reshape(-1) for o in outs), lr, beta1, beta2, eps, bias_c1, bias_c2)
    return tuple(outs)


def _relu(const floating[::1] x, floating[::1] out):
    cdef Py_ssize_t n = x.shape[0]
    cdef int threads = _threads_for(n, _RELU_PARALLEL_MIN)
    with nogil:
        if floating is float:
            tapeflow_relu_f32(&x[0], &out[0], n, threads)
        else:
            tapeflow_relu_f64(&x[0], &out[0], n, threads)


def _relu_grad(const floating[::1] g, const floating[::1] y, floating[::1] out):
    cdef Py_ssize_t n = g.shape[0]
    cdef int threads = _threads_for(n, _RELU_PARALLEL_MIN)
    with nogil:
        if floating is float:
            tapeflow_relu_f32_grad(&g[0], &y[0], &out[0], n, threads)
        else:
            tapeflow_relu_f64_grad(&g[0], &y[0], &out[0], n, threads)



def relu(x):
    """max(x, 0) in one pass, equal to np.maximum(x, 0) (NaN kept, -0.0 made 0.0).

    >>> import numpy as np
    >>> relu(np.array([-1.0, 0.5, np.nan])).tolist()
    [0.0, 0.5, nan]
    """
    _check_same("relu", x=x)
    out = np.empty_like(x)
    if x.size:
        _relu(x.reshape(-1), out.reshape(-1))
    return out


def relu_grad(g, y):
    """g where y > 0, else 0: the gradient of relu given its output y.

    >>> import numpy as np
    >>> relu_grad(np.array([1.0, 2.0, 3.0]), np.array([0.0, 4.0, np.nan])).tolist()
    [0.0, 2.0, 0.0]
    """
    _check_same("relu_grad", g=g, y=y)
    out = np.empty_like(g)
    if g.size:
        _relu_grad(g.reshape(-1), y.reshape(-1), out.reshape(-1))
    return out
