// Embedding gradient: out[ids[i], :] += updates[i, :] for every i, with atomic adds so
// repeated ids accumulate. One thread per element of `updates`.
extern "C" __global__ void scatter_add_rows_f32(float* out, const long long* ids, const float* updates,
                                                long long n, int width) {
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n * width) return;
    long long i = k / width;
    atomicAdd(out + ids[i] * width + (k % width), updates[k]);
}

extern "C" __global__ void scatter_add_rows_f64(double* out, const long long* ids, const double* updates,
                                                long long n, int width) {
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n * width) return;
    long long i = k / width;
    atomicAdd(out + ids[i] * width + (k % width), updates[k]);
}
