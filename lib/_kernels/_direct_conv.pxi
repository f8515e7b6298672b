# Direct convolution for inputs with few channels (an image's first layer: 3 channels, a 7x7 or
# 11x11 filter, a stride): im2col would copy each input pixel kh*kw/(sh*sw) times into a
# matrix with a short inner side that a gemm then reads again. Here each output row reads its
# zero-padded band of input rows (_fill_band) in place: a kernel row's taps are one contiguous
# run of the band, multiplied into 2 pixels x 32 output channels held in registers. The filter
# gradient sweeps the same band against the row's output gradients, 2 taps x 32 channels at a
# time. float32 with AVX2 and FMA, output channels a multiple of 32; elsewhere im2col. Each
# output element is one chain of multiply-adds over the taps in order, whatever the threads.

cdef extern from *:
    """
    #include <stddef.h>
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define TAPEFLOW_DIRECT_AVX2 __attribute__((target("avx2,fma")))

    /* y[p][ob .. ob + 16] for the pixels p0 .. p0 + count - 1 (count up to 6) of one output
       row; a missing pixel repeats the first and is not stored. */
    TAPEFLOW_DIRECT_AVX2 static inline void tapeflow_direct_pixels(
        const float *band, ptrdiff_t band_row, const float *w, float *y, ptrdiff_t o, ptrdiff_t kh,
        ptrdiff_t run, ptrdiff_t step, ptrdiff_t p0, ptrdiff_t ob, int count)
    {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0;
        __m256 d0 = a0, d1 = a0, e0 = a0, e1 = a0, f0 = a0, f1 = a0;
        const ptrdiff_t s1 = count > 1 ? step : 0, s2 = count > 2 ? 2 * step : 0, s3 = count > 3 ? 3 * step : 0;
        const ptrdiff_t s4 = count > 4 ? 4 * step : 0, s5 = count > 5 ? 5 * step : 0;
        for (ptrdiff_t i = 0; i < kh; i++) {
            const float *x = band + i * band_row + p0 * step;
            const float *wi = w + i * run * o + ob;
            for (ptrdiff_t q = 0; q < run; q++) {
                const __m256 w0 = _mm256_loadu_ps(wi + q * o), w1 = _mm256_loadu_ps(wi + q * o + 8);
                __m256 u = _mm256_broadcast_ss(x + q);
                a0 = _mm256_fmadd_ps(u, w0, a0); a1 = _mm256_fmadd_ps(u, w1, a1);
                u = _mm256_broadcast_ss(x + s1 + q);
                b0 = _mm256_fmadd_ps(u, w0, b0); b1 = _mm256_fmadd_ps(u, w1, b1);
                u = _mm256_broadcast_ss(x + s2 + q);
                c0 = _mm256_fmadd_ps(u, w0, c0); c1 = _mm256_fmadd_ps(u, w1, c1);
                u = _mm256_broadcast_ss(x + s3 + q);
                d0 = _mm256_fmadd_ps(u, w0, d0); d1 = _mm256_fmadd_ps(u, w1, d1);
                u = _mm256_broadcast_ss(x + s4 + q);
                e0 = _mm256_fmadd_ps(u, w0, e0); e1 = _mm256_fmadd_ps(u, w1, e1);
                u = _mm256_broadcast_ss(x + s5 + q);
                f0 = _mm256_fmadd_ps(u, w0, f0); f1 = _mm256_fmadd_ps(u, w1, f1);
            }
        }
        float *yp = y + p0 * o + ob;
        _mm256_storeu_ps(yp, a0); _mm256_storeu_ps(yp + 8, a1);
        if (count > 1) { _mm256_storeu_ps(yp + o, b0); _mm256_storeu_ps(yp + o + 8, b1); }
        if (count > 2) { _mm256_storeu_ps(yp + 2 * o, c0); _mm256_storeu_ps(yp + 2 * o + 8, c1); }
        if (count > 3) { _mm256_storeu_ps(yp + 3 * o, d0); _mm256_storeu_ps(yp + 3 * o + 8, d1); }
        if (count > 4) { _mm256_storeu_ps(yp + 4 * o, e0); _mm256_storeu_ps(yp + 4 * o + 8, e1); }
        if (count > 5) { _mm256_storeu_ps(yp + 5 * o, f0); _mm256_storeu_ps(yp + 5 * o + 8, f1); }
    }

    /* One output row y[ow][o] from its band (kh rows of band_row numbers) and the filter
       w[kh][run][o], run = kw * C taps a kernel row, step = sw * C between pixels. */
    TAPEFLOW_DIRECT_AVX2 static void tapeflow_direct_row(const float *band, ptrdiff_t band_row, const float *w,
                                                         float *y, ptrdiff_t ow, ptrdiff_t o, ptrdiff_t kh,
                                                         ptrdiff_t run, ptrdiff_t step)
    {
        for (ptrdiff_t ob = 0; ob < o; ob += 16)
            for (ptrdiff_t p = 0; p < ow; p += 6)
                tapeflow_direct_pixels(band, band_row, w, y, o, kh, run, step, p, ob, ow - p < 6 ? (int)(ow - p) : 6);
    }

    /* dw[kh][run][o] += the band's taps times the row's output gradients dy[ow][o], summed over
       the row's pixels in order: 2 taps x 32 channels in registers a sweep. */
    TAPEFLOW_DIRECT_AVX2 static void tapeflow_direct_row_filter(const float *band, ptrdiff_t band_row,
                                                                const float *dy, float *dw, ptrdiff_t ow,
                                                                ptrdiff_t o, ptrdiff_t kh, ptrdiff_t run,
                                                                ptrdiff_t step)
    {
        for (ptrdiff_t i = 0; i < kh; i++) {
            const float *bi = band + i * band_row;
            for (ptrdiff_t q = 0; q < run; q += 2) {
                const int two = q + 1 < run;
                for (ptrdiff_t ob = 0; ob < o; ob += 32) {
                    float *d0 = dw + (i * run + q) * o + ob, *d1 = two ? d0 + o : d0;
                    __m256 a0 = _mm256_loadu_ps(d0), a1 = _mm256_loadu_ps(d0 + 8);
                    __m256 a2 = _mm256_loadu_ps(d0 + 16), a3 = _mm256_loadu_ps(d0 + 24);
                    __m256 b0 = _mm256_loadu_ps(d1), b1 = _mm256_loadu_ps(d1 + 8);
                    __m256 b2 = _mm256_loadu_ps(d1 + 16), b3 = _mm256_loadu_ps(d1 + 24);
                    const float *xq = bi + q, *xr = two ? xq + 1 : xq;
                    for (ptrdiff_t p = 0; p < ow; p++) {
                        const float *g = dy + p * o + ob;
                        const __m256 g0 = _mm256_loadu_ps(g), g1 = _mm256_loadu_ps(g + 8);
                        const __m256 g2 = _mm256_loadu_ps(g + 16), g3 = _mm256_loadu_ps(g + 24);
                        const __m256 u = _mm256_broadcast_ss(xq + p * step), v = _mm256_broadcast_ss(xr + p * step);
                        a0 = _mm256_fmadd_ps(u, g0, a0); a1 = _mm256_fmadd_ps(u, g1, a1);
                        a2 = _mm256_fmadd_ps(u, g2, a2); a3 = _mm256_fmadd_ps(u, g3, a3);
                        b0 = _mm256_fmadd_ps(v, g0, b0); b1 = _mm256_fmadd_ps(v, g1, b1);
                        b2 = _mm256_fmadd_ps(v, g2, b2); b3 = _mm256_fmadd_ps(v, g3, b3);
                    }
                    _mm256_storeu_ps(d0, a0); _mm256_storeu_ps(d0 + 8, a1);
                    _mm256_storeu_ps(d0 + 16, a2); _mm256_storeu_ps(d0 + 24, a3);
                    if (two) {
                        _mm256_storeu_ps(d1, b0); _mm256_storeu_ps(d1 + 8, b1);
                        _mm256_storeu_ps(d1 + 16, b2); _mm256_storeu_ps(d1 + 24, b3);
                    }
                }
            }
        }
    }

    static int tapeflow_direct_supported(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    #else
    static void tapeflow_direct_row(const float *band, ptrdiff_t band_row, const float *w, float *y, ptrdiff_t ow,
                                    ptrdiff_t o, ptrdiff_t kh, ptrdiff_t run, ptrdiff_t step) {}
    static void tapeflow_direct_row_filter(const float *band, ptrdiff_t band_row, const float *dy, float *dw,
                                           ptrdiff_t ow, ptrdiff_t o, ptrdiff_t kh, ptrdiff_t run,
                                           ptrdiff_t step) {}
    static int tapeflow_direct_supported(void) { return 0; }
    #endif
    """
    void tapeflow_direct_row(const float* band, Py_ssize_t band_row, const float* w, float* y, Py_ssize_t ow,
                             Py_ssize_t o, Py_ssize_t kh, Py_ssize_t run, Py_ssize_t step) noexcept nogil
    void tapeflow_direct_row_filter(const float* band, Py_ssize_t band_row, const float* dy, float* dw,
                                    Py_ssize_t ow, Py_ssize_t o, Py_ssize_t kh, Py_ssize_t run,
                                    Py_ssize_t step) noexcept nogil
    int tapeflow_direct_supported() noexcept nogil

cdef bint _direct_ok = tapeflow_direct_supported()
# Whether the direct way is taken where it fits (tests turn it off to compare with im2col).
cdef bint _direct_enabled = True
# How many products and filter gradients the direct way has made (tests read it).
cdef Py_ssize_t _direct_count = 0


def _set_direct(bint enabled):
    """Turn the direct way for few input channels on or off; returns the old setting."""
    global _direct_enabled
    old = _direct_enabled
    _direct_enabled = enabled
    return old


def _direct_runs():
    """How many forward products and filter gradients the direct way has made so far."""
    return _direct_count


def _direct_supported():
    """Whether this CPU runs the direct kernels (AVX2 with FMA)."""
    return bool(_direct_ok)


cdef inline bint _direct_fits(const Geometry* g) noexcept nogil:
    """Few input channels (the band path), undilated columns, output channels a multiple of 32,
    and a CPU with AVX2 and FMA (the caller's arrays are float32)."""
    return (_direct_ok and _direct_enabled and g.c < _BAND_MAX_CHANNELS and g.dw == 1
            and g.o % 32 == 0 and g.o > 0 and g.kh * g.kw > 1)


cdef bint _direct(str op, bint filter_grad, const Geometry* g, const float* a, const float* b,
                  float* out) except -1:
    """`_direct_filter_grad(g, a, b, out)` with `filter_grad`, else `_direct_forward`, where the
    direct way fits (True), else nothing (False); a MemoryError naming `op` where a band cannot
    be had."""
    if not _direct_fits(g):
        return False
    cdef int failed
    with nogil:
        failed = _direct_filter_grad(g, a, b, out) if filter_grad else _direct_forward(g, a, b, out)
    if failed:
        raise MemoryError(f"{op}: cannot allocate the input bands")
    global _direct_count
    _direct_count += 1
    return True


cdef int _direct_forward(const Geometry* g, const float* x, const float* w, float* y) noexcept nogil:
    """y (every element written) = the convolution of x with w, output rows shared out among the
    threads; returns 1 where a thread could not allocate its band."""
    cdef Py_ssize_t total = g.n * g.oh, r
    cdef Py_ssize_t band_row = _band_width(g) * g.c
    cdef int threads = _threads_for(total * g.ow * g.kh * g.kw * g.c * g.o, 1 << 16)
    cdef float* band = NULL
    cdef int failed = 0
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        band = <float*>malloc(max(1, g.kh * band_row) * sizeof(float))
        if band == NULL:
            failed_p[0] = 1
        for r in prange(total, schedule="static"):
            if band != NULL:
                _fill_band(g, x, band, r)
                tapeflow_direct_row(band, band_row, w, y + r * g.ow * g.o, g.ow, g.o, g.kh, g.kw * g.c,
                                    g.sw * g.c)
                _finish_pixels(g, y + r * g.ow * g.o, g.ow)
        free(band)
        tapeflow_fpenv_swap(own)
    return failed


cdef int _direct_filter_grad(const Geometry* g, const float* x, const float* dy, float* dw) noexcept nogil:
    """dw (zeroed) = the filter gradient: each thread sums its output rows into a partial of its
    own (the first into dw), added at the end; returns 1 where memory ran out."""
    cdef Py_ssize_t total = g.n * g.oh, r
    cdef Py_ssize_t band_row = _band_width(g) * g.c, size = g.kh * g.kw * g.c * g.o
    cdef int threads = _threads_for(total * g.ow * g.kh * g.kw * g.c * g.o, 1 << 16)
    cdef float* partials = <float*>calloc(max(1, (threads - 1) * size), sizeof(float))
    if partials == NULL:
        return 1
    cdef float* band = NULL
    cdef float* acc = NULL
    cdef int t = 0, failed = 0
    cdef int* failed_p = &failed
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        band = <float*>malloc(max(1, g.kh * band_row) * sizeof(float))
        if band == NULL:
            failed_p[0] = 1
        t = threadid()
        acc = dw if t == 0 else partials + (t - 1) * size
        for r in prange(total, schedule="static"):
            if band != NULL:
                _fill_band(g, x, band, r)
                tapeflow_direct_row_filter(band, band_row, dy + r * g.ow * g.o, acc, g.ow, g.o, g.kh,
                                           g.kw * g.c, g.sw * g.c)
        free(band)
        tapeflow_fpenv_swap(own)
    _add_partials(dw, partials, threads - 1, size)
    free(partials)
    return failed
