/* Probes of this machine for `aotc calibrate` (targets/cpu/calibrate.py) and benchmarks/peak.py.
 *
 *   probes fma THREADS SECONDS         -> "lanes nacc threads flops wall_s gflops_on_cpu sink"
 *   probes read BYTES THREADS SECONDS  -> "bytes threads gbytes_per_s_on_cpu sink"
 *
 * Rates divide each thread's work by its own CPU time (CLOCK_THREAD_CPUTIME_ID) and sum over
 * the threads: on a shared machine other processes take turns on the cores, and wall time
 * would count their turns too.
 *
 * fma: NACC independent vector FMA chains per thread, acc = acc * m + a with m, a
 * loop-invariant: one FMA per chain per iteration, all chains independent, so the core is
 * limited by FMA throughput as long as NACC >= latency x FMAs per cycle (4 x 2 = 8 on
 * Skylake-SP and later; 12 leaves headroom and fits the 16 AVX2 registers, 24 uses AVX-512's
 * 32). -DFORCE_LANES=8 measures 256-bit FMAs on an AVX-512 machine (the frequency licence
 * differs).
 *
 * read: each thread sums its own buffer of BYTES (vector loads into 8 independent sums) over
 * and over: the read bandwidth of the level a working set of that size stays in.
 *
 * Built with `cc -O2 -march=native -pthread`. The vector width is the widest the compiler
 * targets (AVX-512: 16 lanes, AVX/AVX2: 8, otherwise 4), through GCC vector extensions so the
 * same file serves x86 and AArch64.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    size_t bytes;  /* read: the buffer's size */
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

#define READ_SUMS 8

static void *stream(void *arg) {
    struct job *job = arg;
    size_t n = job->bytes / sizeof(vf) / READ_SUMS * READ_SUMS;
    if (n < READ_SUMS) n = READ_SUMS;
    vf *buf = aligned_alloc(64, n * sizeof(vf));
    if (!buf) return NULL;
    for (size_t i = 0; i < n; i++)
        for (int l = 0; l < LANES; l++) buf[i][l] = (float)(i % 7) * 1e-3f;
    vf sum[READ_SUMS];
    memset(sum, 0, sizeof sum);
    /* passes between clock reads: about 4 MiB read, so reading the clock costs nothing */
    long per_check = (long)((4u << 20) / (n * sizeof(vf))) + 1;
    double c0 = thread_cpu(), t0 = now(), t1;
    long passes = 0;
    do {
        for (long p = 0; p < per_check; p++)
            for (size_t i = 0; i < n; i += READ_SUMS) {
#pragma GCC unroll 8
                for (int k = 0; k < READ_SUMS; k++) sum[k] += buf[i + k];
            }
        passes += per_check;
        t1 = now();
    } while (t1 - t0 < job->seconds);
    float s = 0;
    for (int k = 0; k < READ_SUMS; k++)
        for (int l = 0; l < LANES; l++) s += sum[k][l];
    job->sink = s;
    job->iters = passes;
    job->bytes = n * sizeof(vf);
    job->seconds = t1 - t0;
    job->cpu_seconds = thread_cpu() - c0;
    free(buf);
    return NULL;
}

static int usage(void) {
    fprintf(stderr, "usage: probes fma THREADS SECONDS | probes read BYTES THREADS SECONDS\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    int reading = strcmp(argv[1], "read") == 0;
    if (!reading && strcmp(argv[1], "fma") != 0) return usage();
    if (argc != (reading ? 5 : 4)) return usage();
    size_t bytes = reading ? strtoull(argv[2], NULL, 10) : 0;
    int threads = atoi(argv[reading ? 3 : 2]);
    double seconds = atof(argv[reading ? 4 : 3]);
    if (threads < 1) threads = 1;
    pthread_t *tid = calloc(threads, sizeof *tid);
    struct job *jobs = calloc(threads, sizeof *jobs);
    if (!tid || !jobs) return 1;
    double t0 = now();
    for (int t = 0; t < threads; t++) {
        jobs[t].seconds = seconds;
        jobs[t].bytes = bytes;
        pthread_create(&tid[t], NULL, reading ? stream : spin, &jobs[t]);
    }
    double work = 0, on_cpu = 0, sink = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (jobs[t].cpu_seconds <= 0) return 1;
        double w = reading ? (double)jobs[t].bytes * (double)jobs[t].iters
                           : 2.0 * LANES * NACC * (double)jobs[t].iters;
        work += w;
        on_cpu += w / jobs[t].cpu_seconds / 1e9;
        sink += jobs[t].sink;
    }
    double wall = now() - t0;
    if (reading)
        printf("%zu %d %.3f %g\n", jobs[0].bytes, threads, on_cpu, sink);
    else
        printf("%d %d %d %.6e %.6f %.3f %g\n", LANES, NACC, threads, work, wall, on_cpu, sink);
    free(tid);
    free(jobs);
    return 0;
}
