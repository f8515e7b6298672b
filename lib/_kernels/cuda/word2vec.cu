// word2vec skip-gram with negative sampling, one pass over a corpus.
//
// Each block takes one centre word at a time (a grid-stride loop over the corpus) and trains
// its whole window at once, as the CPU kernel does: the m context rows X of syn0 against the
// centre's and K shared negatives' rows Y of syn1,
//     S = X Y^T,  G = lr * (labels - sigmoid(S)),  Y += G^T X,  X += G Y  (both from the old values).
// Blocks update the tables without locks (Hogwild). A window costs four barriers: thread 0
// gathers the contexts while threads 1..K draw the negatives; every thread sums a slice of the
// m*(K+1) dot products (lanes of `lanes` threads stride over the dimension); the products
// are completed and turned into G; then each thread updates its own columns of every row.
//
// Random draws are counter-based, so every position's draws are independent of the order in
// which blocks reach them (and a neighbour's subsampling can be recomputed where needed):
// draw k of corpus position p is term p * (K + 2) + k + 1 of the SplitMix64 sequence whose
// state starts at SplitMix64's mix of `seed`. Draw 0 decides subsampling, draw 1 the reduced
// window, draws 2.. the negatives, each used as the CPU kernel uses its LCG output (the 16
// low bits against the keep probability, a modulo for the window, the bits above 16 modulo
// the table's total for a negative): the distributions are the CPU's, the sequences not.
// Windows run over the words that survive subsampling, within a sentence. The learning rate
// falls linearly from alpha_start at the first word to alpha_end at the last. The counts
// (words, words kept, pairs) are summed per block and added to `counts` with one atomic each.
//
// Launch with blockDim.x >= 2 (any size: nothing assumes a power of two or a warp) and dynamic
// shared memory of 16 + sizeof(T) * (P * (lanes + 1) + P + (K + 1) * blockDim.x)
// + 4 * (2 * window + K + 1) bytes, with P = 2 * window * (K + 1).

typedef unsigned long long w2v_u64;

__device__ __forceinline__ w2v_u64 w2v_mix(w2v_u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ w2v_u64 w2v_draw(w2v_u64 key, long long position, int draws, int k) {
    return w2v_mix(key + ((w2v_u64)position * (w2v_u64)draws + (w2v_u64)k + 1ULL) * 0x9E3779B97F4A7C15ULL);
}

__device__ __forceinline__ bool w2v_kept(const double* keep, const int* ids, w2v_u64 key, long long position,
                                         int draws) {
    double p = keep[ids[position]];
    return p >= 1.0 || p >= (double)(w2v_draw(key, position, draws, 0) & 0xFFFFULL) / 65536.0;
}

__device__ __forceinline__ int w2v_negative(const long long* cum, int vocab, w2v_u64 bits) {
    long long r = (long long)((bits >> 16) % (w2v_u64)cum[vocab - 1]);
    int lo = 0, hi = vocab - 1;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (cum[mid] <= r) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

template <typename T>
__device__ void w2v_sgns(T* syn0, T* syn1, const int* ids, const long long* offsets, long long sentences,
                         const double* keep, const long long* cum, const double* alpha_start,
                         const double* alpha_end, const long long* seed, long long total, int vocab, int dim,
                         int window, int negative, int lanes, unsigned long long* counts) {
    extern __shared__ unsigned char shared_bytes[];
    const int tid = threadIdx.x, threads = blockDim.x, outs = negative + 1, span = 2 * window;
    const int draws = negative + 2, most = span * outs;
    long long* header = reinterpret_cast<long long*>(shared_bytes);  // [0]: m, the contexts of this window
    T* partial = reinterpret_cast<T*>(shared_bytes + 16);            // most x (lanes + 1), padded rows
    T* g = partial + most * (lanes + 1);                             // m x outs
    T* old_y = g + most;                                             // outs x threads, a column per thread
    int* ctx = reinterpret_cast<int*>(old_y + outs * threads);
    int* out = ctx + span;
    const w2v_u64 key = w2v_mix((w2v_u64)seed[0]);
    const double a0 = alpha_start[0], a1 = alpha_end[0];
    unsigned long long words = 0, kept = 0, pairs = 0;
    for (long long pos = blockIdx.x; pos < total; pos += gridDim.x) {
        const bool centre_kept = w2v_kept(keep, ids, key, pos, draws);
        if (tid == 0) {
            int m = 0;
            ++words;
            if (centre_kept) {
                ++kept;
                long long a = 0, b = sentences;  // the sentence [offsets[a], offsets[a + 1]) holding pos
                while (b - a > 1) {
                    long long mid = (a + b) >> 1;
                    if (offsets[mid] <= pos) a = mid;
                    else b = mid;
                }
                const long long start = offsets[a], stop = offsets[a + 1];
                const int reach = window - (int)(w2v_draw(key, pos, draws, 1) % (w2v_u64)window);
                int found = 0;
                for (long long j = pos - 1; j >= start && found < reach; --j) {
                    if (w2v_kept(keep, ids, key, j, draws)) {
                        ctx[m++] = ids[j];
                        ++found;
                    }
                }
                found = 0;
                for (long long j = pos + 1; j < stop && found < reach; ++j) {
                    if (w2v_kept(keep, ids, key, j, draws)) {
                        ctx[m++] = ids[j];
                        ++found;
                    }
                }
                pairs += m;
            }
            header[0] = m;
            out[0] = ids[pos];
        } else if (centre_kept) {
            for (int c = tid; c < outs; c += threads - 1) {
                out[c] = w2v_negative(cum, vocab, w2v_draw(key, pos, draws, c + 1));
            }
        }
        __syncthreads();
        const int m = (int)header[0];
        if (m > 0) {
            const int count = m * outs;
            for (int e = tid; e < count * lanes; e += threads) {
                const int p = e / lanes, lane = e - p * lanes;
                const T* x = syn0 + (long long)ctx[p / outs] * dim;
                const T* y = syn1 + (long long)out[p % outs] * dim;
                T s = 0;
                for (int d = lane; d < dim; d += lanes) s += x[d] * y[d];
                partial[p * (lanes + 1) + lane] = s;
            }
            __syncthreads();
            const T lr = (T)(a0 + (a1 - a0) * ((double)pos / (double)total));
            for (int p = tid; p < count; p += threads) {
                const int c = p % outs;
                T s = 0;
                for (int lane = 0; lane < lanes; ++lane) s += partial[p * (lanes + 1) + lane];
                const T label = c == 0 ? T(1) : T(0);
                g[p] = (c > 0 && out[c] == out[0]) ? T(0) : lr * (label - T(1) / (T(1) + exp(-s)));
            }
            __syncthreads();
            T* mine = old_y + tid;
            for (int d = tid; d < dim; d += threads) {
                for (int c = 0; c < outs; ++c) mine[c * threads] = syn1[(long long)out[c] * dim + d];
                for (int c = 0; c < outs; ++c) {
                    T step = 0;
                    for (int i = 0; i < m; ++i) step += g[i * outs + c] * syn0[(long long)ctx[i] * dim + d];
                    syn1[(long long)out[c] * dim + d] += step;
                }
                for (int i = 0; i < m; ++i) {
                    T step = 0;
                    for (int c = 0; c < outs; ++c) step += g[i * outs + c] * mine[c * threads];
                    syn0[(long long)ctx[i] * dim + d] += step;
                }
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        atomicAdd(counts, words);
        atomicAdd(counts + 1, kept);
        atomicAdd(counts + 2, pairs);
    }
}

extern "C" __global__ void word2vec_sgns_f32(float* syn0, float* syn1, const int* ids, const long long* offsets,
                                             long long sentences, const double* keep, const long long* cum,
                                             const double* alpha_start, const double* alpha_end,
                                             const long long* seed, long long total, int vocab, int dim, int window,
                                             int negative, int lanes, unsigned long long* counts) {
    w2v_sgns<float>(syn0, syn1, ids, offsets, sentences, keep, cum, alpha_start, alpha_end, seed, total, vocab, dim,
                    window, negative, lanes, counts);
}

extern "C" __global__ void word2vec_sgns_f64(double* syn0, double* syn1, const int* ids, const long long* offsets,
                                             long long sentences, const double* keep, const long long* cum,
                                             const double* alpha_start, const double* alpha_end,
                                             const long long* seed, long long total, int vocab, int dim, int window,
                                             int negative, int lanes, unsigned long long* counts) {
    w2v_sgns<double>(syn0, syn1, ids, offsets, sentences, keep, cum, alpha_start, alpha_end, seed, total, vocab, dim,
                     window, negative, lanes, counts);
}
