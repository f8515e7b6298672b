# 3x3, stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray): each
# 2x2 block of outputs comes from a 4x4 patch of the input, transformed (B^T d B), multiplied
# elementwise with the transformed filter (G g G^T) and transformed back (A^T m A). Summed over
# the channels, the 16 elementwise products of a block of tiles are 16 gemms, so a tile costs
# 16 multiply-adds per channel pair instead of the 36 that four outputs take directly.
#
#   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
#   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
#   A^T = [1 1 1 0; 0 1 -1 -1]
#
# The forward product runs in chunks of tiles with transformed inputs V[16][T][C] and products
# M[16][T][O]: each thread its own chunks and single-threaded gemms, or (many channel pairs) the
# threads sharing large chunks and splitting each gemm. The input gradient is the forward product
# of the output gradient with the filter turned half a turn; the filter gradient multiplies the
# transformed patches with the transformed output gradients (A dy A^T), sums over the tiles and
# takes the 16 sums back to 3x3 (G^T . G). 3x3 filters take 4x4 output tiles where those pay
# (F(4x4, 3x3), _winograd_f4.pxi), 5x5 filters 2x2 tiles from 6x6 patches (F(2x2, 5x5),
# _winograd_f25.pxi); the code below is the same for all three, P positions a tile.

cdef extern from *:
    """
    #if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
    #define TAPEFLOW_WINOGRAD_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define TAPEFLOW_WINOGRAD_CLONES
    #endif
    /* One tile's transforms over a run of channels, every stream a restrict pointer of its own
       so that the loops vectorize: the 16 input pixel rows d[k] into the 16 rows v + k * vs,
       and the 16 rows m + k * ms into the tile's four output rows y[0..3] (a row outside the
       output points at scratch). */
    #define TAPEFLOW_WINOGRAD(NAME, T)                                                       \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_in(const T* const* d, T* v, ptrdiff_t vs, ptrdiff_t c)               \\
    {                                                                                      \\
        const T *restrict d0 = d[0], *restrict d1 = d[1], *restrict d2 = d[2], *restrict d3 = d[3];      \\
        const T *restrict d4 = d[4], *restrict d5 = d[5], *restrict d6 = d[6], *restrict d7 = d[7];      \\
        const T *restrict d8 = d[8], *restrict d9 = d[9], *restrict d10 = d[10], *restrict d11 = d[11];  \\
        const T *restrict d12 = d[12], *restrict d13 = d[13], *restrict d14 = d[14], *restrict d15 = d[15]; \\
        T *restrict v0 = v, *restrict v1 = v + vs, *restrict v2 = v + 2 * vs, *restrict v3 = v + 3 * vs;  \\
        T *restrict v4 = v + 4 * vs, *restrict v5 = v + 5 * vs, *restrict v6 = v + 6 * vs;               \\
        T *restrict v7 = v + 7 * vs, *restrict v8 = v + 8 * vs, *restrict v9 = v + 9 * vs;               \\
        T *restrict v10 = v + 10 * vs, *restrict v11 = v + 11 * vs, *restrict v12 = v + 12 * vs;         \\
        T *restrict v13 = v + 13 * vs, *restrict v14 = v + 14 * vs, *restrict v15 = v + 15 * vs;         \\
        _Pragma("GCC ivdep")                                                               \\
        for (ptrdiff_t i = 0; i < c; i++) {                                                \\
            T q0 = d0[i] - d8[i], q1 = d1[i] - d9[i], q2 = d2[i] - d10[i], q3 = d3[i] - d11[i];          \\
            T q4 = d4[i] + d8[i], q5 = d5[i] + d9[i], q6 = d6[i] + d10[i], q7 = d7[i] + d11[i];          \\
            T q8 = d8[i] - d4[i], q9 = d9[i] - d5[i], q10 = d10[i] - d6[i], q11 = d11[i] - d7[i];       \\
            T q12 = d4[i] - d12[i], q13 = d5[i] - d13[i], q14 = d6[i] - d14[i], q15 = d7[i] - d15[i];   \\
            v0[i] = q0 - q2;    v1[i] = q1 + q2;    v2[i] = q2 - q1;    v3[i] = q1 - q3;                  \\
            v4[i] = q4 - q6;    v5[i] = q5 + q6;    v6[i] = q6 - q5;    v7[i] = q5 - q7;                  \\
            v8[i] = q8 - q10;   v9[i] = q9 + q10;   v10[i] = q10 - q9;  v11[i] = q9 - q11;                \\
            v12[i] = q12 - q14; v13[i] = q13 + q14; v14[i] = q14 - q13; v15[i] = q13 - q15;              \\
        }                                                                                  \\
    }                                                                                      \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_out(const T* m, ptrdiff_t ms, T* const* y, ptrdiff_t o)              \\
    {                                                                                      \\
        const T *restrict m0 = m, *restrict m1 = m + ms, *restrict m2 = m + 2 * ms;         \\
        const T *restrict m3 = m + 3 * ms, *restrict m4 = m + 4 * ms, *restrict m5 = m + 5 * ms;       \\
        const T *restrict m6 = m + 6 * ms, *restrict m7 = m + 7 * ms, *restrict m8 = m + 8 * ms;       \\
        const T *restrict m9 = m + 9 * ms, *restrict m10 = m + 10 * ms, *restrict m11 = m + 11 * ms;   \\
        const T *restrict m12 = m + 12 * ms, *restrict m13 = m + 13 * ms;                   \\
        const T *restrict m14 = m + 14 * ms, *restrict m15 = m + 15 * ms;                   \\
        T *restrict y0 = y[0], *restrict y1 = y[1], *restrict y2 = y[2], *restrict y3 = y[3];          \\
        _Pragma("GCC ivdep")                                                               \\
        for (ptrdiff_t i = 0; i < o; i++) {                                                \\
            T a0 = m0[i] + m4[i] + m8[i], a1 = m1[i] + m5[i] + m9[i];                       \\
            T a2 = m2[i] + m6[i] + m10[i], a3 = m3[i] + m7[i] + m11[i];                     \\
            T b0 = m4[i] - m8[i] - m12[i], b1 = m5[i] - m9[i] - m13[i];                     \\
            T b2 = m6[i] - m10[i] - m14[i], b3 = m7[i] - m11[i] - m15[i];                   \\
            y0[i] = a0 + a1 + a2;                                                          \\
            y1[i] = a1 - a2 - a3;                                                          \\
            y2[i] = b0 + b1 + b2;                                                          \\
            y3[i] = b1 - b2 - b3;                                                          \\
        }                                                                                  \\
    }
    /* The filter gradient's transform of a 2x2 tile of dy: the 16 rows of A dy A^T from the
       tile's four output rows y[0..3] (y00, y01, y10, y11; a row outside points at zeros). */
    #define TAPEFLOW_WINOGRAD_GRAD(NAME, T)                                                  \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_dy(const T* const* y, T* v, ptrdiff_t vs, ptrdiff_t o)               \\
    {                                                                                      \\
        const T *restrict y0 = y[0], *restrict y1 = y[1], *restrict y2 = y[2], *restrict y3 = y[3];    \\
        T *restrict v0 = v, *restrict v1 = v + vs, *restrict v2 = v + 2 * vs, *restrict v3 = v + 3 * vs;  \\
        T *restrict v4 = v + 4 * vs, *restrict v5 = v + 5 * vs, *restrict v6 = v + 6 * vs;               \\
        T *restrict v7 = v + 7 * vs, *restrict v8 = v + 8 * vs, *restrict v9 = v + 9 * vs;               \\
        T *restrict v10 = v + 10 * vs, *restrict v11 = v + 11 * vs, *restrict v12 = v + 12 * vs;         \\
        T *restrict v13 = v + 13 * vs, *restrict v14 = v + 14 * vs, *restrict v15 = v + 15 * vs;         \\
        _Pragma("GCC ivdep")                                                               \\
        for (ptrdiff_t i = 0; i < o; i++) {                                                \\
            T p00 = y0[i], p01 = y1[i];                                                    \\
            T p10 = y0[i] + y2[i], p11 = y1[i] + y3[i];                                    \\
            T p20 = y0[i] - y2[i], p21 = y1[i] - y3[i];                                    \\
            T p30 = -y2[i], p31 = -y3[i];                                                  \\
            v0[i] = p00;  v1[i] = p00 + p01;  v2[i] = p00 - p01;  v3[i] = -p01;            \\
            v4[i] = p10;  v5[i] = p10 + p11;  v6[i] = p10 - p11;  v7[i] = -p11;            \\
            v8[i] = p20;  v9[i] = p20 + p21;  v10[i] = p20 - p21; v11[i] = -p21;           \\
            v12[i] = p30; v13[i] = p30 + p31; v14[i] = p30 - p31; v15[i] = -p31;           \\
        }                                                                                  \\
    }
    TAPEFLOW_WINOGRAD(tapeflow_winograd_f32, float)
    TAPEFLOW_WINOGRAD_GRAD(tapeflow_winograd_f32, float)
    TAPEFLOW_WINOGRAD_GRAD(tapeflow_winograd_f64, double)
    TAPEFLOW_WINOGRAD(tapeflow_winograd_f64, double)
    """
    void tapeflow_winograd_f32_in(const float* const* d, float* v, Py_ssize_t vs, Py_ssize_t c) noexcept nogil
    void tapeflow_winograd_f64_in(const double* const* d, double* v, Py_ssize_t vs, Py_ssize_t c) noexcept nogil
    void tapeflow_winograd_f32_out(const float* m, Py_ssize_t ms, float* const* y, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f64_out(const double* m, Py_ssize_t ms, double* const* y, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f32_dy(const float* const* y, float* v, Py_ssize_t vs, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f64_dy(const double* const* y, double* v, Py_ssize_t vs, Py_ssize_t o) noexcept nogil

# Fewer channels than this on either side leave the gemms too thin for the transforms to pay,
# and fewer 2x2 tiles than _WINOGRAD_MIN_TILES leave too little work to pay for transforming
# the filter (measured: 256 tiles of 512 x 512 channels lose to im2col, 392 gain 1.5x). Up to
# _WINOGRAD_THREAD_PAIRS channel pairs each thread takes chunks of tiles of its own; beyond,
# the 16 transformed filters (16 C O numbers) outgrow the caches, and the threads share larger
# chunks, splitting each gemm between them.
cdef Py_ssize_t _WINOGRAD_MIN_CHANNELS = 32
cdef Py_ssize_t _WINOGRAD_MIN_TILES = 384
cdef Py_ssize_t _WINOGRAD_THREAD_PAIRS = 256 * 256
# From this many 2x2 tiles a thread (or 4x4 tiles of as many products), the filter gradient's
# threads sum their own tiles (batch 16, 2 threads, median of 12: 392 2x2 tiles a thread of
# 14x14 160 -> 320 channels 10.1 -> 9.2 ms, 392 4x4 tiles of 28x28 128 -> 192 16.3 -> 12.2 ms;
# 128 2x2 tiles a thread of 7x7 192 -> 384 5.2 ms split, 5.7 summed apart).
cdef Py_ssize_t _WINOGRAD_OWN_SUM_TILES = 256
# Per-thread bound on a chunk's V and M, and the bound on a chunk the threads share.
cdef Py_ssize_t _winograd_buffer_bytes = 2 * 1024 * 1024
cdef Py_ssize_t _winograd_shared_bytes = 24 * 1024 * 1024
# The 4x4 tiles of F(4x4, 3x3) are taken where their products come to at most this share of
# the 2x2 tiles' (a 7x7 output: 0.56, 14x14: 0.73; a 2x2 one: 2.25) and there are at least
# _WINOGRAD_BIG_MIN_TILES of them: their 36 transformed filters cost 2.25 times the 16 of F(2x2,
# 3x3) to make and to pack for each chunk's gemms, which fewer tiles do not pay back (measured
# at batch 16, 2 threads: 28x28 outputs, 784 tiles, 16 -> 12 ms; 14x14, 256 tiles, 11 -> 14 ms).
# Below _WINOGRAD_OWN_TILES tiles of either size the threads share chunks, so that each packed
# filter serves more tiles (4x4 tiles of 28x28 outputs: 13.5 ms in chunks of each thread's own,
# 11.6 shared; 2x2 tiles of the five 14x14 layers of GoogLeNet, forward: 36 -> 32 ms).
cdef double _WINOGRAD_BIG_SHARE = 0.8
cdef Py_ssize_t _WINOGRAD_BIG_MIN_TILES = 512
cdef Py_ssize_t _WINOGRAD_OWN_TILES = 2048


def _set_winograd_limits(Py_ssize_t min_channels, Py_ssize_t thread_pairs, Py_ssize_t min_tiles):
    """Change when 3x3 convolutions take Winograd's way (channels on each side, the channel
    pairs up to which each thread takes its own chunks, tiles) and return the old limits as a
    tuple (tests compare the ways with each other and with im2col)."""
    global _WINOGRAD_MIN_CHANNELS, _WINOGRAD_THREAD_PAIRS, _WINOGRAD_MIN_TILES
    old = (_WINOGRAD_MIN_CHANNELS, _WINOGRAD_THREAD_PAIRS, _WINOGRAD_MIN_TILES)
    _WINOGRAD_MIN_CHANNELS, _WINOGRAD_THREAD_PAIRS = max(1, min_channels), max(1, thread_pairs)
    _WINOGRAD_MIN_TILES = max(1, min_tiles)
    return old


def _set_winograd_big_tiles(double share, Py_ssize_t min_tiles, Py_ssize_t own_tiles):
    """Change when 4x4 tiles are taken (the share of the 2x2 tiles' products and the fewest
    tiles; (0, 0, _): never, (inf, 0, _): always) and from how many tiles of either size each
    thread takes chunks of its own; returns the old limits as a tuple (tests compare the tile sizes and the
    ways of chunking)."""
    global _WINOGRAD_BIG_SHARE, _WINOGRAD_BIG_MIN_TILES, _WINOGRAD_OWN_TILES
    old = (_WINOGRAD_BIG_SHARE, _WINOGRAD_BIG_MIN_TILES, _WINOGRAD_OWN_TILES)
    _WINOGRAD_BIG_SHARE, _WINOGRAD_BIG_MIN_TILES, _WINOGRAD_OWN_TILES = share, max(0, min_tiles), max(0, own_tiles)
    return old


cdef inline int _winograd_tile(const Geometry* g) noexcept nogil:
    """The output tile's side for g: 4 where the filter is 3x3, there are _WINOGRAD_BIG_MIN_TILES
    4x4 tiles and F(4x4, 3x3)'s 36 products a tile, over its tiles, come to at most
    _WINOGRAD_BIG_SHARE of F(2x2, 3x3)'s 16, else 2 (a 5x5 filter's always)."""
    if g.kh == 5:
        return 2
    cdef Py_ssize_t tiles = g.n * ((g.oh + 3) // 4) * ((g.ow + 3) // 4)
    if tiles >= _WINOGRAD_BIG_MIN_TILES and 36.0 * tiles <= _WINOGRAD_BIG_SHARE * 16.0 * _winograd_tiles(g):
        return 4
    return 2


cdef void _winograd(str op, bint filter_grad, const Geometry* g, const floating* a, const floating* b,
                    floating* out) except *:
    """`_winograd_filter_grad(g, a, b, out, filters, tile)` with `filter_grad`, else
    `_winograd_conv`, on the tiles `_winograd_tile` picks, with BLAS counted as running; a
    MemoryError naming `op` where the buffers cannot be had. The P transformed filters (P C O
    numbers, P = 16 or 36 positions a tile; tens of MB for wide layers) are a NumPy array, so
    that inside a graph run they take a block an earlier step gave back instead of fresh pages
    (see tapeflow._kernels.allocator)."""
    cdef int failed
    cdef int tile = _winograd_tile(g)
    cdef Py_ssize_t size = _winograd_positions(g, tile) * g.c * g.o + g.c + g.o
    try:  # the filter gradient sums into all of it; the forward writes all but the zero rows
        filters = (np.zeros if filter_grad else np.empty)(size, np.float32 if floating is float else np.float64)
    except MemoryError:
        raise MemoryError(f"{op}: cannot allocate the Winograd buffers") from None
    if not filter_grad:
        filters[size - g.c - g.o :] = 0
    cdef floating[::1] filters_view = filters
    cdef floating* fp = &filters_view[0]
    _blas_enter()
    with nogil:
        if filter_grad:
            failed = _winograd_filter_grad(g, a, b, out, fp, tile)
        else:
            failed = _winograd_conv(g, a, b, out, fp, tile)
    _blas_leave()
    if failed:
        raise MemoryError(f"{op}: cannot allocate the Winograd buffers")


cdef inline Py_ssize_t _winograd_positions(const Geometry* g, int tile) noexcept nogil:
    """P: the positions of a transformed tile, (tile + k - 1)^2 for a k x k filter (16 for
    F(2x2, 3x3), 36 for F(4x4, 3x3) and F(2x2, 5x5))."""
    return (tile + g.kh - 1) * (tile + g.kh - 1)


cdef inline bint _winograd_fits(const Geometry* g) noexcept nogil:
    """A 3x3 or 5x5, stride-1, undilated convolution with the channels and tiles for the transforms to
    pay, while BLAS runs on the calling thread (our threads split the gemms)."""
    return _winograd_shape_fits(g) and _winograd_tiles(g) >= _WINOGRAD_MIN_TILES


cdef inline bint _winograd_fits_filter_grad(const Geometry* g) noexcept nogil:
    """`_winograd_fits` for the filter gradient, which pays from half the tiles (measured at
    196-256 tiles: 10-43 ms against im2col's 12-84; at 576 tiles of 1024 x 1024 channels 330
    against 486)."""
    return _winograd_shape_fits(g) and _winograd_tiles(g) >= _WINOGRAD_MIN_TILES // 2


cdef inline bint _winograd_shape_fits(const Geometry* g) noexcept nogil:
    return ((g.kh == 3 or g.kh == 5) and g.kw == g.kh and g.sh == 1 and g.sw == 1 and g.dh == 1 and g.dw == 1
            and g.c >= _WINOGRAD_MIN_CHANNELS and g.o >= _WINOGRAD_MIN_CHANNELS and _blas_single())


cdef inline Py_ssize_t _winograd_tiles(const Geometry* g) noexcept nogil:
    return g.n * ((g.oh + 1) // 2) * ((g.ow + 1) // 2)


cdef void _winograd_filter(const floating* w, floating* u, Py_ssize_t c, Py_ssize_t o, int threads,
                           int tile, int k) noexcept nogil:
    """u[P][c][o] = G g G^T for every (channel, output) pair of w[k][k][c][o] (P = 16 positions for
    2x2 output tiles of a 3x3 filter, 36 for 4x4 ones or a 5x5 filter), the pairs shared out among
    `threads`."""
    cdef Py_ssize_t plane = c * o, part
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for part in prange(threads, schedule="static"):
            if k == 5:
                _winograd25_filter_pairs(w, u, plane, plane * part // threads, plane * (part + 1) // threads)
            elif tile == 4:
                _winograd4_filter_pairs(w, u, plane, plane * part // threads, plane * (part + 1) // threads)
            else:
                _winograd_filter_pairs(w, u, plane, plane * part // threads, plane * (part + 1) // threads)
        tapeflow_fpenv_swap(own)


cdef void _winograd_filter_pairs(const floating* w, floating* u, Py_ssize_t plane, Py_ssize_t lo,
                                 Py_ssize_t hi) noexcept nogil:
    """`_winograd_filter` for the pairs [lo, hi) of the plane."""
    cdef Py_ssize_t i, r, s
    cdef floating e[4][3]
    cdef floating g0, g1, g2
    for i in range(lo, hi):
        for s in range(3):  # G g: the rows of G times each column of g
            g0 = w[(0 * 3 + s) * plane + i]
            g1 = w[(1 * 3 + s) * plane + i]
            g2 = w[(2 * 3 + s) * plane + i]
            e[0][s] = g0
            e[1][s] = (g0 + g1 + g2) * 0.5
            e[2][s] = (g0 - g1 + g2) * 0.5
            e[3][s] = g2
        for r in range(4):  # (G g) G^T
            u[(r * 4 + 0) * plane + i] = e[r][0]
            u[(r * 4 + 1) * plane + i] = (e[r][0] + e[r][1] + e[r][2]) * 0.5
            u[(r * 4 + 2) * plane + i] = (e[r][0] - e[r][1] + e[r][2]) * 0.5
            u[(r * 4 + 3) * plane + i] = e[r][2]


cdef void _winograd_inputs(const Geometry* g, const floating* x, const floating* zeros, floating* v,
                           Py_ssize_t base, Py_ssize_t count, Py_ssize_t t0, Py_ssize_t t1, Py_ssize_t tiles_h,
                           Py_ssize_t tiles_w, int tile) noexcept nogil:
    """v[P][count][C] (the planes of tiles base .. base + count) = B^T d B for the input
    patches d (tile + k - 1 pixels a side) of tiles [t0, t1); a pixel outside the image reads
    the row `zeros`."""
    cdef Py_ssize_t t, n, ti, tj, row, col, r, s, side = tile + g.kh - 1
    cdef const floating* rows[36]
    for t in range(t0, t1):
        n = t // (tiles_h * tiles_w)
        ti = (t // tiles_w) % tiles_h
        tj = t % tiles_w
        for r in range(side):
            row = tile * ti - g.pt + r
            for s in range(side):
                col = tile * tj - g.pl + s
                if 0 <= row < g.h and 0 <= col < g.w:
                    rows[r * side + s] = x + ((n * g.h + row) * g.w + col) * g.c
                else:
                    rows[r * side + s] = zeros
        if floating is float:
            if side == 6:
                tapeflow_winograd_f32_in4(rows, v + (t - base) * g.c, count * g.c, g.c)
            else:
                tapeflow_winograd_f32_in(rows, v + (t - base) * g.c, count * g.c, g.c)
        else:
            if side == 6:
                tapeflow_winograd_f64_in4(rows, v + (t - base) * g.c, count * g.c, g.c)
            else:
                tapeflow_winograd_f64_in(rows, v + (t - base) * g.c, count * g.c, g.c)


cdef void _winograd_outputs(const Geometry* g, const floating* m, floating* y, floating* scratch,
                            Py_ssize_t base, Py_ssize_t count, Py_ssize_t t0, Py_ssize_t t1,
                            Py_ssize_t tiles_h, Py_ssize_t tiles_w, int tile) noexcept nogil:
    """The tile x tile outputs A^T m A of tiles [t0, t1) (m: the planes [P][count][O] of tiles
    base .. base + count) into y, with the forward's bias and relu; those outside out_h x out_w
    into the row `scratch`."""
    cdef Py_ssize_t t, n, ti, tj, r, s, row, col
    cdef floating* outs[16]
    for t in range(t0, t1):
        n = t // (tiles_h * tiles_w)
        ti = (t // tiles_w) % tiles_h
        tj = t % tiles_w
        for r in range(tile):
            row = tile * ti + r
            for s in range(tile):
                col = tile * tj + s
                outs[r * tile + s] = y + ((n * g.oh + row) * g.ow + col) * g.o if row < g.oh and col < g.ow else scratch
        if floating is float:
            if g.kh == 5:
                tapeflow_winograd_f32_out25(m + (t - base) * g.o, count * g.o, outs, g.o)
            elif tile == 4:
                tapeflow_winograd_f32_out4(m + (t - base) * g.o, count * g.o, outs, g.o)
            else:
                tapeflow_winograd_f32_out(m + (t - base) * g.o, count * g.o, outs, g.o)
        else:
            if g.kh == 5:
                tapeflow_winograd_f64_out25(m + (t - base) * g.o, count * g.o, outs, g.o)
            elif tile == 4:
                tapeflow_winograd_f64_out4(m + (t - base) * g.o, count * g.o, outs, g.o)
            else:
                tapeflow_winograd_f64_out(m + (t - base) * g.o, count * g.o, outs, g.o)
        for r in range(tile * tile):
            if outs[r] != scratch:
                _finish_pixels(g, outs[r], 1)


cdef int _winograd_conv(const Geometry* g, const floating* x, const floating* w, floating* y,
                        floating* u, int tile) noexcept nogil:
    """y = the convolution of x with the k x k filter w (stride 1, no dilation, g's padding and
    output size) on output tiles of tile x tile, every output written, u (P C O numbers, then
    C zeros; P = (tile + k - 1)^2) holding the transformed filters; returns 1 where memory ran
    out (y then unwritten)."""
    cdef Py_ssize_t tiles_h = (g.oh + tile - 1) // tile, tiles_w = (g.ow + tile - 1) // tile
    cdef Py_ssize_t tiles = g.n * tiles_h * tiles_w
    cdef Py_ssize_t P = _winograd_positions(g, tile)
    cdef Py_ssize_t per_tile = P * (g.c + g.o) * sizeof(floating)
    cdef Py_ssize_t per_chunk = max(1, min(tiles, _winograd_buffer_bytes // per_tile))
    cdef int threads = _threads_for(tiles * P * g.c * g.o, 1 << 16)
    cdef Py_ssize_t chunks, chunk, t0, t1, k, count
    if threads > 1:  # at least one chunk a thread, the chunks even
        per_chunk = min(per_chunk, (tiles + threads - 1) // threads)
    chunks = (tiles + per_chunk - 1) // per_chunk
    cdef floating* zeros = u + P * g.c * g.o
    _winograd_filter(w, u, g.c, g.o, threads, tile, g.kh)
    cdef int failed = 0
    if g.c * g.o > _WINOGRAD_THREAD_PAIRS or tiles < _WINOGRAD_OWN_TILES:
        return _winograd_shared_chunks(g, x, u, zeros, y, tiles, tiles_h, tiles_w, threads, tile)
    cdef floating* v = NULL
    cdef floating* m = NULL
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        v = <floating*>malloc((P * per_chunk * (g.c + g.o) + g.o) * sizeof(floating))
        m = v + P * per_chunk * g.c if v != NULL else NULL
        if v == NULL:
            failed_p[0] = 1
        for chunk in prange(chunks, schedule="static"):
            if v == NULL:
                continue
            t0 = chunk * per_chunk
            t1 = min(t0 + per_chunk, tiles)
            count = t1 - t0
            _winograd_inputs(g, x, zeros, v, t0, count, t0, t1, tiles_h, tiles_w, tile)
            for k in range(P):
                _gemm(c'N', c'N', count, g.o, g.c, 1, v + k * count * g.c, g.c, u + k * g.c * g.o, g.o, 0,
                      m + k * count * g.o, g.o)
            _winograd_outputs(g, m, y, m + P * per_chunk * g.o, t0, count, t0, t1, tiles_h, tiles_w, tile)
        free(v)
        tapeflow_fpenv_swap(own)
    return failed


cdef int _winograd_shared_chunks(const Geometry* g, const floating* x, const floating* u, const floating* zeros,
                                 floating* y, Py_ssize_t tiles, Py_ssize_t tiles_h, Py_ssize_t tiles_w,
                                 int threads, int tile) noexcept nogil:
    """Many channel pairs: large chunks of tiles one after another, each transform shared out
    among the threads and each of the 16 gemms split over them, so that every transformed
    filter is packed once a chunk for many tiles. Returns 1 where memory ran out."""
    cdef Py_ssize_t P = _winograd_positions(g, tile)
    cdef Py_ssize_t per_tile = P * (g.c + g.o) * sizeof(floating)
    cdef Py_ssize_t per_chunk = max(1, min(tiles, _winograd_shared_bytes // per_tile))
    cdef floating* v = <floating*>malloc((P * per_chunk * (g.c + g.o) + threads * g.o) * sizeof(floating))
    if v == NULL:
        return 1
    cdef floating* m = v + P * per_chunk * g.c
    cdef floating* scratch = m + P * per_chunk * g.o
    cdef Py_ssize_t chunk, t0, t1, count, k, part, a, b
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    for chunk in range((tiles + per_chunk - 1) // per_chunk):
        t0 = chunk * per_chunk
        t1 = min(t0 + per_chunk, tiles)
        count = t1 - t0
        with parallel(num_threads=threads):
            own = tapeflow_fpenv_swap(env)
            for part in prange(threads, schedule="static"):
                a = t0 + count * part // threads
                b = t0 + count * (part + 1) // threads
                _winograd_inputs(g, x, zeros, v, t0, count, a, b, tiles_h, tiles_w, tile)
            tapeflow_fpenv_swap(own)
        for k in range(P):
            _gemm_split(c'N', c'N', count, g.o, g.c, 1, v + k * count * g.c, g.c, u + k * g.c * g.o, g.o, 0,
                        m + k * count * g.o, g.o, threads)
        with parallel(num_threads=threads):
            own = tapeflow_fpenv_swap(env)
            for part in prange(threads, schedule="static"):
                a = t0 + count * part // threads
                b = t0 + count * (part + 1) // threads
                _winograd_outputs(g, m, y, scratch + part * g.o, t0, count, a, b, tiles_h, tiles_w, tile)
            tapeflow_fpenv_swap(own)
    free(v)
    return 0


cdef void _winograd_output_grads(const Geometry* g, const floating* dy, const floating* zeros, floating* v,
                                 Py_ssize_t base, Py_ssize_t count, Py_ssize_t t0, Py_ssize_t t1,
                                 Py_ssize_t tiles_h, Py_ssize_t tiles_w, int tile) noexcept nogil:
    """v[P][count][O] (the planes of tiles base .. base + count) = A dy A^T for the tile x tile
    blocks of dy of tiles [t0, t1); an output outside out_h x out_w reads the row `zeros`."""
    cdef Py_ssize_t t, n, ti, tj, r, s, row, col
    cdef const floating* rows[16]
    for t in range(t0, t1):
        n = t // (tiles_h * tiles_w)
        ti = (t // tiles_w) % tiles_h
        tj = t % tiles_w
        for r in range(tile):
            row = tile * ti + r
            for s in range(tile):
                col = tile * tj + s
                rows[r * tile + s] = dy + ((n * g.oh + row) * g.ow + col) * g.o if row < g.oh and col < g.ow else zeros
        if floating is float:
            if g.kh == 5:
                tapeflow_winograd_f32_dy25(rows, v + (t - base) * g.o, count * g.o, g.o)
            elif tile == 4:
                tapeflow_winograd_f32_dy4(rows, v + (t - base) * g.o, count * g.o, g.o)
            else:
                tapeflow_winograd_f32_dy(rows, v + (t - base) * g.o, count * g.o, g.o)
        else:
            if g.kh == 5:
                tapeflow_winograd_f64_dy25(rows, v + (t - base) * g.o, count * g.o, g.o)
            elif tile == 4:
                tapeflow_winograd_f64_dy4(rows, v + (t - base) * g.o, count * g.o, g.o)
            else:
                tapeflow_winograd_f64_dy(rows, v + (t - base) * g.o, count * g.o, g.o)


cdef void _winograd_filter_back(const floating* du, floating* dw, Py_ssize_t c, Py_ssize_t o,
                                int threads, int tile, int k) noexcept nogil:
    """dw[k][k][c][o] = G^T du G for every (channel, output) pair of du[P][c][o]: the adjoint
    of `_winograd_filter`, the pairs shared out among `threads`."""
    cdef Py_ssize_t plane = c * o, part
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for part in prange(threads, schedule="static"):
            if k == 5:
                _winograd25_filter_back_pairs(du, dw, plane, plane * part // threads, plane * (part + 1) // threads)
            elif tile == 4:
                _winograd4_filter_back_pairs(du, dw, plane, plane * part // threads, plane * (part + 1) // threads)
            else:
                _winograd_filter_back_pairs(du, dw, plane, plane * part // threads, plane * (part + 1) // threads)
        tapeflow_fpenv_swap(own)


cdef void _winograd_filter_back_pairs(const floating* du, floating* dw, Py_ssize_t plane, Py_ssize_t lo,
                                      Py_ssize_t hi) noexcept nogil:
    """`_winograd_filter_back` for the pairs [lo, hi) of the plane."""
    cdef Py_ssize_t i, s, a
    cdef floating e[3][4]
    cdef floating u0, u1, u2, u3
    for i in range(lo, hi):
        for s in range(4):  # G^T du: the columns of G times each column s of du
            u0 = du[(0 * 4 + s) * plane + i]
            u1 = du[(1 * 4 + s) * plane + i]
            u2 = du[(2 * 4 + s) * plane + i]
            u3 = du[(3 * 4 + s) * plane + i]
            e[0][s] = u0 + (u1 + u2) * 0.5
            e[1][s] = (u1 - u2) * 0.5
            e[2][s] = (u1 + u2) * 0.5 + u3
        for a in range(3):  # (G^T du) G, row a of the filter
            dw[(a * 3 + 0) * plane + i] = e[a][0] + (e[a][1] + e[a][2]) * 0.5
            dw[(a * 3 + 1) * plane + i] = (e[a][1] - e[a][2]) * 0.5
            dw[(a * 3 + 2) * plane + i] = (e[a][1] + e[a][2]) * 0.5 + e[a][3]


cdef int _winograd_filter_grad(const Geometry* g, const floating* x, const floating* dy, floating* dw,
                               floating* du, int tile) noexcept nogil:
    """dw = the gradient of the k x k convolution wrt its filter: for each of the P transformed
    positions, the transformed input patches times the transformed output gradients, summed over
    the tiles into du (P C O + C + O numbers, zeroed), then taken back to k x k by G^T . G.
    With many tiles each thread sums the products of its own tiles, single-threaded gemms with
    the whole C x O output, into sums of its own (the first thread's into du) added at the end;
    with fewer, or where those sums would outgrow the shared bound, each gemm is split over the
    threads instead. Returns 1 where memory ran out."""
    cdef Py_ssize_t tiles_h = (g.oh + tile - 1) // tile, tiles_w = (g.ow + tile - 1) // tile
    cdef Py_ssize_t P = _winograd_positions(g, tile)
    cdef Py_ssize_t tiles = g.n * tiles_h * tiles_w
    cdef Py_ssize_t per_tile = P * (g.c + g.o) * sizeof(floating)
    cdef int threads = _threads_for(tiles * P * g.c * g.o, 1 << 16)
    cdef Py_ssize_t size = P * g.c * g.o
    cdef bint own_sums = (threads > 1 and tiles * P >= _WINOGRAD_OWN_SUM_TILES * 16 * threads
                          and (threads - 1) * size * <Py_ssize_t>sizeof(floating) <= _winograd_shared_bytes)
    # Threads summing their own tiles take a part of the chunk each that fits the per-thread
    # bound (the 56x56 64 -> 192 layer at batch 16: 42 ms in chunks of the shared bound, 26 in
    # these); split gemms take chunks of the shared bound, so that each gemm is long.
    cdef Py_ssize_t per_chunk = max(1, min(tiles, (threads * _winograd_buffer_bytes if own_sums
                                                   else _winograd_shared_bytes) // per_tile))
    cdef floating* v = <floating*>malloc(max(1, P * per_chunk * (g.c + g.o)) * sizeof(floating))
    cdef floating* partials = <floating*>calloc(max(1, (threads - 1) * size if own_sums else 1), sizeof(floating))
    if v == NULL or partials == NULL:
        free(v)
        free(partials)
        return 1
    cdef floating* zeros_c = du + size
    cdef floating* zeros_o = zeros_c + g.c
    cdef floating* m = v + P * per_chunk * g.c
    cdef floating* acc
    cdef Py_ssize_t chunk, t0, t1, count, k, part, a, b
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    for chunk in range((tiles + per_chunk - 1) // per_chunk):
        t0 = chunk * per_chunk
        t1 = min(t0 + per_chunk, tiles)
        count = t1 - t0
        with parallel(num_threads=threads):
            own = tapeflow_fpenv_swap(env)
            for part in prange(threads, schedule="static"):
                a = t0 + count * part // threads
                b = t0 + count * (part + 1) // threads
                _winograd_inputs(g, x, zeros_c, v, t0, count, a, b, tiles_h, tiles_w, tile)
                _winograd_output_grads(g, dy, zeros_o, m, t0, count, a, b, tiles_h, tiles_w, tile)
                if own_sums and b > a:
                    acc = du if part == 0 else partials + (part - 1) * size
                    for k in range(P):
                        _gemm(c'T', c'N', g.c, g.o, b - a, 1, v + k * count * g.c + (a - t0) * g.c, g.c,
                              m + k * count * g.o + (a - t0) * g.o, g.o, 1, acc + k * g.c * g.o, g.o)
            tapeflow_fpenv_swap(own)
        if not own_sums:
            for k in range(P):
                _gemm_split(c'T', c'N', g.c, g.o, count, 1, v + k * count * g.c, g.c, m + k * count * g.o, g.o, 1,
                            du + k * g.c * g.o, g.o, threads)
    if own_sums:
        _add_partials(du, partials, threads - 1, size)
    _winograd_filter_back(du, dw, g.c, g.o, threads, tile, g.kh)
    free(v)
    free(partials)
    return 0

