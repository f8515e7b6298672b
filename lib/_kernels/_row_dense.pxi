# One input row through a dense layer, y = x @ W + b (then relu): the product a batch-1
# inference graph runs. For one row, gemm would pack all of W and gemv reloads the outputs
# for every input; here each band of 64 outputs is summed in registers while W streams by
# once, so the product runs at the speed W can be read. On x86-64 Linux an AVX2 copy is
# compiled beside the baseline one and picked when the CPU has it. Outputs are cut into
# bands between the OpenMP threads, so that each core reads (and caches) its own part of W.

cdef extern from *:
    """
    #include <stddef.h>
    #if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
    #define TAPEFLOW_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define TAPEFLOW_SIMD_CLONES
    #endif

    /* y[0:64] = x[0:k] @ w[0:k, 0:64] + b[0:64] (then relu), w with row stride ldw. */
    static inline __attribute__((always_inline)) void tapeflow_row_block_64(
        const float *restrict x, const float *restrict w, ptrdiff_t ldw, ptrdiff_t k,
        const float *restrict b, float *restrict y, int relu)
    {
        float acc[64];
        for (int q = 0; q < 64; q++) acc[q] = 0.0f;
        for (ptrdiff_t i = 0; i < k; i++, w += ldw) {
            if (i + 4 < k) /* the row 4 ahead, fetched while this one sums */
                for (int q = 0; q < 64; q += 16) __builtin_prefetch(w + 4 * ldw + q);
            const float xi = x[i];
            for (int q = 0; q < 64; q++) acc[q] += xi * w[q];
        }
        for (int q = 0; q < 64; q++) {
            const float v = acc[q] + b[q];
            y[q] = (relu && v < 0.0f) ? 0.0f : v;
        }
    }

    /* The same for 8 outputs: four rows at a time into four sums of 8 lanes (added up at the
       end, in order), so that each sum does not wait on the one before. */
    typedef float tapeflow_lanes8 __attribute__((vector_size(32)));
    static inline __attribute__((always_inline)) void tapeflow_row_block_8(
        const float *restrict x, const float *restrict w, ptrdiff_t ldw, ptrdiff_t k,
        const float *restrict b, float *restrict y, int relu)
    {
        tapeflow_lanes8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, w0, w1, w2, w3;
        ptrdiff_t i = 0;
        for (; i + 4 <= k; i += 4, w += 4 * ldw) {
            __builtin_memcpy(&w0, w, sizeof w0);
            __builtin_memcpy(&w1, w + ldw, sizeof w1);
            __builtin_memcpy(&w2, w + 2 * ldw, sizeof w2);
            __builtin_memcpy(&w3, w + 3 * ldw, sizeof w3);
            a0 += x[i] * w0;
            a1 += x[i + 1] * w1;
            a2 += x[i + 2] * w2;
            a3 += x[i + 3] * w3;
        }
        for (; i < k; i++, w += ldw) {
            __builtin_memcpy(&w0, w, sizeof w0);
            a0 += x[i] * w0;
        }
        __builtin_memcpy(&w0, b, sizeof w0);
        const tapeflow_lanes8 sum = a0 + a1 + a2 + a3 + w0;
        for (int q = 0; q < 8; q++) y[q] = (relu && sum[q] < 0.0f) ? 0.0f : sum[q];
    }

    /* The same for one output, eight rows at a time into eight sums. */
    static inline __attribute__((always_inline)) void tapeflow_row_block_1(
        const float *restrict x, const float *restrict w, ptrdiff_t ldw, ptrdiff_t k,
        const float *restrict b, float *restrict y, int relu)
    {
        float acc[8];
        for (int r = 0; r < 8; r++) acc[r] = 0.0f;
        ptrdiff_t i = 0;
        for (; i + 8 <= k; i += 8, w += 8 * ldw)
            for (int r = 0; r < 8; r++) acc[r] += x[i + r] * w[r * ldw];
        for (; i < k; i++, w += ldw) acc[0] += x[i] * w[0];
        float v = acc[0];
        for (int r = 1; r < 8; r++) v += acc[r];
        v += b[0];
        y[0] = (relu && v < 0.0f) ? 0.0f : v;
    }

    TAPEFLOW_SIMD_CLONES
    static void tapeflow_row_dense_band(const float *x, const float *w, ptrdiff_t ldw, const float *b,
                                        float *y, ptrdiff_t k, ptrdiff_t lo, ptrdiff_t hi, int relu)
    {
        ptrdiff_t j = lo;
        for (; j + 64 <= hi; j += 64) tapeflow_row_block_64(x, w + j, ldw, k, b + j, y + j, relu);
        for (; j + 8 <= hi; j += 8) tapeflow_row_block_8(x, w + j, ldw, k, b + j, y + j, relu);
        for (; j < hi; j++) tapeflow_row_block_1(x, w + j, ldw, k, b + j, y + j, relu);
    }

    /* The threads' share of one layer of a chain: below 128 outputs the first thread takes the
       whole layer, otherwise each takes its band of 64-wide blocks. */
    static void tapeflow_chain_layer(const float *x, const float *w, const float *b, float *y,
                                     ptrdiff_t k, ptrdiff_t n, int relu, int thread, int threads)
    {
        if (n < 128) {
            if (thread == 0) tapeflow_row_dense_band(x, w, n, b, y, k, 0, n, relu);
            return;
        }
        const ptrdiff_t step = ((n + threads - 1) / threads + 63) / 64 * 64;
        const ptrdiff_t lo = thread * step, hi = lo + step < n ? lo + step : n;
        if (lo < hi) tapeflow_row_dense_band(x, w, n, b, y, k, lo, hi, relu);
    }

    typedef struct {
        int layers;
        const float *const *ws, *const *bs;
        float *const *ys;
        const ptrdiff_t *dims;
        const int *relus;
    } tapeflow_chain_job;

    /* One thread's part of a chain, as a job of the team. */
    static void tapeflow_chain_part(void *arg, tapeflow_team_ctx *ctx) {
        const tapeflow_chain_job *job = (const tapeflow_chain_job *)arg;
        for (int l = 0; l < job->layers; l++) {
            tapeflow_chain_layer(job->ys[l], job->ws[l], job->bs[l], job->ys[l + 1], job->dims[l], job->dims[l + 1],
                                 job->relus[l], ctx->thread, ctx->threads);
            if (l + 1 < job->layers) tapeflow_team_barrier(ctx);
        }
    }

    /* One row through `layers` dense layers, ys[l + 1] = ys[l] @ ws[l] + bs[l] (then relu where
       relus[l]), ws[l] C-contiguous of shape dims[l] x dims[l + 1]. With threads, each layer's
       outputs are cut into bands between them (see tapeflow_chain_layer), the threads meeting
       between layers: on the team where it takes the job, else in one OpenMP parallel region.
       Each thread reads the same columns of every weight each call, so those stay in its core's
       cache. A single layer is a chain of one. */
    static void tapeflow_row_dense_chain(int layers, const float *const *ws, const float *const *bs,
                                         float *const *ys, const ptrdiff_t *dims, const int *relus,
                                         int threads)
    {
        if (threads >= 2) {
            tapeflow_chain_job job = {layers, ws, bs, ys, dims, relus};
            if (tapeflow_team_run(tapeflow_chain_part, &job, threads)) return;
    #ifdef _OPENMP
            const unsigned int env = tapeflow_fpenv_get();
            #pragma omp parallel num_threads(threads)
            {
                const unsigned int own = tapeflow_fpenv_swap(env);
                const int thread = omp_get_thread_num(), team = omp_get_num_threads();
                for (int l = 0; l < layers; l++) {
                    tapeflow_chain_layer(ys[l], ws[l], bs[l], ys[l + 1], dims[l], dims[l + 1], relus[l],
                                         thread, team);
                    if (l + 1 < layers) {
                        #pragma omp barrier
                    }
                }
                tapeflow_fpenv_swap(own);
            }
            return;
    #endif
        }
        for (int l = 0; l < layers; l++)
            tapeflow_row_dense_band(ys[l], ws[l], dims[l + 1], bs[l], ys[l + 1], dims[l], 0, dims[l + 1], relus[l]);
    }

    /* y[0:n] = x[0:k] @ w[k, n] + b (w C-contiguous), the outputs cut into `threads` bands. */
    static void tapeflow_row_dense(const float *x, const float *w, const float *b, float *y,
                                   ptrdiff_t k, ptrdiff_t n, int relu, int threads)
    {
        const float *const ws[1] = {w}, *const bs[1] = {b};
        float *const ys[2] = {(float *)x, y};
        const ptrdiff_t dims[2] = {k, n};
        const int relus[1] = {relu};
        tapeflow_row_dense_chain(1, ws, bs, ys, dims, relus, threads);
    }
    """
    void tapeflow_row_dense(const float* x, const float* w, const float* b, float* y,
                            Py_ssize_t k, Py_ssize_t n, int relu, int threads) noexcept nogil
    void tapeflow_row_dense_chain(int layers, const float* const* ws, const float* const* bs,
                                  float* const* ys, const Py_ssize_t* dims, const int* relus,
                                  int threads) noexcept nogil

# Below this many multiply-adds (or 128 outputs) one row runs on one thread.
cdef Py_ssize_t _ROW_PARALLEL_MIN = 1 << 17
