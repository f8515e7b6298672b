# A product with a short side, as a dense layer's input gradient is at small batches: G @ W^T,
# G a few rows and W large. A BLAS gemm packs W's transpose into panels before it multiplies,
# a pass over W that costs more than the product when each of W's elements meets only a few
# rows; this kernel reads W once, in order, each row against every row of G. It needs AVX2
# with FMA (checked once at run time); elsewhere the caller keeps to BLAS. Every output
# element is summed in the same order whatever the thread count. (The weight gradient X^T @ G
# is bound by writing W's size of output, which BLAS already does at that speed.)

cdef extern from *:
    """
    #include <stddef.h>
    #include <stdlib.h>
    #include <math.h>
    #define TAPEFLOW_SKINNY_ROWS 32  /* the most rows of g the kernel takes */
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define TAPEFLOW_AVX2 __attribute__((target("avx2,fma")))

    /* The sum of v's 8 lanes, in a fixed order. */
    TAPEFLOW_AVX2 static inline float tapeflow_lanes_sum(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }

    /* c[i, r] = g[i, :] . w[r, :] for `rows` (1 to 4) rows r of w from row `r0` and every i <
       m: 8 lanes of products summed along the row, the lanes added, then the tail of the row.
       The rows are taken a chunk at a time, short enough that the chunk of the 4 rows of w
       and of every row of g stay in the L1 cache while each pair of rows of g passes over
       them; the 8-lane sums are kept between chunks (the same sums as without chunks). */
    TAPEFLOW_AVX2 static inline void tapeflow_nt_rows(const float *g, ptrdiff_t ldg, const float *w,
                                                       ptrdiff_t ldw, float *c, ptrdiff_t ldc, ptrdiff_t m,
                                                       ptrdiff_t n, ptrdiff_t r0, int rows)
    {
        const float *w0 = w + r0 * ldw;
        const float *w1 = rows > 1 ? w0 + ldw : w0, *w2 = rows > 2 ? w0 + 2 * ldw : w0;
        const float *w3 = rows > 3 ? w0 + 3 * ldw : w0;
        const ptrdiff_t n8 = n / 8 * 8;
        ptrdiff_t chunk = 6144 / (m + 5) / 8 * 8;
        if (chunk < 64) chunk = 64;
        __m256 acc[TAPEFLOW_SKINNY_ROWS + 1][4];
        for (ptrdiff_t i = 0; i <= m && i <= TAPEFLOW_SKINNY_ROWS; i++)
            for (int v = 0; v < 4; v++) acc[i][v] = _mm256_setzero_ps();
        for (ptrdiff_t p0 = 0; p0 < n8; p0 += chunk) {
            const ptrdiff_t p1 = p0 + chunk < n8 ? p0 + chunk : n8;
            for (ptrdiff_t i = 0; i < m; i += 2) {
                const float *g0 = g + i * ldg, *g1 = i + 1 < m ? g0 + ldg : g0;
                __m256 a00 = acc[i][0], a01 = acc[i][1], a02 = acc[i][2], a03 = acc[i][3];
                __m256 a10 = acc[i + 1][0], a11 = acc[i + 1][1], a12 = acc[i + 1][2], a13 = acc[i + 1][3];
                for (ptrdiff_t p = p0; p < p1; p += 8) {
                    const __m256 x0 = _mm256_loadu_ps(g0 + p), x1 = _mm256_loadu_ps(g1 + p);
                    __m256 v0 = _mm256_loadu_ps(w0 + p), v1 = _mm256_loadu_ps(w1 + p);
                    __m256 v2 = _mm256_loadu_ps(w2 + p), v3 = _mm256_loadu_ps(w3 + p);
                    /* w's 8 lanes loaded once into registers for both rows of g (left to
                       itself the compiler reads them from memory for each row) */
                    __asm__("" : "+x"(v0), "+x"(v1), "+x"(v2), "+x"(v3));
                    a00 = _mm256_fmadd_ps(x0, v0, a00); a01 = _mm256_fmadd_ps(x0, v1, a01);
                    a02 = _mm256_fmadd_ps(x0, v2, a02); a03 = _mm256_fmadd_ps(x0, v3, a03);
                    a10 = _mm256_fmadd_ps(x1, v0, a10); a11 = _mm256_fmadd_ps(x1, v1, a11);
                    a12 = _mm256_fmadd_ps(x1, v2, a12); a13 = _mm256_fmadd_ps(x1, v3, a13);
                }
                acc[i][0] = a00; acc[i][1] = a01; acc[i][2] = a02; acc[i][3] = a03;
                acc[i + 1][0] = a10; acc[i + 1][1] = a11; acc[i + 1][2] = a12; acc[i + 1][3] = a13;
            }
        }
        const float *ws[4] = {w0, w1, w2, w3};
        for (ptrdiff_t i = 0; i < m; i++)
            for (int v = 0; v < rows; v++) {
                float t = tapeflow_lanes_sum(acc[i][v]);
                for (ptrdiff_t p = n8; p < n; p++) t = fmaf(g[i * ldg + p], ws[v][p], t);
                c[i * ldc + r0 + v] = t;
            }
    }

    /* c[m, kk] = g[m, n] @ w[kk, n]^T, the rows of w cut into `threads` bands of 4s. */
    TAPEFLOW_AVX2 static void tapeflow_skinny_nt(const float *g, ptrdiff_t ldg, const float *w, ptrdiff_t ldw,
                                                 float *c, ptrdiff_t ldc, ptrdiff_t m, ptrdiff_t kk, ptrdiff_t n,
                                                 int threads)
    {
        const ptrdiff_t quads = (kk + 3) / 4;
        /* g's rows copied with a stride that is no multiple of 4 KB: rows the same multiple
           apart would meet in the same sets of the L1 cache and push one another out */
        const ptrdiff_t ldp = (n + 15) / 16 * 16 + 16;
        float *copy = (float *)aligned_alloc(64, (size_t)(m * ldp) * sizeof(float));
        if (copy != NULL) {
            for (ptrdiff_t i = 0; i < m; i++) __builtin_memcpy(copy + i * ldp, g + i * ldg, (size_t)n * sizeof(float));
            g = copy;
            ldg = ldp;
        }
        const unsigned int env = tapeflow_fpenv_get();
        #pragma omp parallel num_threads(threads) if(threads > 1)
        {
            const unsigned int own = tapeflow_fpenv_swap(env);
            #pragma omp for schedule(static)
            for (ptrdiff_t q = 0; q < quads; q++)
                tapeflow_nt_rows(g, ldg, w, ldw, c, ldc, m, n, q * 4, kk - q * 4 < 4 ? (int)(kk - q * 4) : 4);
            tapeflow_fpenv_swap(own);
        }
        free(copy);
    }
    #else
    static void tapeflow_skinny_nt(const float *g, ptrdiff_t ldg, const float *w, ptrdiff_t ldw, float *c,
                                   ptrdiff_t ldc, ptrdiff_t m, ptrdiff_t kk, ptrdiff_t n, int threads) {}
    #endif
    """
    void tapeflow_skinny_nt(const float* g, Py_ssize_t ldg, const float* w, Py_ssize_t ldw, float* c,
                            Py_ssize_t ldc, Py_ssize_t m, Py_ssize_t kk, Py_ssize_t n, int threads) noexcept nogil
    enum: TAPEFLOW_SKINNY_ROWS

# The short side up to which, and the large operand's elements from which, a product takes
# the skinny kernel (below, the large operand stays in the caches and BLAS packs it cheaply).
cdef Py_ssize_t _SKINNY_MAX_SIDE = TAPEFLOW_SKINNY_ROWS
cdef Py_ssize_t _SKINNY_MIN_ELEMENTS = 1 << 20
cdef bint _skinny_ok = tapeflow_panel_supported()  # the same need: AVX2 with FMA (_panel_gemm.pxi)


def _skinny_supported():
    """Whether this CPU runs the skinny kernel (AVX2 with FMA)."""
    return bool(_skinny_ok)


def _set_skinny_limits(Py_ssize_t max_side, Py_ssize_t min_elements):
    """Set the limits above (for tests); returns the old ones."""
    global _SKINNY_MAX_SIDE, _SKINNY_MIN_ELEMENTS
    old = (_SKINNY_MAX_SIDE, _SKINNY_MIN_ELEMENTS)
    _SKINNY_MAX_SIDE, _SKINNY_MIN_ELEMENTS = min(max_side, TAPEFLOW_SKINNY_ROWS), min_elements
    return old


cdef bint _skinny_product(float* a, float* b, float* c, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                          Py_ssize_t lda, Py_ssize_t ldb, bint trans_a, bint trans_b) noexcept nogil:
    """c[m, n] = a @ b^T by the skinny kernel where it fits (True: a few rows of a, b large),
    else nothing (False)."""
    if not _skinny_ok:
        return False
    cdef int threads
    if not trans_a and trans_b and m <= _SKINNY_MAX_SIDE and n * k >= _SKINNY_MIN_ELEMENTS:
        threads = _threads_for(m * n * k, _GEMM_PARALLEL_MIN)
        tapeflow_skinny_nt(a, lda, b, ldb, c, n, m, n, k, threads)
        return True
    return False
