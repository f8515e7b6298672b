"""Max and average pooling on NHWC images, parallel over images.

Padding is explicit (``pad_top``, ``pad_left`` and the output size). Padded positions take
no part: they are never the max, and an average divides by the number of real inputs in
its window (TensorFlow semantics). A window with no real input gives -inf (max) or 0 (avg)
and passes no gradient.
"""

include "_common.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport parallel, prange
from libc.math cimport INFINITY
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset


cdef extern from *:
    """
    #if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
    #define TAPEFLOW_POOL_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define TAPEFLOW_POOL_CLONES
    #endif
    /* One window [ih0, ih1) x [iw0, iw1) of an image w pixels wide with c channels: the max of
       each channel (ties to the first seen in row-major order, NaN beating every number) into
       best, and with best_at its pixel's position. Selects over rows of channels, so that
       the loops vectorize. */
    #define TAPEFLOW_POOL_WINDOW(SUFFIX, T)                                                      \
    TAPEFLOW_POOL_CLONES static void tapeflow_max_window_##SUFFIX(                               \
        T *restrict best, int *restrict best_at, const T *restrict x, Py_ssize_t w, Py_ssize_t c, \
        Py_ssize_t ih0, Py_ssize_t ih1, Py_ssize_t iw0, Py_ssize_t iw1)                          \
    {                                                                                            \
        const T *first = x + (ih0 * w + iw0) * c;                                                \
        for (Py_ssize_t k = 0; k < c; k++) best[k] = first[k];                                   \
        if (best_at) for (Py_ssize_t k = 0; k < c; k++) best_at[k] = (int)(ih0 * w + iw0);       \
        for (Py_ssize_t ih = ih0; ih < ih1; ih++)                                                \
            for (Py_ssize_t iw = ih == ih0 ? iw0 + 1 : iw0; iw < iw1; iw++) {                    \
                const T *src = x + (ih * w + iw) * c;                                            \
                const int at = (int)(ih * w + iw);                                               \
                if (best_at) {                                                                   \
                    for (Py_ssize_t k = 0; k < c; k++) {                                         \
                        const T v = src[k], b = best[k];                                         \
                        const int take = (v > b) | ((v != v) & (b == b));                        \
                        best[k] = take ? v : b;                                                  \
                        best_at[k] = take ? at : best_at[k];                                     \
                    }                                                                            \
                } else {                                                                         \
                    for (Py_ssize_t k = 0; k < c; k++) {                                         \
                        const T v = src[k], b = best[k];                                         \
                        const int take = (v > b) | ((v != v) & (b == b));                        \
                        best[k] = take ? v : b;                                                  \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
    }
    TAPEFLOW_POOL_WINDOW(f32, float)
    TAPEFLOW_POOL_WINDOW(f64, double)
    """
    void tapeflow_max_window_f32(float* best, int* best_at, const float* x, Py_ssize_t w, Py_ssize_t c,
                                 Py_ssize_t ih0, Py_ssize_t ih1, Py_ssize_t iw0, Py_ssize_t iw1) noexcept nogil
    void tapeflow_max_window_f64(double* best, int* best_at, const double* x, Py_ssize_t w, Py_ssize_t c,
                                 Py_ssize_t ih0, Py_ssize_t ih1, Py_ssize_t iw0, Py_ssize_t iw1) noexcept nogil


cdef inline void _max_window(floating* best, int* best_at, const floating* x, const Window* g, Py_ssize_t ih0,
                             Py_ssize_t ih1, Py_ssize_t iw0, Py_ssize_t iw1) noexcept nogil:
    """Each channel's max over one window of image x into best (and its position into best_at, unless NULL)."""
    if floating is float:
        tapeflow_max_window_f32(best, best_at, x, g.w, g.c, ih0, ih1, iw0, iw1)
    else:
        tapeflow_max_window_f64(best, best_at, x, g.w, g.c, ih0, ih1, iw0, iw1)


cdef struct Window:
    Py_ssize_t n, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl


cdef int _pool_threads(const Window* g) noexcept nogil:
    """Threads for a pooling over g's images: one below 2^16 window reads (or while the cores are busy and
    it is small), never more than the images."""
    cdef Py_ssize_t work = g.n * g.oh * g.ow * g.c * g.kh * g.kw
    return <int>max(1, min(<Py_ssize_t>_threads_for(work, 1 << 16), g.n))


cdef Window _window(str op, tuple x_shape, int kh, int kw, int sh, int sw, int pad_top,
                    int pad_left, Py_ssize_t out_h, Py_ssize_t out_w) except *:
    if kh < 1 or kw < 1 or sh < 1 or sw < 1:
        raise ValueError(f"{op}: window ({kh}, {kw}) and strides ({sh}, {sw}) must be >= 1")
    if out_h < 0 or out_w < 0:
        raise ValueError(f"{op}: output size must be >= 0, got ({out_h}, {out_w})")
    cdef Window g
    g.n, g.h, g.w, g.c = x_shape
    g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl = out_h, out_w, kh, kw, sh, sw, pad_top, pad_left
    return g


cdef inline tuple _shape4(const floating[:, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3])


cdef inline void _span(Py_ssize_t o, Py_ssize_t stride, Py_ssize_t pad, Py_ssize_t k,
                       Py_ssize_t size, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Input rows [lo, hi) that window o covers, clipped to the image."""
    cdef Py_ssize_t start = o * stride - pad
    lo[0] = max(start, 0)
    hi[0] = min(start + k, size)


cdef void _max_forward_image(const Window* g, const floating* x, floating* y) noexcept nogil:
    cdef Py_ssize_t oh, ow, c, ih0, ih1, iw0, iw1
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &ih0, &ih1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &iw0, &iw1)
            if ih0 >= ih1 or iw0 >= iw1:
                for c in range(g.c):
                    y[c] = -INFINITY
            else:
                _max_window(y, NULL, x, g, ih0, ih1, iw0, iw1)
            y += g.c


cdef void _max_backward_image(const Window* g, const floating* x, const floating* dy,
                              floating* dx, floating* best, int* best_at) noexcept nogil:
    """dx (one image, zeroed here) += each window's dy at its max, found again from x.

    The scan runs over the window's positions with the channels innermost, so that every
    read is contiguous; `best` and `best_at` hold the running max and its position for
    each channel.
    """
    cdef Py_ssize_t oh, ow, c, ih0, ih1, iw0, iw1
    memset(dx, 0, g.h * g.w * g.c * sizeof(floating))
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &ih0, &ih1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &iw0, &iw1)
            if ih0 < ih1 and iw0 < iw1:
                _max_window(best, best_at, x, g, ih0, ih1, iw0, iw1)
                for c in range(g.c):
                    dx[best_at[c] * g.c + c] += dy[c]
            dy += g.c


cdef void _avg_forward_image(const Window* g, const floating* x, floating* y) noexcept nogil:
    cdef Py_ssize_t oh, ow, ih, iw, c, ih0, ih1, iw0, iw1
    cdef const floating* src
    cdef floating scale
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &ih0, &ih1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &iw0, &iw1)
            for c in range(g.c):
                y[c] = 0
            if ih0 < ih1 and iw0 < iw1:
                for ih in range(ih0, ih1):
                    for iw in range(iw0, iw1):
                        src = x + (ih * g.w + iw) * g.c
                        for c in range(g.c):
                            y[c] += src[c]
                scale = 1.0 / ((ih1 - ih0) * (iw1 - iw0))
                for c in range(g.c):
                    y[c] *= scale
            y += g.c


cdef void _avg_backward_image(const Window* g, const floating* dy, floating* dx) noexcept nogil:
    cdef Py_ssize_t oh, ow, ih, iw, c, ih0, ih1, iw0, iw1
    cdef floating* dst
    cdef floating scale
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &ih0, &ih1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &iw0, &iw1)
            if ih0 < ih1 and iw0 < iw1:
                scale = 1.0 / ((ih1 - ih0) * (iw1 - iw0))
                for ih in range(ih0, ih1):
                    for iw in range(iw0, iw1):
                        dst = dx + (ih * g.w + iw) * g.c
                        for c in range(g.c):
                            dst[c] += dy[c] * scale
            dy += g.c


def max_pool2d_forward(const floating[:, :, :, ::1] x, int kh, int kw, int sh, int sw,
                       int pad_top, int pad_left, int out_h, int out_w):
    """y[N, out_h, out_w, C]: the max over each window of x[N, H, W, C]."""
    cdef Window g = _window("max_pool2d_forward", _shape4(x), kh, kw, sh, sw, pad_top,
                            pad_left, out_h, out_w)
    y = np.empty((g.n, g.oh, g.ow, g.c), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, ::1] yv = y
    cdef Py_ssize_t n
    if y.size == 0:
        return y
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=_pool_threads(&g)):
        own = tapeflow_fpenv_swap(env)
        for n in prange(g.n, schedule="static"):
            _max_forward_image(&g, &x[n, 0, 0, 0], &yv[n, 0, 0, 0])
        tapeflow_fpenv_swap(own)
    return y


def max_pool2d_backward(const floating[:, :, :, ::1] x, const floating[:, :, :, ::1] dy,
                        int kh, int kw, int sh, int sw, int pad_top, int pad_left):
    """dx[N, H, W, C]: dy routed to each window's first max (row-major window order)."""
    cdef Window g = _window("max_pool2d_backward", _shape4(x), kh, kw, sh, sw, pad_top,
                            pad_left, dy.shape[1], dy.shape[2])
    if dy.shape[0] != g.n or dy.shape[3] != g.c:
        raise ValueError(f"max_pool2d_backward: dy {_shape4(dy)} does not match x {_shape4(x)}")
    if g.h * g.w >= 1 << 31:
        raise ValueError(f"max_pool2d_backward: images of {g.h}x{g.w} are too large")
    dtype = np.float32 if floating is float else np.float64
    if dy.size == 0:
        return np.zeros((g.n, g.h, g.w, g.c), dtype=dtype)
    dx = np.empty((g.n, g.h, g.w, g.c), dtype=dtype)  # each image zeroed by its thread
    if dx.size == 0:
        return dx
    cdef floating[:, :, :, ::1] dxv = dx
    cdef Py_ssize_t n
    cdef floating* best = NULL
    cdef int* best_at = NULL
    cdef int failed = 0
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=_pool_threads(&g)):
        own = tapeflow_fpenv_swap(env)
        best = <floating*>malloc(g.c * sizeof(floating))
        best_at = <int*>malloc(g.c * sizeof(int))
        if best == NULL or best_at == NULL:
            failed_p[0] = 1
        for n in prange(g.n, schedule="static"):
            if best != NULL and best_at != NULL:
                _max_backward_image(&g, &x[n, 0, 0, 0], &dy[n, 0, 0, 0], &dxv[n, 0, 0, 0],
                                    best, best_at)
        free(best)
        free(best_at)
        tapeflow_fpenv_swap(own)
    if failed:
        raise MemoryError("max_pool2d_backward: cannot allocate scratch space")
    return dx


def avg_pool2d_forward(const floating[:, :, :, ::1] x, int kh, int kw, int sh, int sw,
                       int pad_top, int pad_left, int out_h, int out_w):
    """y[N, out_h, out_w, C]: the mean of the real (unpadded) inputs in each window."""
    cdef Window g = _window("avg_pool2d_forward", _shape4(x), kh, kw, sh, sw, pad_top,
                            pad_left, out_h, out_w)
    y = np.empty((g.n, g.oh, g.ow, g.c), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, ::1] yv = y
    cdef Py_ssize_t n
    if y.size == 0:
        return y
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=_pool_threads(&g)):
        own = tapeflow_fpenv_swap(env)
        for n in prange(g.n, schedule="static"):
            _avg_forward_image(&g, &x[n, 0, 0, 0], &yv[n, 0, 0, 0])
        tapeflow_fpenv_swap(own)
    return y


def avg_pool2d_backward(const floating[:, :, :, ::1] dy, int in_h, int in_w, int kh, int kw,
                        int sh, int sw, int pad_top, int pad_left):
    """dx[N, in_h, in_w, C]: each window's dy spread evenly over its real inputs."""
    if in_h < 0 or in_w < 0:
        raise ValueError(f"avg_pool2d_backward: input size must be >= 0, got ({in_h}, {in_w})")
    cdef Window g = _window("avg_pool2d_backward", (dy.shape[0], in_h, in_w, dy.shape[3]),
                            kh, kw, sh, sw, pad_top, pad_left, dy.shape[1], dy.shape[2])
    dx = np.zeros((g.n, g.h, g.w, g.c), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, ::1] dxv = dx
    cdef Py_ssize_t n
    if dx.size == 0 or dy.size == 0:
        return dx
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=_pool_threads(&g)):
        own = tapeflow_fpenv_swap(env)
        for n in prange(g.n, schedule="static"):
            _avg_backward_image(&g, &dy[n, 0, 0, 0], &dxv[n, 0, 0, 0])
        tapeflow_fpenv_swap(own)
    return dx
