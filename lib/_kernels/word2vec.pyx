"""word2vec skip-gram with negative sampling: pair generation and a fused train step.

The train step follows the original word2vec tool: each thread takes a contiguous share of
the corpus, subsamples it and walks it with dynamic windows, updating both embedding
tables in place without locks (Hogwild), with a learning rate that decays linearly over
its share. Instead of one dot product and two axpys per (center, context) pair, every
window shares one set of negatives (pWord2Vec, Ji et al. 2016): with the m context rows
of `syn0` as a matrix X (m x D) and the center's plus K negatives' rows of `syn1` as Y
((K + 1) x D), one window is three small dense products:

    S = X Y^T,   G = lr * (labels - sigmoid(S)),   X += G Y,   Y += G^T X

(both updates from the values before the step). The products are one fused C routine,
built for AVX2/FMA as well as the baseline and picked at load time: for shapes this small
(about 10 x 6 x 100) it ran 1.7x faster than three BLAS gemm calls, whose per-call
packing dominates. Random draws use the tool's linear
congruential generator, one stream per thread, seeded from `seed`, so one thread gives
the same result on every run.
"""

include "_common.pxi"

import numpy as np

from cython cimport floating
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc


cdef extern from *:
    """
    #include <math.h>
    #include <stdint.h>
    /* Built for AVX2 + FMA as well, picked at load time where the CPU has them. */
    #if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
    #define TAPEFLOW_W2V_CLONES __attribute__((target_clones("arch=haswell", "default")))
    #else
    #define TAPEFLOW_W2V_CLONES
    #endif
    /* dst += sum_r coef[r] * rows[r], four rows at a time, so that each pass over dst
       feeds four multiply-adds per element. */
    #define TAPEFLOW_W2V_COMBINE(NAME, T)                                                   \
    static inline void NAME(T* restrict dst, const T* const* rows, const T* coef,          \
                            Py_ssize_t n, Py_ssize_t dim)                                  \
    {                                                                                      \
        Py_ssize_t r = 0;                                                                  \
        for (; r + 4 <= n; r += 4) {                                                       \
            const T* restrict a = rows[r]; const T* restrict b = rows[r + 1];              \
            const T* restrict c = rows[r + 2]; const T* restrict e = rows[r + 3];          \
            const T ga = coef[r], gb = coef[r + 1], gc = coef[r + 2], ge = coef[r + 3];    \
            _Pragma("omp simd")                                                            \
            for (Py_ssize_t d = 0; d < dim; d++)                                           \
                dst[d] += ga * a[d] + gb * b[d] + gc * c[d] + ge * e[d];                   \
        }                                                                                  \
        for (; r < n; r++) {                                                               \
            const T* restrict a = rows[r];                                                 \
            const T ga = coef[r];                                                          \
            _Pragma("omp simd")                                                            \
            for (Py_ssize_t d = 0; d < dim; d++) dst[d] += ga * a[d];                      \
        }                                                                                  \
    }
    /* One window: S = X Y^T, G = lr (labels - sigmoid(S)), dX = G Y, Y += G^T X, X += dX,
       with X the context rows of syn0 and Y the center's and the negatives' rows of syn1
       (row 0 the center; a negative equal to it is skipped). Both updates use the values
       from before the step. `g` holds m x outs values, `dx` m x dim. */
    #define TAPEFLOW_W2V_WINDOW(NAME, T, EXP, COMBINE)                                      \
    TAPEFLOW_W2V_CLONES static void NAME(T* syn0, T* syn1, const int32_t* ctx, Py_ssize_t m, \
                     const int32_t* out, Py_ssize_t outs, Py_ssize_t dim, T lr, T* g, T* dx) \
    {                                                                                      \
        const T* xs[m]; const T* ys[outs]; T column[m];                                    \
        for (Py_ssize_t i = 0; i < m; i++) xs[i] = syn0 + (Py_ssize_t)ctx[i] * dim;        \
        for (Py_ssize_t c = 0; c < outs; c++) ys[c] = syn1 + (Py_ssize_t)out[c] * dim;     \
        for (Py_ssize_t i = 0; i < m; i++) {                                               \
            const T* restrict x = xs[i];                                                   \
            T* gi = g + i * outs;                                                          \
            Py_ssize_t c = 0;                                                              \
            for (; c + 4 <= outs; c += 4) {                                                \
                const T* restrict y0 = ys[c]; const T* restrict y1 = ys[c + 1];            \
                const T* restrict y2 = ys[c + 2]; const T* restrict y3 = ys[c + 3];        \
                T a0 = 0, a1 = 0, a2 = 0, a3 = 0;                                          \
                _Pragma("omp simd reduction(+:a0,a1,a2,a3)")                               \
                for (Py_ssize_t d = 0; d < dim; d++) {                                     \
                    a0 += x[d] * y0[d]; a1 += x[d] * y1[d];                                \
                    a2 += x[d] * y2[d]; a3 += x[d] * y3[d];                                \
                }                                                                          \
                gi[c] = a0; gi[c + 1] = a1; gi[c + 2] = a2; gi[c + 3] = a3;                \
            }                                                                              \
            for (; c < outs; c++) {                                                        \
                const T* restrict y = ys[c];                                               \
                T a = 0;                                                                   \
                _Pragma("omp simd reduction(+:a)")                                         \
                for (Py_ssize_t d = 0; d < dim; d++) a += x[d] * y[d];                     \
                gi[c] = a;                                                                 \
            }                                                                              \
            for (c = 0; c < outs; c++) {                                                   \
                T label = c == 0 ? (T)1 : (T)0;                                            \
                gi[c] = (c > 0 && out[c] == out[0]) ? (T)0                                 \
                        : lr * (label - (T)1 / ((T)1 + EXP(-gi[c])));                      \
            }                                                                              \
        }                                                                                  \
        for (Py_ssize_t i = 0; i < m; i++) {  /* dX = G Y, from Y before its update */     \
            for (Py_ssize_t d = 0; d < dim; d++) dx[i * dim + d] = 0;                      \
            COMBINE(dx + i * dim, ys, g + i * outs, outs, dim);                            \
        }                                                                                  \
        for (Py_ssize_t c = 0; c < outs; c++) {  /* Y += G^T X, X not yet updated */       \
            for (Py_ssize_t i = 0; i < m; i++) column[i] = g[i * outs + c];                \
            COMBINE(syn1 + (Py_ssize_t)out[c] * dim, xs, column, m, dim);                  \
        }                                                                                  \
        for (Py_ssize_t i = 0; i < m; i++) {  /* X += dX */                                \
            T* restrict x = syn0 + (Py_ssize_t)ctx[i] * dim;                               \
            const T* restrict dxi = dx + i * dim;                                          \
            _Pragma("omp simd")                                                            \
            for (Py_ssize_t d = 0; d < dim; d++) x[d] += dxi[d];                           \
        }                                                                                  \
    }
    TAPEFLOW_W2V_COMBINE(tapeflow_w2v_combine_f32, float)
    TAPEFLOW_W2V_COMBINE(tapeflow_w2v_combine_f64, double)
    TAPEFLOW_W2V_WINDOW(tapeflow_w2v_window_f32, float, expf, tapeflow_w2v_combine_f32)
    TAPEFLOW_W2V_WINDOW(tapeflow_w2v_window_f64, double, exp, tapeflow_w2v_combine_f64)
    """
    void tapeflow_w2v_window_f32(float* syn0, float* syn1, const int32_t* ctx, Py_ssize_t m, const int32_t* out,
                                 Py_ssize_t outs, Py_ssize_t dim, float lr, float* g, float* dx) noexcept nogil
    void tapeflow_w2v_window_f64(double* syn0, double* syn1, const int32_t* ctx, Py_ssize_t m, const int32_t* out,
                                 Py_ssize_t outs, Py_ssize_t dim, double lr, double* g, double* dx) noexcept nogil


cdef uint64_t _LCG_MULTIPLIER = 25214903917ULL
cdef uint64_t _THREAD_STREAM = 0x9E3779B97F4A7C15ULL


cdef inline uint64_t _next(uint64_t* state) noexcept nogil:
    state[0] = state[0] * _LCG_MULTIPLIER + 11
    return state[0]


cdef inline bint _keep(const double* keep, int32_t word, uint64_t* state) noexcept nogil:
    """Subsampling: draw only for words that may be dropped."""
    if keep[word] >= 1.0:
        return True
    return keep[word] >= (_next(state) & 0xFFFF) / 65536.0


cdef inline int32_t _negative(const int64_t* cum, Py_ssize_t vocab, uint64_t* state) noexcept nogil:
    """A word drawn from the negative-sampling table: the first whose cumulative weight exceeds a uniform draw."""
    cdef int64_t r = <int64_t>((_next(state) >> 16) % <uint64_t>cum[vocab - 1])
    cdef Py_ssize_t lo = 0, hi = vocab - 1, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if cum[mid] <= r:
            lo = mid + 1
        else:
            hi = mid
    return <int32_t>lo


cdef inline int64_t _segment_start(const int64_t* offsets, Py_ssize_t sentences, int64_t lo) noexcept nogil:
    """The index of the sentence holding word `lo`."""
    cdef Py_ssize_t a = 0, b = sentences, mid
    while b - a > 1:
        mid = (a + b) >> 1
        if offsets[mid] <= lo:
            a = mid
        else:
            b = mid
    return a


cdef struct Counts:
    int64_t words
    int64_t kept
    int64_t pairs


cdef Counts _train_share(floating* syn0, floating* syn1, Py_ssize_t vocab, Py_ssize_t dim,
                         const int32_t* ids, const int64_t* offsets, Py_ssize_t sentences,
                         int64_t lo, int64_t hi, const double* keep, const int64_t* cum,
                         int window, int negative, double alpha_start, double alpha_end,
                         uint64_t seed, Py_ssize_t capacity) noexcept nogil:
    """Train on words [lo, hi) of the corpus: one thread's share."""
    cdef Counts counts
    counts.words = hi - lo
    counts.kept = 0
    counts.pairs = 0
    if hi <= lo:
        return counts
    cdef int outs = negative + 1, span = 2 * window
    cdef int32_t* sen = <int32_t*>malloc(capacity * sizeof(int32_t))
    cdef int64_t* raw = <int64_t*>malloc(capacity * sizeof(int64_t))
    cdef int32_t* ctx = <int32_t*>malloc(span * sizeof(int32_t))
    cdef int32_t* out = <int32_t*>malloc(outs * sizeof(int32_t))
    cdef floating* s = <floating*>malloc(span * outs * sizeof(floating))
    cdef floating* dx = <floating*>malloc(span * dim * sizeof(floating))
    cdef uint64_t state = seed
    cdef int64_t k, start, stop, pos
    cdef Py_ssize_t n, p, j, c, sentence, m, reach
    cdef floating lr
    cdef double span_words = <double>(hi - lo)
    if (sen == NULL or raw == NULL or ctx == NULL or out == NULL
            or s == NULL or dx == NULL):
        counts.words = -1
    else:
        sentence = _segment_start(offsets, sentences, lo)
        while sentence < sentences and offsets[sentence] < hi:
            start = max(offsets[sentence], lo)
            stop = min(offsets[sentence + 1], hi)
            sentence += 1
            n = 0
            for k in range(start, stop):
                if _keep(keep, ids[k], &state):
                    sen[n] = ids[k]
                    raw[n] = k
                    n += 1
            counts.kept += n
            for p in range(n):
                reach = window - <Py_ssize_t>(_next(&state) % <uint64_t>window)
                m = 0
                for j in range(max(0, p - reach), min(n, p + reach + 1)):
                    if j != p:
                        ctx[m] = sen[j]
                        m += 1
                if m == 0:
                    continue
                counts.pairs += m
                lr = <floating>(alpha_start + (alpha_end - alpha_start) * (raw[p] - lo) / span_words)
                out[0] = sen[p]
                for c in range(1, outs):
                    out[c] = _negative(cum, vocab, &state)
                if floating is float:
                    tapeflow_w2v_window_f32(syn0, syn1, ctx, m, out, outs, dim, lr, s, dx)
                else:
                    tapeflow_w2v_window_f64(syn0, syn1, ctx, m, out, outs, dim, lr, s, dx)
    free(sen)
    free(raw)
    free(ctx)
    free(out)
    free(s)
    free(dx)
    return counts


def _check(str name, Py_ssize_t vocab, const int32_t[::1] ids, const int64_t[::1] offsets,
           keep, cum, int window, int negative):
    if window < 1:
        raise ValueError(f"{name}: window must be >= 1, got {window}")
    if negative < 1:
        raise ValueError(f"{name}: negative must be >= 1, got {negative}")
    if offsets.shape[0] < 1 or offsets[0] != 0 or offsets[offsets.shape[0] - 1] != ids.shape[0]:
        raise ValueError(f"{name}: offsets must run from 0 to the number of ids ({ids.shape[0]})")
    if np.any(np.diff(np.asarray(offsets)) < 0):
        raise ValueError(f"{name}: offsets must not decrease")
    if ids.shape[0] and (np.asarray(ids).min() < 0 or np.asarray(ids).max() >= vocab):
        raise IndexError(f"{name}: word ids must lie in [0, {vocab})")
    if keep.shape[0] != vocab or cum.shape[0] != vocab:
        raise ValueError(f"{name}: keep and cum need one entry per word ({vocab}), got {keep.shape[0]}, {cum.shape[0]}")
    if vocab and cum[vocab - 1] <= 0:
        raise ValueError(f"{name}: the negative-sampling table is empty")


def sgns_train(floating[:, ::1] syn0, floating[:, ::1] syn1, const int32_t[::1] ids,
               const int64_t[::1] offsets, const double[::1] keep, const int64_t[::1] cum,
               int window, int negative, double alpha_start, double alpha_end, uint64_t seed,
               int threads=0):
    """Train skip-gram with negative sampling on `ids` once, updating syn0 and syn1 in place.

    `offsets` bound the sentences; `keep` is each word's subsampling keep probability;
    `cum` the cumulative (integer) negative-sampling weights; the learning rate falls
    linearly from alpha_start to alpha_end over each thread's share. `threads=0` uses the
    kernels' thread count. Returns (words, words kept by subsampling, pairs trained).

    >>> import numpy as np
    >>> syn0 = np.full((3, 4), 0.1, np.float32); syn1 = np.zeros((3, 4), np.float32)
    >>> ids = np.array([0, 1, 2, 1], np.int32); offsets = np.array([0, 4])
    >>> sgns_train(syn0, syn1, ids, offsets, np.ones(3), np.array([1, 2, 3]), 1, 2, 0.025, 0.0, 1, 1)
    (4, 4, 6)
    >>> bool(np.abs(syn1).sum() > 0)
    True
    """
    cdef Py_ssize_t vocab = syn0.shape[0], dim = syn0.shape[1], t, sentences = offsets.shape[0] - 1
    if syn1.shape[0] != vocab or syn1.shape[1] != dim:
        raise ValueError(f"sgns_train: syn0 {(vocab, dim)} and syn1 {(syn1.shape[0], syn1.shape[1])} differ in shape")
    _check("sgns_train", vocab, ids, offsets, keep, cum, window, negative)
    if threads < 0:
        raise ValueError(f"sgns_train: threads must be >= 0, got {threads}")
    cdef int nthreads = threads if threads > 0 else _num_threads
    cdef int64_t total = ids.shape[0]
    if nthreads > total:
        nthreads = max(1, <int>total)
    cdef Py_ssize_t capacity = max(1, int(np.diff(np.asarray(offsets)).max(initial=0)))
    counts = np.zeros((nthreads, 3), dtype=np.int64)
    cdef int64_t[:, ::1] counts_v = counts
    cdef Counts got
    if total == 0 or dim == 0:
        return 0, 0, 0
    for t in prange(nthreads, nogil=True, schedule="static", num_threads=nthreads):
        got = _train_share(&syn0[0, 0], &syn1[0, 0], vocab, dim, &ids[0], &offsets[0], sentences,
                           total * t // nthreads, total * (t + 1) // nthreads, &keep[0], &cum[0],
                           window, negative, alpha_start, alpha_end, seed + <uint64_t>t * _THREAD_STREAM,
                           capacity)
        counts_v[t, 0] = got.words
        counts_v[t, 1] = got.kept
        counts_v[t, 2] = got.pairs
    if np.any(counts[:, 0] < 0):
        raise MemoryError("sgns_train: could not allocate a thread's buffers")
    words, kept, pairs = counts.sum(axis=0).tolist()
    return words, kept, pairs


def skipgram_pairs(const int32_t[::1] ids, const int64_t[::1] offsets, const double[::1] keep,
                   int window, uint64_t seed):
    """(centers, contexts) int64 arrays of skip-gram pairs after subsampling, with dynamic
    windows, drawn with the train step's generator (one thread, same draws for the same seed).

    >>> import numpy as np
    >>> c, x = skipgram_pairs(np.array([5, 6, 7], np.int32), np.array([0, 3]), np.ones(8), 1, 0)
    >>> c.tolist(), x.tolist()
    ([5, 6, 6, 7], [6, 5, 7, 6])
    """
    cdef Py_ssize_t vocab = keep.shape[0], sentences = offsets.shape[0] - 1
    _check("skipgram_pairs", vocab, ids, offsets, keep, np.ones(vocab, np.int64), window, 1)
    cdef Py_ssize_t capacity = max(1, int(np.diff(np.asarray(offsets)).max(initial=0)))
    cdef int64_t bound = ids.shape[0] * 2 * window
    centers = np.empty(bound, dtype=np.int64)
    contexts = np.empty(bound, dtype=np.int64)
    cdef int64_t[::1] cv = centers, xv = contexts
    cdef int32_t[::1] sen = np.empty(capacity, dtype=np.int32)
    cdef uint64_t state = seed
    cdef int64_t count = 0, k
    cdef Py_ssize_t sentence, n, p, j, reach
    with nogil:
        for sentence in range(sentences):
            n = 0
            for k in range(offsets[sentence], offsets[sentence + 1]):
                if _keep(&keep[0], ids[k], &state):
                    sen[n] = ids[k]
                    n += 1
            for p in range(n):
                reach = window - <Py_ssize_t>(_next(&state) % <uint64_t>window)
                for j in range(max(0, p - reach), min(n, p + reach + 1)):
                    if j != p:
                        cv[count] = sen[p]
                        xv[count] = sen[j]
                        count += 1
    return centers[:count].copy(), contexts[:count].copy()
