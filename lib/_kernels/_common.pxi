# Shared by every kernel module through `include "_common.pxi"`: build facts, the OpenMP
# thread count that the module's prange loops use, and the floating-point environment.
#
# OpenMP worker threads keep whatever flush-to-zero setting they were started with, so each
# parallel region hands them the caller's: every thread count then gives the same result
# (`own = tapeflow_fpenv_swap(env)` on entry, `tapeflow_fpenv_swap(own)` on exit, where `env`
# is `tapeflow_fpenv_get()` read by the calling thread).

cdef extern from *:
    """
    #if defined(__SSE__) || defined(_M_X64) || defined(__x86_64__)
    #include <xmmintrin.h>
    #define TAPEFLOW_HAS_MXCSR 1
    static inline unsigned int tapeflow_fpenv_get(void) { return _mm_getcsr(); }
    static inline unsigned int tapeflow_fpenv_swap(unsigned int env) {
        unsigned int old = _mm_getcsr();
        if (old != env) _mm_setcsr(env);
        return old;
    }
    #else
    #define TAPEFLOW_HAS_MXCSR 0
    static inline unsigned int tapeflow_fpenv_get(void) { return 0; }
    static inline unsigned int tapeflow_fpenv_swap(unsigned int env) { (void)env; return 0; }
    #endif
    #define TAPEFLOW_FLUSH_BITS 0x8040u  /* MXCSR: flush-to-zero (bit 15) | denormals-are-zero (bit 6) */
    #ifndef TAPEFLOW_SOURCE_SHA256
    #define TAPEFLOW_SOURCE_SHA256 "unknown"
    #endif
    #if defined(__linux__)
    #include <fcntl.h>
    #include <stdio.h>
    #include <time.h>
    #include <unistd.h>
    #endif
    /* Whether every core of the machine has a runnable thread now: the running count in
       /proc/loadavg (the caller included) above the online cores, read at most every 50 ms.
       -1 where it cannot be read (then never busy). tapeflow_busy_override: -1 reads it, 0 or 1 fixes it. */
    static int tapeflow_busy_override = -1;
    static int tapeflow_cores_busy(void) {
        static long next_ms = 0;
        static int busy = 0;
        if (tapeflow_busy_override >= 0) return tapeflow_busy_override;
    #if defined(__linux__)
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        long now_ms = (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (now_ms < __atomic_load_n(&next_ms, __ATOMIC_RELAXED)) return __atomic_load_n(&busy, __ATOMIC_RELAXED);
        __atomic_store_n(&next_ms, now_ms + 50, __ATOMIC_RELAXED);
        char text[128];
        int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return 0;
        ssize_t got = read(fd, text, sizeof(text) - 1);
        close(fd);
        if (got <= 0) return 0;
        text[got] = 0;
        double a1, a5, a15;
        long running = 0, total = 0;
        if (sscanf(text, "%lf %lf %lf %ld/%ld", &a1, &a5, &a15, &running, &total) != 5) return 0;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int now_busy = cores > 0 && running > cores;
        __atomic_store_n(&busy, now_busy, __ATOMIC_RELAXED);
        return now_busy;
    #else
        return 0;
    #endif
    }
    #ifdef _OPENMP
    #include <omp.h>
    #define TAPEFLOW_OPENMP 1
    static int tapeflow_max_threads(void) { return omp_get_max_threads(); }
    /* [lo, hi): this thread's share of `count` items, inside a parallel region. */
    #define TAPEFLOW_SHARE_OF(lo, hi, count) do {                                          \\
        Py_ssize_t t_ = omp_get_thread_num(), nt_ = omp_get_num_threads();                 \\
        lo = (count) * t_ / nt_; hi = (count) * (t_ + 1) / nt_; } while (0)
    #else
    #define TAPEFLOW_OPENMP 0
    static int tapeflow_max_threads(void) { return 1; }
    #define TAPEFLOW_SHARE_OF(lo, hi, count) do { } while (0)
    #endif
    """
    const char* TAPEFLOW_SOURCE_SHA256
    int TAPEFLOW_OPENMP
    int TAPEFLOW_HAS_MXCSR
    unsigned int TAPEFLOW_FLUSH_BITS
    int tapeflow_max_threads() noexcept nogil
    unsigned int tapeflow_fpenv_get() noexcept nogil
    unsigned int tapeflow_fpenv_swap(unsigned int env) noexcept nogil
    int tapeflow_cores_busy() noexcept nogil
    int tapeflow_busy_override

OPENMP = bool(TAPEFLOW_OPENMP)
SOURCE_SHA256 = TAPEFLOW_SOURCE_SHA256.decode("ascii")

cdef int _num_threads = max(1, tapeflow_max_threads())


def _set_num_threads(int n):
    """Set the thread count of this module's prange loops (always 1 without OpenMP)."""
    global _num_threads
    if n < 1:
        raise ValueError(f"set_num_threads: need n >= 1, got {n}")
    _num_threads = n if TAPEFLOW_OPENMP else 1


def _get_num_threads():
    return _num_threads


# Below this much work (multiply-adds or element operations) a kernel keeps to the calling
# thread while every core of the machine is busy: a helper thread would wait for a core,
# and the caller for it, longer than the whole work takes alone.
cdef Py_ssize_t _CROWDED_MIN = 1 << 25


cdef inline int _threads_for(Py_ssize_t work, Py_ssize_t minimum) noexcept nogil:
    """The threads for `work`: 1 below `minimum`, or below _CROWDED_MIN while the cores are busy."""
    if _num_threads < 2 or work < minimum:
        return 1
    if work < _CROWDED_MIN and tapeflow_cores_busy():
        return 1
    return _num_threads


def _cores_busy():
    """Whether this module finds every core of the machine busy now (its last reading, at most 50 ms old)."""
    return bool(tapeflow_cores_busy())


def _set_busy_override(int busy):
    """Fix what _cores_busy says (0 or 1), or let it read the machine again (-1); returns the old setting."""
    global tapeflow_busy_override
    old, tapeflow_busy_override = tapeflow_busy_override, busy
    return old


def _threads_for_work(Py_ssize_t work, Py_ssize_t minimum):
    """How many threads a kernel of this module gives `work` with the size threshold `minimum`."""
    return _threads_for(work, minimum)
