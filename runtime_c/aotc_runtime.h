/* aotc_runtime.h: what a generated bundle's NAME.c links against: the kernel ABI, the thread
 * pool, the executor that walks the step table, and the context behind NAME_create.
 *
 * Not part of a bundle's public API (applications include NAME.h only). No function here keeps
 * global mutable state: all state lives in a caller-owned workspace or in a context.
 */
#ifndef AOTC_RUNTIME_H
#define AOTC_RUNTIME_H

#include "aotc_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runtime symbols stay inside a bundle's shared library; build with -DAOTC_INTERNAL= to export
 * them (e.g. to give a JIT aotc_parallel_for). */
#ifndef AOTC_INTERNAL
#if defined(__GNUC__) && !defined(_WIN32)
#define AOTC_INTERNAL __attribute__((visibility("hidden")))
#else
#define AOTC_INTERNAL
#endif
#endif

#define AOTC_MAX_ARGS 64        /* most buffer arguments of one kernel (checked by aotc) */
#define AOTC_WORKSPACE_ALIGN 64 /* alignment of every workspace and arena offset */
#define AOTC_WEIGHTS_ALIGN 64   /* alignment of the weights and of every offset into them */
#define AOTC_MAX_THREADS 256

/* Kernel ABI: bufs holds one pointer per argument (inputs, outputs, scratch); 0 = ok. */
typedef int32_t (*aotc_kernel_fn)(void *ctx, void **bufs, const int64_t *dims);
typedef void (*aotc_body_fn)(void *env, int64_t lo, int64_t hi);

/* Storage kinds of a buffer reference. */
enum aotc_storage { AOTC_REF_ARENA = 0, AOTC_REF_WEIGHT = 1, AOTC_REF_INPUT = 2, AOTC_REF_OUTPUT = 3 };

/* A kernel argument: arena/weight byte offset, or input/output index. Inside a loop a reference
 * may move with the iteration i of the loop at depth `loop` (-1: it does not): it points
 * shift + i * stride bytes after its start (a scan slice), and an arena reference with
 * odd_offset >= 0 starts at odd_offset instead of offset on odd iterations (the two buffers of a
 * carried value, read and written in turn). */
typedef struct aotc_ref {
    int32_t storage; /* enum aotc_storage */
    int32_t loop;
    int64_t offset;
    int64_t shift;
    int64_t stride;
    int64_t odd_offset;
} aotc_ref;

#define AOTC_MAX_LOOP_DEPTH 8 /* most loops nested in one another (checked by aotc) */

/* What a step does. Its references (refs[first_ref] .., num_args of them) are the kernel's
 * arguments, or the one bool a control step reads. */
enum aotc_step_kind {
    AOTC_STEP_KERNEL = 0,   /* kernel(ctx, bufs, dims) */
    AOTC_STEP_LOOP = 1,     /* a loop at depth `level` of `count` iterations: its body follows,
                               `target` is its LOOP_END; with a reference, skipped when false */
    AOTC_STEP_LOOP_END = 2, /* back to `target` (its LOOP) while iterations are left and the
                               reference (if any) is true; after the loop the `count` steps
                               that follow run only when it ran an odd number of iterations */
    AOTC_STEP_IF = 3,       /* go on at `target` (the else branch) when the reference is false */
    AOTC_STEP_JUMP = 4,     /* go on at `target` (the end of a then branch) */
    AOTC_STEP_CHECK = 5     /* stop with AOTC_ERR_INPUT_VALUE when the reference is false */
};

/* One executor step. */
typedef struct aotc_step {
    aotc_kernel_fn kernel; /* AOTC_STEP_KERNEL; NULL otherwise */
    int32_t num_args;
    int32_t first_ref;
    int32_t kind; /* enum aotc_step_kind */
    int32_t level;
    int32_t target;
    int64_t count;
} aotc_step;

/* Everything a generated NAME.c hands to the runtime: constant tables only. The weights are
 * passed beside it (linked in, or the caller's: NAME_create_with_weights). */
typedef struct aotc_model {
    const aotc_model_desc *desc;
    const aotc_step *steps;
    int32_t num_steps;
    const aotc_ref *refs;
    uint64_t weights_size; /* bytes of weights the kernels read */
    /* NULL when the running CPU has every feature the kernels need, else the first it lacks */
    const char *(*cpu_missing)(void);
    int32_t default_num_threads; /* compile-time default; 0 = all online cores */
    /* per output, the workspace byte offset of the int64 its run stores its computed length in
     * (desc->output_computed_axes; -1: none); NULL when no output has one */
    const int64_t *output_length_offsets;
} aotc_model;

const char *aotc_status_message(int status) AOTC_INTERNAL;

/* ---- thread pool (aotc_pool.c) ---- */
typedef struct aotc_pool aotc_pool;

/* Part i of [0, n) cut into `parts` contiguous ranges whose sizes differ by at most one. */
void aotc_range_part(int64_t n, int64_t parts, int64_t i, int64_t *lo, int64_t *hi) AOTC_INTERNAL;

/* Starts num_threads - 1 workers (the caller of aotc_parallel_for is the other one). */
int aotc_pool_create(aotc_pool **out_pool, int num_threads) AOTC_INTERNAL;
/* Stops and joins the workers; NULL is a no-op. */
void aotc_pool_destroy(aotc_pool *pool) AOTC_INTERNAL;
int aotc_pool_num_threads(const aotc_pool *pool) AOTC_INTERNAL;

/* A parallel loop run by threads the pool does not own (a host's thread pool): it must call
 * body(env, lo, hi) over disjoint ranges that cover [0, n) and return when all have returned. */
typedef void (*aotc_outside_for_fn)(void *user, aotc_body_fn body, void *env, int64_t n);
/* From now on the pool hands its loops to fn(user, ...) (NULL: back to its own threads). Call it
 * only between loops. */
void aotc_pool_set_outside(aotc_pool *pool, aotc_outside_for_fn fn, void *user) AOTC_INTERNAL;

/* Splits [0, n) into contiguous chunks (a few per thread) that the threads, the calling one
 * included, claim one at a time until none is left; returns when all are done. ctx == NULL (or
 * a nested call from inside a body) runs body(env, 0, n). */
void aotc_parallel_for(void *ctx, aotc_body_fn body, void *env, int64_t n) AOTC_INTERNAL;

/* ---- executor and contexts (aotc_runtime.c) ---- */

/* Runs the step table (kernels, loops and branches: enum aotc_step_kind); stops at the first
 * kernel that returns non-zero. Loop iterations live on its stack: nothing is allocated. Every
 * kernel gets `dims`, the run-time dimensions' values (NULL for a static model). */
int aotc_execute(void *ctx, const aotc_step *steps, int32_t num_steps, const aotc_ref *refs,
                 unsigned char *arena, const unsigned char *weights, const void *const *inputs,
                 void *const *outputs, const int64_t *dims) AOTC_INTERNAL;

/* AOTC_OK when `dims` (desc->num_dims values; NULL: each at its maximum) lie in their ranges,
 * else AOTC_ERR_BAD_SIZE; *out_dims is what kernels get. */
int aotc_check_dims(const aotc_model *model, const int64_t *dims, const int64_t **out_dims) AOTC_INTERNAL;

/* AOTC_OK when `weights` can serve as the model's weights: weights_size bytes (`size`),
 * AOTC_WEIGHTS_ALIGN-aligned, not NULL unless the model has none. */
int aotc_check_weights(const aotc_model *model, const void *weights, uint64_t size) AOTC_INTERNAL;

/* Checks the arguments and the CPU, then runs the model single-threaded in `workspace`. */
int aotc_model_run(const aotc_model *model, const unsigned char *weights,
                   const void *const *inputs, void *const *outputs, void *workspace) AOTC_INTERNAL;
/* aotc_model_run at the run-time dimensions `dims` (aotc_check_dims). */
int aotc_model_run_dims(const aotc_model *model, const unsigned char *weights, const int64_t *dims,
                        const void *const *inputs, void *const *outputs, void *workspace) AOTC_INTERNAL;

/* The shape (desc->outputs[output].rank entries) of output `output` after a run in `workspace`:
 * its descriptor's, with the length the run computed on its computed axis. AOTC_ERR_INTERNAL when
 * the workspace holds no length within the bound (no run has completed in it). */
int aotc_model_output_shape(const aotc_model *model, const void *workspace, int32_t output,
                            int64_t *shape) AOTC_INTERNAL;

/* requested > 0: that; else $AOTC_NUM_THREADS, else compile_default, else online cores. */
int aotc_resolve_num_threads(int requested, int compile_default, int *out_num_threads) AOTC_INTERNAL;

typedef struct aotc_context aotc_context;
/* A context running `model` with `weights` (checked by aotc_check_weights first). */
int aotc_context_create(const aotc_model *model, const unsigned char *weights,
                        aotc_context **out_ctx, int num_threads) AOTC_INTERNAL;
int aotc_context_run(aotc_context *ctx, const void *const *inputs, void *const *outputs) AOTC_INTERNAL;
/* aotc_context_run at the run-time dimensions `dims` (aotc_check_dims). */
int aotc_context_run_dims(aotc_context *ctx, const int64_t *dims, const void *const *inputs,
                          void *const *outputs) AOTC_INTERNAL;
/* aotc_model_output_shape after the context's last run. */
int aotc_context_output_shape(const aotc_context *ctx, int32_t output, int64_t *shape) AOTC_INTERNAL;
void aotc_context_destroy(aotc_context *ctx) AOTC_INTERNAL;
int aotc_context_num_threads(const aotc_context *ctx) AOTC_INTERNAL;
/* aotc_pool_set_outside for the context's pool (between runs). */
void aotc_context_set_outside(aotc_context *ctx, aotc_outside_for_fn fn, void *user) AOTC_INTERNAL;
/* The context's workspace (for diagnostics and tests: where it lies, how it is paged). */
void *aotc_context_workspace(const aotc_context *ctx) AOTC_INTERNAL;

#ifdef __cplusplus
}
#endif

#endif /* AOTC_RUNTIME_H */
