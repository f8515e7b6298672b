# Float32 products against a matrix packed into panels of 16 columns (k rows of 16 contiguous
# floats, zeros past the last column): blocks of 6 rows of the left operand, read in place with
# any strides, run against one panel at a time in 12 vector accumulators. A recurrent step's
# gemm of its batch rows with the recurrent kernel, 2 * time times per sequence, packs the
# kernel once per sequence (a BLAS gemm would pack it on every call, a third of such a small
# product); matmul packs blocks of 256 x 256 of its right operand as it goes, into a buffer each
# thread keeps. AVX2 with FMA, checked once at run time; elsewhere the callers keep to BLAS.
# Each output element is summed along k in order, whichever block or thread its row falls in.

from libc.stdlib cimport free

cdef extern from *:
    """
    #include <pthread.h>
    #include <stddef.h>
    #include <stdlib.h>
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define TAPEFLOW_PANEL_AVX2 __attribute__((target("avx2,fma")))

    /* One row's two accumulators into c[:w]: set, or added to it with `add`; then, where given,
       the bias (its 16 values for these columns) added and relu applied (NaN stays NaN). */
    TAPEFLOW_PANEL_AVX2 static inline __attribute__((always_inline)) void tapeflow_panel_store(
        __m256 lo, __m256 hi, float *cr, ptrdiff_t w, int add, const float *bias, int relu)
    {
        float t[16];
        if (w < 16) {
            if (add) {
                for (ptrdiff_t j = 0; j < 16; j++) t[j] = j < w ? cr[j] : 0.0f;
                lo = _mm256_add_ps(_mm256_loadu_ps(t), lo);
                hi = _mm256_add_ps(_mm256_loadu_ps(t + 8), hi);
            }
            if (bias != NULL) {
                for (ptrdiff_t j = 0; j < 16; j++) t[j] = j < w ? bias[j] : 0.0f;
                lo = _mm256_add_ps(lo, _mm256_loadu_ps(t));
                hi = _mm256_add_ps(hi, _mm256_loadu_ps(t + 8));
            }
        } else {
            if (add) {
                lo = _mm256_add_ps(_mm256_loadu_ps(cr), lo);
                hi = _mm256_add_ps(_mm256_loadu_ps(cr + 8), hi);
            }
            if (bias != NULL) {
                lo = _mm256_add_ps(lo, _mm256_loadu_ps(bias));
                hi = _mm256_add_ps(hi, _mm256_loadu_ps(bias + 8));
            }
        }
        if (relu) {
            const __m256 zero = _mm256_setzero_ps();
            lo = _mm256_andnot_ps(_mm256_cmp_ps(lo, zero, _CMP_LE_OQ), lo);
            hi = _mm256_andnot_ps(_mm256_cmp_ps(hi, zero, _CMP_LE_OQ), hi);
        }
        if (w == 16) {
            _mm256_storeu_ps(cr, lo);
            _mm256_storeu_ps(cr + 8, hi);
            return;
        }
        _mm256_storeu_ps(t, lo);
        _mm256_storeu_ps(t + 8, hi);
        for (ptrdiff_t j = 0; j < w; j++) cr[j] = t[j];
    }

    /* `rows` (1 to 6, a constant once inlined) rows of A against one panel bp over k, A's element
       (r, p) at a[r * sar + p * sap]: c[r, :w] set to the products, or increased by them with `add`,
       then the bias and relu of tapeflow_panel_store. */
    TAPEFLOW_PANEL_AVX2 static inline __attribute__((always_inline)) void tapeflow_panel_rows(
        const float *a, ptrdiff_t sar, ptrdiff_t sap, const float *bp, ptrdiff_t k, float *c, ptrdiff_t ldc,
        ptrdiff_t w, int add, const float *bias, int relu, const int rows)
    {
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
        __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        const float *a0 = a, *a1 = a + sar, *a2 = a + 2 * sar, *a3 = a + 3 * sar, *a4 = a + 4 * sar;
        const float *a5 = a + 5 * sar;
        for (int r = 0; r < rows; r++) {  /* the rows' 16 outputs, one or two cache lines, fetched during the sums */
            _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + r * ldc + w - 1), _MM_HINT_T0);
        }
        for (ptrdiff_t p = 0, at = 0; p < k; p++, at += sap) {
            const __m256 b0 = _mm256_load_ps(bp + p * 16), b1 = _mm256_load_ps(bp + p * 16 + 8);
            __m256 x = _mm256_broadcast_ss(a0 + at);
            c00 = _mm256_fmadd_ps(x, b0, c00);
            c01 = _mm256_fmadd_ps(x, b1, c01);
            if (rows > 1) {
                x = _mm256_broadcast_ss(a1 + at);
                c10 = _mm256_fmadd_ps(x, b0, c10);
                c11 = _mm256_fmadd_ps(x, b1, c11);
            }
            if (rows > 2) {
                x = _mm256_broadcast_ss(a2 + at);
                c20 = _mm256_fmadd_ps(x, b0, c20);
                c21 = _mm256_fmadd_ps(x, b1, c21);
            }
            if (rows > 3) {
                x = _mm256_broadcast_ss(a3 + at);
                c30 = _mm256_fmadd_ps(x, b0, c30);
                c31 = _mm256_fmadd_ps(x, b1, c31);
            }
            if (rows > 4) {
                x = _mm256_broadcast_ss(a4 + at);
                c40 = _mm256_fmadd_ps(x, b0, c40);
                c41 = _mm256_fmadd_ps(x, b1, c41);
            }
            if (rows > 5) {
                x = _mm256_broadcast_ss(a5 + at);
                c50 = _mm256_fmadd_ps(x, b0, c50);
                c51 = _mm256_fmadd_ps(x, b1, c51);
            }
        }
        tapeflow_panel_store(c00, c01, c, w, add, bias, relu);
        if (rows > 1) tapeflow_panel_store(c10, c11, c + ldc, w, add, bias, relu);
        if (rows > 2) tapeflow_panel_store(c20, c21, c + 2 * ldc, w, add, bias, relu);
        if (rows > 3) tapeflow_panel_store(c30, c31, c + 3 * ldc, w, add, bias, relu);
        if (rows > 4) tapeflow_panel_store(c40, c41, c + 4 * ldc, w, add, bias, relu);
        if (rows > 5) tapeflow_panel_store(c50, c51, c + 5 * ldc, w, add, bias, relu);
    }

    /* c[m, n] = A[m, k] @ B, or c += A @ B with `add`; A's element (r, p) at a[r * sar + p * sap], B
       packed in panels; then, where given, bias[n] added and relu applied. */
    TAPEFLOW_PANEL_AVX2 static void tapeflow_panel_strided(const float *a, ptrdiff_t sar, ptrdiff_t sap,
                                                           const float *packed, ptrdiff_t k, ptrdiff_t n, float *c,
                                                           ptrdiff_t ldc, ptrdiff_t m, int add, const float *bias,
                                                           int relu)
    {
        for (ptrdiff_t q = 0; q * 16 < n; q++) {
            const float *bp = packed + q * k * 16;
            const ptrdiff_t w = n - q * 16 < 16 ? n - q * 16 : 16;
            float *cq = c + q * 16;
            const float *bq = bias != NULL ? bias + q * 16 : NULL;
            ptrdiff_t i = 0;
            for (; i + 6 <= m; i += 6)
                tapeflow_panel_rows(a + i * sar, sar, sap, bp, k, cq + i * ldc, ldc, w, add, bq, relu, 6);
            const float *ai = a + i * sar;
            float *ci = cq + i * ldc;
            switch (m - i) {
                case 5: tapeflow_panel_rows(ai, sar, sap, bp, k, ci, ldc, w, add, bq, relu, 5); break;
                case 4: tapeflow_panel_rows(ai, sar, sap, bp, k, ci, ldc, w, add, bq, relu, 4); break;
                case 3: tapeflow_panel_rows(ai, sar, sap, bp, k, ci, ldc, w, add, bq, relu, 3); break;
                case 2: tapeflow_panel_rows(ai, sar, sap, bp, k, ci, ldc, w, add, bq, relu, 2); break;
                case 1: tapeflow_panel_rows(ai, sar, sap, bp, k, ci, ldc, w, add, bq, relu, 1); break;
                default: break;
            }
        }
    }

    /* c[m, n] = a[m, k] @ B, or c += a @ B with `add`; a row-major, B packed in panels. */
    TAPEFLOW_PANEL_AVX2 static void tapeflow_panel_gemm(const float *a, ptrdiff_t lda, const float *packed,
                                                        ptrdiff_t k, ptrdiff_t n, float *c, ptrdiff_t ldc,
                                                        ptrdiff_t m, int add)
    {
        tapeflow_panel_strided(a, lda, 1, packed, k, n, c, ldc, m, add, NULL, 0);
    }

    static int tapeflow_panel_supported(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    #else
    static void tapeflow_panel_strided(const float *a, ptrdiff_t sar, ptrdiff_t sap, const float *packed,
                                       ptrdiff_t k, ptrdiff_t n, float *c, ptrdiff_t ldc, ptrdiff_t m, int add,
                                       const float *bias, int relu) {}
    static void tapeflow_panel_gemm(const float *a, ptrdiff_t lda, const float *packed, ptrdiff_t k, ptrdiff_t n,
                                    float *c, ptrdiff_t ldc, ptrdiff_t m, int add) {}
    static int tapeflow_panel_supported(void) { return 0; }
    #endif

    /* The k x n matrix B, element (p, j) at b[p * sp + j * sj], into `packed` as panels of 16 columns. */
    static void tapeflow_pack_into(const float *b, ptrdiff_t sp, ptrdiff_t sj, ptrdiff_t k, ptrdiff_t n,
                                   float *packed) {
        if (sj == 1) { /* rows of B in order, each read once from start to end */
            const ptrdiff_t full = n / 16, tail = n - full * 16;
            for (ptrdiff_t p = 0; p < k; p++) {
                const float *src = b + p * sp;
                for (ptrdiff_t q = 0; q < full; q++) __builtin_memcpy(packed + (q * k + p) * 16, src + q * 16, 64);
                if (tail) {
                    float *dst = packed + (full * k + p) * 16;
                    for (ptrdiff_t j = 0; j < 16; j++) dst[j] = j < tail ? src[full * 16 + j] : 0.0f;
                }
            }
            return;
        }
        for (ptrdiff_t q = 0; q * 16 < n; q++) {
            float *dst = packed + q * k * 16;
            const ptrdiff_t w = n - q * 16 < 16 ? n - q * 16 : 16;
            for (ptrdiff_t p = 0; p < k; p++, dst += 16) {
                const float *src = b + p * sp + q * 16 * sj;
                ptrdiff_t j = 0;
                for (; j < w; j++) dst[j] = src[j * sj];
                for (; j < 16; j++) dst[j] = 0.0f;
            }
        }
    }

    /* tapeflow_pack_into in new memory aligned for vector loads (free with free()); NULL when out of memory. */
    static float *tapeflow_pack_panels(const float *b, ptrdiff_t sp, ptrdiff_t sj, ptrdiff_t k, ptrdiff_t n) {
        const ptrdiff_t panels = (n + 15) / 16;
        float *packed = (float *)aligned_alloc(64, (size_t)(panels > 0 && k > 0 ? panels * k : 1) * 64);
        if (packed != NULL) tapeflow_pack_into(b, sp, sj, k, n, packed);
        return packed;
    }

    /* Blocks of a whole product: KC rows by NC columns of B packed at a time (into the calling
       thread's own buffer), MC rows of A against them. */
    #define TAPEFLOW_PANEL_KC 256
    #define TAPEFLOW_PANEL_NC 256
    #define TAPEFLOW_PANEL_MC 72

    /* The calling thread's packing buffer, KC * NC floats, kept for its later calls and freed when
       the thread ends (NULL when out of memory). */
    static pthread_key_t tapeflow_panel_key;
    static int tapeflow_panel_key_made = 0;
    static pthread_once_t tapeflow_panel_once = PTHREAD_ONCE_INIT;
    static void tapeflow_panel_make_key(void) {
        tapeflow_panel_key_made = pthread_key_create(&tapeflow_panel_key, free) == 0;
    }
    static float *tapeflow_panel_buffer(void) {
        pthread_once(&tapeflow_panel_once, tapeflow_panel_make_key);
        if (!tapeflow_panel_key_made) return NULL;
        float *buffer = (float *)pthread_getspecific(tapeflow_panel_key);
        if (buffer == NULL) {
            buffer = (float *)aligned_alloc(64, TAPEFLOW_PANEL_KC * TAPEFLOW_PANEL_NC * sizeof(float));
            if (buffer != NULL && pthread_setspecific(tapeflow_panel_key, buffer) != 0) {
                free(buffer);
                buffer = NULL;
            }
        }
        return buffer;
    }

    /* Row-major c[m, n] = A[m, k] @ B[k, n], or c += A @ B with `add`, on the calling thread: A's
       element (r, p) at a[r * sar + p * sap], B's (p, j) at b[p * sbp + j * sbj]; then, where given,
       bias[n] added and relu applied. 0 when the packing buffer cannot be had (nothing written), else 1. */
    static inline int tapeflow_panel_product(const float *a, ptrdiff_t sar, ptrdiff_t sap, const float *b,
                                             ptrdiff_t sbp, ptrdiff_t sbj, float *c, ptrdiff_t ldc, ptrdiff_t m,
                                             ptrdiff_t n, ptrdiff_t k, int add, const float *bias, int relu) {
        float *buffer = tapeflow_panel_buffer();
        if (buffer == NULL) return 0;
        /* With few rows of A, B is the traffic: its blocks are taken along its rows, each block
           beside the one before in memory (the same sums in the same order either way). */
        const int along_rows = m <= TAPEFLOW_PANEL_MC;
        const ptrdiff_t outer = along_rows ? k : n, outer_step = along_rows ? TAPEFLOW_PANEL_KC : TAPEFLOW_PANEL_NC;
        const ptrdiff_t inner = along_rows ? n : k, inner_step = along_rows ? TAPEFLOW_PANEL_NC : TAPEFLOW_PANEL_KC;
        for (ptrdiff_t o = 0; o < outer; o += outer_step) {
            for (ptrdiff_t q = 0; q < inner; q += inner_step) {
                const ptrdiff_t p0 = along_rows ? o : q, j0 = along_rows ? q : o;
                const ptrdiff_t kc = k - p0 < TAPEFLOW_PANEL_KC ? k - p0 : TAPEFLOW_PANEL_KC;
                const ptrdiff_t nc = n - j0 < TAPEFLOW_PANEL_NC ? n - j0 : TAPEFLOW_PANEL_NC;
                tapeflow_pack_into(b + p0 * sbp + j0 * sbj, sbp, sbj, kc, nc, buffer);
                const int last = p0 + kc >= k;
                for (ptrdiff_t i0 = 0; i0 < m; i0 += TAPEFLOW_PANEL_MC)
                    tapeflow_panel_strided(a + i0 * sar + p0 * sap, sar, sap, buffer, kc, nc, c + i0 * ldc + j0, ldc,
                                           m - i0 < TAPEFLOW_PANEL_MC ? m - i0 : TAPEFLOW_PANEL_MC, add || p0 > 0,
                                           last && bias != NULL ? bias + j0 : NULL, last && relu);
            }
        }
        return 1;
    }

    /* tapeflow_panel_product over `threads` threads, each a band of `step` columns (by_cols) or
       rows of the result: all of it, or nothing (0) when a thread cannot have its packing buffer. */
    static inline int tapeflow_panel_split(const float *a, ptrdiff_t sar, ptrdiff_t sap, const float *b,
                                           ptrdiff_t sbp, ptrdiff_t sbj, float *c, ptrdiff_t ldc, ptrdiff_t m,
                                           ptrdiff_t n, ptrdiff_t k, int add, const float *bias, int relu,
                                           int by_cols, ptrdiff_t step, int threads)
    {
        int missing = 0;
        const unsigned int env = tapeflow_fpenv_get();
        #pragma omp parallel num_threads(threads)
        {
            if (tapeflow_panel_buffer() == NULL) {
                #pragma omp atomic
                missing++;
            }
            #pragma omp barrier
            if (missing == 0) {
                const unsigned int own = tapeflow_fpenv_swap(env);
                #pragma omp for schedule(static)
                for (int part = 0; part < threads; part++) {
                    const ptrdiff_t extent = by_cols ? n : m, lo = part * step;
                    const ptrdiff_t hi = lo + step < extent ? lo + step : extent;
                    if (lo >= hi) continue;
                    if (by_cols)
                        tapeflow_panel_product(a, sar, sap, b + lo * sbj, sbp, sbj, c + lo, ldc, m, hi - lo, k, add,
                                               bias != NULL ? bias + lo : NULL, relu);
                    else
                        tapeflow_panel_product(a + lo * sar, sar, sap, b, sbp, sbj, c + lo * ldc, ldc, hi - lo, n, k,
                                               add, bias, relu);
                }
                tapeflow_fpenv_swap(own);
            }
        }
        return missing == 0;
    }
    """
    void tapeflow_panel_gemm(const float* a, Py_ssize_t lda, const float* packed, Py_ssize_t k, Py_ssize_t n,
                             float* c, Py_ssize_t ldc, Py_ssize_t m, int add) noexcept nogil
    int tapeflow_panel_product(const float* a, Py_ssize_t sar, Py_ssize_t sap, const float* b, Py_ssize_t sbp,
                               Py_ssize_t sbj, float* c, Py_ssize_t ldc, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                               int add, const float* bias, int relu) noexcept nogil
    int tapeflow_panel_split(const float* a, Py_ssize_t sar, Py_ssize_t sap, const float* b, Py_ssize_t sbp,
                             Py_ssize_t sbj, float* c, Py_ssize_t ldc, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                             int add, const float* bias, int relu, int by_cols, Py_ssize_t step,
                             int threads) noexcept nogil
    int tapeflow_panel_supported() noexcept nogil
    enum: TAPEFLOW_PANEL_MC
    float* tapeflow_pack_panels(const float* b, Py_ssize_t sp, Py_ssize_t sj, Py_ssize_t k, Py_ssize_t n) noexcept nogil

cdef bint _panels_ok = tapeflow_panel_supported()


def _panel_supported():
    """Whether this CPU runs the packed-panel products (AVX2 with FMA)."""
    return bool(_panels_ok)


def _set_panels(bint on):
    """Use the packed-panel products where supported (True) or BLAS (False); returns the old choice (for tests)."""
    global _panels_ok
    old, _panels_ok = _panels_ok, bool(on) and tapeflow_panel_supported()
    return old


def _panel_product(const float[:, ::1] a, const float[:, ::1] b, float[:, ::1] c, bint add, int repeat=1):
    """c = a @ b (or c += a @ b with `add`) by the packed-panel product, `repeat` times on one
    packing (for tests and timing); False where the CPU lacks it."""
    cdef Py_ssize_t m = a.shape[0], k = a.shape[1], n = b.shape[1], r
    if b.shape[0] != k or c.shape[0] != m or c.shape[1] != n:
        raise ValueError(f"_panel_product: shapes {(m, k)}, {(b.shape[0], n)}, {(c.shape[0], c.shape[1])} "
                         "do not fit")
    if not _panels_ok or m == 0 or n == 0 or k == 0:
        return False
    cdef float* packed = tapeflow_pack_panels(&b[0, 0], n, 1, k, n)
    if packed == NULL:
        raise MemoryError()
    with nogil:
        for r in range(repeat):
            tapeflow_panel_gemm(&a[0, 0], k, packed, k, n, &c[0, 0], n, m, add)
    free(packed)
    return True
