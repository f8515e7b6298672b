"""Uniform random numbers in [0, 1) from a 64-bit key, counter-based: draw i is a hash of
(key, i), so any stretch of the stream can be made on its own, by any thread, and the
result does not depend on the thread count.

The hash is SplitMix64's output function on key + (i + 1) * 0x9E3779B97F4A7C15 (the
sequence `java.util.SplittableRandom` walks), which passes BigCrush. A float32 takes the
top 24 bits of each 32-bit half of a draw, a float64 the top 53 bits of a whole draw.
"""

include "_common.pxi"

import numpy as np

cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport uint64_t

cnp.import_array()

cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
    #define TAPEFLOW_DRAW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
    #else
    #define TAPEFLOW_DRAW_CLONES
    #endif
    #define TAPEFLOW_GOLDEN 0x9E3779B97F4A7C15ULL

    static inline uint64_t tapeflow_mix64(uint64_t z) {
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }

    /* Draws [lo, hi) of the key's stream as float32 pairs: out[2j], out[2j + 1] from draw j. */
    TAPEFLOW_DRAW_CLONES
    static void tapeflow_uniform_f32(uint64_t key, Py_ssize_t lo, Py_ssize_t hi, float *out) {
        for (Py_ssize_t j = lo; j < hi; j++) {
            uint64_t z = tapeflow_mix64(key + (uint64_t)(j + 1) * TAPEFLOW_GOLDEN);
            out[2 * j] = (float)(uint32_t)(z >> 40) * 0x1.0p-24f;
            out[2 * j + 1] = (float)((uint32_t)z >> 8) * 0x1.0p-24f;
        }
    }

    TAPEFLOW_DRAW_CLONES
    static void tapeflow_uniform_f64(uint64_t key, Py_ssize_t lo, Py_ssize_t hi, double *out) {
        for (Py_ssize_t j = lo; j < hi; j++) {
            uint64_t z = tapeflow_mix64(key + (uint64_t)(j + 1) * TAPEFLOW_GOLDEN);
            out[j] = (double)(z >> 11) * 0x1.0p-53;
        }
    }

    /* The first float32 of draw j (an odd count's last number). */
    static inline float tapeflow_uniform_f32_first(uint64_t key, Py_ssize_t j) {
        uint64_t z = tapeflow_mix64(key + (uint64_t)(j + 1) * TAPEFLOW_GOLDEN);
        return (float)(uint32_t)(z >> 40) * 0x1.0p-24f;
    }
    """
    void tapeflow_uniform_f32(uint64_t key, Py_ssize_t lo, Py_ssize_t hi, float* out) noexcept nogil
    void tapeflow_uniform_f64(uint64_t key, Py_ssize_t lo, Py_ssize_t hi, double* out) noexcept nogil
    float tapeflow_uniform_f32_first(uint64_t key, Py_ssize_t j) noexcept nogil

# Below this many draws the numbers are made on one thread.
cdef Py_ssize_t _DRAWS_PARALLEL_MIN = 1 << 18
# Draws per chunk that one thread makes at a time.
cdef Py_ssize_t _CHUNK = 1 << 14


def uniform(uint64_t key, Py_ssize_t size, dtype):
    """`size` numbers uniform in [0, 1) of `dtype` (float32 or float64), the start of the
    stream of `key`.

    >>> a = uniform(7, 5, np.float32)
    >>> a.dtype.name, bool(((a >= 0) & (a < 1)).all()), bool((uniform(7, 3, np.float32) == a[:3]).all())
    ('float32', True, True)
    """
    kind = np.dtype(dtype)
    if kind != np.float32 and kind != np.float64:
        raise TypeError(f"uniform: dtype must be float32 or float64, got {kind}")
    if size < 0:
        raise ValueError(f"uniform: size must be >= 0, got {size}")
    cdef cnp.ndarray out = np.empty(size, dtype=kind)
    cdef Py_ssize_t draws = size // 2 if kind == np.float32 else size
    cdef Py_ssize_t chunks = (draws + _CHUNK - 1) // _CHUNK, c, lo, hi
    cdef int threads = _threads_for(draws, _DRAWS_PARALLEL_MIN)
    cdef float* f32 = <float*>cnp.PyArray_DATA(out) if kind == np.float32 else NULL
    cdef double* f64 = <double*>cnp.PyArray_DATA(out) if kind == np.float64 else NULL
    with nogil:
        if threads > 1:
            for c in prange(chunks, schedule="static", num_threads=threads):
                lo = c * _CHUNK
                hi = min(lo + _CHUNK, draws)
                if f32 != NULL:
                    tapeflow_uniform_f32(key, lo, hi, f32)
                else:
                    tapeflow_uniform_f64(key, lo, hi, f64)
        elif f32 != NULL:
            tapeflow_uniform_f32(key, 0, draws, f32)
        else:
            tapeflow_uniform_f64(key, 0, draws, f64)
        if f32 != NULL and size % 2:  # an odd count: the last number is the first half of one more draw
            f32[size - 1] = tapeflow_uniform_f32_first(key, draws)
    return out


def swap_order(const cnp.int64_t[::1] draws):
    """The row order that swaps, for last = n - 1 down to 0, the row at `draws[n - 1 - last]`
    (a number in [0, last]) with the row at `last`, starting from 0 .. n - 1, read back to
    front (a Fisher-Yates shuffle from given draws).

    >>> swap_order(np.array([0, 0, 0], dtype=np.int64)).tolist()
    [0, 2, 1]
    """
    cdef Py_ssize_t n = draws.shape[0], last, k, j
    cdef cnp.ndarray order = np.arange(n, dtype=np.intp)
    cdef Py_ssize_t* rows = <Py_ssize_t*>cnp.PyArray_DATA(order)
    cdef Py_ssize_t swapped
    for k in range(n):
        last = n - 1 - k
        j = draws[k]
        if j < 0 or j > last:
            raise ValueError(f"swap_order: draw {j} at position {k} is outside [0, {last}]")
        swapped = rows[j]
        rows[j] = rows[last]
        rows[last] = swapped
    return order[::-1].copy()
