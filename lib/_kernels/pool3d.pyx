"""Max and average pooling on NDHWC volumes.

Padding is explicit (``pads`` = (front, top, left) and the output size). Padded positions
take no part: they are never the max, and an average divides by the number of real inputs
in its window (TensorFlow semantics). A window with no real input gives -inf (max) or 0
(avg) and passes no gradient.

The forward passes run in parallel over output planes (n, od). The backward passes do too
when the windows of neighbouring planes do not overlap (depth window <= depth stride), and
over volumes otherwise, so that no two threads add into the same input cell. Small poolings
run on the calling thread alone.
"""

include "_common.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport parallel, prange
from libc.math cimport INFINITY

# Below this many window reads a pooling runs on one thread.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 22


def _set_parallel_min(Py_ssize_t n):
    """Change the size below which work runs on one thread and return the old one (tests use 0)."""
    global _PARALLEL_MIN
    old, _PARALLEL_MIN = _PARALLEL_MIN, max(0, n)
    return old


cdef struct Window:
    Py_ssize_t n, d, h, w, c, od, oh, ow, kd, kh, kw, sd, sh, sw, pf, pt, pl


cdef inline tuple _shape5(const floating[:, :, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3], a.shape[4])


cdef Window _window(str op, tuple x_shape, tuple ksize, tuple strides, tuple pads,
                    tuple out) except *:
    if len(ksize) != 3 or len(strides) != 3 or len(pads) != 3 or len(out) != 3:
        raise ValueError(f"{op}: window, strides, pads and output size must be three ints each")
    if min(ksize) < 1 or min(strides) < 1:
        raise ValueError(f"{op}: window {ksize} and strides {strides} must be >= 1")
    if min(out) < 0 or min(pads) < 0:
        raise ValueError(f"{op}: output size and pads must be >= 0, got {out} and {pads}")
    cdef Window g
    g.n, g.d, g.h, g.w, g.c = x_shape
    g.kd, g.kh, g.kw = ksize
    g.sd, g.sh, g.sw = strides
    g.pf, g.pt, g.pl = pads
    g.od, g.oh, g.ow = out
    return g


cdef int _threads(const Window* g) noexcept:
    cdef Py_ssize_t work = g.n * g.od * g.oh * g.ow * g.kd * g.kh * g.kw * g.c
    return _threads_for(work, _PARALLEL_MIN)


cdef inline void _span(Py_ssize_t o, Py_ssize_t stride, Py_ssize_t pad, Py_ssize_t k,
                       Py_ssize_t size, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Input positions [lo, hi) that window o covers, clipped to the volume."""
    cdef Py_ssize_t start = o * stride - pad
    lo[0] = max(start, 0)
    hi[0] = min(start + k, size)


cdef inline bint _better(floating v, floating best) noexcept nogil:
    """Max order with ties to the first seen, and NaN beating every number."""
    return (v > best) | ((v != v) & (best == best))


cdef void _max_forward_plane(const Window* g, const floating* x, Py_ssize_t od,
                             floating* y) noexcept nogil:
    """y[OH, OW, C] = the maxima of output plane od of one volume x."""
    cdef Py_ssize_t oh, ow, id_, ih, iw, c, d0, d1, h0, h1, w0, w1
    cdef const floating* src
    _span(od, g.sd, g.pf, g.kd, g.d, &d0, &d1)
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &h0, &h1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &w0, &w1)
            for c in range(g.c):
                y[c] = -INFINITY
            if d0 < d1 and h0 < h1 and w0 < w1:
                src = x + ((d0 * g.h + h0) * g.w + w0) * g.c
                for c in range(g.c):
                    y[c] = src[c]
                for id_ in range(d0, d1):
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            src = x + ((id_ * g.h + ih) * g.w + iw) * g.c
                            for c in range(g.c):
                                y[c] = src[c] if _better(src[c], y[c]) else y[c]
            y += g.c


# Channels scanned together by the max-pool gradient: its running maxima live on the stack,
# where the compiler knows they alias nothing, so that the scan vectorizes.
cdef enum:
    _BLOCK = 64


cdef void _max_backward_plane(const Window* g, const floating* x, const floating* dy,
                              Py_ssize_t od, floating* dx) noexcept nogil:
    """dx (one volume) += dy (output plane od) at each window's first max, found again from x."""
    cdef Py_ssize_t oh, ow, id_, ih, iw, c, c0, cb, d0, d1, h0, h1, w0, w1
    cdef int at, first
    cdef bint take
    cdef floating v
    cdef floating best[_BLOCK]
    cdef int best_at[_BLOCK]
    cdef const floating* src
    _span(od, g.sd, g.pf, g.kd, g.d, &d0, &d1)
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &h0, &h1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &w0, &w1)
            if d0 < d1 and h0 < h1 and w0 < w1:
                first = <int>((d0 * g.h + h0) * g.w + w0)
                c0 = 0
                while c0 < g.c:
                    cb = min(<Py_ssize_t>_BLOCK, g.c - c0)
                    for c in range(cb):
                        best[c] = x[first * g.c + c0 + c]
                        best_at[c] = first
                    for id_ in range(d0, d1):
                        for ih in range(h0, h1):
                            for iw in range(w0, w1):
                                at = <int>((id_ * g.h + ih) * g.w + iw)
                                src = x + at * g.c + c0
                                for c in range(cb):
                                    v = src[c]
                                    take = _better(v, best[c])
                                    best[c] = v if take else best[c]
                                    best_at[c] = at if take else best_at[c]
                    for c in range(cb):
                        dx[best_at[c] * g.c + c0 + c] += dy[c0 + c]
                    c0 += _BLOCK
            dy += g.c


cdef void _avg_forward_plane(const Window* g, const floating* x, Py_ssize_t od,
                             floating* y) noexcept nogil:
    cdef Py_ssize_t oh, ow, id_, ih, iw, c, d0, d1, h0, h1, w0, w1
    cdef const floating* src
    cdef floating scale
    _span(od, g.sd, g.pf, g.kd, g.d, &d0, &d1)
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &h0, &h1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &w0, &w1)
            for c in range(g.c):
                y[c] = 0
            if d0 < d1 and h0 < h1 and w0 < w1:
                for id_ in range(d0, d1):
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            src = x + ((id_ * g.h + ih) * g.w + iw) * g.c
                            for c in range(g.c):
                                y[c] += src[c]
                scale = 1.0 / ((d1 - d0) * (h1 - h0) * (w1 - w0))
                for c in range(g.c):
                    y[c] *= scale
            y += g.c


cdef void _avg_backward_plane(const Window* g, const floating* dy, Py_ssize_t od,
                              floating* dx) noexcept nogil:
    cdef Py_ssize_t oh, ow, id_, ih, iw, c, d0, d1, h0, h1, w0, w1
    cdef floating* dst
    cdef floating scale
    _span(od, g.sd, g.pf, g.kd, g.d, &d0, &d1)
    for oh in range(g.oh):
        _span(oh, g.sh, g.pt, g.kh, g.h, &h0, &h1)
        for ow in range(g.ow):
            _span(ow, g.sw, g.pl, g.kw, g.w, &w0, &w1)
            if d0 < d1 and h0 < h1 and w0 < w1:
                scale = 1.0 / ((d1 - d0) * (h1 - h0) * (w1 - w0))
                for id_ in range(d0, d1):
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            dst = dx + ((id_ * g.h + ih) * g.w + iw) * g.c
                            for c in range(g.c):
                                dst[c] += dy[c] * scale
            dy += g.c


def max_pool3d_forward(const floating[:, :, :, :, ::1] x, tuple ksize, tuple strides,
                       tuple pads, tuple out):
    """y[N, OD, OH, OW, C]: the max over each window of x[N, D, H, W, C].

    >>> import numpy as np
    >>> x = np.arange(8.0).reshape(1, 2, 2, 2, 1)
    >>> max_pool3d_forward(x, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)).ravel().tolist()
    [7.0]
    """
    cdef Window g = _window("max_pool3d_forward", _shape5(x), ksize, strides, pads, out)
    y = np.empty((g.n, g.od, g.oh, g.ow, g.c), dtype=np.float32 if floating is float else np.float64)
    if y.size == 0:
        return y
    cdef floating[:, :, :, :, ::1] yv = y
    cdef Py_ssize_t s, planes = g.n * g.od
    cdef int threads = _threads(&g)
    cdef const floating* xp = &x[0, 0, 0, 0, 0] if x.size else NULL
    cdef floating* yp = &yv[0, 0, 0, 0, 0]
    cdef Py_ssize_t volume = g.d * g.h * g.w * g.c, plane = g.oh * g.ow * g.c
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for s in prange(planes, schedule="static"):
            _max_forward_plane(&g, xp + (s // g.od) * volume, s % g.od, yp + s * plane)
        tapeflow_fpenv_swap(own)
    return y


def max_pool3d_backward(const floating[:, :, :, :, ::1] x, const floating[:, :, :, :, ::1] dy,
                        tuple ksize, tuple strides, tuple pads):
    """dx[N, D, H, W, C]: dy routed to each window's first max (row-major window order)."""
    cdef Window g = _window("max_pool3d_backward", _shape5(x), ksize, strides, pads,
                            (dy.shape[1], dy.shape[2], dy.shape[3]))
    if dy.shape[0] != g.n or dy.shape[4] != g.c:
        raise ValueError(f"max_pool3d_backward: dy {_shape5(dy)} does not match x {_shape5(x)}")
    if g.d * g.h * g.w >= 1 << 31:
        raise ValueError(f"max_pool3d_backward: volumes of {g.d}x{g.h}x{g.w} are too large")
    dx = np.zeros((g.n, g.d, g.h, g.w, g.c), dtype=np.float32 if floating is float else np.float64)
    if dx.size == 0 or dy.size == 0:
        return dx
    cdef floating[:, :, :, :, ::1] dxv = dx
    cdef const floating* xp = &x[0, 0, 0, 0, 0]
    cdef const floating* dyp = &dy[0, 0, 0, 0, 0]
    cdef floating* dxp = &dxv[0, 0, 0, 0, 0]
    cdef Py_ssize_t volume = g.d * g.h * g.w * g.c, plane = g.oh * g.ow * g.c
    cdef bint by_plane = g.kd <= g.sd
    cdef Py_ssize_t s, v, units = g.n * g.od if by_plane else g.n
    cdef int threads = _threads(&g)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for s in prange(units, schedule="static"):
            if by_plane:
                _max_backward_plane(&g, xp + (s // g.od) * volume, dyp + s * plane, s % g.od,
                                    dxp + (s // g.od) * volume)
            else:
                for v in range(g.od):
                    _max_backward_plane(&g, xp + s * volume, dyp + (s * g.od + v) * plane, v,
                                        dxp + s * volume)
        tapeflow_fpenv_swap(own)
    return dx


def avg_pool3d_forward(const floating[:, :, :, :, ::1] x, tuple ksize, tuple strides,
                       tuple pads, tuple out):
    """y[N, OD, OH, OW, C]: the mean of the real (unpadded) inputs in each window."""
    cdef Window g = _window("avg_pool3d_forward", _shape5(x), ksize, strides, pads, out)
    y = np.empty((g.n, g.od, g.oh, g.ow, g.c), dtype=np.float32 if floating is float else np.float64)
    if y.size == 0:
        return y
    cdef floating[:, :, :, :, ::1] yv = y
    cdef Py_ssize_t s, planes = g.n * g.od
    cdef int threads = _threads(&g)
    cdef const floating* xp = &x[0, 0, 0, 0, 0] if x.size else NULL
    cdef floating* yp = &yv[0, 0, 0, 0, 0]
    cdef Py_ssize_t volume = g.d * g.h * g.w * g.c, plane = g.oh * g.ow * g.c
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for s in prange(planes, schedule="static"):
            _avg_forward_plane(&g, xp + (s // g.od) * volume, s % g.od, yp + s * plane)
        tapeflow_fpenv_swap(own)
    return y


def avg_pool3d_backward(const floating[:, :, :, :, ::1] dy, tuple in_size, tuple ksize,
                        tuple strides, tuple pads):
    """dx[N, D, H, W, C] (in_size = (D, H, W)): each window's dy spread evenly over its real inputs."""
    if len(in_size) != 3 or min(in_size) < 0:
        raise ValueError(f"avg_pool3d_backward: input size must be three ints >= 0, got {in_size}")
    cdef Window g = _window("avg_pool3d_backward", (dy.shape[0], *in_size, dy.shape[4]), ksize,
                            strides, pads, (dy.shape[1], dy.shape[2], dy.shape[3]))
    dx = np.zeros((g.n, g.d, g.h, g.w, g.c), dtype=np.float32 if floating is float else np.float64)
    if dx.size == 0 or dy.size == 0:
        return dx
    cdef floating[:, :, :, :, ::1] dxv = dx
    cdef const floating* dyp = &dy[0, 0, 0, 0, 0]
    cdef floating* dxp = &dxv[0, 0, 0, 0, 0]
    cdef Py_ssize_t volume = g.d * g.h * g.w * g.c, plane = g.oh * g.ow * g.c
    cdef bint by_plane = g.kd <= g.sd
    cdef Py_ssize_t s, v, units = g.n * g.od if by_plane else g.n
    cdef int threads = _threads(&g)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for s in prange(units, schedule="static"):
            if by_plane:
                _avg_backward_plane(&g, dyp + s * plane, s % g.od, dxp + (s // g.od) * volume)
            else:
                for v in range(g.od):
                    _avg_backward_plane(&g, dyp + (s * g.od + v) * plane, v, dxp + s * volume)
        tapeflow_fpenv_swap(own)
    return dx
