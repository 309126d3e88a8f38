/* aotc_pool.c: the thread pool behind aotc_parallel_for. Workers start once (at context creation);
 * between loops they spin briefly on a generation counter, then sleep on a condition variable.
 * Handing out a loop takes no lock unless a worker is asleep; a loop creates no thread. */
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

struct aotc_worker {
    aotc_pool *pool;
    int index; /* 1 .. num_threads - 1; the calling thread is 0 */
    pthread_t thread;
};

struct aotc_pool {
    int num_threads;
    int num_started;
    struct aotc_worker *workers;
    pthread_mutex_t mutex; /* only for sleeping and waking */
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    /* The current loop: written before gen is bumped, read after gen is seen to change. Every
     * worker takes part in every loop, so none reads these while the next loop is posted. */
    aotc_body_fn body;
    void *env;
    int64_t n;
    unsigned long gen; /* bumped once per loop and once at stop */
    int pending;       /* workers still inside the current loop */
    int sleepers;      /* workers asleep (or about to be) on work_cv */
    int caller_waiting; /* the caller is asleep (or about to be) on done_cv */
    int stop;
    int busy; /* a loop is running: nested calls run inline */
};

static void range_of(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {
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

/* Spins until *value != unwanted (1) or the spin budget is used up (0). */
static int spin_while_equal(const unsigned long *value, unsigned long unwanted) {
    int64_t start = now_ns();
    unsigned i;
    for (i = 0;; ++i) {
        if (LOAD(value) != unwanted) return 1;
        cpu_relax();
        if ((i & 63u) == 63u && now_ns() - start > AOTC_SPIN_NS) return 0;
    }
}

static int spin_while_pending(const int *pending) {
    int64_t start = now_ns();
    unsigned i;
    for (i = 0;; ++i) {
        if (LOAD(pending) == 0) return 1;
        cpu_relax();
        if ((i & 63u) == 63u && now_ns() - start > AOTC_SPIN_NS) return 0;
    }
}

/* Waits for a generation other than seen: spinning first, then asleep. */
static unsigned long wait_for_work(aotc_pool *p, unsigned long seen) {
    if (!spin_while_equal(&p->gen, seen)) {
        pthread_mutex_lock(&p->mutex);
        ADD(&p->sleepers, 1); /* seq_cst: a poster either sees this or we see its gen */
        while (LOAD(&p->gen) == seen) pthread_cond_wait(&p->work_cv, &p->mutex);
        ADD(&p->sleepers, -1);
        pthread_mutex_unlock(&p->mutex);
    }
    return LOAD(&p->gen);
}

static void *worker_main(void *arg) {
    struct aotc_worker *w = (struct aotc_worker *)arg;
    aotc_pool *p = w->pool;
    unsigned long seen = 0;
    for (;;) {
        int64_t lo, hi;
        seen = wait_for_work(p, seen);
        if (LOAD(&p->stop)) return NULL;
        range_of(p->n, p->num_threads, w->index, &lo, &hi);
        if (lo < hi) p->body(p->env, lo, hi);
        if (ADD(&p->pending, -1) == 0 && LOAD(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mutex);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mutex);
        }
    }
}

/* Publishes a new generation and wakes sleeping workers. */
static void post(aotc_pool *p) {
    ADD(&p->gen, 1);
    if (LOAD(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mutex);
    }
}

static void stop_workers(aotc_pool *p) {
    int i;
    STORE(&p->stop, 1);
    post(p);
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
        w->index = i;
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

void aotc_parallel_for(void *ctx, aotc_body_fn body, void *env, int64_t n) {
    aotc_pool *p = (aotc_pool *)ctx;
    int64_t lo, hi;
    if (n <= 0) return;
    if (p == NULL || p->num_threads <= 1 || n == 1 || LOAD(&p->busy)) {
        body(env, 0, n);
        return;
    }
    STORE(&p->busy, 1);
    p->body = body;
    p->env = env;
    p->n = n;
    STORE(&p->pending, p->num_threads - 1);
    post(p);

    range_of(n, p->num_threads, 0, &lo, &hi);
    if (lo < hi) body(env, lo, hi);

    if (!spin_while_pending(&p->pending)) {
        pthread_mutex_lock(&p->mutex);
        STORE(&p->caller_waiting, 1); /* seq_cst: the last worker sees this or we see pending 0 */
        while (LOAD(&p->pending) != 0) pthread_cond_wait(&p->done_cv, &p->mutex);
        STORE(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mutex);
    }
    STORE(&p->busy, 0);
}
