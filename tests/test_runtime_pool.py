"""The thread pool's work distribution: every iteration runs exactly once at any thread count
(plain, ASan/UBSan, TSan), a thread held up inside a chunk costs the loop only that chunk (the
others take the rest), and a model bundle's outputs are bit-identical at 1, 2, 3 and 8 threads."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from program_runner import assert_close, ort_outputs  # noqa: E402
from test_runtime_c import compile_c, run_sanitized  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402
from aotc.package.loaded import LoadedBundle  # noqa: E402

POOL_SPLIT_TEST = r"""
#define _POSIX_C_SOURCE 200809L
#include "aotc_runtime.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_N 5000
#define SEQ __ATOMIC_SEQ_CST

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_us(long us) {
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = us * 1000;
    nanosleep(&ts, NULL);
}

/* ---- every iteration exactly once ---- */
typedef struct {
    int hits[MAX_N]; /* plain ints: two threads on one iteration is a TSan race as well */
    int calls;
    int bad_calls; /* empty or out-of-range [lo, hi) */
} count_env;

static void count(void *e, int64_t lo, int64_t hi) {
    count_env *env = (count_env *)e;
    int64_t i;
    if (lo >= hi || lo < 0 || hi > MAX_N) __atomic_add_fetch(&env->bad_calls, 1, SEQ);
    for (i = lo; i < hi && i < MAX_N; ++i) env->hits[i] += 1;
    __atomic_add_fetch(&env->calls, 1, SEQ);
}

static int check_counts(void *ctx, int threads) {
    static const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1001, 4999};
    static count_env env;
    size_t s;
    int rep;
    int64_t i;
    for (rep = 0; rep < 60; ++rep) {
        for (s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
            int64_t n = sizes[s];
            memset(&env, 0, sizeof env);
            aotc_parallel_for(ctx, count, &env, n);
            for (i = 0; i < n; ++i) {
                if (env.hits[i] != 1) {
                    printf("FAIL threads=%d n=%lld: iteration %lld ran %d times\n", threads,
                           (long long)n, (long long)i, env.hits[i]);
                    return 1;
                }
            }
            if (env.bad_calls != 0 || env.calls > n || (n > 0 && env.calls < 1)) {
                printf("FAIL threads=%d n=%lld: %d calls, %d empty or out of range\n", threads,
                       (long long)n, env.calls, env.bad_calls);
                return 1;
            }
        }
        if (rep % 20 == 19) sleep_us(3000); /* let the workers fall asleep, then wake them */
    }
    return 0;
}

/* ---- a held-up thread costs one chunk ----
 * The first chunk that the chosen kind of thread (the caller, or any worker) runs plays a thread
 * the OS took off its core: it does not return until every other iteration is done. That only
 * ends if the other threads take over the rest of the loop, and it must leave the held-up thread
 * with less than an even share of the iterations. */
typedef struct {
    int64_t n;
    pthread_t caller;
    int hold_caller;    /* 1: hold up the caller; 0: hold up the first worker that runs a chunk */
    int held;           /* a chunk has been held up (claimed with a compare-exchange) */
    int64_t held_size;  /* its size */
    int64_t others_done; /* iterations the other chunks finished */
    int timed_out;
    int hits[MAX_N];
} hold_env;

static void hold_one(void *e, int64_t lo, int64_t hi) {
    hold_env *env = (hold_env *)e;
    int is_caller = pthread_equal(pthread_self(), env->caller) != 0;
    int expected = 0;
    int64_t i;
    for (i = lo; i < hi; ++i) env->hits[i] += 1;
    if (is_caller == env->hold_caller &&
        __atomic_compare_exchange_n(&env->held, &expected, 1, 0, SEQ, SEQ)) {
        int64_t deadline = now_ns() + 10000000000LL;
        __atomic_store_n(&env->held_size, hi - lo, SEQ);
        while (__atomic_load_n(&env->others_done, SEQ) < env->n - (hi - lo)) {
            if (now_ns() > deadline) {
                __atomic_store_n(&env->timed_out, 1, SEQ);
                return;
            }
            sleep_us(100);
        }
        return;
    }
    sleep_us(200); /* a chunk long enough that sleeping workers wake to take part */
    __atomic_add_fetch(&env->others_done, hi - lo, SEQ);
}

static int check_hold(void *ctx, int threads, int hold_caller) {
    static hold_env env;
    int attempt;
    int64_t i;
    for (attempt = 0; attempt < 50; ++attempt) {
        memset(&env, 0, sizeof env);
        env.n = 1000;
        env.caller = pthread_self();
        env.hold_caller = hold_caller;
        aotc_parallel_for(ctx, hold_one, &env, env.n);
        for (i = 0; i < env.n; ++i) {
            if (env.hits[i] != 1) {
                printf("FAIL hold threads=%d: iteration %lld ran %d times\n", threads, (long long)i, env.hits[i]);
                return 1;
            }
        }
        if (!env.held) continue; /* no worker took part this time (it was asleep): try again */
        if (env.timed_out) {
            printf("FAIL hold threads=%d caller=%d: the others did not take over the loop\n", threads, hold_caller);
            return 1;
        }
        if (env.held_size * threads >= env.n) {
            printf("FAIL hold threads=%d caller=%d: the held-up thread had %lld of %lld iterations\n",
                   threads, hold_caller, (long long)env.held_size, (long long)env.n);
            return 1;
        }
        return 0;
    }
    printf("FAIL hold threads=%d: no worker ever ran a chunk\n", threads);
    return 1;
}

int main(void) {
    static const int counts[] = {1, 2, 3, 8};
    size_t c;
    int failed = 0;
    aotc_pool *pool = NULL;
    failed |= check_counts(NULL, 1);
    for (c = 0; c < sizeof counts / sizeof counts[0] && !failed; ++c) {
        if (aotc_pool_create(&pool, counts[c]) != AOTC_OK) { printf("FAIL create %d\n", counts[c]); return 1; }
        failed |= check_counts(pool, counts[c]);
        if (counts[c] > 1 && !failed) failed |= check_hold(pool, counts[c], 1);
        if (counts[c] > 1 && !failed) failed |= check_hold(pool, counts[c], 0);
        aotc_pool_destroy(pool);
    }
    if (!failed) printf("OK\n");
    return failed;
}
"""


@pytest.mark.parametrize(
    "flags",
    [["-O2"],
     ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
     ["-O1", "-g", "-fsanitize=thread"],
     ["-O1", "-g", "-fsanitize=thread", "-DAOTC_SPIN_NS=0"]],  # every wait goes to sleep
    ids=["plain", "asan-ubsan", "tsan", "tsan-nospin"],
)
def test_pool_runs_each_iteration_once_and_rebalances(tmp_path: Path, flags: list[str]) -> None:
    exe = compile_c(tmp_path, "pool_split", POOL_SPLIT_TEST, ["aotc_runtime.c", "aotc_pool.c"],
                    flags)
    run_sanitized(exe, flags)


def test_bundle_outputs_identical_at_any_thread_count(tmp_path: Path) -> None:
    """Chunks go to whichever thread claims them first, so each run splits the work differently:
    repeated runs at 1, 2, 3 and 8 threads (more threads than cores) must all give the same bits."""
    # resnet_tiny at 128x128: at 32x32 its kernels are too small to be run in parallel
    model = onnx.load(str(SAMPLE_MODELS["resnet_tiny"]))
    for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], (128, 128), strict=True):
        dim.dim_value = size
    del model.graph.value_info[:]
    path = tmp_path / "resnet_128.onnx"
    onnx.save(model, str(path))
    d = tmp_path / "bundle"
    optimize_model(path, d, input_shapes=[])
    assert (d / "model_kernels.ll").read_text().count("call void @aotc_parallel_for") >= 4
    build_bundle(d, target="shared")
    inits = {i.name for i in model.graph.initializer}
    arrays = random_inputs(path, seed=3)
    inputs = [arrays[i.name] for i in model.graph.input if i.name not in inits]
    with LoadedBundle(d) as b:
        b.create(threads=1)
        want = b.run(inputs)
        b.destroy()
        for g, w in zip(want, ort_outputs(model, inputs), strict=True):
            assert_close(g, w)
        for threads in (1, 2, 3, 8):
            b.create(threads=threads)
            assert b.num_threads == threads
            for _ in range(15):
                for g, w in zip(b.run(inputs), want, strict=True):
                    np.testing.assert_array_equal(g, w)
            b.destroy()
