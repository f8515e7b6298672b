# The transforms of Winograd's F(4x4, 3x3) (Lavin and Gray; interpolation points 0, 1, -1, 2,
# -2 and infinity): a 4x4 block of outputs from a 6x6 input patch, 36 multiply-adds per channel
# pair where direct convolution takes 144 and F(2x2, 3x3) 64 (for four of its 2x2 tiles).
#
#   B^T = [4  0 -5  0 1 0;  0 -4 -4  1 1 0;  0 4 -4 -1 1 0;
#          0 -2 -1  2 1 0;  0  2 -1 -2 1 0;  0 4  0 -5 0 1]
#   G   = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
#   A^T = [1 1 1 1 1 0;  0 1 -1 2 -2 0;  0 1 1 4 4 0;  0 1 -1 8 -8 1]
#
# Each transform is the 1-D one along a patch's rows and then along its columns; position
# k = 6 r + s of the 36 is row r, column s, as for the 16 of F(2x2, 3x3).

cdef extern from *:
    """
    /* B^T along six values a0..a5 into b0..b5. */
    #define TAPEFLOW_W4_BT(T, a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5) do {            \\
        const T p_ = (a4) - 4 * (a2), q_ = (a3) - 4 * (a1);                                \\
        const T r_ = (a4) - (a2), s_ = 2 * ((a3) - (a1));                                  \\
        b0 = 4 * (a0) - 5 * (a2) + (a4); b1 = p_ + q_; b2 = p_ - q_;                         \\
        b3 = r_ + s_; b4 = r_ - s_; b5 = 4 * (a1) - 5 * (a3) + (a5);                         \\
    } while (0)
    /* A^T along six values m0..m5 into o0..o3. */
    #define TAPEFLOW_W4_AT(T, m0, m1, m2, m3, m4, m5, o0, o1, o2, o3) do {                    \\
        const T s1_ = (m1) + (m2), d1_ = (m1) - (m2), s2_ = (m3) + (m4), d2_ = (m3) - (m4);   \\
        o0 = (m0) + s1_ + s2_; o1 = d1_ + 2 * d2_; o2 = s1_ + 4 * s2_; o3 = d1_ + 8 * d2_ + (m5); \\
    } while (0)
    /* A along four values y0..y3 into z0..z5 (the filter gradient's transform of dy). */
    #define TAPEFLOW_W4_A(T, y0, y1, y2, y3, z0, z1, z2, z3, z4, z5) do {                      \\
        const T e_ = (y0) + (y2), f_ = (y1) + (y3), g_ = (y0) + 4 * (y2), h_ = 2 * (y1) + 8 * (y3); \\
        z0 = (y0); z1 = e_ + f_; z2 = e_ - f_; z3 = g_ + h_; z4 = g_ - h_; z5 = (y3);          \\
    } while (0)

    /* The transforms run over a block of up to TAPEFLOW_W4_BLOCK channels at a time: the 1-D
       transform along each patch row into a small buffer, then along each column of it, each
       pass a loop over the block with restrict pointers of its own, so that it vectorizes. */
    #define TAPEFLOW_W4_BLOCK 64
    #define TAPEFLOW_WINOGRAD4(NAME, T)                                                      \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_bt6(const T *restrict a0, const T *restrict a1, const T *restrict a2,  \\
                           const T *restrict a3, const T *restrict a4, const T *restrict a5,  \\
                           T *restrict b0, T *restrict b1, T *restrict b2, T *restrict b3,    \\
                           T *restrict b4, T *restrict b5, ptrdiff_t n)                       \\
    {                                                                                      \\
        for (ptrdiff_t i = 0; i < n; i++)                                                  \\
            TAPEFLOW_W4_BT(T, a0[i], a1[i], a2[i], a3[i], a4[i], a5[i],                    \\
                           b0[i], b1[i], b2[i], b3[i], b4[i], b5[i]);                      \\
    }                                                                                      \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_at6(const T *restrict m0, const T *restrict m1, const T *restrict m2,  \\
                           const T *restrict m3, const T *restrict m4, const T *restrict m5,  \\
                           T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3,    \\
                           ptrdiff_t n)                                                    \\
    {                                                                                      \\
        for (ptrdiff_t i = 0; i < n; i++)                                                  \\
            TAPEFLOW_W4_AT(T, m0[i], m1[i], m2[i], m3[i], m4[i], m5[i], o0[i], o1[i], o2[i], o3[i]); \\
    }                                                                                      \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_a4(const T *restrict y0, const T *restrict y1, const T *restrict y2,   \\
                          const T *restrict y3, T *restrict z0, T *restrict z1, T *restrict z2, \\
                          T *restrict z3, T *restrict z4, T *restrict z5, ptrdiff_t n)      \\
    {                                                                                      \\
        for (ptrdiff_t i = 0; i < n; i++)                                                  \\
            TAPEFLOW_W4_A(T, y0[i], y1[i], y2[i], y3[i], z0[i], z1[i], z2[i], z3[i], z4[i], z5[i]); \\
    }                                                                                      \\
    /* The 36 input pixel rows d[k] of a tile into the 36 rows v + k * vs (B^T d B). */     \\
    static void NAME##_in4(const T* const* d, T* v, ptrdiff_t vs, ptrdiff_t c)              \\
    {                                                                                      \\
        T t[36 * TAPEFLOW_W4_BLOCK];                                                       \\
        for (ptrdiff_t i = 0; i < c; i += TAPEFLOW_W4_BLOCK) {                             \\
            const ptrdiff_t n = c - i < TAPEFLOW_W4_BLOCK ? c - i : TAPEFLOW_W4_BLOCK;     \\
            T* u = t;                                                                      \\
            for (int r = 0; r < 6; r++, d += 6, u += 6 * TAPEFLOW_W4_BLOCK)                \\
                NAME##_bt6(d[0] + i, d[1] + i, d[2] + i, d[3] + i, d[4] + i, d[5] + i,     \\
                           u, u + TAPEFLOW_W4_BLOCK, u + 2 * TAPEFLOW_W4_BLOCK, u + 3 * TAPEFLOW_W4_BLOCK, \\
                           u + 4 * TAPEFLOW_W4_BLOCK, u + 5 * TAPEFLOW_W4_BLOCK, n);       \\
            d -= 36;                                                                       \\
            for (int s = 0; s < 6; s++) {                                                  \\
                const T* col = t + s * TAPEFLOW_W4_BLOCK;                                  \\
                const ptrdiff_t row = 6 * TAPEFLOW_W4_BLOCK;                               \\
                T* w = v + s * vs + i;                                                     \\
                NAME##_bt6(col, col + row, col + 2 * row, col + 3 * row, col + 4 * row, col + 5 * row, \\
                           w, w + 6 * vs, w + 12 * vs, w + 18 * vs, w + 24 * vs, w + 30 * vs, n); \\
            }                                                                              \\
        }                                                                                  \\
    }                                                                                      \\
    /* The 36 rows m + k * ms into the tile's 16 output rows y[0..15] (A^T m A; a row      \\
       outside the output points at scratch). */                                           \\
    static void NAME##_out4(const T* m, ptrdiff_t ms, T* const* y, ptrdiff_t o)             \\
    {                                                                                      \\
        T t[24 * TAPEFLOW_W4_BLOCK];                                                       \\
        for (ptrdiff_t i = 0; i < o; i += TAPEFLOW_W4_BLOCK) {                             \\
            const ptrdiff_t n = o - i < TAPEFLOW_W4_BLOCK ? o - i : TAPEFLOW_W4_BLOCK;     \\
            for (int r = 0; r < 6; r++) {                                                  \\
                const T* a = m + 6 * r * ms + i;                                           \\
                T* u = t + 4 * r * TAPEFLOW_W4_BLOCK;                                      \\
                NAME##_at6(a, a + ms, a + 2 * ms, a + 3 * ms, a + 4 * ms, a + 5 * ms,      \\
                           u, u + TAPEFLOW_W4_BLOCK, u + 2 * TAPEFLOW_W4_BLOCK, u + 3 * TAPEFLOW_W4_BLOCK, n); \\
            }                                                                              \\
            for (int s = 0; s < 4; s++) {                                                  \\
                const T* col = t + s * TAPEFLOW_W4_BLOCK;                                  \\
                const ptrdiff_t row = 4 * TAPEFLOW_W4_BLOCK;                               \\
                NAME##_at6(col, col + row, col + 2 * row, col + 3 * row, col + 4 * row, col + 5 * row, \\
                           y[s] + i, y[4 + s] + i, y[8 + s] + i, y[12 + s] + i, n);        \\
            }                                                                              \\
        }                                                                                  \\
    }                                                                                      \\
    /* The filter gradient's transform of a 4x4 tile of dy: the 36 rows of A dy A^T from  \\
       the tile's 16 output rows y[0..15] (a row outside points at zeros). */             \\
    static void NAME##_dy4(const T* const* y, T* v, ptrdiff_t vs, ptrdiff_t o)              \\
    {                                                                                      \\
        T t[24 * TAPEFLOW_W4_BLOCK];                                                       \\
        for (ptrdiff_t i = 0; i < o; i += TAPEFLOW_W4_BLOCK) {                             \\
            const ptrdiff_t n = o - i < TAPEFLOW_W4_BLOCK ? o - i : TAPEFLOW_W4_BLOCK;     \\
            for (int r = 0; r < 4; r++) {                                                  \\
                T* u = t + 6 * r * TAPEFLOW_W4_BLOCK;                                      \\
                NAME##_a4(y[4 * r] + i, y[4 * r + 1] + i, y[4 * r + 2] + i, y[4 * r + 3] + i, \\
                          u, u + TAPEFLOW_W4_BLOCK, u + 2 * TAPEFLOW_W4_BLOCK, u + 3 * TAPEFLOW_W4_BLOCK, \\
                          u + 4 * TAPEFLOW_W4_BLOCK, u + 5 * TAPEFLOW_W4_BLOCK, n);        \\
            }                                                                              \\
            for (int s = 0; s < 6; s++) {                                                  \\
                const T* col = t + s * TAPEFLOW_W4_BLOCK;                                  \\
                const ptrdiff_t row = 6 * TAPEFLOW_W4_BLOCK;                               \\
                T* w = v + s * vs + i;                                                     \\
                NAME##_a4(col, col + row, col + 2 * row, col + 3 * row,                    \\
                          w, w + 6 * vs, w + 12 * vs, w + 18 * vs, w + 24 * vs, w + 30 * vs, n); \\
            }                                                                              \\
        }                                                                                  \\
    }
    TAPEFLOW_WINOGRAD4(tapeflow_winograd_f32, float)
    TAPEFLOW_WINOGRAD4(tapeflow_winograd_f64, double)
    """
    void tapeflow_winograd_f32_in4(const float* const* d, float* v, Py_ssize_t vs, Py_ssize_t c) noexcept nogil
    void tapeflow_winograd_f64_in4(const double* const* d, double* v, Py_ssize_t vs, Py_ssize_t c) noexcept nogil
    void tapeflow_winograd_f32_out4(const float* m, Py_ssize_t ms, float* const* y, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f64_out4(const double* m, Py_ssize_t ms, double* const* y, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f32_dy4(const float* const* y, float* v, Py_ssize_t vs, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f64_dy4(const double* const* y, double* v, Py_ssize_t vs, Py_ssize_t o) noexcept nogil


cdef void _winograd4_filter_pairs(const floating* w, floating* u, Py_ssize_t plane, Py_ssize_t lo,
                                  Py_ssize_t hi) noexcept nogil:
    """u[36][plane] = G g G^T (6x6) for the pairs [lo, hi) of w[3][3][plane]."""
    cdef Py_ssize_t i, r, s
    cdef floating e[6][3]
    cdef floating g0, g1, g2
    for i in range(lo, hi):
        for s in range(3):  # G g along the filter's rows, each column s
            g0 = w[(0 * 3 + s) * plane + i]
            g1 = w[(1 * 3 + s) * plane + i]
            g2 = w[(2 * 3 + s) * plane + i]
            e[0][s] = g0 / 4
            e[1][s] = -(g0 + g1 + g2) / 6
            e[2][s] = -(g0 - g1 + g2) / 6
            e[3][s] = g0 / 24 + g1 / 12 + g2 / 6
            e[4][s] = g0 / 24 - g1 / 12 + g2 / 6
            e[5][s] = g2
        for r in range(6):  # (G g) G^T along the columns
            g0, g1, g2 = e[r][0], e[r][1], e[r][2]
            u[(r * 6 + 0) * plane + i] = g0 / 4
            u[(r * 6 + 1) * plane + i] = -(g0 + g1 + g2) / 6
            u[(r * 6 + 2) * plane + i] = -(g0 - g1 + g2) / 6
            u[(r * 6 + 3) * plane + i] = g0 / 24 + g1 / 12 + g2 / 6
            u[(r * 6 + 4) * plane + i] = g0 / 24 - g1 / 12 + g2 / 6
            u[(r * 6 + 5) * plane + i] = g2


cdef void _winograd4_filter_back_pairs(const floating* du, floating* dw, Py_ssize_t plane, Py_ssize_t lo,
                                       Py_ssize_t hi) noexcept nogil:
    """dw[3][3][plane] = G^T du G for the pairs [lo, hi) of du[36][plane]: the adjoint of
    `_winograd4_filter_pairs`."""
    cdef Py_ssize_t i, r, s
    cdef floating e[3][6]
    cdef floating u0, u1, u2, u3, u4, u5
    for i in range(lo, hi):
        for s in range(6):  # G^T du along the rows, each column s
            u0 = du[(0 * 6 + s) * plane + i]
            u1 = du[(1 * 6 + s) * plane + i]
            u2 = du[(2 * 6 + s) * plane + i]
            u3 = du[(3 * 6 + s) * plane + i]
            u4 = du[(4 * 6 + s) * plane + i]
            u5 = du[(5 * 6 + s) * plane + i]
            e[0][s] = u0 / 4 - (u1 + u2) / 6 + (u3 + u4) / 24
            e[1][s] = (u2 - u1) / 6 + (u3 - u4) / 12
            e[2][s] = -(u1 + u2) / 6 + (u3 + u4) / 6 + u5
        for r in range(3):  # (G^T du) G along the columns
            u0, u1, u2, u3, u4, u5 = e[r][0], e[r][1], e[r][2], e[r][3], e[r][4], e[r][5]
            dw[(r * 3 + 0) * plane + i] = u0 / 4 - (u1 + u2) / 6 + (u3 + u4) / 24
            dw[(r * 3 + 1) * plane + i] = (u2 - u1) / 6 + (u3 - u4) / 12
            dw[(r * 3 + 2) * plane + i] = -(u1 + u2) / 6 + (u3 + u4) / 6 + u5
