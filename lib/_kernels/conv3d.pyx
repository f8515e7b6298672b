"""3-D convolution on NDHWC volumes with DHWIO filters: im2col / col2im around BLAS gemm.

Padding is explicit: ``pads`` = (front, top, left) planes/rows/columns of zeros before the
volume; the back/bottom/right padding follows from the output size. Every input read is
bounds-checked, so any combination of pads and output size is memory-safe.

The output rows (n, od, oh) are cut into chunks whose im2col matrix fits a small per-thread
scratch buffer. While OpenBLAS is single-threaded, each OpenMP thread takes whole chunks and
runs im2col and a gemm on them; when chunks of conv3d_backward_input would write to the same
volume they run one after another, and each gemm is split over the threads instead. While
OpenBLAS runs threaded, or behind a BLAS whose thread count cannot be read, the chunks run
one after another and that BLAS threads each gemm (see _blas.pxi). Small convolutions run on
the calling thread alone.
"""

include "_common.pxi"
include "_panel_gemm.pxi"
include "_blas.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport parallel, prange, threadid
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

include "_partials.pxi"

# Per-thread bound on the im2col scratch buffer.
cdef Py_ssize_t _col_buffer_bytes = 4 * 1024 * 1024
# Below this many multiply-adds a convolution runs on one thread.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 20


def _set_parallel_min(Py_ssize_t n):
    """Change the size below which work runs on one thread and return the old one (tests use 0)."""
    global _PARALLEL_MIN
    old, _PARALLEL_MIN = _PARALLEL_MIN, max(0, n)
    return old


def _set_col_buffer_bytes(Py_ssize_t n):
    """Change the scratch bound and return the old one (tests use a tiny one for many chunks)."""
    global _col_buffer_bytes
    old, _col_buffer_bytes = _col_buffer_bytes, max(1, n)
    return old


cdef struct Geometry:
    Py_ssize_t n, d, h, w, c, kd, kh, kw, o, od, oh, ow
    Py_ssize_t sd, sh, sw, pf, pt, pl, dd, dh, dw


cdef struct Plan:
    Py_ssize_t rows      # output rows (n, od, oh) per chunk
    Py_ssize_t chunks
    int threads          # > 1: chunks in parallel, BLAS single-threaded inside each
    int gemm_threads     # > 1: chunks one after another, each gemm split over the threads


cdef inline tuple _shape5(const floating[:, :, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3], a.shape[4])


cdef Geometry _geometry(str op, tuple x_shape, tuple w_shape, tuple out, tuple strides,
                        tuple pads, tuple dilations) except *:
    if len(out) != 3 or len(strides) != 3 or len(pads) != 3 or len(dilations) != 3:
        raise ValueError(f"{op}: output size, strides, pads and dilations must be three ints each")
    if min(strides) < 1 or min(dilations) < 1:
        raise ValueError(f"{op}: strides and dilations must be >= 1, got strides {strides} "
                         f"and dilations {dilations}")
    if min(out) < 0 or min(pads) < 0:
        raise ValueError(f"{op}: output size and pads must be >= 0, got {out} and {pads}")
    if x_shape[4] != w_shape[3]:
        raise ValueError(f"{op}: input has {x_shape[4]} channels but the filter "
                         f"{w_shape} expects {w_shape[3]}")
    cdef Geometry g
    g.n, g.d, g.h, g.w, g.c = x_shape
    g.kd, g.kh, g.kw, _, g.o = w_shape
    g.od, g.oh, g.ow = out
    g.sd, g.sh, g.sw = strides
    g.pf, g.pt, g.pl = pads
    g.dd, g.dh, g.dw = dilations
    return g


cdef inline bint _is_pointwise(const Geometry* g) noexcept nogil:
    """A 1x1x1, stride-1, unpadded conv: its im2col matrix is the input itself."""
    return (g.kd == 1 and g.kh == 1 and g.kw == 1 and g.sd == 1 and g.sh == 1 and g.sw == 1
            and g.pf == 0 and g.pt == 0 and g.pl == 0 and g.od == g.d and g.oh == g.h
            and g.ow == g.w)


cdef Plan _plan(const Geometry* g, Py_ssize_t itemsize, bint whole_volumes) noexcept:
    """Chunks of output rows that fit the scratch bound, balanced over the threads.

    With `whole_volumes`, parallel chunks hold whole volumes, so that no two threads write
    into the same volume. When the chunks must run one after another, each gemm is split
    over the threads instead (`gemm_threads`).
    """
    cdef Plan p
    cdef Py_ssize_t kkc = g.kd * g.kh * g.kw * g.c
    cdef Py_ssize_t per_volume = g.od * g.oh
    cdef Py_ssize_t fit = max(1, _col_buffer_bytes // max(1, g.ow * kkc * itemsize))
    cdef Py_ssize_t work = g.n * per_volume * g.ow * kkc * g.o
    cdef int nt = _threads_for(work, _PARALLEL_MIN) if _blas_single() else 1
    cdef bint by_volume = fit >= per_volume and (whole_volumes or g.n >= nt)
    cdef bint in_parallel = nt > 1 and (by_volume or not whole_volumes)
    cdef Py_ssize_t unit = per_volume if by_volume else 1
    cdef Py_ssize_t units = g.n * per_volume // unit
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
    """The kernel columns [j0, j1) whose input column for output column ow is in the volume."""
    cdef Py_ssize_t start = ow * g.sw - g.pl, j
    j0[0] = g.kw
    j1[0] = 0
    for j in range(g.kw):
        if 0 <= start + j * g.dw < g.w:
            j0[0] = min(j0[0], j)
            j1[0] = j + 1


cdef inline void _zero(floating* dst, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t q
    for q in range(count):
        dst[q] = 0


cdef void _im2col(const Geometry* g, const floating* x, floating* col, Py_ssize_t r0,
                  Py_ssize_t r1) noexcept nogil:
    """col[(r, ow), (a, i, j, c)] = x[n, od*sd - pf + a*dd, oh*sh - pt + i*dh,
    ow*sw - pl + j*dw, c] or 0, for the output rows r = (n*OD + od)*OH + oh in [r0, r1)."""
    cdef Py_ssize_t r, n, od, oh, ow, a, i, j, j0, j1, id_, ih, iw
    cdef Py_ssize_t row = g.kw * g.c
    cdef const floating* src
    for r in range(r0, r1):
        oh = r % g.oh
        od = (r // g.oh) % g.od
        n = r // (g.oh * g.od)
        for ow in range(g.ow):
            _valid_taps(g, ow, &j0, &j1)
            for a in range(g.kd):
                id_ = od * g.sd - g.pf + a * g.dd
                for i in range(g.kh):
                    ih = oh * g.sh - g.pt + i * g.dh
                    if not (0 <= id_ < g.d and 0 <= ih < g.h) or j0 >= j1:
                        memset(col, 0, row * sizeof(floating))
                    elif g.dw == 1:
                        src = x + (((n * g.d + id_) * g.h + ih) * g.w + ow * g.sw - g.pl + j0) * g.c
                        _zero(col, j0 * g.c)
                        memcpy(col + j0 * g.c, src, (j1 - j0) * g.c * sizeof(floating))
                        _zero(col + j1 * g.c, (g.kw - j1) * g.c)
                    else:
                        for j in range(g.kw):
                            iw = ow * g.sw - g.pl + j * g.dw
                            if 0 <= iw < g.w:
                                memcpy(col + j * g.c, x + (((n * g.d + id_) * g.h + ih) * g.w + iw) * g.c,
                                       g.c * sizeof(floating))
                            else:
                                _zero(col + j * g.c, g.c)
                    col += row


cdef void _col2im(const Geometry* g, const floating* col, floating* dx, Py_ssize_t r0,
                  Py_ssize_t r1) noexcept nogil:
    """dx += the adjoint of _im2col over output rows [r0, r1)."""
    cdef Py_ssize_t r, n, od, oh, ow, a, i, j, j0, j1, id_, ih, iw, c, q, span
    cdef Py_ssize_t row = g.kw * g.c
    cdef floating* dst
    cdef const floating* src
    for r in range(r0, r1):
        oh = r % g.oh
        od = (r // g.oh) % g.od
        n = r // (g.oh * g.od)
        for ow in range(g.ow):
            _valid_taps(g, ow, &j0, &j1)
            for a in range(g.kd):
                id_ = od * g.sd - g.pf + a * g.dd
                for i in range(g.kh):
                    ih = oh * g.sh - g.pt + i * g.dh
                    if 0 <= id_ < g.d and 0 <= ih < g.h and j0 < j1:
                        if g.dw == 1:
                            dst = dx + (((n * g.d + id_) * g.h + ih) * g.w + ow * g.sw - g.pl + j0) * g.c
                            src = col + j0 * g.c
                            span = (j1 - j0) * g.c
                            for q in range(span):
                                dst[q] += src[q]
                        else:
                            for j in range(j0, j1):
                                iw = ow * g.sw - g.pl + j * g.dw
                                if 0 <= iw < g.w:
                                    dst = dx + (((n * g.d + id_) * g.h + ih) * g.w + iw) * g.c
                                    for c in range(g.c):
                                        dst[c] += col[j * g.c + c]
                    col += row


cdef inline floating* _alloc(Py_ssize_t count, floating* like) noexcept nogil:
    return <floating*>malloc(max(1, count) * sizeof(floating))


def conv3d_forward(const floating[:, :, :, :, ::1] x, const floating[:, :, :, :, ::1] w,
                   tuple strides, tuple pads, tuple dilations, tuple out):
    """y[N, OD, OH, OW, O] = conv(x[N, D, H, W, C], w[KD, KH, KW, C, O]) (cross-correlation).

    >>> import numpy as np
    >>> y = conv3d_forward(np.ones((1, 3, 3, 3, 1)), np.ones((2, 2, 2, 1, 1)), (1, 1, 1),
    ...                    (0, 0, 0), (1, 1, 1), (2, 2, 2))
    >>> float(y.min()), float(y.max()), y.shape
    (8.0, 8.0, (1, 2, 2, 2, 1))
    """
    cdef Geometry g = _geometry("conv3d_forward", _shape5(x), _shape5(w), out, strides, pads,
                                dilations)
    dtype = np.float32 if floating is float else np.float64
    cdef Py_ssize_t total = g.n * g.od * g.oh, kkc = g.kd * g.kh * g.kw * g.c
    if total * g.ow * g.o == 0 or kkc == 0:
        return np.zeros((g.n, g.od, g.oh, g.ow, g.o), dtype=dtype)
    y = np.empty((g.n, g.od, g.oh, g.ow, g.o), dtype=dtype)  # every row written by a gemm
    cdef floating[:, :, :, :, ::1] y_view = y
    cdef const floating* xp = &x[0, 0, 0, 0, 0]
    cdef const floating* wp = &w[0, 0, 0, 0, 0]
    cdef floating* yp = &y_view[0, 0, 0, 0, 0]
    cdef bint pointwise = _is_pointwise(&g)
    cdef Plan p = _plan(&g, sizeof(floating), False)
    cdef Py_ssize_t chunk, r0, r1
    cdef floating* col = NULL
    cdef int failed = 0
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    _blas_enter()
    with nogil, parallel(num_threads=p.threads):
        own = tapeflow_fpenv_swap(env)
        col = NULL if pointwise else _alloc(p.rows * g.ow * kkc, yp)
        if not pointwise and col == NULL:
            failed_p[0] = 1
        for chunk in prange(p.chunks, schedule="static"):
            r0 = chunk * p.rows
            r1 = min(r0 + p.rows, total)
            if pointwise:
                _gemm_split(c'N', c'N', (r1 - r0) * g.ow, g.o, kkc, 1, xp + r0 * g.ow * kkc,
                            kkc, wp, g.o, 0, yp + r0 * g.ow * g.o, g.o, p.gemm_threads)
            elif col != NULL:
                _im2col(&g, xp, col, r0, r1)
                _gemm_split(c'N', c'N', (r1 - r0) * g.ow, g.o, kkc, 1, col, kkc, wp, g.o, 0,
                            yp + r0 * g.ow * g.o, g.o, p.gemm_threads)
        free(col)
        tapeflow_fpenv_swap(own)
    _blas_leave()
    if failed:
        raise MemoryError("conv3d_forward: cannot allocate the im2col buffer")
    return y


def conv3d_backward_input(const floating[:, :, :, :, ::1] dy, const floating[:, :, :, :, ::1] w,
                          tuple in_size, tuple strides, tuple pads, tuple dilations):
    """dx[N, D, H, W, C] (in_size = (D, H, W)): the gradient of conv3d_forward wrt x."""
    if dy.shape[4] != w.shape[4]:
        raise ValueError(f"conv3d_backward_input: dy has {dy.shape[4]} channels but the "
                         f"filter {_shape5(w)} has {w.shape[4]} outputs")
    if len(in_size) != 3 or min(in_size) < 0:
        raise ValueError(f"conv3d_backward_input: input size must be three ints >= 0, got {in_size}")
    cdef Geometry g = _geometry("conv3d_backward_input", (dy.shape[0], *in_size, w.shape[3]),
                                _shape5(w), (dy.shape[1], dy.shape[2], dy.shape[3]), strides,
                                pads, dilations)
    dx = np.zeros((g.n, g.d, g.h, g.w, g.c), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, :, ::1] dx_view = dx
    cdef Py_ssize_t total = g.n * g.od * g.oh, kkc = g.kd * g.kh * g.kw * g.c
    if dx.size == 0 or total * g.ow * g.o == 0 or kkc == 0:
        return dx
    cdef const floating* dyp = &dy[0, 0, 0, 0, 0]
    cdef const floating* wp = &w[0, 0, 0, 0, 0]
    cdef floating* dxp = &dx_view[0, 0, 0, 0, 0]
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
        raise MemoryError("conv3d_backward_input: cannot allocate the col2im buffer")
    return dx


def conv3d_backward_filter(const floating[:, :, :, :, ::1] x, const floating[:, :, :, :, ::1] dy,
                           tuple ksize, tuple strides, tuple pads, tuple dilations):
    """dw[KD, KH, KW, C, O] (ksize = (KD, KH, KW)): the gradient of conv3d_forward wrt its filter."""
    if dy.shape[0] != x.shape[0]:
        raise ValueError(f"conv3d_backward_filter: x has batch {x.shape[0]} but dy has {dy.shape[0]}")
    if len(ksize) != 3 or min(ksize) < 0:
        raise ValueError(f"conv3d_backward_filter: kernel size must be three ints >= 0, got {ksize}")
    cdef Geometry g = _geometry("conv3d_backward_filter", _shape5(x), (*ksize, x.shape[4], dy.shape[4]),
                                (dy.shape[1], dy.shape[2], dy.shape[3]), strides, pads, dilations)
    dw = np.zeros((g.kd, g.kh, g.kw, g.c, g.o), dtype=np.float32 if floating is float else np.float64)
    cdef floating[:, :, :, :, ::1] dw_view = dw
    cdef Py_ssize_t total = g.n * g.od * g.oh, kkc = g.kd * g.kh * g.kw * g.c, size = kkc * g.o
    if size == 0 or total * g.ow == 0 or x.size == 0:
        return dw
    cdef const floating* xp = &x[0, 0, 0, 0, 0]
    cdef const floating* dyp = &dy[0, 0, 0, 0, 0]
    cdef floating* dwp = &dw_view[0, 0, 0, 0, 0]
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
        raise MemoryError("conv3d_backward_filter: cannot allocate partial sums")
    memset(partials, 0, (p.threads - 1) * size * sizeof(floating))
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    _blas_enter()
    with nogil, parallel(num_threads=p.threads):
        own = tapeflow_fpenv_swap(env)
        col = NULL if pointwise else _alloc(p.rows * g.ow * kkc, dwp)
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
                _im2col(&g, xp, col, r0, r1)
                _gemm_split(c'T', c'N', kkc, g.o, (r1 - r0) * g.ow, 1, col, kkc,
                            dyp + r0 * g.ow * g.o, g.o, 1, acc, g.o, p.gemm_threads)
        free(col)
        tapeflow_fpenv_swap(own)
    _blas_leave()
    with nogil:
        _add_partials(dwp, partials, p.threads - 1, size)
        free(partials)
    if failed:
        raise MemoryError("conv3d_backward_filter: cannot allocate the im2col buffer")
    return dw
