"""2-D convolution on NHWC images with HWIO filters: im2col / col2im around BLAS gemm.

Padding is explicit: ``pad_top`` and ``pad_left`` rows/columns of zeros before the image;
the bottom/right padding follows from the output size. Every input read is bounds-checked,
so any combination of pads and output size is memory-safe.

The output rows (n, oh) are cut into chunks whose im2col matrix fits a small per-thread
scratch buffer. While OpenBLAS is single-threaded, each OpenMP thread takes whole chunks
and runs im2col and a gemm on them; when chunks of conv2d_backward_input would write to the
same image they run one after another, and each gemm is split over the threads instead.
While OpenBLAS runs threaded, or behind a BLAS whose thread count cannot be read, the chunks
run one after another and that BLAS threads each gemm (see _blas.pxi).
"""

include "_common.pxi"
include "_panel_gemm.pxi"
include "_blas.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport parallel, prange, threadid
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

include "_partials.pxi"

# Per-thread bound on the im2col scratch buffer.
cdef Py_ssize_t _col_buffer_bytes = 4 * 1024 * 1024

def _set_col_buffer_bytes(Py_ssize_t n):
    """Change the scratch bound and return the old one (tests use a tiny one for many chunks)."""
    global _col_buffer_bytes
    old, _col_buffer_bytes = _col_buffer_bytes, max(1, n)
    return old


cdef struct Geometry:
    Py_ssize_t n, h, w, c, kh, kw, o, oh, ow
    Py_ssize_t sh, sw, pt, pl, dh, dw
    const void* bias     # the forward's o numbers (of its float type) added to every output pixel, or NULL
    bint relu            # the forward's outputs taken through max(., 0) after the bias


cdef struct Plan:
    Py_ssize_t rows      # output rows (n, oh) per chunk
    Py_ssize_t chunks
    int threads          # > 1: chunks in parallel, BLAS single-threaded inside each
    int gemm_threads     # > 1: chunks one after another, each gemm split over the threads


cdef inline tuple _shape4(const floating[:, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3])


cdef Geometry _geometry(str op, tuple x_shape, tuple w_shape, Py_ssize_t out_h,
                        Py_ssize_t out_w, int stride_h, int stride_w, int pad_top,
                        int pad_left, int dil_h, int dil_w) except *:
    if stride_h < 1 or stride_w < 1 or dil_h < 1 or dil_w < 1:
        raise ValueError(f"{op}: strides and dilations must be >= 1, got strides "
                         f"({stride_h}, {stride_w}) and dilations ({dil_h}, {dil_w})")
    if out_h < 0 or out_w < 0:
        raise ValueError(f"{op}: output size must be >= 0, got ({out_h}, {out_w})")
    if x_shape[3] != w_shape[2]:
        raise ValueError(f"{op}: input has {x_shape[3]} channels but the filter "
                         f"{w_shape} expects {w_shape[2]}")
    cdef Geometry g
    g.n, g.h, g.w, g.c = x_shape
    g.kh, g.kw, _, g.o = w_shape
    g.oh, g.ow = out_h, out_w
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = stride_h, stride_w, pad_top, pad_left, dil_h, dil_w
    g.bias, g.relu = NULL, False
    return g


cdef inline void _finish_pixels(const Geometry* g, floating* y, Py_ssize_t pixels) noexcept nogil:
    """The forward's bias and relu (g.bias, g.relu) on `pixels` output pixels at y, each g.o
    numbers, while a thread has them in its cache; a NaN stays NaN, as max(NaN, 0) is NaN."""
    cdef const floating* bias = <const floating*>g.bias
    cdef Py_ssize_t i, count = pixels * g.o, q, p
    cdef floating v
    if bias != NULL:
        for p in range(pixels):
            if g.relu:
                for q in range(g.o):
                    v = y[p * g.o + q] + bias[q]
                    y[p * g.o + q] = 0 if v < 0 else v
            else:
                for q in range(g.o):
                    y[p * g.o + q] = y[p * g.o + q] + bias[q]
    elif g.relu:
        for i in range(count):
            v = y[i]
            y[i] = 0 if v < 0 else v


cdef inline bint _is_pointwise(const Geometry* g) noexcept nogil:
    """A 1x1, stride-1, unpadded conv: its im2col matrix is the input itself."""
    return (g.kh == 1 and g.kw == 1 and g.sh == 1 and g.sw == 1 and g.pt == 0 and g.pl == 0
            and g.oh == g.h and g.ow == g.w)


cdef Plan _plan(const Geometry* g, Py_ssize_t itemsize, bint whole_images) noexcept:
    """Chunks of output rows that fit the scratch bound, balanced over the threads.

    With `whole_images`, parallel chunks hold whole images, so that no two threads write
    into the same image. When the chunks must run one after another, each gemm is split
    over the threads instead (`gemm_threads`).
    """
    cdef Plan p
    cdef Py_ssize_t fit = max(1, _col_buffer_bytes // max(1, g.ow * g.kh * g.kw * g.c * itemsize))
    cdef Py_ssize_t work = g.n * g.oh * g.ow * g.kh * g.kw * g.c * g.o
    cdef int nt = _threads_for(work, 1 << 16) if _blas_single() else 1
    cdef bint by_image = fit >= g.oh and (whole_images or g.n >= nt)
    cdef bint in_parallel = nt > 1 and (by_image or not whole_images)
    cdef Py_ssize_t unit = g.oh if by_image else 1
    cdef Py_ssize_t units = g.n * g.oh // unit
    cdef Py_ssize_t per_chunk = max(1, min(units, fit // unit))
    p.chunks = (units + per_chunk - 1) // per_chunk
    if in_parallel:
        p.chunks = max(p.chunks, min(units, nt))
        p.chunks = (p.chunks + nt - 1) // nt * nt
        per_chunk = (units + p.chunks - 1) // p.chunks
        p.chunks = (units + per_chunk - 1) // per_chunk
    p.rows = per_chunk * unit
    p.threads = <int>min(nt, p.chunks) if in_parallel else 1
    p.gemm_threads = nt if p.threads == 1 else 1
    return p


cdef inline void _valid_taps(const Geometry* g, Py_ssize_t ow, Py_ssize_t* j0,
                             Py_ssize_t* j1) noexcept nogil:
    """The kernel columns [j0, j1) whose input column for output column ow is in the image."""
    cdef Py_ssize_t start = ow * g.sw - g.pl, j
    j0[0] = g.kw
    j1[0] = 0
    for j in range(g.kw):
        if 0 <= start + j * g.dw < g.w:
            j0[0] = min(j0[0], j)
            j1[0] = j + 1


cdef inline void _copy(floating* dst, const floating* src, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t q
    for q in range(count):
        dst[q] = src[q]


cdef inline void _zero(floating* dst, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t q
    for q in range(count):
        dst[q] = 0


# Inputs with fewer channels than this are gathered through a padded band of input rows.
cdef Py_ssize_t _BAND_MAX_CHANNELS = 8


cdef inline Py_ssize_t _band_width(const Geometry* g) noexcept nogil:
    """Input columns, padding included, that one output row's windows span."""
    return (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1


cdef inline Py_ssize_t _band_size(const Geometry* g) noexcept nogil:
    """Elements of the band scratch _im2col needs after the col buffer (0: none)."""
    return g.kh * _band_width(g) * g.c if g.c < _BAND_MAX_CHANNELS else 0


cdef void _fill_band(const Geometry* g, const floating* x, floating* band, Py_ssize_t r) noexcept nogil:
    """band[kh][width][C] = the kh input rows that output row r = n*OH + oh reads, each
    zero-padded to the columns its windows span."""
    cdef Py_ssize_t n = r // g.oh, oh = r % g.oh, i, ih
    cdef Py_ssize_t width = _band_width(g)
    cdef Py_ssize_t p_lo = min(max(<Py_ssize_t>g.pl, 0), width)
    cdef Py_ssize_t p_hi = max(min(g.pl + g.w, width), p_lo)
    cdef floating* dst
    for i in range(g.kh):
        ih = oh * g.sh - g.pt + i * g.dh
        dst = band + i * width * g.c
        if 0 <= ih < g.h and p_lo < p_hi:
            _zero(dst, p_lo * g.c)
            _copy(dst + p_lo * g.c, x + ((n * g.h + ih) * g.w + p_lo - g.pl) * g.c, (p_hi - p_lo) * g.c)
            _zero(dst + p_hi * g.c, (width - p_hi) * g.c)
        else:
            _zero(dst, width * g.c)


cdef void _im2col(const Geometry* g, const floating* x, floating* col, floating* band,
                  Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """col[(r, ow), (i, j, c)] = x[n, oh*sh - pt + i*dh, ow*sw - pl + j*dw, c] or 0,
    for the output rows r = n*OH + oh in [r0, r1).

    With many channels each tap's channels are one contiguous copy. With few, the kh input
    rows one output row reads are first laid out zero-padded in `band`; then each tap
    (i, j) is a plain strided copy along ow with no bounds to check.
    """
    cdef Py_ssize_t r, n, oh, ow, i, j, j0, j1, ih, iw, c
    cdef Py_ssize_t row = g.kw * g.c, kkc = g.kh * g.kw * g.c
    cdef Py_ssize_t width = _band_width(g), step = g.sw * g.c
    cdef const floating* src
    cdef floating* dst
    for r in range(r0, r1):
        n = r // g.oh
        oh = r % g.oh
        if band != NULL:
            _fill_band(g, x, band, r)
            if g.dw == 1:  # a kernel row's taps are one contiguous run of the band
                for ow in range(g.ow):
                    for i in range(g.kh):
                        _copy(col + ow * kkc + i * row, band + (i * width + ow * g.sw) * g.c, row)
                col += g.ow * kkc
                continue
            for i in range(g.kh):
                for j in range(g.kw):
                    src = band + (i * width + j * g.dw) * g.c
                    dst = col + (i * g.kw + j) * g.c
                    if g.c == 1:
                        for ow in range(g.ow):
                            dst[ow * kkc] = src[ow * step]
                    else:
                        for ow in range(g.ow):
                            for c in range(g.c):
                                dst[ow * kkc + c] = src[ow * step + c]
            col += g.ow * kkc
            continue
        for ow in range(g.ow):
            _valid_taps(g, ow, &j0, &j1)
            for i in range(g.kh):
                ih = oh * g.sh - g.pt + i * g.dh
                if not (0 <= ih < g.h) or j0 >= j1:
                    memset(col, 0, row * sizeof(floating))
                elif g.dw == 1:
                    src = x + ((n * g.h + ih) * g.w + ow * g.sw - g.pl + j0) * g.c
                    _zero(col, j0 * g.c)
                    memcpy(col + j0 * g.c, src, (j1 - j0) * g.c * sizeof(floating))
                    _zero(col + j1 * g.c, (g.kw - j1) * g.c)
                else:
                    for j in range(g.kw):
                        iw = ow * g.sw - g.pl + j * g.dw
                        if 0 <= iw < g.w:
                            memcpy(col + j * g.c, x + ((n * g.h + ih) * g.w + iw) * g.c,
                                   g.c * sizeof(floating))
                        else:
                            _zero(col + j * g.c, g.c)
                col += row


cdef void _col2im(const Geometry* g, const floating* col, floating* dx, Py_ssize_t r0,
                  Py_ssize_t r1) noexcept nogil:
    """dx += the adjoint of _im2col over output rows [r0, r1)."""
    cdef Py_ssize_t r, n, oh, ow, i, j, j0, j1, ih, iw, c, q, span
    cdef Py_ssize_t row = g.kw * g.c
    cdef floating* dst
    cdef const floating* src
    for r in range(r0, r1):
        n = r // g.oh
        oh = r % g.oh
        for ow in range(g.ow):
            _valid_taps(g, ow, &j0, &j1)
            for i in range(g.kh):
                ih = oh * g.sh - g.pt + i * g.dh
                if 0 <= ih < g.h and j0 < j1:
                    if g.dw == 1:
                        dst = dx + ((n * g.h + ih) * g.w + ow * g.sw - g.pl + j0) * g.c
                        src = col + j0 * g.c
                        span = (j1 - j0) * g.c
                        for q in range(span):
                            dst[q] += src[q]
                    else:
                        for j in range(j0, j1):
                            iw = ow * g.sw - g.pl + j * g.dw
                            if 0 <= iw < g.w:
                                dst = dx + ((n * g.h + ih) * g.w + iw) * g.c
                                for c in range(g.c):
                                    dst[c] += col[j * g.c + c]
                col += row


cdef inline floating* _alloc(Py_ssize_t count, floating* like) noexcept nogil:
    return <floating*>malloc(max(1, count) * sizeof(floating))


include "_winograd.pxi"
include "_winograd_f4.pxi"
include "_winograd_f25.pxi"
include "_direct_conv.pxi"


cdef bint _other_way(str op, bint filter_grad, const Geometry* g, const floating* a, const floating* b,
                     floating* out) except -1:
    """The forward product (or with `filter_grad` the filter gradient) of `a` and `b` into `out`
    by Winograd's way or the direct one where either fits (True), else nothing (False: im2col's
    turn)."""
    if _winograd_fits_filter_grad(g) if filter_grad else _winograd_fits(g):
        _winograd(op, filter_grad, g, a, b, out)
        return True
    if floating is float:
        return _direct(op, filter_grad, g, a, b, out)
    return False


def conv2d_forward(const floating[:, :, :, ::1] x, const floating[:, :, :, ::1] w,
                   int stride_h, int stride_w, int pad_top, int pad_left, int dil_h, int dil_w,
                   int out_h, int out_w, const floating[::1] bias=None, bint relu=False):
    """y[N, out_h, out_w, O] = conv(x[N, H, W, C], w[KH, KW, C, O]) (cross-correlation),
    plus `bias[O]` and through max(., 0) with `relu`, each block of outputs finished where it is
    made (a fused_conv2d node).

    >>> import numpy as np
    >>> y = conv2d_forward(np.ones((1, 3, 3, 1)), np.ones((2, 2, 1, 1)), 1, 1, 0, 0, 1, 1, 2, 2)
    >>> y[0, :, :, 0].tolist()
    [[4.0, 4.0], [4.0, 4.0]]
    """
    cdef Geometry g = _geometry("conv2d_forward", _shape4(x), _shape4(w), out_h, out_w,
                                stride_h, stride_w, pad_top, pad_left, dil_h, dil_w)
    if bias is not None and bias.shape[0] != g.o:
        raise ValueError(f"conv2d_forward: bias of shape ({bias.shape[0]},) does not match the filter "
                         f"{_shape4(w)}'s {g.o} outputs")
    dtype = np.float32 if floating is float else np.float64
    cdef Py_ssize_t total = g.n * g.oh, kkc = g.kh * g.kw * g.c
    if total * g.ow * g.o == 0 or kkc == 0:
        y = np.zeros((g.n, g.oh, g.ow, g.o), dtype=dtype)
        if bias is not None:
            y += np.asarray(bias)
        return np.maximum(y, 0, out=y) if relu else y
    if bias is not None:
        g.bias = &bias[0]
    g.relu = relu
    y = np.empty((g.n, g.oh, g.ow, g.o), dtype=dtype)  # every row written by a gemm
    cdef floating[:, :, :, ::1] y_view = y
    cdef const floating* xp = &x[0, 0, 0, 0]
    cdef const floating* wp = &w[0, 0, 0, 0]
    cdef floating* yp = &y_view[0, 0, 0, 0]
    cdef bint pointwise = _is_pointwise(&g)
    cdef Plan p = _plan(&g, sizeof(floating), False)
    cdef Py_ssize_t chunk, r0, r1
    cdef floating* col = NULL
    cdef int failed = 0
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    if _other_way("conv2d_forward", False, &g, xp, wp, yp):
        return y
    _blas_enter()
    with nogil, parallel(num_threads=p.threads):
        own = tapeflow_fpenv_swap(env)
        col = NULL if pointwise else _alloc(p.rows * g.ow * kkc + _band_size(&g), yp)
        if not pointwise and col == NULL:
            failed_p[0] = 1
        for chunk in prange(p.chunks, schedule="static"):
            r0 = chunk * p.rows
            r1 = min(r0 + p.rows, total)
            if pointwise:
                _gemm_split(c'N', c'N', (r1 - r0) * g.ow, g.o, kkc, 1, xp + r0 * g.ow * kkc,
                            kkc, wp, g.o, 0, yp + r0 * g.ow * g.o, g.o, p.gemm_threads)
            elif col != NULL:
                _im2col(&g, xp, col, col + p.rows * g.ow * kkc if _band_size(&g) else NULL,
                        r0, r1)
                _gemm_split(c'N', c'N', (r1 - r0) * g.ow, g.o, kkc, 1, col, kkc, wp, g.o, 0,
                            yp + r0 * g.ow * g.o, g.o, p.gemm_threads)
            if pointwise or col != NULL:
                _finish_pixels(&g, yp + r0 * g.ow * g.o, (r1 - r0) * g.ow)
        free(col)
        tapeflow_fpenv_swap(own)
    _blas_leave()
    if failed:
        raise MemoryError("conv2d_forward: cannot allocate the im2col buffer")
    return y


cdef object _winograd_transposed(const floating[:, :, :, ::1] dy, const floating[:, :, :, ::1] w, dx,
                                 const Geometry* g):
    """dx (every element written) = the stride-1 convolution of dy with w turned half a turn and
    its channels swapped, padded by k - 1 - the forward's pads: the adjoint of a k x k
    convolution."""
    flipped = np.ascontiguousarray(np.asarray(w)[::-1, ::-1].transpose(0, 1, 3, 2))
    cdef floating[:, :, :, ::1] f_view = flipped
    cdef floating[:, :, :, ::1] dx_view = dx
    cdef Geometry t = g[0]
    t.h, t.w, t.c, t.o = g.oh, g.ow, g.o, g.c
    t.oh, t.ow = g.h, g.w
    t.pt, t.pl = g.kh - 1 - g.pt, g.kw - 1 - g.pl
    _winograd("conv2d_backward_input", False, &t, &dy[0, 0, 0, 0], &f_view[0, 0, 0, 0], &dx_view[0, 0, 0, 0])
    return dx


def conv2d_backward_input(const floating[:, :, :, ::1] dy, const floating[:, :, :, ::1] w,
                          int in_h, int in_w, int stride_h, int stride_w, int pad_top,
                          int pad_left, int dil_h, int dil_w):
    """dx[N, in_h, in_w, C]: the gradient of conv2d_forward wrt x (also conv2d_transpose)."""
    if dy.shape[3] != w.shape[3]:
        raise ValueError(f"conv2d_backward_input: dy has {dy.shape[3]} channels but the "
                         f"filter {_shape4(w)} has {w.shape[3]} outputs")
    if in_h < 0 or in_w < 0:
        raise ValueError(f"conv2d_backward_input: input size must be >= 0, got ({in_h}, {in_w})")
    cdef Geometry g = _geometry("conv2d_backward_input", (dy.shape[0], in_h, in_w, w.shape[2]),
                                _shape4(w), dy.shape[1], dy.shape[2], stride_h, stride_w,
                                pad_top, pad_left, dil_h, dil_w)
    cdef Py_ssize_t total = g.n * g.oh, kkc = g.kh * g.kw * g.c
    cdef bint empty = g.n * g.h * g.w * g.c == 0 or total * g.ow * g.o == 0
    # Winograd's way and a 1x1 product write every element; col2im adds into zeros.
    make = np.empty if not empty and (_winograd_fits(&g) or _is_pointwise(&g)) else np.zeros
    dx = make((g.n, g.h, g.w, g.c), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, ::1] dx_view = dx
    if empty:
        return dx
    cdef const floating* dyp = &dy[0, 0, 0, 0]
    cdef const floating* wp = &w[0, 0, 0, 0]
    cdef floating* dxp = &dx_view[0, 0, 0, 0]
    if _winograd_fits(&g):  # the forward convolution of dy with the flipped filter, its pads mirrored
        return _winograd_transposed(dy, w, dx, &g)
    cdef bint pointwise = _is_pointwise(&g)
    cdef Plan p = _plan(&g, sizeof(floating), not pointwise)
    cdef Py_ssize_t chunk, r0, r1
    cdef floating* col = NULL
    cdef int failed = 0
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    _blas_enter()
    with nogil, parallel(num_threads=p.threads):
        own = tapeflow_fpenv_swap(env)
        col = NULL if pointwise else _alloc(p.rows * g.ow * kkc, dxp)
        if not pointwise and col == NULL:
            failed_p[0] = 1
        for chunk in prange(p.chunks, schedule="static"):
            r0 = chunk * p.rows
            r1 = min(r0 + p.rows, total)
            if pointwise:
                _gemm_split(c'N', c'T', (r1 - r0) * g.ow, kkc, g.o, 1, dyp + r0 * g.ow * g.o,
                            g.o, wp, g.o, 0, dxp + r0 * g.ow * kkc, kkc, p.gemm_threads)
            elif col != NULL:
                _gemm_split(c'N', c'T', (r1 - r0) * g.ow, kkc, g.o, 1, dyp + r0 * g.ow * g.o,
                            g.o, wp, g.o, 0, col, kkc, p.gemm_threads)
                _col2im(&g, col, dxp, r0, r1)
        free(col)
        tapeflow_fpenv_swap(own)
    _blas_leave()
    if failed:
        raise MemoryError("conv2d_backward_input: cannot allocate the col2im buffer")
    return dx


def conv2d_backward_filter(const floating[:, :, :, ::1] x, const floating[:, :, :, ::1] dy,
                           int kh, int kw, int stride_h, int stride_w, int pad_top,
                           int pad_left, int dil_h, int dil_w):
    """dw[KH, KW, C, O]: the gradient of conv2d_forward wrt its filter."""
    if dy.shape[0] != x.shape[0]:
        raise ValueError(f"conv2d_backward_filter: x has batch {x.shape[0]} but dy has "
                         f"{dy.shape[0]}")
    if kh < 0 or kw < 0:
        raise ValueError(f"conv2d_backward_filter: kernel size must be >= 0, got ({kh}, {kw})")
    cdef Geometry g = _geometry("conv2d_backward_filter", _shape4(x),
                                (kh, kw, x.shape[3], dy.shape[3]), dy.shape[1], dy.shape[2],
                                stride_h, stride_w, pad_top, pad_left, dil_h, dil_w)
    dw = np.zeros((g.kh, g.kw, g.c, g.o), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, ::1] dw_view = dw
    cdef Py_ssize_t total = g.n * g.oh, kkc = g.kh * g.kw * g.c, size = kkc * g.o
    if size == 0 or total * g.ow == 0:
        return dw
    cdef const floating* xp = &x[0, 0, 0, 0]
    cdef const floating* dyp = &dy[0, 0, 0, 0]
    cdef floating* dwp = &dw_view[0, 0, 0, 0]
    if _other_way("conv2d_backward_filter", True, &g, xp, dyp, dwp):
        return dw
    cdef bint pointwise = _is_pointwise(&g)
    cdef Plan p = _plan(&g, sizeof(floating), False)
    cdef Py_ssize_t chunk, r0, r1
    cdef floating* col = NULL
    cdef floating* acc = NULL
    cdef int t = 0, failed = 0
    cdef int* failed_p = &failed
    # Thread 0 accumulates into dw itself; the others into zeroed partial sums added at the end.
    cdef floating* partials = _alloc((p.threads - 1) * size, dwp)
    if partials == NULL:
        raise MemoryError("conv2d_backward_filter: cannot allocate partial sums")
    memset(partials, 0, (p.threads - 1) * size * sizeof(floating))
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    _blas_enter()
    with nogil, parallel(num_threads=p.threads):
        own = tapeflow_fpenv_swap(env)
        col = NULL if pointwise else _alloc(p.rows * g.ow * kkc + _band_size(&g), dwp)
        if not pointwise and col == NULL:
            failed_p[0] = 1
        t = threadid()
        acc = dwp if t == 0 else partials + (t - 1) * size
        for chunk in prange(p.chunks, schedule="static"):
            r0 = chunk * p.rows
            r1 = min(r0 + p.rows, total)
            if pointwise:
                _gemm_split(c'T', c'N', kkc, g.o, (r1 - r0) * g.ow, 1, xp + r0 * g.ow * kkc,
                            kkc, dyp + r0 * g.ow * g.o, g.o, 1, acc, g.o, p.gemm_threads)
            elif col != NULL:
                _im2col(&g, xp, col, col + p.rows * g.ow * kkc if _band_size(&g) else NULL,
                        r0, r1)
                _gemm_split(c'T', c'N', kkc, g.o, (r1 - r0) * g.ow, 1, col, kkc,
                            dyp + r0 * g.ow * g.o, g.o, 1, acc, g.o, p.gemm_threads)
        free(col)
        tapeflow_fpenv_swap(own)
    _blas_leave()
    with nogil:
        _add_partials(dwp, partials, p.threads - 1, size)
        free(partials)
    if failed:
        raise MemoryError("conv2d_backward_filter: cannot allocate the im2col buffer")
    return dw
