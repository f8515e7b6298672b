"""Fused elementwise kernels: one pass over memory instead of one per NumPy operator."""

include "_common.pxi"

import numpy as np

cimport numpy as cnp
from libc.stdlib cimport calloc, free, malloc

cnp.import_array()

cdef extern from *:
    """
    #include <math.h>
    #ifdef _OPENMP
    #include <omp.h>
    #endif
    /* Adam at element i, reading p, m, v, g and writing p_out, m_out, v_out (which may be
       p, m, v themselves); b1, b2, c1, c2, step, inv_c2 and e come from the caller. */
    #define TAPEFLOW_ADAM_AT(T, SQRT, p, m, v, g, p_out, m_out, v_out, i) do {             \\
            T gi = (g)[i];                                                                 \\
            T mi = b1 * (m)[i] + c1 * gi;                                                  \\
            T vi = b2 * (v)[i] + c2 * gi * gi;                                             \\
            (m_out)[i] = mi;                                                               \\
            (v_out)[i] = vi;                                                               \\
            (p_out)[i] = (p)[i] - step * mi / (SQRT(vi * inv_c2) + e);                     \\
        } while (0)
    /* One thread's share, in a function of its own: with restrict parameters the
       compiler vectorizes it, which it does not inside an OpenMP-outlined loop body. */
    #define TAPEFLOW_ADAM(NAME, T, SQRT)                                                   \\
    static void NAME##_chunk(const T* restrict p, const T* restrict m, const T* restrict v, \\
                             const T* restrict g, T* restrict p_out, T* restrict m_out,    \\
                             T* restrict v_out, Py_ssize_t n, T b1, T b2, T c1, T c2,      \\
                             T step, T inv_c2, T e)                                        \\
    {                                                                                      \\
        for (Py_ssize_t i = 0; i < n; i++)                                                 \\
            TAPEFLOW_ADAM_AT(T, SQRT, p, m, v, g, p_out, m_out, v_out, i);                 \\
    }                                                                                      \\
    static void NAME(const T* p, const T* m, const T* v, const T* g, T* p_out, T* m_out,   \\
                     T* v_out, Py_ssize_t n, double lr, double beta1, double beta2,        \\
                     double eps, double bias_c1, double bias_c2, int threads)              \\
    {                                                                                      \\
        TAPEFLOW_ADAM_SHARED(T, n, NAME##_chunk(p + lo, m + lo, v + lo, g + lo, p_out + lo, \\
                                              m_out + lo, v_out + lo, hi - lo, b1, b2, c1, \\
                                              c2, step, inv_c2, e));                       \\
    }
    #define TAPEFLOW_THREAD_SHARE(lo, hi) TAPEFLOW_SHARE_OF(lo, hi, n)
    /* The Adam settings in T, then the body run by each thread on its share [lo, hi) of
       count items, with the caller's floating-point environment. */
    #define TAPEFLOW_ADAM_SHARED(T, count, ...)                                            \\
        const T b1 = (T)beta1, b2 = (T)beta2, c1 = (T)(1 - beta1), c2 = (T)(1 - beta2);    \\
        const T step = (T)(lr / bias_c1), inv_c2 = (T)(1 / bias_c2), e = (T)eps;           \\
        const unsigned int env = tapeflow_fpenv_get();                                     \\
        _Pragma("omp parallel num_threads(threads) if(threads > 1)")                       \\
        {                                                                                  \\
            const unsigned int own = tapeflow_fpenv_swap(env);                             \\
            const Py_ssize_t total_ = (count);                                             \\
            Py_ssize_t lo = 0, hi = total_;                                                \\
            TAPEFLOW_SHARE_OF(lo, hi, total_);                                             \\
            __VA_ARGS__;                                                                   \\
            tapeflow_fpenv_swap(own);                                                      \\
        }
    TAPEFLOW_ADAM(tapeflow_adam_f32, float, sqrtf)
    TAPEFLOW_ADAM(tapeflow_adam_f64, double, sqrt)

    /* The same step in place: on the rows `ids` (distinct) of p, m and v, the gradient row i
       for table row ids[i], rows shared out among the threads (NAME), or on every element
       (NAME##_all). */
    #define TAPEFLOW_ADAM_ROWS(NAME, T, SQRT)                                              \\
    static void NAME##_row(T* p, T* m, T* v, const T* restrict g, Py_ssize_t n, T b1,      \\
                           T b2, T c1, T c2, T step, T inv_c2, T e)                        \\
    {                                                                                      \\
        for (Py_ssize_t i = 0; i < n; i++)                                                 \\
            TAPEFLOW_ADAM_AT(T, SQRT, p, m, v, g, p, m, v, i);                             \\
    }                                                                                      \\
    static void NAME(T* p, T* m, T* v, const long long* ids, const T* g, Py_ssize_t rows,  \\
                     Py_ssize_t width, double lr, double beta1, double beta2, double eps,  \\
                     double bias_c1, double bias_c2, int threads)                          \\
    {                                                                                      \\
        TAPEFLOW_ADAM_SHARED(T, rows, for (Py_ssize_t r = lo; r < hi; r++)                 \\
            NAME##_row(p + (Py_ssize_t)ids[r] * width, m + (Py_ssize_t)ids[r] * width,     \\
                       v + (Py_ssize_t)ids[r] * width, g + r * width, width, b1, b2, c1, c2, \\
                       step, inv_c2, e));                                                  \\
    }                                                                                      \\
    static void NAME##_all(T* p, T* m, T* v, const T* g, Py_ssize_t n, double lr,          \\
                           double beta1, double beta2, double eps, double bias_c1,         \\
                           double bias_c2, int threads)                                    \\
    {                                                                                      \\
        TAPEFLOW_ADAM_SHARED(T, n, NAME##_row(p + lo, m + lo, v + lo, g + lo, hi - lo, b1, b2, \\
                                            c1, c2, step, inv_c2, e));                     \\
    }
    TAPEFLOW_ADAM_ROWS(tapeflow_adam_rows_f32, float, sqrtf)
    TAPEFLOW_ADAM_ROWS(tapeflow_adam_rows_f64, double, sqrt)

    /* Rows a block of a thread's sums in the array's own dtype (channels.pyx sums alike). */
    #define TAPEFLOW_SUM_ROWS 32
    #if TAPEFLOW_OPENMP
    #define TAPEFLOW_THREAD_ID(t) t = omp_get_thread_num()
    #else
    #define TAPEFLOW_THREAD_ID(t) t = 0
    #endif
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
    }                                                                                      \
    /* The gradient of rows of `cols` numbers, g's rows `stride` numbers apart, y and out    \
       contiguous; each thread also sums its rows of the gradient into its own `cols` sums in \
       double (partial + thread * cols, zeroed): TAPEFLOW_SUM_ROWS rows at a time in T (into  \
       scratch + thread * cols), each block's sums then added in double, in order. */       \
    static void NAME##_grad_sum(const T* g, Py_ssize_t stride, const T* y, T* out,         \
                                double* partial, T* scratch, Py_ssize_t rows,              \
                                Py_ssize_t cols, int threads)                              \
    {                                                                                      \
        const unsigned int env = tapeflow_fpenv_get();                                    \
        _Pragma("omp parallel num_threads(threads) if(threads > 1)")                       \
        {                                                                                  \
            const unsigned int own = tapeflow_fpenv_swap(env);                             \
            Py_ssize_t lo = 0, hi = rows, t = 0;                                           \
            TAPEFLOW_SHARE_OF(lo, hi, rows);                                               \
            TAPEFLOW_THREAD_ID(t);                                                         \
            double* restrict acc = partial + t * cols;                                     \
            T* restrict block = scratch + t * cols;                                        \
            for (Py_ssize_t r0 = lo; r0 < hi; r0 += TAPEFLOW_SUM_ROWS) {                   \
                const Py_ssize_t r1 = hi - r0 < TAPEFLOW_SUM_ROWS ? hi : r0 + TAPEFLOW_SUM_ROWS; \
                for (Py_ssize_t q = 0; q < cols; q++) block[q] = 0;                        \
                for (Py_ssize_t r = r0; r < r1; r++) {                                     \
                    const T* restrict gr = g + r * stride;                                 \
                    const T* restrict yr = y + r * cols;                                   \
                    T* restrict o = out + r * cols;                                        \
                    for (Py_ssize_t q = 0; q < cols; q++) {                                \
                        const T gi = gr[q], v = yr[q] > 0 ? gi : (T)0;  /* a select */    \
                        o[q] = v;                                                          \
                        block[q] += v;                                                     \
                    }                                                                      \
                }                                                                          \
                for (Py_ssize_t q = 0; q < cols; q++) acc[q] += block[q];                  \
            }                                                                              \
            tapeflow_fpenv_swap(own);                                                      \
        }                                                                                  \
    }                                                                                      \
    /* The gradient for g whose rows of `cols` numbers lie `stride` numbers apart (a slice  \
       along the last axis of a larger array), y and out contiguous. */                    \
    static void NAME##_grad_rows(const T* g, Py_ssize_t stride, const T* y, T* out,        \
                                 Py_ssize_t rows, Py_ssize_t cols, int threads)            \
    {                                                                                      \
        const unsigned int env = tapeflow_fpenv_get();                                    \
        _Pragma("omp parallel num_threads(threads) if(threads > 1)")                       \
        {                                                                                  \
            const unsigned int own = tapeflow_fpenv_swap(env);                             \
            Py_ssize_t lo = 0, hi = rows;                                                  \
            TAPEFLOW_SHARE_OF(lo, hi, rows);                                               \
            for (Py_ssize_t r = lo; r < hi; r++)                                           \
                NAME##_grad_chunk(g + r * stride, y + r * cols, out + r * cols, cols);     \
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
    void tapeflow_adam_rows_f32(float* p, float* m, float* v, const long long* ids, const float* g,
                                Py_ssize_t rows, Py_ssize_t width, double lr, double beta1, double beta2,
                                double eps, double bias_c1, double bias_c2, int threads) noexcept nogil
    void tapeflow_adam_rows_f64(double* p, double* m, double* v, const long long* ids, const double* g,
                                Py_ssize_t rows, Py_ssize_t width, double lr, double beta1, double beta2,
                                double eps, double bias_c1, double bias_c2, int threads) noexcept nogil
    void tapeflow_adam_rows_f32_all(float* p, float* m, float* v, const float* g, Py_ssize_t n, double lr,
                                    double beta1, double beta2, double eps, double bias_c1, double bias_c2,
                                    int threads) noexcept nogil
    void tapeflow_adam_rows_f64_all(double* p, double* m, double* v, const double* g, Py_ssize_t n, double lr,
                                    double beta1, double beta2, double eps, double bias_c1, double bias_c2,
                                    int threads) noexcept nogil
    void tapeflow_relu_f32(const float* x, float* out, Py_ssize_t n, int threads) noexcept nogil
    void tapeflow_relu_f64(const double* x, double* out, Py_ssize_t n, int threads) noexcept nogil
    void tapeflow_relu_f32_grad(const float* g, const float* y, float* out, Py_ssize_t n,
                                int threads) noexcept nogil
    void tapeflow_relu_f64_grad(const double* g, const double* y, double* out, Py_ssize_t n,
                                int threads) noexcept nogil
    void tapeflow_relu_f32_grad_sum(const float* g, Py_ssize_t stride, const float* y, float* out,
                                    double* partial, float* scratch, Py_ssize_t rows, Py_ssize_t cols,
                                    int threads) noexcept nogil
    void tapeflow_relu_f64_grad_sum(const double* g, Py_ssize_t stride, const double* y, double* out,
                                    double* partial, double* scratch, Py_ssize_t rows, Py_ssize_t cols,
                                    int threads) noexcept nogil
    void tapeflow_relu_f32_grad_rows(const float* g, Py_ssize_t stride, const float* y, float* out,
                                     Py_ssize_t rows, Py_ssize_t cols, int threads) noexcept nogil
    void tapeflow_relu_f64_grad_rows(const double* g, Py_ssize_t stride, const double* y, double* out,
                                     Py_ssize_t rows, Py_ssize_t cols, int threads) noexcept nogil

# Below this many elements the parallel region costs more than it saves (Adam's square root
# and division make each element dearer than a relu's select).
cdef Py_ssize_t _ADAM_PARALLEL_MIN = 1 << 15
cdef Py_ssize_t _RELU_PARALLEL_MIN = 1 << 17
# Where relu_bias_grad shares its rows among threads: the bound of channels.sum_leading, so that
# both add the same rows on each thread.
cdef Py_ssize_t _SUM_PARALLEL_MIN = 1 << 18


def _same_floats(name, **arrays) -> tuple:
    """The arrays as C-contiguous numpy arrays (strided ones copied), once each is found to be
    a numpy array of the first one's shape and float32/float64 dtype; else a clear error."""
    first_label, first = next(iter(arrays.items()))
    for label, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name}: {label} must be a numpy array, got {type(array)}")
        if array.dtype not in (np.float32, np.float64) or array.dtype != first.dtype:
            raise TypeError(f"{name}: {label} has dtype {array.dtype}; {', '.join(arrays)} "
                            f"need one float32 or float64 dtype ({first_label} is {first.dtype})")
        if array.shape != first.shape:
            raise ValueError(f"{name}: shapes differ: {label} has shape {array.shape}, {first_label} {first.shape}")
    return tuple(np.asarray(a, order="C") for a in arrays.values())


cdef inline bint _plain_float(object x) noexcept:
    """x an exact numpy array, C-contiguous, of float32 or float64."""
    if not cnp.PyArray_CheckExact(x):
        return False
    cdef int kind = cnp.PyArray_TYPE(<cnp.ndarray>x)
    return (kind == cnp.NPY_FLOAT32 or kind == cnp.NPY_FLOAT64) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x)


cdef inline bint _plain_like(object x, cnp.ndarray first) noexcept:
    """x an exact C-contiguous numpy array of `first`'s dtype and shape."""
    return (cnp.PyArray_CheckExact(x) and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.PyArray_TYPE(first)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x) and cnp.PyArray_SAMESHAPE(<cnp.ndarray>x, first))


cdef inline cnp.ndarray _empty_like(cnp.ndarray x):
    return cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)


cdef void _adam(cnp.ndarray p, m, v, grad, cnp.ndarray po, mo, vo, double lr, double beta1, double beta2,
                double eps, double bias_c1, double bias_c2):
    """The Adam step from p, m, v and grad into po, mo and vo (checked arrays of one shape and
    float dtype); the three outputs either all new arrays or p, m and v themselves."""
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef int threads = _threads_for(n, _ADAM_PARALLEL_MIN)
    cdef void* pp = cnp.PyArray_DATA(p)
    cdef void* mp = cnp.PyArray_DATA(<cnp.ndarray>m)
    cdef void* vp = cnp.PyArray_DATA(<cnp.ndarray>v)
    cdef void* gp = cnp.PyArray_DATA(<cnp.ndarray>grad)
    cdef void* pop = cnp.PyArray_DATA(po)
    cdef void* mop = cnp.PyArray_DATA(<cnp.ndarray>mo)
    cdef void* vop = cnp.PyArray_DATA(<cnp.ndarray>vo)
    cdef bint single = cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32, in_place = pop == pp
    if not n:
        return
    with nogil:
        if single and in_place:
            tapeflow_adam_rows_f32_all(<float*>pp, <float*>mp, <float*>vp, <const float*>gp, n, lr, beta1, beta2,
                                       eps, bias_c1, bias_c2, threads)
        elif in_place:
            tapeflow_adam_rows_f64_all(<double*>pp, <double*>mp, <double*>vp, <const double*>gp, n, lr, beta1, beta2,
                                       eps, bias_c1, bias_c2, threads)
        elif single:
            tapeflow_adam_f32(<const float*>pp, <const float*>mp, <const float*>vp, <const float*>gp, <float*>pop,
                              <float*>mop, <float*>vop, n, lr, beta1, beta2, eps, bias_c1, bias_c2, threads)
        else:
            tapeflow_adam_f64(<const double*>pp, <const double*>mp, <const double*>vp, <const double*>gp,
                              <double*>pop, <double*>mop, <double*>vop, n, lr, beta1, beta2, eps, bias_c1, bias_c2,
                              threads)


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
    if not (_plain_float(param) and _plain_like(m, <cnp.ndarray>param) and _plain_like(v, <cnp.ndarray>param)
            and _plain_like(grad, <cnp.ndarray>param)):
        param, m, v, grad = _same_floats("adam_update", param=param, m=m, v=v, grad=grad)
    cdef cnp.ndarray p = <cnp.ndarray>param, mo = _empty_like(p), vo = _empty_like(p), po = _empty_like(p)
    _adam(p, m, v, grad, po, mo, vo, lr, beta1, beta2, eps, bias_c1, bias_c2)
    return po, mo, vo


def adam_update_in_place(param, m, v, grad, double lr, double beta1, double beta2, double eps,
                         double bias_c1, double bias_c2):
    """`adam_update` writing param, m and v themselves (C-contiguous and writeable), with the
    same arithmetic.

    >>> import numpy as np
    >>> p, m, v = np.ones(2), np.zeros(2), np.zeros(2)
    >>> adam_update_in_place(p, m, v, np.array([1.0, -1.0]), 0.1, 0.9, 0.999, 0.0, 0.1, 0.001)
    >>> np.round(p, 6).tolist()
    [0.9, 1.1]
    """
    if not (_plain_float(param) and _plain_like(m, <cnp.ndarray>param) and _plain_like(v, <cnp.ndarray>param)
            and _plain_like(grad, <cnp.ndarray>param)):
        _, _, _, grad = _same_floats("adam_update_in_place", param=param, m=m, v=v, grad=grad)
        if not (_plain_float(param) and _plain_like(m, <cnp.ndarray>param) and _plain_like(v, <cnp.ndarray>param)):
            raise ValueError("adam_update_in_place: param, m and v must be C-contiguous, to be written in place")
    cdef cnp.ndarray p = <cnp.ndarray>param
    if not (cnp.PyArray_ISWRITEABLE(p) and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>m)
            and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>v)):
        raise ValueError("adam_update_in_place: param, m and v must be writeable")
    _adam(p, m, v, grad, p, m, v, lr, beta1, beta2, eps, bias_c1, bias_c2)


def adam_update_rows(param, m, v, ids, grad, double lr, double beta1, double beta2, double eps,
                     double bias_c1, double bias_c2):
    """`adam_update` on the rows `ids` of param, m and v, in place (the tables are written, not
    copied); grad[i] is the gradient of row ids[i]. The ids must lie in [0, rows) and be distinct:
    a repeated one raises before anything is written.

    >>> import numpy as np
    >>> p, m, v = np.ones((3, 2)), np.zeros((3, 2)), np.zeros((3, 2))
    >>> adam_update_rows(p, m, v, np.array([2]), np.array([[1.0, -1.0]]), 0.1, 0.9, 0.999, 0.0, 0.1, 0.001)
    >>> np.round(p, 6).tolist()
    [[1.0, 1.0], [1.0, 1.0], [0.9, 1.1]]
    """
    if not (_plain_float(param) and _plain_like(m, <cnp.ndarray>param) and _plain_like(v, <cnp.ndarray>param)):
        _same_floats("adam_update_rows", param=param, m=m, v=v)
        raise ValueError("adam_update_rows: param, m and v must be C-contiguous, to be written in place")
    cdef cnp.ndarray p = <cnp.ndarray>param
    if cnp.PyArray_NDIM(p) < 1 or not cnp.PyArray_ISWRITEABLE(p):
        raise ValueError(f"adam_update_rows: param of shape {param.shape} must be a writeable table of rows")
    cdef Py_ssize_t num = cnp.PyArray_DIM(p, 0)
    cdef Py_ssize_t width = cnp.PyArray_SIZE(p) // num if num else 0
    if not (cnp.PyArray_CheckExact(ids) and cnp.PyArray_TYPE(<cnp.ndarray>ids) == cnp.NPY_INT64
            and cnp.PyArray_NDIM(<cnp.ndarray>ids) == 1 and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>ids)):
        raise TypeError(f"adam_update_rows: ids must be a contiguous 1-D int64 array, got {type(ids).__name__} "
                        f"{getattr(ids, 'dtype', '')}{list(getattr(ids, 'shape', ()))}")
    cdef Py_ssize_t rows = cnp.PyArray_DIM(<cnp.ndarray>ids, 0)
    if not (cnp.PyArray_CheckExact(grad) and cnp.PyArray_TYPE(<cnp.ndarray>grad) == cnp.PyArray_TYPE(p)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>grad) and cnp.PyArray_SIZE(<cnp.ndarray>grad) == rows * width
            and (cnp.PyArray_NDIM(<cnp.ndarray>grad) == 0 or cnp.PyArray_DIM(<cnp.ndarray>grad, 0) == rows)):
        raise ValueError(f"adam_update_rows: gradient rows {getattr(grad, 'dtype', type(grad).__name__)}"
                         f"{list(getattr(grad, 'shape', ()))} for {rows} ids into a table "
                         f"{param.dtype}{list(param.shape)}")
    cdef const long long* ip = <const long long*>cnp.PyArray_DATA(<cnp.ndarray>ids)
    cdef unsigned char* seen = <unsigned char*>calloc(max(num, 1), 1)
    cdef Py_ssize_t r, bad = -1
    cdef long long at
    if seen == NULL:
        raise MemoryError()
    with nogil:
        for r in range(rows):
            at = ip[r]
            if at < 0 or at >= num or seen[at]:
                bad = r
                break
            seen[at] = 1
    free(seen)
    if bad >= 0:
        at = ip[bad]
        if at < 0 or at >= num:
            raise IndexError(f"adam_update_rows: id {at} is out of range for {num} rows")
        raise ValueError(f"adam_update_rows: id {at} repeats; the ids must be distinct")
    cdef int threads = _threads_for(rows * width, _ADAM_PARALLEL_MIN)
    cdef void* pp = cnp.PyArray_DATA(p)
    cdef void* mp = cnp.PyArray_DATA(<cnp.ndarray>m)
    cdef void* vp = cnp.PyArray_DATA(<cnp.ndarray>v)
    cdef void* gp = cnp.PyArray_DATA(<cnp.ndarray>grad)
    cdef bint single = cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32
    if rows and width:
        with nogil:
            if single:
                tapeflow_adam_rows_f32(<float*>pp, <float*>mp, <float*>vp, ip, <const float*>gp, rows, width, lr,
                                       beta1, beta2, eps, bias_c1, bias_c2, threads)
            else:
                tapeflow_adam_rows_f64(<double*>pp, <double*>mp, <double*>vp, ip, <const double*>gp, rows, width,
                                       lr, beta1, beta2, eps, bias_c1, bias_c2, threads)


def relu(x):
    """max(x, 0) in one pass, equal to np.maximum(x, 0) (NaN kept, -0.0 made 0.0).

    >>> import numpy as np
    >>> relu(np.array([-1.0, 0.5, np.nan])).tolist()
    [0.0, 0.5, nan]
    """
    if not _plain_float(x):
        (x,) = _same_floats("relu", x=x)
    cdef cnp.ndarray xa = <cnp.ndarray>x, out = _empty_like(xa)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(xa)
    cdef int threads = _threads_for(n, _RELU_PARALLEL_MIN)
    cdef void* xp = cnp.PyArray_DATA(xa)
    cdef void* op = cnp.PyArray_DATA(out)
    cdef bint single = cnp.PyArray_TYPE(xa) == cnp.NPY_FLOAT32
    if n:
        with nogil:
            if single:
                tapeflow_relu_f32(<const float*>xp, <float*>op, n, threads)
            else:
                tapeflow_relu_f64(<const double*>xp, <double*>op, n, threads)
    return out


def relu_grad(g, y):
    """g where y > 0, else 0: the gradient of relu given its output y.

    >>> import numpy as np
    >>> relu_grad(np.array([1.0, 2.0, 3.0]), np.array([0.0, 4.0, np.nan])).tolist()
    [0.0, 2.0, 0.0]
    """
    cdef Py_ssize_t stride = _row_stride(g, y)
    if stride:  # a slice of a wider gradient: read in place
        return _relu_grad_rows(<cnp.ndarray>g, stride, <cnp.ndarray>y)
    if not (_plain_float(g) and _plain_like(y, <cnp.ndarray>g)):
        g, y = _same_floats("relu_grad", g=g, y=y)
    cdef cnp.ndarray ga = <cnp.ndarray>g, out = _empty_like(ga)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(ga)
    cdef int threads = _threads_for(n, _RELU_PARALLEL_MIN)
    cdef void* gp = cnp.PyArray_DATA(ga)
    cdef void* yp = cnp.PyArray_DATA(<cnp.ndarray>y)
    cdef void* op = cnp.PyArray_DATA(out)
    cdef bint single = cnp.PyArray_TYPE(ga) == cnp.NPY_FLOAT32
    if n:
        with nogil:
            if single:
                tapeflow_relu_f32_grad(<const float*>gp, <const float*>yp, <float*>op, n, threads)
            else:
                tapeflow_relu_f64_grad(<const double*>gp, <const double*>yp, <double*>op, n, threads)
    return out


def relu_bias_grad(g, y):
    """relu_grad(g, y) and its sums over every axis but the last (a bias's gradient), in one
    pass: each thread sums its share of the rows in blocks of 32 in g's dtype, the blocks in
    float64, and the threads' sums are added in order, as `channels.sum_leading` does with the
    same shares (a frozen step's bias gradient is the eager one's). g may be a slice along the
    last axis of a wider array (read where it lies).

    >>> import numpy as np
    >>> gz, db = relu_bias_grad(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 0.0], [1.0, 1.0]]))
    >>> gz.tolist(), db.tolist()
    ([[1.0, 0.0], [3.0, 4.0]], [4.0, 4.0])
    """
    cdef Py_ssize_t stride = _row_stride(g, y)
    if stride == 0 and not (_plain_float(g) and _plain_like(y, <cnp.ndarray>g)):
        g, y = _same_floats("relu_bias_grad", g=g, y=y)
    cdef cnp.ndarray ga = <cnp.ndarray>g, ya = <cnp.ndarray>y
    cdef int nd = cnp.PyArray_NDIM(ya)
    if nd < 1:
        raise ValueError("relu_bias_grad: g and y must have at least one axis, got scalars")
    cdef Py_ssize_t cols = cnp.PyArray_DIMS(ya)[nd - 1], n = cnp.PyArray_SIZE(ya)
    cdef Py_ssize_t rows = n // cols if cols else 0, q, t
    if stride == 0:
        stride = cols
    cdef cnp.ndarray out = _empty_like(ya)
    cdef double[::1] total = np.zeros(cols)
    if rows == 0:
        return out, np.asarray(total).astype(out.dtype)
    cdef int threads = <int>max(1, min(<Py_ssize_t>_threads_for(n, _SUM_PARALLEL_MIN), rows))
    cdef double* partial = <double*>calloc(threads * cols, sizeof(double))
    cdef void* scratch = malloc(threads * cols * cnp.PyArray_ITEMSIZE(ya))
    if partial == NULL or scratch == NULL:
        free(partial)
        free(scratch)
        raise MemoryError("relu_bias_grad: cannot allocate the partial sums")
    cdef void* gp = cnp.PyArray_DATA(ga)
    cdef void* yp = cnp.PyArray_DATA(ya)
    cdef void* op = cnp.PyArray_DATA(out)
    cdef bint single = cnp.PyArray_TYPE(ya) == cnp.NPY_FLOAT32
    with nogil:
        if single:
            tapeflow_relu_f32_grad_sum(<const float*>gp, stride, <const float*>yp, <float*>op, partial,
                                       <float*>scratch, rows, cols, threads)
        else:
            tapeflow_relu_f64_grad_sum(<const double*>gp, stride, <const double*>yp, <double*>op, partial,
                                       <double*>scratch, rows, cols, threads)
        for t in range(threads):
            for q in range(cols):
                total[q] += partial[t * cols + q]
    free(partial)
    free(scratch)
    return out, np.asarray(total).astype(out.dtype)


cdef Py_ssize_t _row_stride(object g_obj, object y_obj):
    """For a non-contiguous NumPy array g of the plain float array y's shape and dtype whose
    last axis is contiguous and whose rows of it lie evenly apart (a slice along the last axis
    of a C-contiguous array, as `split` gives): the distance between rows in numbers; 0 for
    any other g."""
    if not (cnp.PyArray_CheckExact(g_obj) and _plain_float(y_obj)):
        return 0
    cdef cnp.ndarray g = <cnp.ndarray>g_obj, y = <cnp.ndarray>y_obj
    cdef int nd = cnp.PyArray_NDIM(g), k
    if (cnp.PyArray_IS_C_CONTIGUOUS(g) or nd < 2 or cnp.PyArray_TYPE(g) != cnp.PyArray_TYPE(y)
            or not cnp.PyArray_SAMESHAPE(g, y) or cnp.PyArray_SIZE(g) == 0):
        return 0
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(g)
    cdef cnp.npy_intp* strides = cnp.PyArray_STRIDES(g)
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(g), row = strides[nd - 2], expected = row
    if strides[nd - 1] != item or row % item or row < dims[nd - 1] * item:
        return 0
    for k in range(nd - 2, -1, -1):
        if dims[k] != 1 and strides[k] != expected:
            return 0
        expected *= dims[k]
    return row // item


cdef cnp.ndarray _relu_grad_rows(cnp.ndarray g, Py_ssize_t stride, cnp.ndarray y):
    """relu_grad for g with rows `stride` numbers apart (see `_row_stride`), y contiguous."""
    cdef cnp.ndarray out = _empty_like(y)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(y), cols = cnp.PyArray_DIMS(y)[cnp.PyArray_NDIM(y) - 1]
    cdef Py_ssize_t rows = n // cols
    cdef int threads = _threads_for(n, _RELU_PARALLEL_MIN)
    cdef void* gp = cnp.PyArray_DATA(g)
    cdef void* yp = cnp.PyArray_DATA(y)
    cdef void* op = cnp.PyArray_DATA(out)
    with nogil:
        if cnp.PyArray_TYPE(y) == cnp.NPY_FLOAT32:
            tapeflow_relu_f32_grad_rows(<const float*>gp, stride, <const float*>yp, <float*>op, rows, cols, threads)
        else:
            tapeflow_relu_f64_grad_rows(<const double*>gp, stride, <const double*>yp, <double*>op, rows, cols,
                                        threads)
    return out
