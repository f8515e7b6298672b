"""Depthwise 2-D convolution on NHWC images: each input channel c convolved with its own
``M`` filters w[:, :, c, m], giving output channel c * M + m.

Padding is explicit (``pad_top``, ``pad_left`` and the output size); every input read is
bounds-checked. Each pass is a direct loop with the channels innermost, so that every read
and write is contiguous. The forward pass and the filter gradient run in parallel over
output rows (n, oh), the input gradient over input rows (n, ih), each gathering from the
outputs its row feeds, so that no two threads write to the same cell. Small convolutions
run on the calling thread alone.
"""

include "_common.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport parallel, prange, threadid
from libc.stdlib cimport free, malloc
from libc.string cimport memset

include "_partials.pxi"

# Below this many multiply-adds a depthwise convolution runs on one thread.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 20


def _set_parallel_min(Py_ssize_t n):
    """Change the size below which work runs on one thread and return the old one (tests use 0)."""
    global _PARALLEL_MIN
    old, _PARALLEL_MIN = _PARALLEL_MIN, max(0, n)
    return old


cdef struct Geometry:
    Py_ssize_t n, h, w, c, m, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw


cdef inline tuple _shape4(const floating[:, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3])


cdef Geometry _geometry(str op, tuple x_shape, tuple w_shape, Py_ssize_t out_h, Py_ssize_t out_w,
                        int sh, int sw, int pad_top, int pad_left, int dh, int dw) except *:
    if sh < 1 or sw < 1 or dh < 1 or dw < 1:
        raise ValueError(f"{op}: strides and dilations must be >= 1, got strides ({sh}, {sw}) "
                         f"and dilations ({dh}, {dw})")
    if out_h < 0 or out_w < 0 or pad_top < 0 or pad_left < 0:
        raise ValueError(f"{op}: output size and pads must be >= 0, got ({out_h}, {out_w}) "
                         f"and ({pad_top}, {pad_left})")
    if x_shape[3] != w_shape[2]:
        raise ValueError(f"{op}: input has {x_shape[3]} channels but the filter {w_shape} "
                         f"expects {w_shape[2]}")
    cdef Geometry g
    g.n, g.h, g.w, g.c = x_shape
    g.kh, g.kw, _, g.m = w_shape
    g.oh, g.ow = out_h, out_w
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = sh, sw, pad_top, pad_left, dh, dw
    return g


cdef int _threads(const Geometry* g) noexcept nogil:
    cdef Py_ssize_t work = g.n * g.oh * g.ow * g.kh * g.kw * g.c * g.m
    return _threads_for(work, _PARALLEL_MIN)


cdef inline void _tap(const floating* x, const floating* w, floating* y, Py_ssize_t c,
                      Py_ssize_t m) noexcept nogil:
    """y[c * m + k] += x[c] * w[c * m + k] for every channel and multiple."""
    cdef Py_ssize_t q, k
    cdef floating v
    if m == 1:
        for q in range(c):
            y[q] += x[q] * w[q]
    else:
        for q in range(c):
            v = x[q]
            for k in range(m):
                y[q * m + k] += v * w[q * m + k]


cdef void _forward_row(const Geometry* g, const floating* x, const floating* w, floating* y,
                       Py_ssize_t r) noexcept nogil:
    """Output row r = n * OH + oh."""
    cdef Py_ssize_t n = r // g.oh, oh = r % g.oh, ow, i, j, ih, iw, cm = g.c * g.m, q
    cdef floating* out = y + r * g.ow * cm
    for q in range(g.ow * cm):
        out[q] = 0
    for ow in range(g.ow):
        for i in range(g.kh):
            ih = oh * g.sh - g.pt + i * g.dh
            if not 0 <= ih < g.h:
                continue
            for j in range(g.kw):
                iw = ow * g.sw - g.pl + j * g.dw
                if 0 <= iw < g.w:
                    _tap(x + ((n * g.h + ih) * g.w + iw) * g.c, w + (i * g.kw + j) * cm, out,
                         g.c, g.m)
        out += cm


cdef void _input_grad_row(const Geometry* g, const floating* dy, const floating* w, floating* dx,
                          Py_ssize_t r) noexcept nogil:
    """Input row r = n * H + ih: dx[n, ih, iw, c] = sum of dy * w over the outputs it feeds."""
    cdef Py_ssize_t n = r // g.h, ih = r % g.h, iw, i, j, t, u, oh, ow, q, k, cm = g.c * g.m
    cdef floating* dst = dx + r * g.w * g.c
    cdef const floating* src
    cdef const floating* taps
    cdef floating s
    for iw in range(g.w):
        for i in range(g.kh):
            t = ih + g.pt - i * g.dh
            if t < 0 or t % g.sh != 0 or t // g.sh >= g.oh:
                continue
            oh = t // g.sh
            for j in range(g.kw):
                u = iw + g.pl - j * g.dw
                if u < 0 or u % g.sw != 0 or u // g.sw >= g.ow:
                    continue
                ow = u // g.sw
                src = dy + ((n * g.oh + oh) * g.ow + ow) * cm
                taps = w + (i * g.kw + j) * cm
                if g.m == 1:
                    for q in range(g.c):
                        dst[q] += src[q] * taps[q]
                else:
                    for q in range(g.c):
                        s = 0
                        for k in range(g.m):
                            s = s + src[q * g.m + k] * taps[q * g.m + k]
                        dst[q] += s
        dst += g.c


cdef void _filter_grad_row(const Geometry* g, const floating* x, const floating* dy,
                           floating* dw, Py_ssize_t r) noexcept nogil:
    """dw += the contribution of output row r = n * OH + oh."""
    cdef Py_ssize_t n = r // g.oh, oh = r % g.oh, ow, i, j, ih, iw, cm = g.c * g.m
    cdef const floating* grad = dy + r * g.ow * cm
    for ow in range(g.ow):
        for i in range(g.kh):
            ih = oh * g.sh - g.pt + i * g.dh
            if not 0 <= ih < g.h:
                continue
            for j in range(g.kw):
                iw = ow * g.sw - g.pl + j * g.dw
                if 0 <= iw < g.w:
                    _tap(x + ((n * g.h + ih) * g.w + iw) * g.c, grad, dw + (i * g.kw + j) * cm,
                         g.c, g.m)
        grad += cm


def depthwise_conv2d_forward(const floating[:, :, :, ::1] x, const floating[:, :, :, ::1] w,
                             int stride_h, int stride_w, int pad_top, int pad_left, int dil_h,
                             int dil_w, int out_h, int out_w):
    """y[N, out_h, out_w, C * M] = depthwise conv of x[N, H, W, C] with w[KH, KW, C, M].

    >>> import numpy as np
    >>> w = np.ones((2, 2, 2, 1)); w[..., 1, 0] = 2
    >>> y = depthwise_conv2d_forward(np.ones((1, 3, 3, 2)), w, 1, 1, 0, 0, 1, 1, 2, 2)
    >>> y[0, 0, 0].tolist()
    [4.0, 8.0]
    """
    cdef Geometry g = _geometry("depthwise_conv2d_forward", _shape4(x), _shape4(w), out_h, out_w,
                                stride_h, stride_w, pad_top, pad_left, dil_h, dil_w)
    y = np.zeros((g.n, g.oh, g.ow, g.c * g.m), dtype=np.float32 if floating is float else np.float64)
    if y.size == 0 or x.size == 0 or w.size == 0:
        return y
    cdef floating[:, :, :, ::1] yv = y
    cdef const floating* xp = &x[0, 0, 0, 0]
    cdef const floating* wp = &w[0, 0, 0, 0]
    cdef floating* yp = &yv[0, 0, 0, 0]
    cdef Py_ssize_t r
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=_threads(&g)):
        own = tapeflow_fpenv_swap(env)
        for r in prange(g.n * g.oh, schedule="static"):
            _forward_row(&g, xp, wp, yp, r)
        tapeflow_fpenv_swap(own)
    return y


def depthwise_conv2d_backward_input(const floating[:, :, :, ::1] dy,
                                    const floating[:, :, :, ::1] w, int in_h, int in_w,
                                    int stride_h, int stride_w, int pad_top, int pad_left,
                                    int dil_h, int dil_w):
    """dx[N, in_h, in_w, C]: the gradient of depthwise_conv2d_forward wrt x."""
    if in_h < 0 or in_w < 0:
        raise ValueError(f"depthwise_conv2d_backward_input: input size must be >= 0, got ({in_h}, {in_w})")
    if dy.shape[3] != w.shape[2] * w.shape[3]:
        raise ValueError(f"depthwise_conv2d_backward_input: dy has {dy.shape[3]} channels but the "
                         f"filter {_shape4(w)} gives {w.shape[2] * w.shape[3]}")
    cdef Geometry g = _geometry("depthwise_conv2d_backward_input", (dy.shape[0], in_h, in_w, w.shape[2]),
                                _shape4(w), dy.shape[1], dy.shape[2], stride_h, stride_w, pad_top,
                                pad_left, dil_h, dil_w)
    dx = np.zeros((g.n, g.h, g.w, g.c), dtype=np.float32 if floating is float else np.float64)
    if dx.size == 0 or dy.size == 0 or w.size == 0:
        return dx
    cdef floating[:, :, :, ::1] dxv = dx
    cdef const floating* dyp = &dy[0, 0, 0, 0]
    cdef const floating* wp = &w[0, 0, 0, 0]
    cdef floating* dxp = &dxv[0, 0, 0, 0]
    cdef Py_ssize_t r
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=_threads(&g)):
        own = tapeflow_fpenv_swap(env)
        for r in prange(g.n * g.h, schedule="static"):
            _input_grad_row(&g, dyp, wp, dxp, r)
        tapeflow_fpenv_swap(own)
    return dx


def depthwise_conv2d_backward_filter(const floating[:, :, :, ::1] x, const floating[:, :, :, ::1] dy,
                                     int kh, int kw, int stride_h, int stride_w, int pad_top,
                                     int pad_left, int dil_h, int dil_w):
    """dw[KH, KW, C, M]: the gradient of depthwise_conv2d_forward wrt its filter."""
    if dy.shape[0] != x.shape[0]:
        raise ValueError(f"depthwise_conv2d_backward_filter: x has batch {x.shape[0]} but dy has {dy.shape[0]}")
    if kh < 0 or kw < 0:
        raise ValueError(f"depthwise_conv2d_backward_filter: kernel size must be >= 0, got ({kh}, {kw})")
    if x.shape[3] == 0 or dy.shape[3] % x.shape[3] != 0:
        if dy.shape[3] != 0 or x.shape[3] != 0:
            raise ValueError(f"depthwise_conv2d_backward_filter: dy's {dy.shape[3]} channels are not "
                             f"a multiple of x's {x.shape[3]}")
    cdef Py_ssize_t mult = dy.shape[3] // x.shape[3] if x.shape[3] else 0
    cdef Geometry g = _geometry("depthwise_conv2d_backward_filter", _shape4(x), (kh, kw, x.shape[3], mult),
                                dy.shape[1], dy.shape[2], stride_h, stride_w, pad_top, pad_left, dil_h,
                                dil_w)
    dw = np.zeros((g.kh, g.kw, g.c, g.m), dtype=np.float32 if floating is float else np.float64)
    cdef Py_ssize_t size = g.kh * g.kw * g.c * g.m, r
    if size == 0 or dy.size == 0 or x.size == 0:
        return dw
    cdef floating[:, :, :, ::1] dwv = dw
    cdef const floating* xp = &x[0, 0, 0, 0]
    cdef const floating* dyp = &dy[0, 0, 0, 0]
    cdef floating* dwp = &dwv[0, 0, 0, 0]
    cdef int threads = _threads(&g), t = 0
    cdef floating* acc = NULL
    # Thread 0 accumulates into dw itself; the others into zeroed partial sums added at the end.
    cdef floating* partials = <floating*>malloc(max(1, (threads - 1) * size) * sizeof(floating))
    if partials == NULL:
        raise MemoryError("depthwise_conv2d_backward_filter: cannot allocate partial sums")
    memset(partials, 0, (threads - 1) * size * sizeof(floating))
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with nogil, parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        t = threadid()
        acc = dwp if t == 0 else partials + (t - 1) * size
        for r in prange(g.n * g.oh, schedule="static"):
            _filter_grad_row(&g, xp, dyp, acc, r)
        tapeflow_fpenv_swap(own)
    with nogil:
        _add_partials(dwp, partials, threads - 1, size)
        free(partials)
    return dw
