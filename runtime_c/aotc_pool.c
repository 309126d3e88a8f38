/* aotc_pool.c: the thread pool behind aotc_parallel_for. Workers start once (at context creation);
 * between loops they spin briefly on a generation counter, then sleep on a condition variable.
 * A loop is cut into a few contiguous chunks per thread that every thread, the caller included,
 * claims one at a time from an atomic counter: a worker the OS has taken off its core holds back
 * at most the one chunk it claimed, and one that has not woken up holds back nothing, since the
 * caller waits for chunks to finish, not for workers to check in. Handing out a loop takes no
 * lock unless a worker is asleep; a loop creates no thread. */
#define _POSIX_C_SOURCE 200809L

#include "aotc_runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#if !defined(__GNUC__) && !defined(__clang__)
#error "aotc_pool.c needs the __atomic builtins of gcc or clang"
#endif

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)

#ifndef AOTC_SPIN_NS
#define AOTC_SPIN_NS 200000 /* how long a waiting thread spins before it sleeps */
#endif

#ifndef AOTC_CHUNKS_PER_THREAD
#define AOTC_CHUNKS_PER_THREAD 4 /* more: a late thread costs less; fewer: less claiming */
#endif

/* The claim word: generation in the high 32 bits, chunks not yet claimed in the low 32. */
#define GEN_OF(w) ((uint32_t)((w) >> 32))
#define UNCLAIMED_OF(w) ((uint32_t)(w))
#define WORD(gen, unclaimed) (((uint64_t)(gen) << 32) | (uint64_t)(unclaimed))

struct aotc_worker {
    aotc_pool *pool;
    pthread_t thread;
};

/* Fields that different threads write in the same loop sit at least a cache line apart. */
#define CACHE_LINE 64

struct aotc_pool {
    int num_threads;
    int num_started;
    struct aotc_worker *workers;
    pthread_mutex_t mutex; /* only for sleeping and waking */
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    char gap0[CACHE_LINE];
    /* The current loop: written by the caller while no chunk is left to claim, read only by a
     * thread that holds a claimed, unfinished chunk (so the loop cannot end under it). */
    uint64_t work; /* WORD(generation, unclaimed chunks); a new loop bumps the generation */
    aotc_body_fn body;
    void *env;
    int64_t n;
    uint32_t chunks;
    char gap1[CACHE_LINE];
    uint32_t done;      /* chunks of the current loop finished */
    int caller_waiting; /* the caller is asleep (or about to be) on done_cv */
    char gap2[CACHE_LINE];
    int sleepers; /* workers asleep (or about to be) on work_cv */
    int stop;
    int busy; /* a loop is running: nested calls run inline */
    aotc_outside_for_fn outside; /* non-NULL: loops go to someone else's threads */
    void *outside_user;
};

void aotc_range_part(int64_t n, int64_t parts, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t q = n / parts, r = n % parts;
    *lo = i * q + (i < r ? i : r);
    *hi = *lo + q + (i < r ? 1 : 0);
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until the generation differs from seen (1) or the spin budget is used up (0). */
static int spin_for_generation(const uint64_t *work, uint32_t seen) {
    int64_t start = now_ns();
    unsigned i;
    for (i = 0;; ++i) {
        if (GEN_OF(LOAD(work)) != seen) return 1;
        cpu_relax();
        if ((i & 63u) == 63u && now_ns() - start > AOTC_SPIN_NS) return 0;
    }
}

/* Spins until *done == chunks (1) or the spin budget is used up (0). */
static int spin_for_done(const uint32_t *done, uint32_t chunks) {
    int64_t start = now_ns();
    unsigned i;
    for (i = 0;; ++i) {
        if (LOAD(done) == chunks) return 1;
        cpu_relax();
        if ((i & 63u) == 63u && now_ns() - start > AOTC_SPIN_NS) return 0;
    }
}

/* Waits for a generation other than seen: spinning first, then asleep. */
static uint32_t wait_for_work(aotc_pool *p, uint32_t seen) {
    if (!spin_for_generation(&p->work, seen)) {
        pthread_mutex_lock(&p->mutex);
        ADD(&p->sleepers, 1); /* seq_cst: a poster either sees this or we see its generation */
        while (GEN_OF(LOAD(&p->work)) == seen) pthread_cond_wait(&p->work_cv, &p->mutex);
        ADD(&p->sleepers, -1);
        pthread_mutex_unlock(&p->mutex);
    }
    return GEN_OF(LOAD(&p->work));
}

/* Claims the next chunk of whatever loop is current; 0 when none is left. The compare-exchange
 * (not a plain decrement) never takes a chunk count below zero, so a thread that arrives after
 * its loop ended cannot eat into the next loop's chunks. */
static int claim_chunk(aotc_pool *p, int64_t *lo, int64_t *hi, uint32_t *chunks) {
    uint64_t w = LOAD(&p->work);
    do {
        if (UNCLAIMED_OF(w) == 0) return 0;
    } while (!__atomic_compare_exchange_n(&p->work, &w, w - 1, 1, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST));
    /* The chunk is ours and unfinished, so the loop's fields stay put until we report it done. */
    *chunks = p->chunks;
    aotc_range_part(p->n, *chunks, *chunks - UNCLAIMED_OF(w), lo, hi);
    return 1;
}

/* Runs chunks until none is left to claim, then reports how many it ran (one atomic add per
 * thread, not per chunk). After that add a thread reads nothing of the loop: the caller may
 * already be posting the next one. */
static void run_chunks(aotc_pool *p) {
    int64_t lo, hi;
    uint32_t chunks = 0, ran = 0;
    while (claim_chunk(p, &lo, &hi, &chunks)) {
        p->body(p->env, lo, hi);
        ++ran;
    }
    if (ran > 0 && ADD(&p->done, ran) == chunks && LOAD(&p->caller_waiting)) {
        /* A stale caller_waiting (a later loop's) only costs a spurious wake-up. */
        pthread_mutex_lock(&p->mutex);
        pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mutex);
    }
}

static void *worker_main(void *arg) {
    aotc_pool *p = ((struct aotc_worker *)arg)->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_work(p, seen);
        if (LOAD(&p->stop)) return NULL;
        run_chunks(p);
    }
}

/* Publishes a new generation with `chunks` to claim and wakes sleeping workers. Only the thread
 * that owns the pool writes `work` other than by claiming, and only while nothing is left to
 * claim, so a plain store cannot lose a claim. */
static void post(aotc_pool *p, uint32_t chunks) {
    STORE(&p->work, WORD(GEN_OF(LOAD(&p->work)) + 1u, chunks));
    if (LOAD(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mutex);
    }
}

static void stop_workers(aotc_pool *p) {
    int i;
    STORE(&p->stop, 1);
    post(p, 0);
    for (i = 0; i < p->num_started; ++i) pthread_join(p->workers[i].thread, NULL);
    p->num_started = 0;
}

int aotc_pool_create(aotc_pool **out_pool, int num_threads) {
    aotc_pool *p;
    int i;
    if (out_pool == NULL) return AOTC_ERR_NULL_ARGUMENT;
    *out_pool = NULL;
    if (num_threads < 1 || num_threads > AOTC_MAX_THREADS) return AOTC_ERR_BAD_ARGUMENT;
    p = (aotc_pool *)calloc(1, sizeof *p);
    if (p == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    p->num_threads = num_threads;
    if (num_threads > 1) {
        p->workers = (struct aotc_worker *)calloc((size_t)num_threads - 1, sizeof *p->workers);
        if (p->workers == NULL) {
            free(p);
            return AOTC_ERR_OUT_OF_MEMORY;
        }
    }
    if (pthread_mutex_init(&p->mutex, NULL) != 0) goto fail_mutex;
    if (pthread_cond_init(&p->work_cv, NULL) != 0) goto fail_work_cv;
    if (pthread_cond_init(&p->done_cv, NULL) != 0) goto fail_done_cv;
    for (i = 1; i < num_threads; ++i) {
        struct aotc_worker *w = &p->workers[i - 1];
        w->pool = p;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            stop_workers(p);
            pthread_cond_destroy(&p->done_cv);
            goto fail_done_cv;
        }
        p->num_started = i;
    }
    *out_pool = p;
    return AOTC_OK;

fail_done_cv:
    pthread_cond_destroy(&p->work_cv);
fail_work_cv:
    pthread_mutex_destroy(&p->mutex);
fail_mutex:
    free(p->workers);
    free(p);
    return AOTC_ERR_THREAD;
}

void aotc_pool_destroy(aotc_pool *pool) {
    if (pool == NULL) return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->mutex);
    free(pool->workers);
    free(pool);
}

int aotc_pool_num_threads(const aotc_pool *pool) { return pool == NULL ? 1 : pool->num_threads; }

void aotc_pool_set_outside(aotc_pool *pool, aotc_outside_for_fn fn, void *user) {
    if (pool == NULL) return;
    pool->outside = fn;
    pool->outside_user = user;
}

/* A loop handed to the outside threads; a nested call (from inside one of its bodies, on any
 * thread) runs inline, as with the pool's own threads. */
static void run_outside(aotc_pool *p, aotc_body_fn body, void *env, int64_t n) {
    if (n == 1 || LOAD(&p->busy)) {
        body(env, 0, n);
        return;
    }
    STORE(&p->busy, 1);
    p->outside(p->outside_user, body, env, n);
    STORE(&p->busy, 0);
}

void aotc_parallel_for(void *ctx, aotc_body_fn body, void *env, int64_t n) {
    aotc_pool *p = (aotc_pool *)ctx;
    int64_t most;
    uint32_t chunks;
    if (n <= 0) return;
    if (p != NULL && p->outside != NULL) {
        run_outside(p, body, env, n);
        return;
    }
    if (p == NULL || p->num_threads <= 1 || n == 1 || LOAD(&p->busy)) {
        body(env, 0, n);
        return;
    }
    most = (int64_t)p->num_threads * AOTC_CHUNKS_PER_THREAD;
    chunks = (uint32_t)(n < most ? n : most);
    STORE(&p->busy, 1);
    p->body = body;
    p->env = env;
    p->n = n;
    p->chunks = chunks;
    STORE(&p->done, 0u);
    post(p, chunks);

    run_chunks(p); /* the caller starts at once, without waiting for workers to wake */

    /* What is left are chunks other threads claimed and are still running. */
    if (!spin_for_done(&p->done, chunks)) {
        pthread_mutex_lock(&p->mutex);
        STORE(&p->caller_waiting, 1); /* seq_cst: the last finisher sees this or we see done */
        while (LOAD(&p->done) != chunks) pthread_cond_wait(&p->done_cv, &p->mutex);
        STORE(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mutex);
    }
    STORE(&p->busy, 0);
}
