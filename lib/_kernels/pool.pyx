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


cdef inline bint _better(floating v, floating best) noexcept nogil:
    """Max order with ties to the first seen, and NaN beating every number.

    Bitwise, not short-circuit, so that loops using it compile to selects, not branches.
    """
    return (v > best) | ((v != v) & (best == best))


cdef void _max_forward_image(const Window* g, const floating* x, floating* y) noexcept nogil:
    cdef Py_ssize_t oh, ow, ih, iw, c, ih0, ih1, iw0, iw1
    cdef const floating* src
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &ih0, &ih1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &iw0, &iw1)
            if ih0 >= ih1 or iw0 >= iw1:
                for c in range(g.c):
                    y[c] = -INFINITY
            else:
                memcpy(y, x + (ih0 * g.w + iw0) * g.c, g.c * sizeof(floating))
                for ih in range(ih0, ih1):
                    for iw in range(iw0, iw1):
                        src = x + (ih * g.w + iw) * g.c
                        for c in range(g.c):
                            y[c] = src[c] if _better(src[c], y[c]) else y[c]
            y += g.c


cdef void _max_backward_image(const Window* g, const floating* x, const floating* dy,
                              floating* dx, floating* best, int* best_at) noexcept nogil:
    """dx (one image, zeroed here) += each window's dy at its max, found again from x.

    The scan runs over the window's positions with the channels innermost, so that every
    read is contiguous; `best` and `best_at` hold the running max and its position for
    each channel.
    """
    cdef Py_ssize_t oh, ow, ih, iw, c, ih0, ih1, iw0, iw1
    cdef int at
    cdef bint take
    cdef const floating* src
    cdef floating v
    memset(dx, 0, g.h * g.w * g.c * sizeof(floating))
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &ih0, &ih1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &iw0, &iw1)
            if ih0 < ih1 and iw0 < iw1:
                at = <int>(ih0 * g.w + iw0)
                memcpy(best, x + at * g.c, g.c * sizeof(floating))
                for c in range(g.c):
                    best_at[c] = at
                for ih in range(ih0, ih1):
                    for iw in range(iw0, iw1):
                        at = <int>(ih * g.w + iw)
                        src = x + at * g.c
                        for c in range(g.c):
                            v = src[c]
                            take = _better(v, best[c])
                            best[c] = v if take else best[c]
                            best_at[c] = at if take else best_at[c]
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
