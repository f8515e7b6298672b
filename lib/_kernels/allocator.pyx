"""A caching allocator for the data of NumPy arrays made while a graph runs.

A training step allocates the same large arrays at every step; handed back to the C
allocator, each is unmapped when freed and mapped again, page by page with every page
zeroed, at the next step. While `reusing_blocks()` is active in a thread (a context
variable: NumPy's own per-context allocator hook), arrays of at least 256 KiB take their
data from blocks that earlier arrays of the same rounded size gave back, kept up to
`CACHE_LIMIT` bytes and `CACHE_SLOTS` blocks; smaller ones, and arrays made anywhere else,
use the C allocator as before. An array keeps the allocator that made it, so it may be freed
anywhere. `release()` frees every kept block.

>>> import numpy as np
>>> with reusing_blocks():
...     a = np.ones(1 << 17)
>>> del a
>>> cached_bytes() >= (1 << 20)
True
>>> release(); cached_bytes()
0
"""

include "_common.pxi"

from cpython.pycapsule cimport PyCapsule_New

cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #include <pthread.h>
    #include <stdlib.h>
    #include <string.h>
    #define TF_LARGE ((size_t)1 << 18)
    #define TF_SLOTS 1024  /* 64 left a GoogLeNet step at batch 16 with 66,000 page faults */
    #define TF_HEADER 16  /* keeps the C allocator's 16-byte alignment */
    static pthread_mutex_t tf_lock = PTHREAD_MUTEX_INITIALIZER;
    static void* tf_blocks[TF_SLOTS];
    static size_t tf_sizes[TF_SLOTS];
    static int tf_count = 0;
    static size_t tf_cached = 0;
    static size_t tf_limit = (size_t)1 << 28;  /* raised at import where memory allows */
    static unsigned long long tf_reused = 0;

    /* Every block starts with a header: the size it was made for (rounded to pages when large). */
    static inline size_t* tf_header(void* data) { return (size_t*)((char*)data - TF_HEADER); }
    static inline size_t tf_rounded(size_t n) { return n >= TF_LARGE ? (n + 4095) & ~(size_t)4095 : n; }

    static void* tf_take(size_t size) {
        void* found = NULL;
        pthread_mutex_lock(&tf_lock);
        for (int i = tf_count - 1; i >= 0; i--) {
            if (tf_sizes[i] == size) {
                found = tf_blocks[i];
                tf_cached -= size;
                tf_count--;
                tf_blocks[i] = tf_blocks[tf_count];
                tf_sizes[i] = tf_sizes[tf_count];
                tf_reused++;
                break;
            }
        }
        pthread_mutex_unlock(&tf_lock);
        return found;
    }
    static void* tf_made(void* base, size_t size) {
        if (base == NULL) return NULL;
        *(size_t*)base = size;
        return (char*)base + TF_HEADER;
    }
    static void* tf_malloc(void* ctx, size_t n) {
        (void)ctx;
        size_t size = tf_rounded(n);
        if (size >= TF_LARGE) {
            void* kept = tf_take(size);
            if (kept != NULL) return kept;
        }
        return tf_made(malloc(size + TF_HEADER), size);
    }
    static void* tf_calloc(void* ctx, size_t nelem, size_t elsize) {
        (void)ctx;
        if (elsize != 0 && nelem > (((size_t)-1) - 2 * 4096 - TF_HEADER) / elsize) return NULL;
        size_t n = nelem * elsize, size = tf_rounded(n);
        if (size >= TF_LARGE) {
            void* kept = tf_take(size);
            if (kept != NULL) {
                memset(kept, 0, n);
                return kept;
            }
        }
        return tf_made(calloc(1, size + TF_HEADER), size);
    }
    static void tf_free(void* ctx, void* data, size_t unused) {
        (void)ctx; (void)unused;
        if (data == NULL) return;
        size_t size = *tf_header(data);
        if (size >= TF_LARGE) {
            int kept = 0;
            pthread_mutex_lock(&tf_lock);
            if (tf_count < TF_SLOTS && tf_cached + size <= tf_limit) {
                tf_blocks[tf_count] = data;
                tf_sizes[tf_count] = size;
                tf_count++;
                tf_cached += size;
                kept = 1;
            }
            pthread_mutex_unlock(&tf_lock);
            if (kept) return;
        }
        free(tf_header(data));
    }
    static void* tf_realloc(void* ctx, void* data, size_t n) {
        if (data == NULL) return tf_malloc(ctx, n);
        size_t old = *tf_header(data);
        if (old < TF_LARGE && tf_rounded(n) < TF_LARGE) {
            void* base = realloc(tf_header(data), n + TF_HEADER);
            return tf_made(base, n);
        }
        void* moved = tf_malloc(ctx, n);
        if (moved == NULL) return NULL;
        memcpy(moved, data, old < n ? old : n);
        tf_free(ctx, data, old);
        return moved;
    }
    static void tf_release(void) {
        pthread_mutex_lock(&tf_lock);
        for (int i = 0; i < tf_count; i++) free(tf_header(tf_blocks[i]));
        tf_count = 0;
        tf_cached = 0;
        pthread_mutex_unlock(&tf_lock);
    }
    static size_t tf_cached_bytes(void) {
        pthread_mutex_lock(&tf_lock);
        size_t n = tf_cached;
        pthread_mutex_unlock(&tf_lock);
        return n;
    }
    static unsigned long long tf_reused_count(void) {
        pthread_mutex_lock(&tf_lock);
        unsigned long long n = tf_reused;
        pthread_mutex_unlock(&tf_lock);
        return n;
    }
    static PyDataMem_Handler tf_handler = {
        "tapeflow_reusing_blocks", 1, {NULL, tf_malloc, tf_calloc, tf_realloc, tf_free}
    };
    static void* tf_handler_address(void) { return &tf_handler; }
    """
    void tf_release() noexcept nogil
    size_t tf_cached_bytes() noexcept nogil
    unsigned long long tf_reused_count() noexcept nogil
    void* tf_handler_address() noexcept nogil
    size_t TF_LARGE
    size_t tf_limit
    int TF_SLOTS

cdef extern from "numpy/arrayobject.h":
    object PyDataMem_SetHandler(object handler)

import os


def _cache_limit() -> int:
    """The bytes kept: a sixteenth of the machine's memory, between 256 MiB and 1 GiB (a large
    dense layer's weights, their gradient and their update are each one block of a step)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 28
    return max(1 << 28, min(1 << 30, memory // 16))


tf_limit = _cache_limit()
LARGE_BYTES = TF_LARGE
CACHE_SLOTS = TF_SLOTS
CACHE_LIMIT = tf_limit

_HANDLER = PyCapsule_New(tf_handler_address(), b"mem_handler", NULL)


cdef class reusing_blocks:
    """Within it, new arrays of this thread's context take their data from the kept blocks."""

    cdef object _previous

    def __enter__(self):
        self._previous = PyDataMem_SetHandler(_HANDLER)
        return self

    def __exit__(self, *exc):
        PyDataMem_SetHandler(self._previous)
        self._previous = None
        return False


def release():
    """Free every kept block."""
    with nogil:
        tf_release()


def cached_bytes():
    """How many bytes the kept blocks hold now."""
    return tf_cached_bytes()


def reused_blocks():
    """How many times a kept block has served a new array since the process started."""
    return tf_reused_count()
