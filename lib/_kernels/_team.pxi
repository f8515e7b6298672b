# A small team of helper threads for work that takes a few microseconds: a batch-1 dense
# layer or chain of them. Starting an OpenMP parallel region and meeting at its barriers
# costs about a microsecond, as much as a layer's share of the work; the team's threads wait
# for the next job on one counter and meet at barriers on another (a 784-256-256-10 chain on
# 2 threads: 6.9 -> 5.9 us).
#
# `tapeflow_team_run(job, arg, threads)` runs `job(arg, ctx)` on the calling thread (ctx->thread
# 0) and on threads - 1 helpers (1, 2, ...), all with the caller's floating-point environment,
# and returns once all are done; inside a job, `tapeflow_team_barrier(ctx)` waits for all of
# its threads. It returns 0, running nothing, where the team cannot take the job (another
# caller holds it, more threads than it keeps, no helper could be started, no team on this
# platform): the caller then runs the job its own way. Waiting threads spin for as long as
# the OpenMP threads do (tapeflow._kernels.IDLE_SPIN, or what OMP_WAIT_POLICY and GOMP_SPINCOUNT
# say), then helpers sleep and a caller gives its core away between checks, so that other
# processes get the cores. A forked child starts helpers of its own.

cdef extern from *:
    """
    #if defined(__linux__) && defined(__GNUC__)
    #define TAPEFLOW_HAS_TEAM 1
    #include <limits.h>
    #include <linux/futex.h>
    #include <pthread.h>
    #include <sched.h>
    #include <stdint.h>
    #include <sys/syscall.h>
    #include <unistd.h>

    #if defined(__x86_64__) || defined(__i386__)
    #define TAPEFLOW_CPU_RELAX() __builtin_ia32_pause()
    #elif defined(__aarch64__)
    #define TAPEFLOW_CPU_RELAX() __asm__ __volatile__("yield")
    #else
    #define TAPEFLOW_CPU_RELAX() do { } while (0)
    #endif

    #include <stdlib.h>
    #include <string.h>

    #define TAPEFLOW_TEAM_HELPERS 16  /* helper threads at most */

    /* Relax loops a waiting thread spins before it sleeps or yields: as the OpenMP runtime is
       told (OMP_WAIT_POLICY=passive: none; GOMP_SPINCOUNT), else as long as tapeflow's OpenMP
       threads spin (IDLE_SPIN). Read when the first helper starts. */
    static int tapeflow_team_spin = 3000;

    static void tapeflow_team_read_spin(void) {
        const char *policy = getenv("OMP_WAIT_POLICY"), *count = getenv("GOMP_SPINCOUNT");
        if (policy != NULL && strcasecmp(policy, "passive") == 0) tapeflow_team_spin = 0;
        else if (count != NULL && *count) {
            const long spin = strtol(count, NULL, 10);
            tapeflow_team_spin = spin < 0 ? 0 : spin > (1L << 24) ? (1 << 24) : (int)spin;
        }
    }

    typedef struct { int thread, threads; unsigned int passed; } tapeflow_team_ctx;
    typedef void (*tapeflow_team_job)(void *arg, tapeflow_team_ctx *ctx);

    static struct {
        tapeflow_team_job job;
        void *arg;
        int threads;
        unsigned int env;
        int started;  /* helpers running */
        int failed;   /* a helper could not be started: the team is not used again */
        int busy;     /* a caller holds the team */
        unsigned int posted __attribute__((aligned(64)));    /* jobs posted */
        unsigned int arrived __attribute__((aligned(64)));   /* barrier arrivals in this job */
        unsigned int finished __attribute__((aligned(64)));  /* helpers done with this job */
        int sleeping __attribute__((aligned(64)));           /* helpers asleep on `posted` */
    } tapeflow_team;

    static long tapeflow_futex(unsigned int *addr, int op, unsigned int value) {
        return syscall(SYS_futex, addr, op, value, NULL, NULL, 0);
    }

    /* Wait until the counter at `addr` reaches `want`. */
    static void tapeflow_team_wait_count(unsigned int *addr, unsigned int want) {
        for (int i = 0; (int)(__atomic_load_n(addr, __ATOMIC_ACQUIRE) - want) < 0; i++) {
            if (i < tapeflow_team_spin) TAPEFLOW_CPU_RELAX();
            else sched_yield();
        }
    }

    static void tapeflow_team_barrier(tapeflow_team_ctx *ctx) {
        ctx->passed++;
        __atomic_add_fetch(&tapeflow_team.arrived, 1, __ATOMIC_ACQ_REL);
        tapeflow_team_wait_count(&tapeflow_team.arrived, ctx->passed * (unsigned int)ctx->threads);
    }

    /* The jobs posted when each helper was started, which it has not to run. */
    static unsigned int tapeflow_team_seen_at_start[TAPEFLOW_TEAM_HELPERS + 1];

    /* Helper number `thread` (1, 2, ...). */
    static void *tapeflow_team_helper(void *thread_number) {
        const int thread = (int)(intptr_t)thread_number;
        unsigned int seen = tapeflow_team_seen_at_start[thread];
        for (;;) {
            unsigned int now;
            for (int i = 0; (now = __atomic_load_n(&tapeflow_team.posted, __ATOMIC_ACQUIRE)) == seen; i++) {
                if (i < tapeflow_team_spin) {
                    TAPEFLOW_CPU_RELAX();
                    continue;
                }
                __atomic_add_fetch(&tapeflow_team.sleeping, 1, __ATOMIC_SEQ_CST);
                if (__atomic_load_n(&tapeflow_team.posted, __ATOMIC_SEQ_CST) == seen)
                    tapeflow_futex(&tapeflow_team.posted, FUTEX_WAIT_PRIVATE, seen);
                __atomic_sub_fetch(&tapeflow_team.sleeping, 1, __ATOMIC_SEQ_CST);
            }
            seen = now;
            if (thread < tapeflow_team.threads) {
                const unsigned int own = tapeflow_fpenv_swap(tapeflow_team.env);
                tapeflow_team_ctx ctx = {thread, tapeflow_team.threads, 0};
                tapeflow_team.job(tapeflow_team.arg, &ctx);
                tapeflow_fpenv_swap(own);
            }
            __atomic_add_fetch(&tapeflow_team.finished, 1, __ATOMIC_RELEASE);
        }
        return NULL;
    }

    /* A forked child has none of its parent's helpers. */
    static void tapeflow_team_after_fork(void) {
        tapeflow_team.started = 0;
        tapeflow_team.busy = 0;
        tapeflow_team.sleeping = 0;
    }

    static void tapeflow_team_once(void) {
        tapeflow_team_read_spin();
        pthread_atfork(NULL, NULL, tapeflow_team_after_fork);
    }

    static int tapeflow_team_start(int helpers) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, tapeflow_team_once);
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) return 0;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 1 << 20);
        while (tapeflow_team.started < helpers) {
            const int number = tapeflow_team.started + 1;
            tapeflow_team_seen_at_start[number] = tapeflow_team.posted;
            pthread_t thread;
            if (pthread_create(&thread, &attr, tapeflow_team_helper, (void *)(intptr_t)number) != 0) {
                tapeflow_team.failed = 1;
                break;
            }
            tapeflow_team.started++;
        }
        pthread_attr_destroy(&attr);
        return tapeflow_team.started >= helpers;
    }

    static int tapeflow_team_run(tapeflow_team_job job, void *arg, int threads) {
        if (threads < 2 || threads - 1 > TAPEFLOW_TEAM_HELPERS) return 0;
        if (__atomic_exchange_n(&tapeflow_team.busy, 1, __ATOMIC_ACQUIRE)) return 0;
        if (tapeflow_team.failed || !tapeflow_team_start(threads - 1)) {
            __atomic_store_n(&tapeflow_team.busy, 0, __ATOMIC_RELEASE);
            return 0;
        }
        tapeflow_team.job = job;
        tapeflow_team.arg = arg;
        tapeflow_team.threads = threads;
        tapeflow_team.env = tapeflow_fpenv_get();
        __atomic_store_n(&tapeflow_team.arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&tapeflow_team.finished, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&tapeflow_team.posted, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&tapeflow_team.sleeping, __ATOMIC_SEQ_CST) > 0)
            tapeflow_futex(&tapeflow_team.posted, FUTEX_WAKE_PRIVATE, INT_MAX);
        tapeflow_team_ctx ctx = {0, threads, 0};
        job(arg, &ctx);
        tapeflow_team_wait_count(&tapeflow_team.finished, (unsigned int)tapeflow_team.started);
        __atomic_store_n(&tapeflow_team.busy, 0, __ATOMIC_RELEASE);
        return 1;
    }
    #else
    #define TAPEFLOW_HAS_TEAM 0
    typedef struct { int thread, threads; unsigned int passed; } tapeflow_team_ctx;
    typedef void (*tapeflow_team_job)(void *arg, tapeflow_team_ctx *ctx);
    static void tapeflow_team_barrier(tapeflow_team_ctx *ctx) { (void)ctx; }
    static int tapeflow_team_run(tapeflow_team_job job, void *arg, int threads) {
        (void)job; (void)arg; (void)threads;
        return 0;
    }
    #endif
    """
