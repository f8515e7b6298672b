// Ids and labels checked against [low, high) in one launch of one block: the values come back
// clipped into [low, max(high - 1, low)] (safe to index with), flag = {1 if any value was out of
// range else 0, the first such value (0 if none)} and ok = !flag[0]. Each thread walks the values
// with a stride of blockDim.x and keeps the smallest position of a bad value it saw; a
// shared-memory reduction (blockDim.x long longs, a power of two) finds the first. I is the
// integer type of the values.
template <typename I>
__device__ void range_check(const I* values, long long n, long long low, long long high, I* clipped,
                            long long* flag, bool* ok) {
    extern __shared__ unsigned char shared_bytes[];
    long long* first = reinterpret_cast<long long*>(shared_bytes);
    const long long top = high > low ? high - 1 : low;
    long long mine = n;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const long long v = (long long)values[i];
        const bool bad = v < low || v >= high;
        if (bad && i < mine) mine = i;
        clipped[i] = (I)(v < low ? low : (v > top ? top : v));
    }
    first[threadIdx.x] = mine;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && first[threadIdx.x + s] < first[threadIdx.x]) first[threadIdx.x] = first[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const long long at = first[0];
        flag[0] = at < n ? 1 : 0;
        flag[1] = at < n ? (long long)values[at] : 0;
        ok[0] = at >= n;
    }
}

extern "C" __global__ void range_check_i64(const long long* values, long long n, long long low, long long high,
                                           long long* clipped, long long* flag, bool* ok) {
    range_check<long long>(values, n, low, high, clipped, flag, ok);
}

extern "C" __global__ void range_check_i32(const int* values, long long n, long long low, long long high,
                                           int* clipped, long long* flag, bool* ok) {
    range_check<int>(values, n, low, high, clipped, flag, ok);
}
