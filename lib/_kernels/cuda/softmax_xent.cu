// Fused sparse softmax cross-entropy: one block per row computes the row's max and
// log-sum-exp with shared-memory reductions, then writes the loss and the gradient
// (softmax minus the one-hot label) in the same pass. T is float or double. blockDim.x is a
// power of two. Infinity is built from its bits: NVRTC has no INFINITY macro.
template <typename T>
__device__ void sparse_softmax_xent(const T* logits, const long long* labels, T* loss, T* backprop,
                                    int rows, int classes) {
    extern __shared__ unsigned char shared_bytes[];
    T* shared = reinterpret_cast<T*>(shared_bytes);
    int row = blockIdx.x;
    if (row >= rows) return;
    const T* z = logits + (long long)row * classes;
    T* g = backprop + (long long)row * classes;
    T m = -T(__int_as_float(0x7f800000));
    for (int c = threadIdx.x; c < classes; c += blockDim.x) m = max(m, z[c]);
    shared[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = max(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    m = shared[0];
    __syncthreads();
    T total = 0;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) total += exp(z[c] - m);
    shared[threadIdx.x] = total;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    T lse = log(shared[0]);
    long long label = labels[row];
    for (int c = threadIdx.x; c < classes; c += blockDim.x) {
        T p = exp(z[c] - m - lse);
        g[c] = p - (c == label ? T(1) : T(0));
    }
    if (threadIdx.x == 0) loss[row] = lse - (z[label] - m);
}

extern "C" __global__ void sparse_softmax_xent_f32(const float* logits, const long long* labels, float* loss,
                                                   float* backprop, int rows, int classes) {
    sparse_softmax_xent<float>(logits, labels, loss, backprop, rows, classes);
}

extern "C" __global__ void sparse_softmax_xent_f64(const double* logits, const long long* labels, double* loss,
                                                   double* backprop, int rows, int classes) {
    sparse_softmax_xent<double>(logits, labels, loss, backprop, rows, classes);
}
