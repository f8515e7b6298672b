// 2-D window ops on channels-last arrays [n, h, w, c]: im2col and col2im around cuBLAS products
// for convolutions, and max and average pooling with their gradients. One thread per element
// written; every element of the output is written by the one thread that owns it (gathers, no
// atomics), so the results do not depend on the order in which threads run. T is float or
// double.
//
// A window's geometry: output [oh, ow], kernel [kh, kw], strides (sh, sw), dilations (dh, dw),
// and the padding before each axis (pt, pl). Output (oy, ox), tap (i, j) reads input row
// oy * sh - pt + i * dh and column ox * sw - pl + j * dw; outside the input it reads zero
// (convolutions) or minus infinity (max pooling). Infinity is built from its bits: NVRTC has no
// INFINITY macro.

// Element k of an array [n, rows, cols, c]: its image, row, column and channel.
struct tf_cell {
    long long b;
    int row, col, ch;
};
__device__ inline tf_cell cell_of(long long k, int rows, int cols, int c) {
    tf_cell at;
    at.ch = (int)(k % c);
    long long rest = k / c;
    at.col = (int)(rest % cols);
    rest /= cols;
    at.row = (int)(rest % rows);
    at.b = rest / rows;
    return at;
}

// The windows [from, to] along one axis that hold position p (window o covers o * s - pad
// .. o * s - pad + k - 1), within the o_count windows there are.
struct tf_range {
    int from, to;
};
__device__ inline tf_range windows_holding(int p, int pad, int k, int s, int o_count) {
    tf_range r;
    r.from = p + pad - k + 1 > 0 ? (p + pad - k + 1 + s - 1) / s : 0;
    r.to = (p + pad) / s < o_count - 1 ? (p + pad) / s : o_count - 1;
    return r;
}

// cols[(b, oy, ox), (i, j, ch)] = x[b, oy * sh - pt + i * dh, ox * sw - pl + j * dw, ch]
template <typename T>
__device__ void im2col(const T* x, T* cols, long long total, int h, int w, int c, int oh, int ow, int kh,
                       int kw, int sh, int sw, int dh, int dw, int pt, int pl) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const int width = kh * kw * c;
    const long long row = k / width;
    const int col = (int)(k - row * width);
    const int ch = col % c, tap = col / c;
    const int j = tap % kw, i = tap / kw;
    const int ox = (int)(row % ow);
    const long long rest = row / ow;
    const int oy = (int)(rest % oh);
    const long long b = rest / oh;
    const int y = oy * sh - pt + i * dh, xx = ox * sw - pl + j * dw;
    cols[k] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[((b * h + y) * w + xx) * c + ch] : T(0);
}

// dx[b, y, x, ch] = the sum of dcols[(b, oy, ox), (i, j, ch)] over the taps that read (y, x),
// added in the order of (i, j)
template <typename T>
__device__ void col2im(const T* dcols, T* dx, long long total, int h, int w, int c, int oh, int ow, int kh,
                       int kw, int sh, int sw, int dh, int dw, int pt, int pl) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const tf_cell at = cell_of(k, h, w, c);
    const long long b = at.b, width = (long long)kh * kw * c;
    const int y = at.row, xx = at.col, ch = at.ch;
    T sum = T(0);
    for (int i = 0; i < kh; ++i) {
        const int ty = y + pt - i * dh;
        if (ty < 0 || ty % sh != 0 || ty / sh >= oh) continue;
        for (int j = 0; j < kw; ++j) {
            const int tx = xx + pl - j * dw;
            if (tx < 0 || tx % sw != 0 || tx / sw >= ow) continue;
            sum += dcols[((b * oh + ty / sh) * ow + tx / sw) * width + (i * kw + j) * c + ch];
        }
    }
    dx[k] = sum;
}

// The first maximum of window (b, oy, ox) in channel ch, taps in row-major order, cells outside
// the input minus infinity, a NaN the maximum once met: its value and its tap i * kw + j.
template <typename T>
__device__ T first_max(const T* x, long long b, int oy, int ox, int ch, int h, int w, int c, int kh, int kw,
                       int sh, int sw, int pt, int pl, int* tap) {
    const T lowest = -T(__int_as_float(0x7f800000));
    T best = lowest;
    *tap = 0;
    for (int i = 0; i < kh; ++i) {
        const int y = oy * sh - pt + i;
        for (int j = 0; j < kw; ++j) {
            const int xx = ox * sw - pl + j;
            const T v = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[((b * h + y) * w + xx) * c + ch] : lowest;
            if (v > best || (v != v && best == best)) {
                best = v;
                *tap = i * kw + j;
            }
        }
    }
    return best;
}

template <typename T>
__device__ void max_pool(const T* x, T* out, long long total, int h, int w, int c, int oh, int ow, int kh, int kw,
                         int sh, int sw, int pt, int pl) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const tf_cell at = cell_of(k, oh, ow, c);
    int tap;
    out[k] = first_max(x, at.b, at.row, at.col, at.ch, h, w, c, kh, kw, sh, sw, pt, pl, &tap);
}

// dx[b, y, x, ch] = the sum of dy over the windows whose first maximum is (y, x), added in the
// order of the windows (oy, then ox)
template <typename T>
__device__ void max_pool_grad(const T* x, const T* dy, T* dx, long long total, int h, int w, int c, int oh, int ow,
                              int kh, int kw, int sh, int sw, int pt, int pl) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const tf_cell at = cell_of(k, h, w, c);
    const tf_range rows = windows_holding(at.row, pt, kh, sh, oh), cols = windows_holding(at.col, pl, kw, sw, ow);
    T sum = T(0);
    for (int oy = rows.from; oy <= rows.to; ++oy) {
        for (int ox = cols.from; ox <= cols.to; ++ox) {
            int tap;
            first_max(x, at.b, oy, ox, at.ch, h, w, c, kh, kw, sh, sw, pt, pl, &tap);
            if (tap == (at.row - (oy * sh - pt)) * kw + (at.col - (ox * sw - pl)))
                sum += dy[((at.b * oh + oy) * ow + ox) * c + at.ch];
        }
    }
    dx[k] = sum;
}

// The cells of window (oy, ox) inside the input: the divisor of an average pool.
__device__ inline int window_cells(int oy, int ox, int h, int w, int kh, int kw, int sh, int sw, int pt, int pl) {
    const int y0 = oy * sh - pt, x0 = ox * sw - pl;
    const int rows = (y0 + kh < h ? y0 + kh : h) - (y0 > 0 ? y0 : 0);
    const int cols = (x0 + kw < w ? x0 + kw : w) - (x0 > 0 ? x0 : 0);
    return (rows > 0 ? rows : 0) * (cols > 0 ? cols : 0);
}

// out = the mean of each window's cells inside the input (padding not counted)
template <typename T>
__device__ void avg_pool(const T* x, T* out, long long total, int h, int w, int c, int oh, int ow, int kh, int kw,
                         int sh, int sw, int pt, int pl) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const tf_cell at = cell_of(k, oh, ow, c);
    T sum = T(0);
    for (int i = 0; i < kh; ++i) {
        const int y = at.row * sh - pt + i;
        if (y < 0 || y >= h) continue;
        for (int j = 0; j < kw; ++j) {
            const int xx = at.col * sw - pl + j;
            if (xx >= 0 && xx < w) sum += x[((at.b * h + y) * w + xx) * c + at.ch];
        }
    }
    out[k] = sum / T(window_cells(at.row, at.col, h, w, kh, kw, sh, sw, pt, pl));
}

// dx[b, y, x, ch] = the sum of dy / (the window's cells) over the windows holding (y, x)
template <typename T>
__device__ void avg_pool_grad(const T* dy, T* dx, long long total, int h, int w, int c, int oh, int ow, int kh,
                              int kw, int sh, int sw, int pt, int pl) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const tf_cell at = cell_of(k, h, w, c);
    const tf_range rows = windows_holding(at.row, pt, kh, sh, oh), cols = windows_holding(at.col, pl, kw, sw, ow);
    T sum = T(0);
    for (int oy = rows.from; oy <= rows.to; ++oy)
        for (int ox = cols.from; ox <= cols.to; ++ox)
            sum += dy[((at.b * oh + oy) * ow + ox) * c + at.ch] /
                   T(window_cells(oy, ox, h, w, kh, kw, sh, sw, pt, pl));
    dx[k] = sum;
}

#define TF_WINDOW_KERNELS(T, SUFFIX)                                                                              \
    extern "C" __global__ void im2col_##SUFFIX(const T* x, T* cols, long long total, int h, int w, int c, int oh, \
                                               int ow, int kh, int kw, int sh, int sw, int dh, int dw, int pt,    \
                                               int pl) {                                                          \
        im2col<T>(x, cols, total, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl);                               \
    }                                                                                                             \
    extern "C" __global__ void col2im_##SUFFIX(const T* dcols, T* dx, long long total, int h, int w, int c,      \
                                               int oh, int ow, int kh, int kw, int sh, int sw, int dh, int dw,    \
                                               int pt, int pl) {                                                  \
        col2im<T>(dcols, dx, total, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl);                             \
    }                                                                                                             \
    extern "C" __global__ void max_pool_##SUFFIX(const T* x, T* out, long long total, int h, int w, int c,       \
                                                 int oh, int ow, int kh, int kw, int sh, int sw, int pt,          \
                                                 int pl) {                                                        \
        max_pool<T>(x, out, total, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl);                                      \
    }                                                                                                             \
    extern "C" __global__ void max_pool_grad_##SUFFIX(const T* x, const T* dy, T* dx, long long total, int h,     \
                                                      int w, int c, int oh, int ow, int kh, int kw, int sh,       \
                                                      int sw, int pt, int pl) {                                   \
        max_pool_grad<T>(x, dy, dx, total, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl);                              \
    }                                                                                                             \
    extern "C" __global__ void avg_pool_##SUFFIX(const T* x, T* out, long long total, int h, int w, int c,       \
                                                 int oh, int ow, int kh, int kw, int sh, int sw, int pt,          \
                                                 int pl) {                                                        \
        avg_pool<T>(x, out, total, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl);                                      \
    }                                                                                                             \
    extern "C" __global__ void avg_pool_grad_##SUFFIX(const T* dy, T* dx, long long total, int h, int w, int c,  \
                                                      int oh, int ow, int kh, int kw, int sh, int sw, int pt,     \
                                                      int pl) {                                                   \
        avg_pool_grad<T>(dy, dx, total, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl);                                 \
    }

TF_WINDOW_KERNELS(float, f32)
TF_WINDOW_KERNELS(double, f64)
