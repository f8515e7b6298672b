"""A fused elementwise program evaluated in one pass over memory.

The program is a list of instructions (opcode, a, b): register k holds the value of
instruction k for a block of elements, so each instruction is a short, vectorizable loop
over data that stays in cache, and every input is read once and the output written once.
"""

include "_common.pxi"

import numpy as np

cimport numpy as cnp
from cython cimport floating
from cython.parallel cimport parallel, prange
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cnp.import_array()

from tapeflow._kernels.fusion_opcodes import PRIMITIVES

cdef extern from *:
    """
    #include <math.h>
    #include <stdint.h>
    #include <string.h>
    /* float32 exp and tanh written without branches or calls, so that loops over them
       vectorize (libm's expf and tanhf do not); both are within a few ulp of libm. */
    static inline float tapeflow_expf(float x) {
        /* Past 88.72 the result overflows; below -87.34 it would be subnormal (flushed). */
        float c = x > 88.72283f ? 88.72283f : (x < -87.33654f ? -87.33654f : x);
        float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* round to nearest */
        float r = c - n * 0.693359375f + n * 2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * r * r + r + 1.0f;
        /* 2^n in two factors, 2^(n - s) * 2^s, so that n = 128 (x up to 88.72) stays finite. */
        int32_t s = n > 0.0f ? 1 : 0;
        int32_t bits = ((int32_t)n - s + 127) << 23;
        float scale;
        memcpy(&scale, &bits, sizeof scale);
        float y = p * scale * (s ? 2.0f : 1.0f);
        y = x > 88.72283f ? INFINITY : y;
        y = x < -87.33654f ? 0.0f : y;
        return x != x ? x : y;
    }
    /* libm's exp builds subnormal results in integer arithmetic, which flush-to-zero does
       not touch: flush them here, as every other kernel's arithmetic does. */
    static inline double tapeflow_exp(double x) {
        const double y = exp(x);
        return y < 2.2250738585072014e-308 ? 0.0 : y;
    }
    static inline float tapeflow_tanhf(float x) {
        float a = fabsf(x);
        float z = x * x;
        float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                        + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
        float big = 1.0f - 2.0f / (tapeflow_expf(2.0f * a) + 1.0f);
        big = x < 0 ? -big : big;
        return a < 0.625f ? copysignf(small, x) : big;  /* tanh(-0.0) is -0.0 */
    }

    /* Opcodes (tapeflow.graph.fused_op maps op names to these through OPCODES). */
    enum {
        TAPEFLOW_EW_LOAD, TAPEFLOW_EW_CONST, TAPEFLOW_EW_ADD, TAPEFLOW_EW_SUBTRACT,
        TAPEFLOW_EW_MULTIPLY, TAPEFLOW_EW_DIVIDE, TAPEFLOW_EW_MAXIMUM, TAPEFLOW_EW_MINIMUM,
        TAPEFLOW_EW_NEG, TAPEFLOW_EW_EXP, TAPEFLOW_EW_LOG, TAPEFLOW_EW_TANH, TAPEFLOW_EW_SIGMOID,
        TAPEFLOW_EW_RELU, TAPEFLOW_EW_SQRT, TAPEFLOW_EW_SQUARE, TAPEFLOW_EW_ABS,
        TAPEFLOW_EW_RECIPROCAL, TAPEFLOW_EW_RSQRT
    };

    #if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
    #define TAPEFLOW_EW_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define TAPEFLOW_EW_CLONES
    #endif

    /* One instruction over m elements: d = op(x) or d = op(x, y). A switch outside plain
       loops, so that each loop vectorizes (8 floats at a time in the AVX2 copy). */
    #define TAPEFLOW_EW_LOOPS(SUFFIX, T, EXP, LOG, TANH, SQRT, FABS)                            \\
    TAPEFLOW_EW_CLONES                                                                      \\
    static void tapeflow_ew_unary_##SUFFIX(int op, T *d, const T *x, Py_ssize_t m)         \\
    {                                                                                      \\
        Py_ssize_t j;                                                                      \\
        switch (op) {                                                                      \\
        case TAPEFLOW_EW_NEG: for (j = 0; j < m; j++) d[j] = -x[j]; break;                 \\
        case TAPEFLOW_EW_EXP: for (j = 0; j < m; j++) d[j] = EXP(x[j]); break;             \\
        case TAPEFLOW_EW_LOG: for (j = 0; j < m; j++) d[j] = LOG(x[j]); break;             \\
        case TAPEFLOW_EW_TANH: for (j = 0; j < m; j++) d[j] = TANH(x[j]); break;           \\
        case TAPEFLOW_EW_SIGMOID: for (j = 0; j < m; j++) d[j] = 1 / (1 + EXP(-x[j])); break; \\
        case TAPEFLOW_EW_RELU: /* NaN stays NaN */                                         \\
            for (j = 0; j < m; j++) { const T v = x[j]; d[j] = v <= 0 ? 0 : v; } break;    \\
        case TAPEFLOW_EW_SQRT: for (j = 0; j < m; j++) d[j] = SQRT(x[j]); break;           \\
        case TAPEFLOW_EW_SQUARE: for (j = 0; j < m; j++) d[j] = x[j] * x[j]; break;        \\
        case TAPEFLOW_EW_ABS: for (j = 0; j < m; j++) d[j] = FABS(x[j]); break;            \\
        case TAPEFLOW_EW_RECIPROCAL: for (j = 0; j < m; j++) d[j] = 1 / x[j]; break;       \\
        case TAPEFLOW_EW_RSQRT: for (j = 0; j < m; j++) d[j] = 1 / SQRT(x[j]); break;      \\
        }                                                                                  \\
    }                                                                                      \\
    TAPEFLOW_EW_CLONES                                                                      \\
    static void tapeflow_ew_binary_##SUFFIX(int op, T *d, const T *x, const T *y, Py_ssize_t m) \\
    {                                                                                      \\
        Py_ssize_t j;                                                                      \\
        switch (op) {                                                                      \\
        case TAPEFLOW_EW_ADD: for (j = 0; j < m; j++) d[j] = x[j] + y[j]; break;           \\
        case TAPEFLOW_EW_SUBTRACT: for (j = 0; j < m; j++) d[j] = x[j] - y[j]; break;      \\
        case TAPEFLOW_EW_MULTIPLY: for (j = 0; j < m; j++) d[j] = x[j] * y[j]; break;      \\
        case TAPEFLOW_EW_DIVIDE: for (j = 0; j < m; j++) d[j] = x[j] / y[j]; break;        \\
        case TAPEFLOW_EW_MAXIMUM: /* as np.maximum: NaN wins, a tie (0.0, -0.0) gives y */  \\
            for (j = 0; j < m; j++) { const T u = x[j], v = y[j]; d[j] = (u > v || u != u) ? u : v; } \\
            break;                                                                         \\
        case TAPEFLOW_EW_MINIMUM:                                                          \\
            for (j = 0; j < m; j++) { const T u = x[j], v = y[j]; d[j] = (u < v || u != u) ? u : v; } \\
            break;                                                                         \\
        }                                                                                  \\
    }
    TAPEFLOW_EW_LOOPS(f32, float, tapeflow_expf, logf, tapeflow_tanhf, sqrtf, fabsf)
    TAPEFLOW_EW_LOOPS(f64, double, tapeflow_exp, log, tanh, sqrt, fabs)
    """
    void tapeflow_ew_unary_f32(int op, float* d, const float* x, Py_ssize_t m) noexcept nogil
    void tapeflow_ew_binary_f32(int op, float* d, const float* x, const float* y, Py_ssize_t m) noexcept nogil
    void tapeflow_ew_unary_f64(int op, double* d, const double* x, Py_ssize_t m) noexcept nogil
    void tapeflow_ew_binary_f64(int op, double* d, const double* x, const double* y, Py_ssize_t m) noexcept nogil
    enum:
        LOAD "TAPEFLOW_EW_LOAD"
        CONST "TAPEFLOW_EW_CONST"
        ADD "TAPEFLOW_EW_ADD"
        SUBTRACT "TAPEFLOW_EW_SUBTRACT"
        MULTIPLY "TAPEFLOW_EW_MULTIPLY"
        DIVIDE "TAPEFLOW_EW_DIVIDE"
        MAXIMUM "TAPEFLOW_EW_MAXIMUM"
        MINIMUM "TAPEFLOW_EW_MINIMUM"
        NEG "TAPEFLOW_EW_NEG"
        EXP "TAPEFLOW_EW_EXP"
        LOG "TAPEFLOW_EW_LOG"
        TANH "TAPEFLOW_EW_TANH"
        SIGMOID "TAPEFLOW_EW_SIGMOID"
        RELU "TAPEFLOW_EW_RELU"
        SQRT "TAPEFLOW_EW_SQRT"
        SQUARE "TAPEFLOW_EW_SQUARE"
        ABS "TAPEFLOW_EW_ABS"
        RECIPROCAL "TAPEFLOW_EW_RECIPROCAL"
        RSQRT "TAPEFLOW_EW_RSQRT"

# Input layouts: the whole output's size, one scalar, or one row repeated over the last axis.
cdef enum:
    FULL = 0
    SCALAR = 1
    ROW = 2

cdef enum:
    BLOCK = 512

# Below this many elements the parallel region costs more than it saves.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 16

# Opcodes follow tapeflow._kernels.fusion_opcodes.PRIMITIVES, the order of the enum above.
OPCODES = {"input": LOAD, "const": CONST}
OPCODES.update(zip(PRIMITIVES, range(ADD, ADD + len(PRIMITIVES))))
LAYOUTS = {"full": FULL, "scalar": SCALAR, "row": ROW}


cdef inline void _unary(int op, floating* d, const floating* x, Py_ssize_t m) noexcept nogil:
    if floating is float:
        tapeflow_ew_unary_f32(op, d, x, m)
    else:
        tapeflow_ew_unary_f64(op, d, x, m)


cdef inline void _binary(int op, floating* d, const floating* x, const floating* y, Py_ssize_t m) noexcept nogil:
    if floating is float:
        tapeflow_ew_binary_f32(op, d, x, y, m)
    else:
        tapeflow_ew_binary_f64(op, d, x, y, m)


cdef void _run_block(floating* out, floating** inputs, const int* layouts, Py_ssize_t inner,
                     const int* ops, const int* args_a, const int* args_b, const double* consts,
                     int count, floating* scratch, floating** regs, Py_ssize_t lo,
                     Py_ssize_t m, bint staged) noexcept nogil:
    """Evaluate every instruction for elements [lo, lo + m); the last one lands in out (when
    `staged`, through the scratch block: out is then one of the inputs, read to the end)."""
    cdef int k, op, layout
    cdef Py_ssize_t j, col, run
    cdef floating* dst
    cdef floating* src
    cdef floating c
    for k in range(count):
        op = ops[k]
        dst = out + lo if k == count - 1 and not staged else scratch + k * BLOCK
        if op == LOAD:
            src = inputs[args_a[k]]
            layout = layouts[args_a[k]]
            if layout == FULL and k != count - 1:
                regs[k] = src + lo  # read in place: no copy
                continue
            if layout == FULL:
                for j in range(m):
                    dst[j] = src[lo + j]
            elif layout == SCALAR:
                c = src[0]
                for j in range(m):
                    dst[j] = c
            else:  # copy whole stretches of the row
                col = lo % inner
                j = 0
                while j < m:
                    run = min(inner - col, m - j)
                    memcpy(dst + j, src + col, run * sizeof(floating))
                    j += run
                    col = 0
        elif op == CONST:
            c = <floating>consts[args_a[k]]
            for j in range(m):
                dst[j] = c
        elif op <= MINIMUM:
            _binary(op, dst, regs[args_a[k]], regs[args_b[k]], m)
        else:
            _unary(op, dst, regs[args_a[k]], m)
        regs[k] = dst
    if staged:
        memcpy(out + lo, regs[count - 1], m * sizeof(floating))


cdef int _run_program(floating* out, Py_ssize_t n, floating** inputs, const int* layouts, Py_ssize_t inner,
                      const int* ops, const int* args_a, const int* args_b, const double* consts,
                      int count, bint staged=False) noexcept nogil:
    """Evaluate the program into out[0:n], in blocks split over the threads (`staged` where
    out is one of the inputs); -1 if a thread could not allocate its registers."""
    cdef Py_ssize_t blocks = (n + BLOCK - 1) // BLOCK
    cdef Py_ssize_t b, lo
    cdef int threads = _threads_for(n, _PARALLEL_MIN)
    cdef floating* scratch
    cdef floating** regs
    cdef int failed[1]
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    failed[0] = 0
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        scratch = <floating*>malloc(count * BLOCK * sizeof(floating))
        regs = <floating**>malloc(count * sizeof(floating*))
        if scratch != NULL and regs != NULL:
            for b in prange(blocks, schedule="static"):
                lo = b * BLOCK
                _run_block(out, inputs, layouts, inner, ops, args_a, args_b, consts, count, scratch, regs,
                           lo, min(<Py_ssize_t>BLOCK, n - lo), staged)
        else:
            failed[0] = -1
        free(scratch)
        free(regs)
        tapeflow_fpenv_swap(own)
    return failed[0]


def _evaluate(floating[::1] out, list inputs, const int[::1] layouts, Py_ssize_t inner,
              const int[::1] ops, const int[::1] args_a, const int[::1] args_b,
              const double[::1] consts):
    cdef int n_inputs = len(inputs)
    cdef int i, failed
    cdef floating[::1] view
    cdef floating** pointers = <floating**>malloc(max(n_inputs, 1) * sizeof(floating*))
    if pointers == NULL:
        raise MemoryError("fused_elementwise: cannot allocate input pointers")
    try:
        for i in range(n_inputs):
            view = inputs[i]
            pointers[i] = &view[0]
        with nogil:
            failed = _run_program(&out[0], out.shape[0], pointers, &layouts[0], inner, &ops[0], &args_a[0],
                                  &args_b[0], &consts[0], ops.shape[0])
    finally:
        free(pointers)
    if failed:
        raise MemoryError("fused_elementwise: cannot allocate per-thread registers")


cdef enum:
    MAX_BOUND_INPUTS = 64


cdef class Program:
    """An encoded program bound once, as a graph runs it: `program(*arrays)` evaluates it
    straight away when the arrays are C-contiguous, of one float dtype, and each is the
    result's shape, a single value or one row of the last axis; other inputs go to
    `general(*arrays)`.

    >>> import numpy as np
    >>> ops = np.array([OPCODES["input"], OPCODES["input"], OPCODES["add"]], np.int32)
    >>> a, b = np.array([0, 1, 0], np.int32), np.array([0, 0, 1], np.int32)
    >>> Program(ops, a, b, np.zeros(1), None)(np.ones((2, 2)), np.array([1.0, 2.0])).tolist()
    [[2.0, 3.0], [2.0, 3.0]]
    """

    cdef object _ops, _args_a, _args_b, _consts, general
    cdef int count
    cdef readonly int inputs_needed

    def __init__(self, ops, args_a, args_b, consts, general):
        self._ops = np.ascontiguousarray(ops, dtype=np.int32)
        self._args_a = np.ascontiguousarray(args_a, dtype=np.int32)
        self._args_b = np.ascontiguousarray(args_b, dtype=np.int32)
        self._consts = np.ascontiguousarray(consts, dtype=np.float64)
        self.count = self._ops.shape[0]
        if self.count == 0 or self._args_a.shape[0] != self.count or self._args_b.shape[0] != self.count:
            raise ValueError("fused_elementwise: empty program or instruction arrays of different lengths")
        self.inputs_needed = 0
        for k, (op, a, b) in enumerate(zip(self._ops, self._args_a, self._args_b)):
            if op == LOAD:
                self.inputs_needed = max(self.inputs_needed, a + 1)
            elif op == CONST:
                if not 0 <= a < self._consts.shape[0]:
                    raise ValueError(f"fused_elementwise: instruction {k} names constant {a}")
            elif not (ADD <= op <= RSQRT and 0 <= a < k and (op > MINIMUM or 0 <= b < k)):
                raise ValueError(f"fused_elementwise: instruction {k} ({op}, {a}, {b}) is invalid")
        self.general = general

    def __call__(self, *arrays):
        out = self._direct(arrays, -1)
        return out if out is not None else self.general(*arrays)

    def into(self, Py_ssize_t target, *arrays):
        """The program's result written into `arrays[target]` itself (an input of the result's
        shape and dtype, C-contiguous and writeable), which it returns; None where it cannot
        (nothing is then written).

        >>> import numpy as np
        >>> ops = np.array([OPCODES["input"], OPCODES["input"], OPCODES["subtract"]], np.int32)
        >>> a, b = np.array([0, 1, 0], np.int32), np.array([0, 0, 1], np.int32)
        >>> w = np.ones(3)
        >>> Program(ops, a, b, np.zeros(1), None).into(0, w, np.array(0.5)) is w, w.tolist()
        (True, [0.5, 0.5, 0.5])
        """
        if not 0 <= target < len(arrays):
            return None
        return self._direct(arrays, target)

    cdef object _direct(self, tuple arrays, Py_ssize_t target):
        cdef Py_ssize_t n_inputs = len(arrays), i, size, best = 0
        cdef cnp.ndarray a, ref = None
        cdef int layouts[MAX_BOUND_INPUTS]
        cdef void* pointers[MAX_BOUND_INPUTS]
        if n_inputs < self.inputs_needed or n_inputs == 0 or n_inputs > MAX_BOUND_INPUTS:
            return None
        for i in range(n_inputs):
            if not cnp.PyArray_CheckExact(arrays[i]):
                return None
            a = <cnp.ndarray>arrays[i]
            size = cnp.PyArray_SIZE(a)
            if size > best:
                best, ref = size, a
        if ref is None:
            return None
        cdef int typenum = cnp.PyArray_TYPE(ref), nd = cnp.PyArray_NDIM(ref), a_nd
        if typenum != cnp.NPY_FLOAT32 and typenum != cnp.NPY_FLOAT64:
            return None
        cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(ref)
        cdef Py_ssize_t inner = dims[nd - 1] if nd else 1
        for i in range(n_inputs):
            a = <cnp.ndarray>arrays[i]
            a_nd = cnp.PyArray_NDIM(a)
            if cnp.PyArray_TYPE(a) != typenum or not cnp.PyArray_IS_C_CONTIGUOUS(a) or a_nd > nd:
                return None
            size = cnp.PyArray_SIZE(a)
            if a_nd == nd and cnp.PyArray_CompareLists(cnp.PyArray_DIMS(a), dims, nd):
                layouts[i] = FULL
            elif size == 1:
                layouts[i] = SCALAR
            elif a_nd >= 1 and cnp.PyArray_DIMS(a)[a_nd - 1] == inner and size == inner:
                layouts[i] = ROW
            else:
                return None
            pointers[i] = cnp.PyArray_DATA(a)
        cdef cnp.ndarray out
        if target < 0:
            out = cnp.PyArray_EMPTY(nd, dims, typenum, 0)
        elif layouts[target] == FULL and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>arrays[target]):
            out = <cnp.ndarray>arrays[target]
        else:
            return None
        cdef const int* ops = <const int*>cnp.PyArray_DATA(<cnp.ndarray>self._ops)
        cdef const int* args_a = <const int*>cnp.PyArray_DATA(<cnp.ndarray>self._args_a)
        cdef const int* args_b = <const int*>cnp.PyArray_DATA(<cnp.ndarray>self._args_b)
        cdef const double* consts = <const double*>cnp.PyArray_DATA(<cnp.ndarray>self._consts)
        cdef int failed
        with nogil:
            if typenum == cnp.NPY_FLOAT32:
                failed = _run_program(<float*>cnp.PyArray_DATA(out), best, <float**>pointers, layouts, inner,
                                      ops, args_a, args_b, consts, self.count, target >= 0)
            else:
                failed = _run_program(<double*>cnp.PyArray_DATA(out), best, <double**>pointers, layouts, inner,
                                      ops, args_a, args_b, consts, self.count, target >= 0)
        if failed:
            raise MemoryError("fused_elementwise: cannot allocate per-thread registers")
        return out


def evaluate(out, inputs, layouts, Py_ssize_t inner, ops, args_a, args_b, consts):
    """Run an encoded program into the flat C-contiguous `out` (float32 or float64).

    `inputs` are flat contiguous arrays of out's dtype; `layouts[i]` says how input i maps
    onto the output: FULL (same size), SCALAR (one value) or ROW (`inner` values repeated).
    `ops`, `args_a`, `args_b` are int32 arrays (one entry per instruction) and `consts`
    float64. Returns `out`.

    >>> import numpy as np
    >>> x = np.array([-1.0, 2.0])
    >>> ops = np.array([OPCODES["input"], OPCODES["relu"]], np.int32)
    >>> a = np.array([0, 0], np.int32)
    >>> evaluate(np.empty(2), [x], np.zeros(1, np.int32), 2, ops, a, a, np.zeros(1)).tolist()
    [0.0, 2.0]
    """
    if out.size == 0:
        return out
    if ops.shape[0] == 0:
        raise ValueError("fused_elementwise: empty program")
    _evaluate(out, list(inputs), layouts, inner, ops, args_a, args_b, consts)
    return out
