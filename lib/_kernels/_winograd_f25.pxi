# The transforms of Winograd's F(2x2, 5x5) on the interpolation points of F(4x4, 3x3) (0, 1,
# -1, 2, -2 and infinity): a 2x2 block of outputs from a 6x6 input patch, 36 multiply-adds per
# channel pair where direct convolution takes 100. The input transform B^T is F(4x4, 3x3)'s (it
# depends on the points alone); the filter's and the output's follow from the same points:
#
#   G   = [1/4 0 0 0 0;  -1/6 -1/6 -1/6 -1/6 -1/6;  -1/6 1/6 -1/6 1/6 -1/6;
#          1/24 1/12 1/6 1/3 2/3;  1/24 -1/12 1/6 -1/3 2/3;  0 0 0 0 1]
#   A^T = [1 1 1 1 1 0;  0 1 -1 2 -2 1]
#
# Position k = 6 r + s of the 36 is row r, column s, as for the other two.

cdef extern from *:
    """
    /* A^T along six values m0..m5 into o0, o1. */
    #define TAPEFLOW_W25_AT(T, m0, m1, m2, m3, m4, m5, o0, o1) do {                          \\
        o0 = (m0) + ((m1) + (m2)) + ((m3) + (m4)); o1 = ((m1) - (m2)) + 2 * ((m3) - (m4)) + (m5); \\
    } while (0)
    /* A along two values y0, y1 into z0..z5 (the filter gradient's transform of dy). */
    #define TAPEFLOW_W25_A(T, y0, y1, z0, z1, z2, z3, z4, z5) do {                           \\
        z0 = (y0); z1 = (y0) + (y1); z2 = (y0) - (y1); z3 = (y0) + 2 * (y1); z4 = (y0) - 2 * (y1); z5 = (y1); \\
    } while (0)

    #define TAPEFLOW_WINOGRAD25(NAME, T)                                                     \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_at62(const T *restrict m0, const T *restrict m1, const T *restrict m2, \\
                            const T *restrict m3, const T *restrict m4, const T *restrict m5, \\
                            T *restrict o0, T *restrict o1, ptrdiff_t n)                    \\
    {                                                                                      \\
        for (ptrdiff_t i = 0; i < n; i++)                                                  \\
            TAPEFLOW_W25_AT(T, m0[i], m1[i], m2[i], m3[i], m4[i], m5[i], o0[i], o1[i]);    \\
    }                                                                                      \\
    TAPEFLOW_WINOGRAD_CLONES                                                               \\
    static void NAME##_a2(const T *restrict y0, const T *restrict y1, T *restrict z0,       \\
                          T *restrict z1, T *restrict z2, T *restrict z3, T *restrict z4,   \\
                          T *restrict z5, ptrdiff_t n)                                      \\
    {                                                                                      \\
        for (ptrdiff_t i = 0; i < n; i++)                                                  \\
            TAPEFLOW_W25_A(T, y0[i], y1[i], z0[i], z1[i], z2[i], z3[i], z4[i], z5[i]);     \\
    }                                                                                      \\
    /* The 36 rows m + k * ms into the tile's 4 output rows y[0..3] (A^T m A; a row outside  \\
       the output points at scratch). */                                                   \\
    static void NAME##_out25(const T* m, ptrdiff_t ms, T* const* y, ptrdiff_t o)            \\
    {                                                                                      \\
        T t[12 * TAPEFLOW_W4_BLOCK];                                                       \\
        for (ptrdiff_t i = 0; i < o; i += TAPEFLOW_W4_BLOCK) {                             \\
            const ptrdiff_t n = o - i < TAPEFLOW_W4_BLOCK ? o - i : TAPEFLOW_W4_BLOCK;     \\
            for (int r = 0; r < 6; r++) {                                                  \\
                const T* a = m + 6 * r * ms + i;                                           \\
                T* u = t + 2 * r * TAPEFLOW_W4_BLOCK;                                      \\
                NAME##_at62(a, a + ms, a + 2 * ms, a + 3 * ms, a + 4 * ms, a + 5 * ms,     \\
                            u, u + TAPEFLOW_W4_BLOCK, n);                                  \\
            }                                                                              \\
            for (int s = 0; s < 2; s++) {                                                  \\
                const T* col = t + s * TAPEFLOW_W4_BLOCK;                                  \\
                const ptrdiff_t row = 2 * TAPEFLOW_W4_BLOCK;                               \\
                NAME##_at62(col, col + row, col + 2 * row, col + 3 * row, col + 4 * row, col + 5 * row, \\
                            y[s] + i, y[2 + s] + i, n);                                    \\
            }                                                                              \\
        }                                                                                  \\
    }                                                                                      \\
    /* The filter gradient's transform of a 2x2 tile of dy: the 36 rows of A dy A^T from   \\
       the tile's 4 output rows y[0..3] (a row outside points at zeros). */                \\
    static void NAME##_dy25(const T* const* y, T* v, ptrdiff_t vs, ptrdiff_t o)             \\
    {                                                                                      \\
        T t[12 * TAPEFLOW_W4_BLOCK];                                                       \\
        for (ptrdiff_t i = 0; i < o; i += TAPEFLOW_W4_BLOCK) {                             \\
            const ptrdiff_t n = o - i < TAPEFLOW_W4_BLOCK ? o - i : TAPEFLOW_W4_BLOCK;     \\
            for (int r = 0; r < 2; r++) {                                                  \\
                T* u = t + 6 * r * TAPEFLOW_W4_BLOCK;                                      \\
                NAME##_a2(y[2 * r] + i, y[2 * r + 1] + i, u, u + TAPEFLOW_W4_BLOCK,        \\
                          u + 2 * TAPEFLOW_W4_BLOCK, u + 3 * TAPEFLOW_W4_BLOCK,            \\
                          u + 4 * TAPEFLOW_W4_BLOCK, u + 5 * TAPEFLOW_W4_BLOCK, n);        \\
            }                                                                              \\
            for (int s = 0; s < 6; s++) {                                                  \\
                const T* col = t + s * TAPEFLOW_W4_BLOCK;                                  \\
                T* w = v + s * vs + i;                                                     \\
                NAME##_a2(col, col + 6 * TAPEFLOW_W4_BLOCK,                                \\
                          w, w + 6 * vs, w + 12 * vs, w + 18 * vs, w + 24 * vs, w + 30 * vs, n); \\
            }                                                                              \\
        }                                                                                  \\
    }
    TAPEFLOW_WINOGRAD25(tapeflow_winograd_f32, float)
    TAPEFLOW_WINOGRAD25(tapeflow_winograd_f64, double)
    """
    void tapeflow_winograd_f32_out25(const float* m, Py_ssize_t ms, float* const* y, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f64_out25(const double* m, Py_ssize_t ms, double* const* y, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f32_dy25(const float* const* y, float* v, Py_ssize_t vs, Py_ssize_t o) noexcept nogil
    void tapeflow_winograd_f64_dy25(const double* const* y, double* v, Py_ssize_t vs, Py_ssize_t o) noexcept nogil


cdef void _winograd25_filter_pairs(const floating* w, floating* u, Py_ssize_t plane, Py_ssize_t lo,
                                   Py_ssize_t hi) noexcept nogil:
    """u[36][plane] = G g G^T (6x6) for the pairs [lo, hi) of w[5][5][plane]."""
    cdef Py_ssize_t i, r, s
    cdef floating e[6][5]
    cdef floating g0, g1, g2, g3, g4
    for i in range(lo, hi):
        for s in range(5):  # G g along the filter's rows, each column s
            g0 = w[(0 * 5 + s) * plane + i]
            g1 = w[(1 * 5 + s) * plane + i]
            g2 = w[(2 * 5 + s) * plane + i]
            g3 = w[(3 * 5 + s) * plane + i]
            g4 = w[(4 * 5 + s) * plane + i]
            e[0][s] = g0 / 4
            e[1][s] = -(g0 + g1 + g2 + g3 + g4) / 6
            e[2][s] = -(g0 - g1 + g2 - g3 + g4) / 6
            e[3][s] = (g0 + 2 * g1 + 4 * g2 + 8 * g3 + 16 * g4) / 24
            e[4][s] = (g0 - 2 * g1 + 4 * g2 - 8 * g3 + 16 * g4) / 24
            e[5][s] = g4
        for r in range(6):  # (G g) G^T along the columns
            g0, g1, g2, g3, g4 = e[r][0], e[r][1], e[r][2], e[r][3], e[r][4]
            u[(r * 6 + 0) * plane + i] = g0 / 4
            u[(r * 6 + 1) * plane + i] = -(g0 + g1 + g2 + g3 + g4) / 6
            u[(r * 6 + 2) * plane + i] = -(g0 - g1 + g2 - g3 + g4) / 6
            u[(r * 6 + 3) * plane + i] = (g0 + 2 * g1 + 4 * g2 + 8 * g3 + 16 * g4) / 24
            u[(r * 6 + 4) * plane + i] = (g0 - 2 * g1 + 4 * g2 - 8 * g3 + 16 * g4) / 24
            u[(r * 6 + 5) * plane + i] = g4


cdef void _winograd25_filter_back_pairs(const floating* du, floating* dw, Py_ssize_t plane, Py_ssize_t lo,
                                        Py_ssize_t hi) noexcept nogil:
    """dw[5][5][plane] = G^T du G for the pairs [lo, hi) of du[36][plane]: the adjoint of
    `_winograd25_filter_pairs`."""
    cdef Py_ssize_t i, r, s
    cdef floating e[5][6]
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
            e[2][s] = -(u1 + u2) / 6 + (u3 + u4) / 6
            e[3][s] = (u2 - u1) / 6 + (u3 - u4) / 3
            e[4][s] = -(u1 + u2) / 6 + 2 * (u3 + u4) / 3 + u5
        for r in range(5):  # (G^T du) G along the columns
            u0, u1, u2, u3, u4, u5 = e[r][0], e[r][1], e[r][2], e[r][3], e[r][4], e[r][5]
            dw[(r * 5 + 0) * plane + i] = u0 / 4 - (u1 + u2) / 6 + (u3 + u4) / 24
            dw[(r * 5 + 1) * plane + i] = (u2 - u1) / 6 + (u3 - u4) / 12
            dw[(r * 5 + 2) * plane + i] = -(u1 + u2) / 6 + (u3 + u4) / 6
            dw[(r * 5 + 3) * plane + i] = (u2 - u1) / 6 + (u3 - u4) / 3
            dw[(r * 5 + 4) * plane + i] = -(u1 + u2) / 6 + 2 * (u3 + u4) / 3 + u5
