/* aotc_runtime.c: status messages, the executor that walks a bundle's step table, argument and
 * CPU checks, and the context (thread pool + workspace) behind NAME_create. */
#define _POSIX_C_SOURCE 200809L
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* sysconf(_SC_NPROCESSORS_ONLN) */
#endif

#include "aotc_runtime.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* A workspace of at least this many bytes is allocated in whole 2 MiB huge pages (where the
 * kernel grants them): a convolution over 56x56 planes reads one 4 KiB page per input channel
 * and k step, more pages than the first-level TLB holds; ResNet-50 ran 2 % faster. */
#define AOTC_HUGE_PAGE ((size_t)2 << 20)

struct aotc_context {
    const aotc_model *model;
    const unsigned char *weights;
    aotc_pool *pool;
    void *workspace; /* model->desc->workspace_size bytes, AOTC_WORKSPACE_ALIGN aligned */
    int num_threads;
};

const char *aotc_status_message(int status) {
    switch (status) {
    case AOTC_OK: return "ok";
    case AOTC_ERR_NULL_ARGUMENT: return "a required pointer argument (or an input/output buffer) is NULL";
    case AOTC_ERR_BAD_SIZE: return "a size or shape does not match the model";
    case AOTC_ERR_MISALIGNED_WORKSPACE: return "the workspace is not aligned to the model's WORKSPACE_ALIGN bytes";
    case AOTC_ERR_UNSUPPORTED_CPU: return "this CPU lacks an instruction set extension the model's kernels were compiled for";
    case AOTC_ERR_OUT_OF_MEMORY: return "out of memory while creating the context";
    case AOTC_ERR_THREAD: return "could not start the worker threads";
    case AOTC_ERR_BAD_ARGUMENT: return "an argument is out of range (e.g. a negative thread count)";
    case AOTC_ERR_KERNEL: return "a kernel reported an error";
    case AOTC_ERR_INTERNAL: return "internal error: inconsistent generated tables";
    case AOTC_ERR_MISALIGNED_WEIGHTS: return "the weights are not aligned to the model's WEIGHTS_ALIGN bytes";
    case AOTC_ERR_NO_DEVICE: return "no GPU device (or driver) found, or none matches the device chosen";
    case AOTC_ERR_DEVICE: return "the GPU device's API failed (see the context's message)";
    case AOTC_ERR_INPUT_VALUE: return "an input parameter's value differs from the one the model was compiled for (its declared shapes fix it; see the header)";
    default: return "unknown status code";
    }
}

/* Where a reference points at the iterations `iter` of the loops around it; NULL when the table
 * is inconsistent. */
static void *resolve(const aotc_ref *r, const int64_t *iter, unsigned char *arena,
                     const unsigned char *weights, const void *const *inputs,
                     void *const *outputs) {
    int64_t off = r->offset, i = 0;
    unsigned char *base;
    if (r->loop >= AOTC_MAX_LOOP_DEPTH) return NULL;
    if (r->loop >= 0) {
        i = iter[r->loop];
        if (r->odd_offset >= 0 && (i & 1) != 0) {
            if (r->storage != AOTC_REF_ARENA) return NULL;
            off = r->odd_offset;
        }
    }
    switch (r->storage) {
    case AOTC_REF_ARENA: base = arena + off; break;
    case AOTC_REF_WEIGHT: base = (unsigned char *)(uintptr_t)(weights + off); break;
    case AOTC_REF_INPUT: base = (unsigned char *)(uintptr_t)inputs[off]; break;
    case AOTC_REF_OUTPUT: base = (unsigned char *)outputs[off]; break;
    default: return NULL;
    }
    /* (in integers: the walk of a reversed slice starts past a buffer's start) */
    return (void *)((uintptr_t)base + (uintptr_t)(r->shift + i * r->stride));
}

int aotc_execute(void *ctx, const aotc_step *steps, int32_t num_steps, const aotc_ref *refs,
                 unsigned char *arena, const unsigned char *weights, const void *const *inputs,
                 void *const *outputs, const int64_t *dims) {
    void *bufs[AOTC_MAX_ARGS];
    int64_t iter[AOTC_MAX_LOOP_DEPTH] = {0};
    int32_t s = 0, a;
    while (s < num_steps) {
        const aotc_step *step = &steps[s];
        const aotc_ref *ref = &refs[step->first_ref];
        int32_t rc, next = s + 1;
        int truth = 1;
        if (step->num_args < 0 || step->num_args > AOTC_MAX_ARGS) return AOTC_ERR_INTERNAL;
        for (a = 0; a < step->num_args; ++a) {
            bufs[a] = resolve(&ref[a], iter, arena, weights, inputs, outputs);
            if (bufs[a] == NULL) return AOTC_ERR_INTERNAL;
        }
        if (step->kind != AOTC_STEP_KERNEL) {
            /* (a target one past the table ends the run; a loop's names a row) */
            if (step->target < 0 || step->target > num_steps) return AOTC_ERR_INTERNAL;
            if ((step->kind == AOTC_STEP_LOOP || step->kind == AOTC_STEP_LOOP_END) &&
                step->target == num_steps)
                return AOTC_ERR_INTERNAL;
            if (step->num_args > 0) truth = *(const unsigned char *)bufs[0] != 0;
        }
        switch (step->kind) {
        case AOTC_STEP_KERNEL:
            rc = step->kernel(ctx, bufs, dims);
            if (rc != 0) return AOTC_ERR_KERNEL;
            break;
        case AOTC_STEP_LOOP:
            if (step->level < 0 || step->level >= AOTC_MAX_LOOP_DEPTH) return AOTC_ERR_INTERNAL;
            iter[step->level] = 0;
            if (step->count <= 0 || !truth) /* past the end and its odd-exit steps */
                next = step->target + 1 + (int32_t)steps[step->target].count;
            break;
        case AOTC_STEP_LOOP_END: {
            const aotc_step *open = &steps[step->target];
            int64_t done;
            if (step->level < 0 || step->level >= AOTC_MAX_LOOP_DEPTH) return AOTC_ERR_INTERNAL;
            done = iter[step->level] + 1;
            if (done < open->count && truth) {
                iter[step->level] = done;
                next = step->target + 1;
            } else if (done % 2 == 0) {
                next = s + 1 + (int32_t)step->count;
            }
            break;
        }
        case AOTC_STEP_IF:
            if (!truth) next = step->target;
            break;
        case AOTC_STEP_JUMP: next = step->target; break;
        case AOTC_STEP_CHECK:
            if (step->num_args != 1) return AOTC_ERR_INTERNAL;
            if (!truth) return AOTC_ERR_INPUT_VALUE;
            break;
        default: return AOTC_ERR_INTERNAL;
        }
        s = next;
    }
    return AOTC_OK;
}

/* NULL input/output arrays or entries. */
static int check_call(const aotc_model *m, const void *const *inputs, void *const *outputs) {
    int32_t i;
    if (m->desc->num_inputs > 0 && inputs == NULL) return AOTC_ERR_NULL_ARGUMENT;
    if (m->desc->num_outputs > 0 && outputs == NULL) return AOTC_ERR_NULL_ARGUMENT;
    for (i = 0; i < m->desc->num_inputs; ++i)
        if (inputs[i] == NULL) return AOTC_ERR_NULL_ARGUMENT;
    for (i = 0; i < m->desc->num_outputs; ++i)
        if (outputs[i] == NULL) return AOTC_ERR_NULL_ARGUMENT;
    return AOTC_OK;
}

int aotc_check_weights(const aotc_model *m, const void *weights, uint64_t size) {
    if (m == NULL) return AOTC_ERR_NULL_ARGUMENT;
    if (size != m->weights_size) return AOTC_ERR_BAD_SIZE;
    if (weights == NULL && size > 0) return AOTC_ERR_NULL_ARGUMENT;
    if ((uintptr_t)weights % AOTC_WEIGHTS_ALIGN != 0) return AOTC_ERR_MISALIGNED_WEIGHTS;
    return AOTC_OK;
}

int aotc_check_dims(const aotc_model *m, const int64_t *dims, const int64_t **out_dims) {
    const aotc_model_desc *d = m->desc;
    int32_t k;
    *out_dims = d->num_dims > 0 ? (dims != NULL ? dims : d->dims_max) : NULL;
    for (k = 0; dims != NULL && k < d->num_dims; ++k)
        if (dims[k] < d->dims_min[k] || dims[k] > d->dims_max[k]) return AOTC_ERR_BAD_SIZE;
    return AOTC_OK;
}

int aotc_model_run(const aotc_model *m, const unsigned char *weights, const void *const *inputs,
                   void *const *outputs, void *workspace) {
    return aotc_model_run_dims(m, weights, NULL, inputs, outputs, workspace);
}

int aotc_model_run_dims(const aotc_model *m, const unsigned char *weights, const int64_t *dims,
                        const void *const *inputs, void *const *outputs, void *workspace) {
    const int64_t *run_dims = NULL;
    int rc;
    if (m == NULL) return AOTC_ERR_NULL_ARGUMENT;
    rc = aotc_check_dims(m, dims, &run_dims);
    if (rc != AOTC_OK) return rc;
    rc = check_call(m, inputs, outputs);
    if (rc != AOTC_OK) return rc;
    if (workspace == NULL && m->desc->workspace_size > 0) return AOTC_ERR_NULL_ARGUMENT;
    if ((uintptr_t)workspace % AOTC_WORKSPACE_ALIGN != 0) return AOTC_ERR_MISALIGNED_WORKSPACE;
    if (m->cpu_missing != NULL && m->cpu_missing() != NULL) return AOTC_ERR_UNSUPPORTED_CPU;
    return aotc_execute(NULL, m->steps, m->num_steps, m->refs, (unsigned char *)workspace,
                        weights, inputs, outputs, run_dims);
}

int aotc_model_output_shape(const aotc_model *m, const void *workspace, int32_t output,
                            int64_t *shape) {
    const aotc_tensor_desc *t;
    int32_t k;
    if (m == NULL || shape == NULL) return AOTC_ERR_NULL_ARGUMENT;
    if (output < 0 || output >= m->desc->num_outputs) return AOTC_ERR_BAD_ARGUMENT;
    t = &m->desc->outputs[output];
    for (k = 0; k < t->rank; ++k) shape[k] = t->shape[k];
    if (m->output_length_offsets != NULL && m->output_length_offsets[output] >= 0) {
        int32_t axis = m->desc->output_computed_axes[output];
        int64_t length;
        if (workspace == NULL) return AOTC_ERR_NULL_ARGUMENT;
        if (axis < 0 || axis >= t->rank) return AOTC_ERR_INTERNAL;
        memcpy(&length, (const unsigned char *)workspace + m->output_length_offsets[output],
               sizeof length);
        if (length < 0 || length > t->shape[axis]) return AOTC_ERR_INTERNAL;
        shape[axis] = length;
    }
    return AOTC_OK;
}

static int parse_threads(const char *text, int *out) {
    char *end = NULL;
    long v;
    if (text == NULL || *text == '\0') return 0;
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1) return 0;
    *out = v > AOTC_MAX_THREADS ? AOTC_MAX_THREADS : (int)v;
    return 1;
}

int aotc_resolve_num_threads(int requested, int compile_default, int *out_num_threads) {
    long online;
    int n;
    if (out_num_threads == NULL) return AOTC_ERR_NULL_ARGUMENT;
    if (requested < 0) return AOTC_ERR_BAD_ARGUMENT;
    if (requested > 0) {
        *out_num_threads = requested > AOTC_MAX_THREADS ? AOTC_MAX_THREADS : requested;
        return AOTC_OK;
    }
    if (parse_threads(getenv("AOTC_NUM_THREADS"), &n)) {
        *out_num_threads = n;
        return AOTC_OK;
    }
    if (compile_default > 0) {
        *out_num_threads = compile_default > AOTC_MAX_THREADS ? AOTC_MAX_THREADS : compile_default;
        return AOTC_OK;
    }
    online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    *out_num_threads = online > AOTC_MAX_THREADS ? AOTC_MAX_THREADS : (int)online;
    return AOTC_OK;
}

/* posix_memalign of `size` bytes; a large workspace whole huge pages, advised as such (a hint:
 * without transparent huge pages it stays in small pages). */
static int allocate_workspace(void **out, size_t size) {
    if (size < AOTC_HUGE_PAGE) return posix_memalign(out, AOTC_WORKSPACE_ALIGN, size);
    size = (size + AOTC_HUGE_PAGE - 1) / AOTC_HUGE_PAGE * AOTC_HUGE_PAGE;
    if (posix_memalign(out, AOTC_HUGE_PAGE, size) != 0) return -1;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(*out, size, MADV_HUGEPAGE);
#endif
    return 0;
}

int aotc_context_create(const aotc_model *m, const unsigned char *weights, aotc_context **out_ctx,
                        int num_threads) {
    aotc_context *c;
    size_t size;
    int rc, threads = 1;
    if (out_ctx == NULL) return AOTC_ERR_NULL_ARGUMENT;
    *out_ctx = NULL;
    if (m == NULL) return AOTC_ERR_NULL_ARGUMENT;
    rc = aotc_resolve_num_threads(num_threads, m->default_num_threads, &threads);
    if (rc != AOTC_OK) return rc;
    if (m->cpu_missing != NULL && m->cpu_missing() != NULL) return AOTC_ERR_UNSUPPORTED_CPU;
    c = (aotc_context *)calloc(1, sizeof *c);
    if (c == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    c->model = m;
    c->weights = weights;
    c->num_threads = threads;
    size = (size_t)m->desc->workspace_size;
    if (size == 0) size = AOTC_WORKSPACE_ALIGN;
    if (allocate_workspace(&c->workspace, size) != 0) {
        free(c);
        return AOTC_ERR_OUT_OF_MEMORY;
    }
    rc = aotc_pool_create(&c->pool, threads);
    if (rc != AOTC_OK) {
        free(c->workspace);
        free(c);
        return rc;
    }
    *out_ctx = c;
    return AOTC_OK;
}

int aotc_context_run(aotc_context *c, const void *const *inputs, void *const *outputs) {
    return aotc_context_run_dims(c, NULL, inputs, outputs);
}

int aotc_context_run_dims(aotc_context *c, const int64_t *dims, const void *const *inputs,
                          void *const *outputs) {
    const int64_t *run_dims = NULL;
    int rc;
    if (c == NULL) return AOTC_ERR_NULL_ARGUMENT;
    rc = aotc_check_dims(c->model, dims, &run_dims);
    if (rc != AOTC_OK) return rc;
    rc = check_call(c->model, inputs, outputs);
    if (rc != AOTC_OK) return rc;
    return aotc_execute(c->pool, c->model->steps, c->model->num_steps, c->model->refs,
                        (unsigned char *)c->workspace, c->weights, inputs, outputs, run_dims);
}

void aotc_context_destroy(aotc_context *c) {
    if (c == NULL) return;
    aotc_pool_destroy(c->pool);
    free(c->workspace);
    free(c);
}

int aotc_context_num_threads(const aotc_context *c) { return c == NULL ? 0 : c->num_threads; }

void aotc_context_set_outside(aotc_context *c, aotc_outside_for_fn fn, void *user) {
    if (c != NULL) aotc_pool_set_outside(c->pool, fn, user);
}

int aotc_context_output_shape(const aotc_context *c, int32_t output, int64_t *shape) {
    if (c == NULL) return AOTC_ERR_NULL_ARGUMENT;
    return aotc_model_output_shape(c->model, c->workspace, output, shape);
}

void *aotc_context_workspace(const aotc_context *c) { return c == NULL ? NULL : c->workspace; }
