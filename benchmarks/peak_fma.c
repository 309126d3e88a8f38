/* Peak fp32 FMA throughput: NACC independent vector FMA chains per thread (see peak.py).
 *
 *   peak_fma THREADS SECONDS  ->  prints "lanes nacc threads flops wall_s gflops_on_cpu"
 *
 * gflops_on_cpu sums, over the threads, each thread's FLOPs / its own CPU time
 * (CLOCK_THREAD_CPUTIME_ID): the rate of the cores while they run this loop, which stays right
 * when other processes take turns on the same cores (wall time would count their turns too).
 *
 * Built by peak.py with `cc -O2 -march=native -pthread`. The vector width is the widest the
 * compiler targets (AVX-512: 16 lanes, AVX/AVX2: 8, otherwise 4), through GCC vector extensions so
 * the same file serves x86 and AArch64. Each chain is acc = acc * m + a with m, a loop-invariant:
 * one FMA per chain per iteration, all chains independent, so the core is limited by FMA
 * throughput as long as NACC >= latency x FMAs per cycle (4 x 2 = 8 on Skylake-SP and later; 12
 * leaves headroom and fits the 16 AVX2 registers, 24 uses AVX-512's 32). -DFORCE_LANES=8 measures
 * 256-bit FMAs on an AVX-512 machine (the frequency licence differs).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(FORCE_LANES)
#define LANES FORCE_LANES
#define NACC 12
#elif defined(__AVX512F__)
#define LANES 16
#define NACC 24
#elif defined(__AVX__)
#define LANES 8
#define NACC 12
#else
#define LANES 4
#define NACC 12
#endif

typedef float vf __attribute__((vector_size(LANES * 4)));

#define ITERS_PER_CHECK 100000L

struct job {
    double seconds;
    double cpu_seconds;
    long iters;
    float sink;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *spin(void *arg) {
    struct job *job = arg;
    vf acc[NACC];
    /* volatile loads: the optimiser cannot treat m and a as constants it could fold */
    volatile float mv = 0.999999f, av = 1e-6f;
    vf m, a;
    for (int l = 0; l < LANES; l++) {
        m[l] = mv;
        a[l] = av;
    }
    for (int k = 0; k < NACC; k++)
        for (int l = 0; l < LANES; l++) acc[k][l] = (float)(k + l);
    double c0 = thread_cpu(), t0 = now(), t1;
    long iters = 0;
    do {
        for (long i = 0; i < ITERS_PER_CHECK; i++) {
#pragma GCC unroll 32
            for (int k = 0; k < NACC; k++) acc[k] = acc[k] * m + a;
        }
        iters += ITERS_PER_CHECK;
        t1 = now();
    } while (t1 - t0 < job->seconds);
    float s = 0;
    for (int k = 0; k < NACC; k++)
        for (int l = 0; l < LANES; l++) s += acc[k][l];
    job->sink = s;
    job->iters = iters;
    job->seconds = t1 - t0;
    job->cpu_seconds = thread_cpu() - c0;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    double seconds = argc > 2 ? atof(argv[2]) : 0.5;
    if (threads < 1) threads = 1;
    pthread_t *tid = calloc(threads, sizeof *tid);
    struct job *jobs = calloc(threads, sizeof *jobs);
    double t0 = now();
    for (int t = 0; t < threads; t++) {
        jobs[t].seconds = seconds;
        pthread_create(&tid[t], NULL, spin, &jobs[t]);
    }
    double flops = 0, on_cpu = 0, sink = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        double f = 2.0 * LANES * NACC * (double)jobs[t].iters;
        flops += f;
        on_cpu += f / jobs[t].cpu_seconds / 1e9;
        sink += jobs[t].sink;
    }
    double wall = now() - t0;
    printf("%d %d %d %.6e %.6f %.3f %g\n", LANES, NACC, threads, flops, wall, on_cpu, sink);
    free(tid);
    free(jobs);
    return 0;
}
