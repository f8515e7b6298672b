"""LSTM and GRU over a whole sequence: per step, one gemm of the previous output with the
recurrent kernel for all the gates, then the gates and the state update in one pass over the batch.

Arrays are C-contiguous. The projected inputs `xp` are [batch, time, 4 * units] for the LSTM
(gates i, f, c, o) and [batch, time, 3 * units] for the GRU (gates z, r, h); `mask` ([batch, time], nonzero = real step) is optional: a masked step keeps the
previous states, and its output repeats the previous output (zeros before the first real
step). Outputs are stored in the order the steps run (reversed time with `backwards`); the
gate activations are stored at their time index, beside the inputs they come from.
"""

include "_common.pxi"
include "_wide_math.pxi"
include "_panel_gemm.pxi"

from tapeflow._kernels.private_blas import private_blas

from cython cimport floating
from libc.math cimport exp, expf, tanh, tanhf
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset
from cython.parallel cimport parallel, prange
from scipy.linalg.cython_blas cimport dgemm, sgemm

# Float32 sigmoid and tanh over arrays, written branch-free so that the compiler vectorizes
# them: exp from _wide_math.pxi, tanh from it, with an odd polynomial near zero where
# 1 - 2 / (exp(2x) + 1) would cancel.
cdef extern from *:
    """
    static inline float tapeflow_tanhf(float x) {
        float z = x * x;
        float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                        + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
        float large = 1.0f - 2.0f / (tapeflow_expf(2.0f * x) + 1.0f);
        return (x < 0.625f && x > -0.625f) ? small : large;
    }
    TAPEFLOW_WIDE static void tapeflow_sigmoid_f32(float* v, long n) {
        for (long k = 0; k < n; k++) v[k] = 1.0f / (1.0f + tapeflow_expf(-v[k]));
    }
    TAPEFLOW_WIDE static void tapeflow_tanh_f32(const float* in, float* out, long n) {
        for (long k = 0; k < n; k++) out[k] = tapeflow_tanhf(in[k]);
    }
    /* One LSTM row's step: gates z (4 * nu, the recurrent gemm's part) plus the projected input x,
       activated in place; the cell c and output h updated; the cell also into cc, the output into y. */
    TAPEFLOW_WIDE static void tapeflow_lstm_cell_f32(float* restrict z, const float* restrict x,
                                                    float* restrict c, float* restrict h,
                                                    float* restrict cc, float* restrict y, long nu) {
        for (long k = 0; k < 4 * nu; k++) z[k] += x[k];
        for (long k = 0; k < 2 * nu; k++) z[k] = 1.0f / (1.0f + tapeflow_expf(-z[k]));
        for (long k = 2 * nu; k < 3 * nu; k++) z[k] = tapeflow_tanhf(z[k]);
        for (long k = 3 * nu; k < 4 * nu; k++) z[k] = 1.0f / (1.0f + tapeflow_expf(-z[k]));
        for (long u = 0; u < nu; u++) {
            float c_new = z[nu + u] * c[u] + z[u] * z[2 * nu + u];
            float h_new = z[3 * nu + u] * tapeflow_tanhf(c_new);
            c[u] = c_new;
            cc[u] = c_new;
            h[u] = h_new;
            y[u] = h_new;
        }
    }
    /* Its gradient: from the activations a, the cell c_row and the previous cell c_prev, the incoming
       output gradient gy plus the running dh, dc and carry; writes the gate gradients dz. */
    TAPEFLOW_WIDE static void tapeflow_lstm_cell_grad_f32(const float* restrict a, const float* restrict c_row,
                                                         const float* restrict c_prev, const float* restrict gy,
                                                         float* restrict dh, float* restrict dc,
                                                         float* restrict carry, float* restrict dz, long nu) {
        for (long u = 0; u < nu; u++) {
            float tc = tapeflow_tanhf(c_row[u]);
            float dhn = dh[u] + gy[u] + carry[u];
            float ai = a[u], af = a[nu + u], ac = a[2 * nu + u], ao = a[3 * nu + u];
            float dcn = dc[u] + dhn * ao * (1.0f - tc * tc);
            dz[u] = dcn * ac * ai * (1.0f - ai);
            dz[nu + u] = dcn * c_prev[u] * af * (1.0f - af);
            dz[2 * nu + u] = dcn * ai * (1.0f - ac * ac);
            dz[3 * nu + u] = dhn * tc * ao * (1.0f - ao);
            dc[u] = dcn * af;
            dh[u] = 0.0f;
            carry[u] = 0.0f;
        }
    }
    """
    void tapeflow_sigmoid_f32(float* v, long n) noexcept nogil
    void tapeflow_tanh_f32(const float* src, float* dst, long n) noexcept nogil
    void tapeflow_lstm_cell_f32(float* z, const float* x, float* c, float* h, float* cc, float* y,
                                long nu) noexcept nogil
    void tapeflow_lstm_cell_grad_f32(const float* a, const float* c_row, const float* c_prev, const float* gy,
                                     float* dh, float* dc, float* carry, float* dz, long nu) noexcept nogil


cdef inline floating _sigmoid(floating x) noexcept nogil:
    if floating is float:
        return 1.0 / (1.0 + expf(-x))
    else:
        return 1.0 / (1.0 + exp(-x))


cdef inline floating _tanh(floating x) noexcept nogil:
    if floating is float:
        return tanhf(x)
    else:
        return tanh(x)


ctypedef void (*sgemm_fn)(char*, char*, int*, int*, int*, float*, float*, int*, float*, int*, float*,
                          float*, int*) noexcept nogil
ctypedef void (*dgemm_fn)(char*, char*, int*, int*, int*, double*, double*, int*, double*, int*, double*,
                          double*, int*) noexcept nogil

# The steps' gemms are small and one follows another: they run on the calling thread, in the
# private single-threaded copy of OpenBLAS where one loads (see private_blas.py), so that no
# worker thread is woken, or left spinning, 2 * time times per sequence.
cdef sgemm_fn _sgemm = sgemm
cdef dgemm_fn _dgemm = dgemm


def _bind_private_blas():
    global _sgemm, _dgemm
    found = private_blas()
    if found is None:
        return False
    _sgemm = <sgemm_fn><size_t>found["sgemm"]
    _dgemm = <dgemm_fn><size_t>found["dgemm"]
    return True


BLAS_PRIVATE = _bind_private_blas()

# Below this many multiply-adds of the recurrent gemms a sequence runs on one thread.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 22


def _set_parallel_min(Py_ssize_t n):
    """Change the size below which a sequence runs on one thread and return the old one (tests use 0)."""
    global _PARALLEL_MIN
    old, _PARALLEL_MIN = _PARALLEL_MIN, max(0, n)
    return old


cdef inline void _gemm(char* ta, char* tb, int n, int m, int k, floating* a, int lda, floating* b, int ldb,
                       floating beta, floating* c, int ldc) noexcept nogil:
    """Column-major C[n, m] = op(a)[n, k] @ op(b)[k, m] + beta * C (row-major: C^T)."""
    cdef floating one = 1.0
    if n <= 0 or m <= 0:
        return
    if floating is float:
        _sgemm(ta, tb, &n, &m, &k, &one, a, &lda, b, &ldb, &beta, c, &ldc)
    else:
        _dgemm(ta, tb, &n, &m, &k, &one, a, &lda, b, &ldb, &beta, c, &ldc)


cdef int _row_blocks(Py_ssize_t rows, Py_ssize_t work) noexcept nogil:
    """How many blocks of batch rows a sequence runs as, one per thread: 1 below _PARALLEL_MIN
    multiply-adds (or as _threads_for says while the cores are busy), or with fewer than 8 rows a block."""
    return <int>max(1, min(<Py_ssize_t>_threads_for(work, _PARALLEL_MIN), rows // 8))


# What _packed_kernel returns when the panels' memory cannot be had (NULL means "use BLAS").
cdef size_t _NO_MEMORY = 1


cdef float* _packed_kernel(const floating[:, ::1] kernel, bint transposed):
    """The float32 recurrent kernel [units, gates] in panels for the steps' products: as it is
    (the forward's h @ kernel) or transposed (the backward's dz @ kernel^T); NULL where BLAS
    takes them (float64, no AVX2, no units)."""
    cdef Py_ssize_t nu = kernel.shape[0], ng = kernel.shape[1]
    cdef float* packed
    if floating is double or not _panels_ok or nu == 0 or ng == 0:
        return NULL
    else:
        if transposed:
            packed = tapeflow_pack_panels(&kernel[0, 0], 1, ng, ng, nu)
        else:
            packed = tapeflow_pack_panels(&kernel[0, 0], ng, 1, nu, ng)
        return <float*>_NO_MEMORY if packed == NULL else packed


cdef void _free_packed(float* packed) noexcept nogil:
    if packed != <float*>_NO_MEMORY:
        free(packed)


cdef void _lstm_forward_rows(const floating[:, :, ::1] xp, const floating[:, ::1] h0, const floating[:, ::1] c0,
                             const floating[:, ::1] kernel, const unsigned char* mp, bint backwards,
                             floating[:, :, ::1] ys, floating[:, :, ::1] cs, floating[:, :, ::1] acts,
                             floating* hs, floating* cst, floating* zs, const float* packed,
                             Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """The sequence of batch rows [b0, b1): rows are independent, so blocks of them run on threads.
    `packed`: the recurrent kernel in panels (float32 where the panel products run), else NULL.

    Each step's gemm writes the rows' gates into the contiguous scratch `zs` ([batch, 4 * units]);
    written in place in `acts`, rows a whole sequence apart would share cache sets."""
    cdef Py_ssize_t nt = xp.shape[1], ng = xp.shape[2], nu = h0.shape[1]
    cdef Py_ssize_t s, t, b, u
    cdef floating zi, zf, zc, zo, c_new, h_new
    cdef floating* z
    cdef const floating* x
    cdef floating* y
    cdef floating* cc
    for b in range(b0, b1):
        memcpy(&hs[b * nu], &h0[b, 0], nu * sizeof(floating))
        memcpy(&cst[b * nu], &c0[b, 0], nu * sizeof(floating))
    for s in range(nt):
        t = nt - 1 - s if backwards else s
        if floating is float:
            if packed != NULL:
                tapeflow_panel_gemm(&hs[b0 * nu], nu, packed, nu, ng, &zs[b0 * ng], ng, b1 - b0, 0)
        if b1 > b0 and (floating is double or packed == NULL):
            _gemm("N", "N", <int>ng, <int>(b1 - b0), <int>nu, <floating*>&kernel[0, 0], <int>ng, &hs[b0 * nu],
                  <int>nu, 0.0, &zs[b0 * ng], <int>ng)
        for b in range(b0, b1):
            z = &zs[b * ng]
            x = &xp[b, t, 0]
            y = &ys[b, s, 0]
            cc = &cs[b, s, 0]
            if mp != NULL and mp[b * nt + t] == 0:
                if s > 0:
                    memcpy(y, &ys[b, s - 1, 0], nu * sizeof(floating))
                else:
                    memset(y, 0, nu * sizeof(floating))
                memcpy(cc, &cst[b * nu], nu * sizeof(floating))
                memset(&acts[b, t, 0], 0, ng * sizeof(floating))
                continue
            if floating is float:
                tapeflow_lstm_cell_f32(z, x, &cst[b * nu], &hs[b * nu], cc, y, nu)
            else:
                for u in range(ng):
                    z[u] += x[u]
                for u in range(nu):
                    zi = _sigmoid(z[u])
                    zf = _sigmoid(z[nu + u])
                    zc = _tanh(z[2 * nu + u])
                    zo = _sigmoid(z[3 * nu + u])
                    z[u] = zi
                    z[nu + u] = zf
                    z[2 * nu + u] = zc
                    z[3 * nu + u] = zo
                    c_new = zf * cst[b * nu + u] + zi * zc
                    h_new = zo * _tanh(c_new)
                    cst[b * nu + u] = c_new
                    hs[b * nu + u] = h_new
                    cc[u] = c_new
                    y[u] = h_new
            memcpy(&acts[b, t, 0], z, ng * sizeof(floating))


def lstm_forward(const floating[:, :, ::1] xp, const floating[:, ::1] h0, const floating[:, ::1] c0,
                 const floating[:, ::1] kernel, const unsigned char[:, ::1] mask, bint backwards,
                 floating[:, :, ::1] ys, floating[:, :, ::1] cs, floating[:, :, ::1] acts,
                 floating[:, ::1] h_last, floating[:, ::1] c_last):
    """Run the sequence; fills ys and cs [batch, time, units], acts [batch, time, 4 * units]
    (sigmoid / tanh of the gates) and the final states h_last, c_last [batch, units]."""
    cdef Py_ssize_t nb = xp.shape[0], nt = xp.shape[1], ng = xp.shape[2], nu = h0.shape[1]
    if ng != 4 * nu or kernel.shape[0] != nu or kernel.shape[1] != ng or c0.shape[1] != nu:
        raise ValueError(f"lstm_forward: inconsistent shapes {xp.shape}, {h0.shape}, {kernel.shape}")
    cdef const unsigned char* mp = NULL
    if mask is not None:
        mp = &mask[0, 0]
    cdef Py_ssize_t b, i
    cdef int blocks = _row_blocks(nb, nt * nb * ng * nu)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    cdef floating* hs = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* cst = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* zs = <floating*>malloc(max(1, nb * ng) * sizeof(floating))
    cdef float* packed = _packed_kernel(kernel, False)
    if hs == NULL or cst == NULL or zs == NULL or packed == <float*>_NO_MEMORY:
        free(hs)
        free(cst)
        free(zs)
        _free_packed(packed)
        raise MemoryError()
    if blocks <= 1:
        with nogil:
            _lstm_forward_rows(xp, h0, c0, kernel, mp, backwards, ys, cs, acts, hs, cst, zs, packed, 0, nb)
    else:
        with nogil, parallel(num_threads=blocks):
            own = tapeflow_fpenv_swap(env)
            for i in prange(blocks, schedule="static"):
                _lstm_forward_rows(xp, h0, c0, kernel, mp, backwards, ys, cs, acts, hs, cst, zs, packed,
                                   nb * i // blocks, nb * (i + 1) // blocks)
            tapeflow_fpenv_swap(own)
    with nogil:
        for b in range(nb):
            memcpy(&h_last[b, 0], &hs[b * nu], nu * sizeof(floating))
            memcpy(&c_last[b, 0], &cst[b * nu], nu * sizeof(floating))
    free(hs)
    free(cst)
    free(zs)
    _free_packed(packed)


cdef void _first_steps(const unsigned char* mp, Py_ssize_t nb, Py_ssize_t nt, bint backwards,
                       Py_ssize_t* firsts) noexcept nogil:
    """Each row's first step that runs, in the order the steps run (0 without a mask; nt for a row
    that never runs): before it the state is the initial one and the output zeros."""
    cdef Py_ssize_t b, s, t
    for b in range(nb):
        firsts[b] = 0
        if mp != NULL:
            firsts[b] = nt
            for s in range(nt):
                t = nt - 1 - s if backwards else s
                if mp[b * nt + t] != 0:
                    firsts[b] = s
                    break


cdef void _lstm_backward_rows(const floating[:, :, ::1] gys, const floating[:, ::1] h0,
                              const floating[:, ::1] c0, const floating[:, ::1] kernel,
                              const floating[:, :, ::1] ys, const floating[:, :, ::1] cs,
                              const floating[:, :, ::1] acts, const unsigned char* mp, bint backwards,
                              floating[:, :, ::1] dxp, floating* dh, floating* dc, floating* carry,
                              floating* hprev, Py_ssize_t* firsts, floating* tcs, floating* zs,
                              const float* packed, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """Back through time for batch rows [b0, b1) (independent rows, as forward); each step's gate
    gradients are formed in the contiguous scratch `zs` for its gemm, then copied into `dxp`."""
    cdef Py_ssize_t nt = acts.shape[1], ng = acts.shape[2], nu = h0.shape[1]
    cdef Py_ssize_t s, t, b, u, first
    cdef floating dhn, dcn, ai, af, ac, ao, tc, c_prev
    cdef floating* dz
    cdef const floating* a
    cdef const floating* gy
    cdef const floating* cp
    cdef floating* dhr
    cdef floating* dcr
    cdef floating* cr
    for s in range(nt - 1, -1, -1):
        t = nt - 1 - s if backwards else s
        for b in range(b0, b1):
            dz = &zs[b * ng]
            first = firsts[b]
            if s > first:
                memcpy(&hprev[(b * nt + t) * nu], &ys[b, s - 1, 0], nu * sizeof(floating))
            else:
                memcpy(&hprev[(b * nt + t) * nu], &h0[b, 0], nu * sizeof(floating))
            if mp != NULL and mp[b * nt + t] == 0:
                for u in range(nu):
                    carry[b * nu + u] += gys[b, s, u]
                for u in range(ng):
                    dz[u] = 0.0
                continue
            a = &acts[b, t, 0]
            gy = &gys[b, s, 0]
            cp = &cs[b, s - 1, 0] if s > 0 else &c0[b, 0]
            dhr = &dh[b * nu]
            dcr = &dc[b * nu]
            cr = &carry[b * nu]
            if floating is float:
                tapeflow_lstm_cell_grad_f32(a, &cs[b, s, 0], cp, gy, dhr, dcr, cr, dz, nu)
            else:
                for u in range(nu):
                    tcs[u] = _tanh(cs[b, s, u])
                for u in range(nu):
                    dhn = dhr[u] + gy[u] + cr[u]
                    cr[u] = 0.0
                    ai = a[u]
                    af = a[nu + u]
                    ac = a[2 * nu + u]
                    ao = a[3 * nu + u]
                    c_prev = cp[u]
                    tc = tcs[u]
                    dcn = dcr[u] + dhn * ao * (1.0 - tc * tc)
                    dz[u] = dcn * ac * ai * (1.0 - ai)
                    dz[nu + u] = dcn * c_prev * af * (1.0 - af)
                    dz[2 * nu + u] = dcn * ai * (1.0 - ac * ac)
                    dz[3 * nu + u] = dhn * tc * ao * (1.0 - ao)
                    dcr[u] = dcn * af
                    dhr[u] = 0.0
        for b in range(b0, b1):
            memcpy(&dxp[b, t, 0], &zs[b * ng], ng * sizeof(floating))
        if floating is float:
            if packed != NULL:
                tapeflow_panel_gemm(&zs[b0 * ng], ng, packed, ng, nu, &dh[b0 * nu], nu, b1 - b0, 1)
        if b1 > b0 and (floating is double or packed == NULL):
            _gemm("T", "N", <int>nu, <int>(b1 - b0), <int>ng, <floating*>&kernel[0, 0], <int>ng, &zs[b0 * ng],
                  <int>ng, 1.0, &dh[b0 * nu], <int>nu)


cdef void _kernel_grad_band(floating* dz, floating* hprev, floating* dkernel, Py_ssize_t rows, Py_ssize_t nu,
                            Py_ssize_t ng, Py_ssize_t u0, Py_ssize_t u1) noexcept nogil:
    """dkernel[:, u0:u1] += hprev^T @ dz[:, u0:u1] over every (row, step): the packed-panel
    product for float32 where it runs, else BLAS."""
    if floating is float:
        if _panels_ok and tapeflow_panel_product(hprev, 1, nu, &dz[u0], ng, 1, &dkernel[u0], ng, nu, u1 - u0,
                                                 rows, 1, NULL, 0):
            return
    _gemm("N", "T", <int>(u1 - u0), <int>nu, <int>rows, &dz[u0], <int>ng, hprev, <int>nu, 1.0, &dkernel[u0],
          <int>ng)


def lstm_backward(const floating[:, :, ::1] gys, const floating[:, ::1] gh, const floating[:, ::1] gc,
                  const floating[:, ::1] h0, const floating[:, ::1] c0, const floating[:, ::1] kernel,
                  const floating[:, :, ::1] ys, const floating[:, :, ::1] cs, const floating[:, :, ::1] acts,
                  const unsigned char[:, ::1] mask, bint backwards,
                  floating[:, :, ::1] dxp, floating[:, ::1] dh0, floating[:, ::1] dc0, floating[:, ::1] dkernel):
    """Back through time from the gradients of ys, h_last and c_last: fills dxp, dh0, dc0 and
    dkernel (the recurrent kernel's gradient, one gemm over every step at the end, its gate
    columns split over the threads)."""
    cdef Py_ssize_t nb = acts.shape[0], nt = acts.shape[1], ng = acts.shape[2], nu = h0.shape[1]
    if ng != 4 * nu or kernel.shape[0] != nu or kernel.shape[1] != ng:
        raise ValueError(f"lstm_backward: inconsistent shapes {acts.shape}, {h0.shape}, {kernel.shape}")
    cdef const unsigned char* mp = NULL
    if mask is not None:
        mp = &mask[0, 0]
    cdef Py_ssize_t s, t, b, u, i, u0, u1
    cdef int blocks = _row_blocks(nb, nt * nb * ng * nu)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    cdef floating* dh = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* dc = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* carry = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* hprev = <floating*>malloc(max(1, nb * nt * nu) * sizeof(floating))
    cdef Py_ssize_t* firsts = <Py_ssize_t*>malloc(max(1, nb) * sizeof(Py_ssize_t))
    cdef floating* tcs = <floating*>malloc(max(1, blocks * nu) * sizeof(floating))
    cdef floating* zs = <floating*>malloc(max(1, nb * ng) * sizeof(floating))
    cdef float* packed = _packed_kernel(kernel, True)
    if (dh == NULL or dc == NULL or carry == NULL or hprev == NULL or firsts == NULL or tcs == NULL or zs == NULL
            or packed == <float*>_NO_MEMORY):
        _free_packed(packed)
        free(zs)
        free(tcs)
        free(dh)
        free(dc)
        free(carry)
        free(hprev)
        free(firsts)
        raise MemoryError()
    with nogil:
        for b in range(nb):
            memcpy(&dh[b * nu], &gh[b, 0], nu * sizeof(floating))
            memcpy(&dc[b * nu], &gc[b, 0], nu * sizeof(floating))
            memset(&carry[b * nu], 0, nu * sizeof(floating))
        _first_steps(mp, nb, nt, backwards, firsts)
        for u in range(nu):
            memset(&dkernel[u, 0], 0, ng * sizeof(floating))
    if blocks <= 1:
        with nogil:
            _lstm_backward_rows(gys, h0, c0, kernel, ys, cs, acts, mp, backwards, dxp, dh, dc, carry, hprev,
                                firsts, tcs, zs, packed, 0, nb)
            if nb * nt > 0:
                _kernel_grad_band(&dxp[0, 0, 0], hprev, &dkernel[0, 0], nb * nt, nu, ng, 0, ng)
    else:
        with nogil, parallel(num_threads=blocks):
            own = tapeflow_fpenv_swap(env)
            for i in prange(blocks, schedule="static"):
                _lstm_backward_rows(gys, h0, c0, kernel, ys, cs, acts, mp, backwards, dxp, dh, dc, carry, hprev,
                                    firsts, &tcs[i * nu], zs, packed, nb * i // blocks, nb * (i + 1) // blocks)
            tapeflow_fpenv_swap(own)
        with nogil, parallel(num_threads=blocks):
            own = tapeflow_fpenv_swap(env)
            for i in prange(blocks, schedule="static"):
                # bands of gate columns, each multiplied by every unit: a long product keeps more of
                # BLAS's speed with the full width of units than with a band of them
                u0 = ng * i // blocks // 16 * 16
                u1 = ng if i == blocks - 1 else ng * (i + 1) // blocks // 16 * 16
                if u1 > u0:
                    _kernel_grad_band(&dxp[0, 0, 0], hprev, &dkernel[0, 0], nb * nt, nu, ng, u0, u1)
            tapeflow_fpenv_swap(own)
    with nogil:
        for b in range(nb):
            memcpy(&dh0[b, 0], &dh[b * nu], nu * sizeof(floating))
            memcpy(&dc0[b, 0], &dc[b * nu], nu * sizeof(floating))
    free(dh)
    free(dc)
    free(carry)
    free(hprev)
    free(firsts)
    free(tcs)
    free(zs)
    _free_packed(packed)


cdef inline void _sigmoid_all(floating* v, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    if floating is float:
        tapeflow_sigmoid_f32(v, n)
    else:
        for k in range(n):
            v[k] = _sigmoid(v[k])


cdef inline void _tanh_all(floating* v, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    if floating is float:
        tapeflow_tanh_f32(v, v, n)
    else:
        for k in range(n):
            v[k] = _tanh(v[k])


cdef void _gru_forward_rows(const floating[:, :, ::1] xp, const floating[:, ::1] h0, const floating[:, ::1] kernel,
                            const floating[::1] bias, const unsigned char* mp, bint reset_after, bint backwards,
                            floating[:, :, ::1] ys, floating[:, :, ::1] acts, floating* hs, floating* zs,
                            const float* packed, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """The sequence of batch rows [b0, b1) (independent rows: blocks of them run on threads); each
    step's activations are formed in the contiguous scratch `zs` ([batch, 4 * units]), then copied
    into `acts`. `packed`: the recurrent kernel in panels for the first product, or NULL."""
    cdef Py_ssize_t nt = xp.shape[1], ng = xp.shape[2], nu = h0.shape[1]
    cdef Py_ssize_t s, t, b, u, na = 4 * nu
    cdef floating z
    cdef floating* a
    cdef floating* y
    cdef floating* hp
    cdef const floating* x
    for b in range(b0, b1):
        memcpy(&hs[b * nu], &h0[b, 0], nu * sizeof(floating))
    for s in range(nt):
        t = nt - 1 - s if backwards else s
        # the recurrent matmul of every gate (reset_after), or of z and r, into acts[b0:b1, t]
        if floating is float:
            if packed != NULL:
                tapeflow_panel_gemm(&hs[b0 * nu], nu, packed, nu, ng if reset_after else 2 * nu, &zs[b0 * na], na,
                                    b1 - b0, 0)
        if b1 > b0 and (floating is double or packed == NULL):
            _gemm("N", "N", <int>(ng if reset_after else 2 * nu), <int>(b1 - b0), <int>nu,
                  <floating*>&kernel[0, 0], <int>ng, &hs[b0 * nu], <int>nu, 0.0, &zs[b0 * na], <int>na)
        for b in range(b0, b1):
            a = &zs[b * na]
            x = &xp[b, t, 0]
            hp = &hs[b * nu]
            for u in range(2 * nu):
                a[u] = x[u] + a[u] + bias[u]
            _sigmoid_all(a, 2 * nu)
            if reset_after:
                for u in range(nu):
                    a[3 * nu + u] = a[2 * nu + u] + bias[2 * nu + u]
                    a[2 * nu + u] = x[2 * nu + u] + a[nu + u] * a[3 * nu + u]
            else:
                for u in range(nu):
                    a[3 * nu + u] = a[nu + u] * hp[u]
        if not reset_after and b1 > b0:
            _gemm("N", "N", <int>nu, <int>(b1 - b0), <int>nu, <floating*>&kernel[0, 2 * nu], <int>ng,
                  &zs[b0 * na + 3 * nu], <int>na, 0.0, &zs[b0 * na + 2 * nu], <int>na)
        for b in range(b0, b1):
            a = &zs[b * na]
            y = &ys[b, s, 0]
            hp = &hs[b * nu]
            if mp != NULL and mp[b * nt + t] == 0:
                if s > 0:
                    memcpy(y, &ys[b, s - 1, 0], nu * sizeof(floating))
                else:
                    memset(y, 0, nu * sizeof(floating))
                memset(&acts[b, t, 0], 0, na * sizeof(floating))
                continue
            if not reset_after:
                x = &xp[b, t, 0]
                for u in range(nu):
                    a[2 * nu + u] = x[2 * nu + u] + a[2 * nu + u] + bias[2 * nu + u]
            _tanh_all(&a[2 * nu], nu)
            for u in range(nu):
                z = a[u]
                hp[u] = z * hp[u] + (1.0 - z) * a[2 * nu + u]
                y[u] = hp[u]
            memcpy(&acts[b, t, 0], a, na * sizeof(floating))


def gru_forward(const floating[:, :, ::1] xp, const floating[:, ::1] h0, const floating[:, ::1] kernel,
                const floating[::1] bias, const unsigned char[:, ::1] mask, bint reset_after, bint backwards,
                floating[:, :, ::1] ys, floating[:, :, ::1] acts, floating[:, ::1] h_last):
    """GRU over a whole sequence (gates z, r, h along the kernel's columns; `bias` is the
    recurrent bias, added to the recurrent matmul). Per step one gemm of the previous output with
    the recurrent kernel (two without reset_after: the candidate's kernel reads r * h), then the
    gates in one pass over the batch. Fills ys [batch, time, units], acts [batch, time, 4 * units]
    (z, r, the candidate, and the candidate's recurrent term (reset_after) or the reset state
    r * h (otherwise)) and the final state h_last [batch, units]."""
    cdef Py_ssize_t nb = xp.shape[0], nt = xp.shape[1], ng = xp.shape[2], nu = h0.shape[1]
    if (ng != 3 * nu or kernel.shape[0] != nu or kernel.shape[1] != ng or bias.shape[0] != ng
            or acts.shape[2] != 4 * nu):
        raise ValueError(f"gru_forward: inconsistent shapes {xp.shape}, {h0.shape}, {kernel.shape}, {bias.shape}")
    cdef const unsigned char* mp = NULL
    if mask is not None:
        mp = &mask[0, 0]
    cdef Py_ssize_t b, i
    cdef int blocks = _row_blocks(nb, nt * nb * ng * nu)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    cdef floating* hs = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* zs = <floating*>malloc(max(1, nb * 4 * nu) * sizeof(floating))
    cdef float* packed = _packed_kernel(kernel, False)
    if hs == NULL or zs == NULL or packed == <float*>_NO_MEMORY:
        free(hs)
        free(zs)
        _free_packed(packed)
        raise MemoryError()
    if blocks <= 1:
        with nogil:
            _gru_forward_rows(xp, h0, kernel, bias, mp, reset_after, backwards, ys, acts, hs, zs, packed, 0, nb)
    else:
        with nogil, parallel(num_threads=blocks):
            own = tapeflow_fpenv_swap(env)
            for i in prange(blocks, schedule="static"):
                _gru_forward_rows(xp, h0, kernel, bias, mp, reset_after, backwards, ys, acts, hs, zs, packed,
                                  nb * i // blocks, nb * (i + 1) // blocks)
            tapeflow_fpenv_swap(own)
    with nogil:
        for b in range(nb):
            memcpy(&h_last[b, 0], &hs[b * nu], nu * sizeof(floating))
    free(hs)
    free(zs)
    _free_packed(packed)


cdef void _gru_backward_rows(const floating[:, :, ::1] gys, const floating[:, ::1] h0,
                             const floating[:, ::1] kernel, const floating[:, :, ::1] ys,
                             const floating[:, :, ::1] acts, const unsigned char* mp, bint reset_after,
                             bint backwards, floating[:, :, ::1] dxp, floating* dh, floating* carry, floating* hp,
                             floating* dr, Py_ssize_t* firsts, floating* dk, floating* db,
                             const float* packed, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """Back through time for batch rows [b0, b1), adding their share of the recurrent kernel's and
    bias's gradients into dk [units, 3 * units] and db [3 * units]. `packed`: the recurrent kernel
    transposed in panels for the state's gradient (reset_after), or NULL."""
    cdef Py_ssize_t nt = acts.shape[1], na = acts.shape[2], nu = h0.shape[1]
    cdef Py_ssize_t ng = 3 * nu, m = b1 - b0
    cdef Py_ssize_t s, t, b, u
    cdef floating dhn, z, r, c, e, dz, dc
    cdef const floating* a
    cdef const floating* gy
    cdef floating* d
    cdef floating* dhr
    cdef floating* cr
    cdef floating* hr
    cdef floating* rr
    for s in range(nt - 1, -1, -1):
        t = nt - 1 - s if backwards else s
        for b in range(b0, b1):
            hr = &hp[b * nu]
            if s > firsts[b]:
                memcpy(hr, &ys[b, s - 1, 0], nu * sizeof(floating))
            else:
                memcpy(hr, &h0[b, 0], nu * sizeof(floating))
            d = &dxp[b, t, 0]
            rr = &dr[b * ng] if reset_after else &dr[b * nu]
            cr = &carry[b * nu]
            gy = &gys[b, s, 0]
            if mp != NULL and mp[b * nt + t] == 0:
                for u in range(nu):
                    cr[u] += gy[u]
                memset(d, 0, ng * sizeof(floating))
                memset(rr, 0, (ng if reset_after else nu) * sizeof(floating))
                continue
            a = &acts[b, t, 0]
            dhr = &dh[b * nu]
            for u in range(nu):
                dhn = dhr[u] + gy[u] + cr[u]
                cr[u] = 0.0
                z = a[u]
                c = a[2 * nu + u]
                dz = dhn * (hr[u] - c) * z * (1.0 - z)
                dc = dhn * (1.0 - z) * (1.0 - c * c)
                d[u] = dz
                d[2 * nu + u] = dc
                dhr[u] = dhn * z
                if reset_after:
                    r = a[nu + u]
                    e = a[3 * nu + u]
                    d[nu + u] = dc * e * r * (1.0 - r)
                    rr[u] = dz
                    rr[nu + u] = d[nu + u]
                    rr[2 * nu + u] = dc * r
        if m == 0:
            continue
        if reset_after:
            if floating is float:
                if packed != NULL:
                    tapeflow_panel_gemm(&dr[b0 * ng], ng, packed, ng, nu, &dh[b0 * nu], nu, m, 1)
            if floating is double or packed == NULL:
                _gemm("T", "N", <int>nu, <int>m, <int>ng, <floating*>&kernel[0, 0], <int>ng, &dr[b0 * ng], <int>ng,
                      1.0, &dh[b0 * nu], <int>nu)
            _gemm("N", "T", <int>ng, <int>nu, <int>m, &dr[b0 * ng], <int>ng, &hp[b0 * nu], <int>nu, 1.0, dk, <int>ng)
            for b in range(b0, b1):
                for u in range(ng):
                    db[u] += dr[b * ng + u]
            continue
        # without reset_after: the reset state's gradient first, then the gates z and r
        _gemm("T", "N", <int>nu, <int>m, <int>nu, <floating*>&kernel[0, 2 * nu], <int>ng, &dxp[b0, t, 2 * nu],
              <int>(nt * ng), 0.0, &dr[b0 * nu], <int>nu)
        for b in range(b0, b1):
            if mp != NULL and mp[b * nt + t] == 0:
                continue
            a = &acts[b, t, 0]
            d = &dxp[b, t, 0]
            rr = &dr[b * nu]
            hr = &hp[b * nu]
            dhr = &dh[b * nu]
            for u in range(nu):
                r = a[nu + u]
                d[nu + u] = rr[u] * hr[u] * r * (1.0 - r)
                dhr[u] += rr[u] * r
        _gemm("T", "N", <int>nu, <int>m, <int>(2 * nu), <floating*>&kernel[0, 0], <int>ng, &dxp[b0, t, 0],
              <int>(nt * ng), 1.0, &dh[b0 * nu], <int>nu)
        _gemm("N", "T", <int>(2 * nu), <int>nu, <int>m, &dxp[b0, t, 0], <int>(nt * ng), &hp[b0 * nu], <int>nu,
              1.0, dk, <int>ng)
        _gemm("N", "T", <int>nu, <int>nu, <int>m, &dxp[b0, t, 2 * nu], <int>(nt * ng),
              <floating*>&acts[b0, t, 3 * nu], <int>(nt * na), 1.0, &dk[2 * nu], <int>ng)
        for b in range(b0, b1):
            for u in range(ng):
                db[u] += dxp[b, t, u]


def gru_backward(const floating[:, :, ::1] gys, const floating[:, ::1] gh, const floating[:, ::1] h0,
                 const floating[:, ::1] kernel, const floating[:, :, ::1] ys, const floating[:, :, ::1] acts,
                 const unsigned char[:, ::1] mask, bint reset_after, bint backwards,
                 floating[:, :, ::1] dxp, floating[:, ::1] dh0, floating[:, ::1] dkernel, floating[::1] dbias):
    """Back through time from the gradients of ys and h_last: fills dxp [batch, time, 3 * units],
    dh0, dkernel and dbias (the recurrent kernel's and bias's gradients, accumulated in place
    step by step; with several blocks of batch rows on threads, each block's share apart, then
    summed in block order)."""
    cdef Py_ssize_t nb = acts.shape[0], nt = acts.shape[1], na = acts.shape[2], nu = h0.shape[1]
    cdef Py_ssize_t ng = 3 * nu
    if na != 4 * nu or kernel.shape[0] != nu or kernel.shape[1] != ng or dbias.shape[0] != ng:
        raise ValueError(f"gru_backward: inconsistent shapes {acts.shape}, {h0.shape}, {kernel.shape}")
    cdef const unsigned char* mp = NULL
    if mask is not None:
        mp = &mask[0, 0]
    cdef Py_ssize_t s, t, b, u, i, k
    cdef int blocks = _row_blocks(nb, nt * nb * ng * nu)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    # dh: the state's gradient; carry: output gradients of masked steps, owed to the last step that ran;
    # hp: the state each row's step read; dr: per reset_after, the gradient of the recurrent matmul
    # [batch, 3 * units], or that of the reset state [batch, units]; shares: each block's dkernel and dbias
    cdef floating* dh = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* carry = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* hp = <floating*>malloc(max(1, nb * nu) * sizeof(floating))
    cdef floating* dr = <floating*>malloc(max(1, nb * ng) * sizeof(floating))
    cdef Py_ssize_t* firsts = <Py_ssize_t*>malloc(max(1, nb) * sizeof(Py_ssize_t))
    cdef Py_ssize_t share = nu * ng + ng
    cdef floating* shares = <floating*>calloc(blocks * share if blocks > 1 else 1, sizeof(floating))
    cdef float* packed = _packed_kernel(kernel, True) if reset_after else NULL
    if (dh == NULL or carry == NULL or hp == NULL or dr == NULL or firsts == NULL or shares == NULL
            or packed == <float*>_NO_MEMORY):
        _free_packed(packed)
        free(dh)
        free(carry)
        free(hp)
        free(dr)
        free(firsts)
        free(shares)
        raise MemoryError()
    with nogil:
        for b in range(nb):
            memcpy(&dh[b * nu], &gh[b, 0], nu * sizeof(floating))
            memset(&carry[b * nu], 0, nu * sizeof(floating))
        _first_steps(mp, nb, nt, backwards, firsts)
        for u in range(nu):
            memset(&dkernel[u, 0], 0, ng * sizeof(floating))
        memset(&dbias[0], 0, ng * sizeof(floating))
    if blocks <= 1:
        with nogil:
            _gru_backward_rows(gys, h0, kernel, ys, acts, mp, reset_after, backwards, dxp, dh, carry, hp, dr,
                               firsts, &dkernel[0, 0], &dbias[0], packed, 0, nb)
    else:
        with nogil, parallel(num_threads=blocks):
            own = tapeflow_fpenv_swap(env)
            for i in prange(blocks, schedule="static"):
                _gru_backward_rows(gys, h0, kernel, ys, acts, mp, reset_after, backwards, dxp, dh, carry, hp,
                                   dr, firsts, &shares[i * share], &shares[i * share + nu * ng], packed,
                                   nb * i // blocks, nb * (i + 1) // blocks)
            tapeflow_fpenv_swap(own)
        with nogil:
            for i in range(blocks):
                for u in range(nu):
                    for k in range(ng):
                        dkernel[u, k] += shares[i * share + u * ng + k]
                for k in range(ng):
                    dbias[k] += shares[i * share + nu * ng + k]
    with nogil:
        for b in range(nb):
            memcpy(&dh0[b, 0], &dh[b * nu], nu * sizeof(floating))
    free(dh)
    free(carry)
    free(hp)
    free(dr)
    free(firsts)
    free(shares)
    _free_packed(packed)
