"""Fused sparse softmax cross-entropy: loss and its gradient in one pass per row."""

include "_common.pxi"
include "_wide_math.pxi"

import numpy as np

cimport numpy as cnp
from cython cimport floating
from cython.parallel cimport parallel, prange
from libc.math cimport NAN, exp, expf, log
from libc.stdint cimport int64_t

cnp.import_array()

# Below this many logits the parallel region costs more than it saves.
cdef Py_ssize_t _PARALLEL_MIN = 1 << 15

# A float32 row in a form the compiler vectorizes, cloned for AVX2 where the CPU has it: the
# maximum and the sum of exponentials in 8 partial lanes (the sum in float64), exp from
# _wide_math.pxi (0 below the smallest normal float).
cdef extern from *:
    """
    static inline float tapeflow_xent_expf(float x) { return x < -87.0f ? 0.0f : tapeflow_expf(x); }
    TAPEFLOW_WIDE static double tapeflow_xent_row_f32(const float* restrict logits, long classes,
                                                           float* restrict backprop, float* top_out) {
        float tops[8];
        double sums[8];
        long c = 0, k;
        for (k = 0; k < 8; k++) { tops[k] = logits[0]; sums[k] = 0.0; }
        for (; c + 8 <= classes; c += 8)
            for (k = 0; k < 8; k++) tops[k] = logits[c + k] > tops[k] ? logits[c + k] : tops[k];
        float top = tops[0];
        for (k = 1; k < 8; k++) top = tops[k] > top ? tops[k] : top;
        for (; c < classes; c++) top = logits[c] > top ? logits[c] : top;
        for (c = 0; c + 8 <= classes; c += 8)
            for (k = 0; k < 8; k++) {
                float e = tapeflow_xent_expf(logits[c + k] - top);
                backprop[c + k] = e;
                sums[k] += (double)e;
            }
        double total = 0.0;
        for (; c < classes; c++) {
            float e = tapeflow_xent_expf(logits[c] - top);
            backprop[c] = e;
            total += (double)e;
        }
        for (k = 0; k < 8; k++) total += sums[k];
        float inv = (float)(1.0 / total);
        for (c = 0; c < classes; c++) backprop[c] *= inv;
        *top_out = top;
        return total;
    }
    """
    double tapeflow_xent_row_f32(const float* logits, long classes, float* backprop, float* top) noexcept nogil


cdef inline floating _exp(floating v) noexcept nogil:
    if floating is float:
        return expf(v)
    else:
        return exp(v)


cdef void _row(const floating* logits, int64_t label, Py_ssize_t classes, floating* loss,
               floating* backprop) noexcept nogil:
    """loss = logsumexp(row) - row[label]; backprop = softmax(row) - onehot(label)."""
    cdef Py_ssize_t c
    cdef floating top = logits[0], e, inv
    cdef double total = 0
    cdef float top32
    if label < 0 or label >= classes:
        loss[0] = NAN
        for c in range(classes):
            backprop[c] = NAN
        return
    if floating is float:
        total = tapeflow_xent_row_f32(logits, classes, backprop, &top32)
        backprop[label] -= 1
        loss[0] = <float>(log(total) + top32 - logits[label])
    else:
        for c in range(1, classes):
            if logits[c] > top:
                top = logits[c]
        for c in range(classes):
            e = _exp(logits[c] - top)
            backprop[c] = e
            total += e
        inv = <floating>(1.0 / total)
        for c in range(classes):
            backprop[c] *= inv
        backprop[label] -= 1
        loss[0] = <floating>(log(total) + top - logits[label])


cdef void _rows(const floating* logits, const int64_t* labels, Py_ssize_t rows, Py_ssize_t classes,
                floating* loss, floating* backprop) noexcept nogil:
    cdef int threads = _threads_for(rows * classes, _PARALLEL_MIN)
    cdef unsigned int env = tapeflow_fpenv_get(), own = 0
    cdef Py_ssize_t b
    with parallel(num_threads=threads):
        own = tapeflow_fpenv_swap(env)
        for b in prange(rows, schedule="static"):
            _row(logits + b * classes, labels[b], classes, loss + b, backprop + b * classes)
        tapeflow_fpenv_swap(own)


def sparse_softmax_xent(logits, labels):
    """(loss[B], backprop[B, C]) for float32 or float64 logits[B, C] and int64 labels[B]
    (both C-contiguous).

    Labels are not validated: an out-of-range label gives NaN loss and gradient for its row
    (`first_label_outside` finds one).

    >>> import numpy as np
    >>> loss, grad = sparse_softmax_xent(np.zeros((1, 4)), np.array([2]))
    >>> round(float(loss[0]), 6), grad[0].tolist()
    (1.386294, [0.25, 0.25, -0.75, 0.25])
    """
    if not (cnp.PyArray_Check(logits) and cnp.PyArray_NDIM(<cnp.ndarray>logits) == 2
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>logits)
            and cnp.PyArray_TYPE(<cnp.ndarray>logits) in (cnp.NPY_FLOAT32, cnp.NPY_FLOAT64)):
        raise TypeError("sparse_softmax_xent: logits must be a C-contiguous 2-D float32 or float64 array, got "
                        f"{getattr(logits, 'dtype', type(logits).__name__)}{list(getattr(logits, 'shape', ()))}")
    if not (cnp.PyArray_Check(labels) and cnp.PyArray_NDIM(<cnp.ndarray>labels) == 1
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>labels) and cnp.PyArray_TYPE(<cnp.ndarray>labels) == cnp.NPY_INT64):
        raise TypeError("sparse_softmax_xent: labels must be a C-contiguous 1-D int64 array, got "
                        f"{getattr(labels, 'dtype', type(labels).__name__)}{list(getattr(labels, 'shape', ()))}")
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(<cnp.ndarray>logits)
    cdef Py_ssize_t rows = dims[0], classes = dims[1]
    if cnp.PyArray_DIMS(<cnp.ndarray>labels)[0] != rows:
        raise ValueError(f"sparse_softmax_xent: {labels.shape[0]} labels for {rows} rows")
    cdef int kind = cnp.PyArray_TYPE(<cnp.ndarray>logits)
    cdef cnp.ndarray loss = cnp.PyArray_EMPTY(1, dims, kind, 0)
    cdef cnp.ndarray backprop = cnp.PyArray_EMPTY(2, dims, kind, 0)
    if rows == 0:
        return loss, backprop
    if classes == 0:
        loss[:] = np.nan
        return loss, backprop
    cdef const void* lp = cnp.PyArray_DATA(<cnp.ndarray>logits)
    cdef const int64_t* yp = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>labels)
    cdef void* out = cnp.PyArray_DATA(loss)
    cdef void* bp = cnp.PyArray_DATA(backprop)
    with nogil:
        if kind == cnp.NPY_FLOAT32:
            _rows(<const float*>lp, yp, rows, classes, <float*>out, <float*>bp)
        else:
            _rows(<const double*>lp, yp, rows, classes, <double*>out, <double*>bp)
    return loss, backprop


def first_label_outside(labels, Py_ssize_t classes):
    """The position of the first label outside [0, classes) in a C-contiguous 1-D int64
    array, or -1 when every label is a class.

    >>> import numpy as np
    >>> first_label_outside(np.array([0, 3, 4, -1]), 4), first_label_outside(np.array([1, 2]), 4)
    (2, -1)
    """
    if not (cnp.PyArray_Check(labels) and cnp.PyArray_NDIM(<cnp.ndarray>labels) == 1
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>labels) and cnp.PyArray_TYPE(<cnp.ndarray>labels) == cnp.NPY_INT64):
        raise TypeError("first_label_outside: labels must be a C-contiguous 1-D int64 array")
    cdef const int64_t* yp = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>labels)
    cdef Py_ssize_t n = cnp.PyArray_DIMS(<cnp.ndarray>labels)[0], i
    for i in range(n):
        if yp[i] < 0 or yp[i] >= classes:
            return i
    return -1
