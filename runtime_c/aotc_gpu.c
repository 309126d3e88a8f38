/* aotc_gpu.c: a GPU bundle's device context over either API (aotc_gpu_api: aotc_opencl.c,
 * aotc_cuda.c): argument checks, the device choice, the launch-size check, the run (inputs in,
 * every step's launches with their buffers and byte offsets, outputs out, wait) and messages. */
#include "aotc_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t aotc_gpu_num_buffers(const aotc_gpu_model *m) {
    return AOTC_GPU_FIRST_INPUT + m->model->desc->num_inputs + m->model->desc->num_outputs;
}

uint64_t aotc_gpu_buffer_size(const aotc_gpu_model *m, int32_t index) {
    const aotc_model_desc *d = m->model->desc;
    uint64_t size;
    if (index == AOTC_GPU_ARENA) size = d->workspace_size;
    else if (index == AOTC_GPU_WEIGHTS) size = m->model->weights_size;
    else if (index < AOTC_GPU_FIRST_INPUT + d->num_inputs) size = d->inputs[index - AOTC_GPU_FIRST_INPUT].num_bytes;
    else size = d->outputs[index - AOTC_GPU_FIRST_INPUT - d->num_inputs].num_bytes;
    return size > 0 ? size : 1;
}

void *aotc_gpu_buffer_override(const aotc_gpu_context *c, int32_t index) {
    const aotc_model_desc *d = c->m->model->desc;
    int32_t first_output = AOTC_GPU_FIRST_INPUT + d->num_inputs;
    if (c->device_inputs != NULL && index >= AOTC_GPU_FIRST_INPUT && index < first_output)
        return c->device_inputs[index - AOTC_GPU_FIRST_INPUT];
    if (c->device_outputs != NULL && index >= first_output && index < first_output + d->num_outputs)
        return c->device_outputs[index - first_output];
    return NULL;
}

int aotc_gpu_fail(aotc_gpu_context *c, int status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, args);
    va_end(args);
    c->error[sizeof c->error - 1] = '\0';
    return status;
}

/* The buffer index and byte offset a reference names; AOTC_ERR_INTERNAL when out of range. */
static int resolve(const aotc_gpu_model *m, const aotc_ref *r, int32_t *buffer, int64_t *offset) {
    const aotc_model_desc *d = m->model->desc;
    *offset = 0;
    if (r->loop >= 0) return AOTC_ERR_INTERNAL; /* GPU programs have no loops */
    switch (r->storage) {
    case AOTC_REF_ARENA:
    case AOTC_REF_WEIGHT:
        *buffer = r->storage == AOTC_REF_ARENA ? AOTC_GPU_ARENA : AOTC_GPU_WEIGHTS;
        *offset = r->offset;
        if (r->offset < 0 || (uint64_t)r->offset > aotc_gpu_buffer_size(m, *buffer)) return AOTC_ERR_INTERNAL;
        return AOTC_OK;
    case AOTC_REF_INPUT:
        if (r->offset < 0 || r->offset >= d->num_inputs) return AOTC_ERR_INTERNAL;
        *buffer = AOTC_GPU_FIRST_INPUT + (int32_t)r->offset;
        return AOTC_OK;
    case AOTC_REF_OUTPUT:
        if (r->offset < 0 || r->offset >= d->num_outputs) return AOTC_ERR_INTERNAL;
        *buffer = AOTC_GPU_FIRST_INPUT + d->num_inputs + (int32_t)r->offset;
        return AOTC_OK;
    default: return AOTC_ERR_INTERNAL;
    }
}

/* Every launch's entry point exists and takes blocks of its size on this device. */
static int check_launches(aotc_gpu_context *c) {
    const aotc_gpu_model *m = c->m;
    int32_t s, l;
    int rc;
    for (s = 0; s < m->num_steps; ++s) {
        for (l = 0; l < m->steps[s].num_launches; ++l) {
            const aotc_gpu_launch *launch = &m->launches[m->steps[s].first_launch + l];
            int64_t most = 0;
            if (launch->function < 0 || launch->function >= m->num_functions || launch->threads <= 0)
                return AOTC_ERR_INTERNAL;
            rc = c->api->max_threads(c, launch->function, &most);
            if (rc != AOTC_OK) return rc;
            if (launch->threads > most)
                return aotc_gpu_fail(c, AOTC_ERR_DEVICE, "%s runs blocks of %d threads; %s allows %lld for it",
                                     m->functions[launch->function], (int)launch->threads,
                                     c->device_name, (long long)most);
        }
    }
    return AOTC_OK;
}

static int set_up(aotc_gpu_context *c, const unsigned char *weights, const aotc_gpu_options *options) {
    const char *choice = options != NULL ? options->device : NULL;
    int rc;
    if (choice == NULL || choice[0] == '\0') choice = getenv(c->api->device_env);
    if (choice != NULL && choice[0] == '\0') choice = NULL;
    rc = c->api->set_up(c, choice, weights, options);
    if (rc != AOTC_OK) return rc;
    if (c->api->begin != NULL && (rc = c->api->begin(c)) != AOTC_OK) return rc;
    rc = check_launches(c);
    if (c->api->end != NULL) c->api->end(c);
    return rc;
}

int aotc_gpu_create(const aotc_gpu_api *api, const aotc_gpu_model *m, const unsigned char *weights,
                    uint64_t weights_size, const aotc_gpu_options *options, aotc_gpu_context **out_ctx) {
    aotc_gpu_context *c;
    int rc;
    if (out_ctx == NULL || m == NULL || api == NULL) return AOTC_ERR_NULL_ARGUMENT;
    *out_ctx = NULL;
    rc = aotc_check_weights(m->model, weights, weights_size);
    if (rc != AOTC_OK) return rc;
    c = (aotc_gpu_context *)calloc(1, api->context_size);
    if (c == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    c->api = api;
    c->m = m;
    rc = set_up(c, weights, options);
    if (rc != AOTC_OK) {
        if (c->error[0] == '\0') aotc_gpu_fail(c, rc, "%s", aotc_status_message(rc));
        if (options != NULL && options->error != NULL && options->error_size > 0) {
            strncpy(options->error, c->error, options->error_size - 1);
            options->error[options->error_size - 1] = '\0';
        }
        aotc_gpu_destroy(c);
        return rc;
    }
    *out_ctx = c;
    return AOTC_OK;
}

static int check_run(const aotc_gpu_model *m, const void *const *inputs, void *const *outputs) {
    const aotc_model_desc *d = m->model->desc;
    int32_t i;
    if (d->num_inputs > 0 && inputs == NULL) return AOTC_ERR_NULL_ARGUMENT;
    if (d->num_outputs > 0 && outputs == NULL) return AOTC_ERR_NULL_ARGUMENT;
    for (i = 0; i < d->num_inputs; ++i)
        if (inputs[i] == NULL) return AOTC_ERR_NULL_ARGUMENT;
    for (i = 0; i < d->num_outputs; ++i)
        if (outputs[i] == NULL) return AOTC_ERR_NULL_ARGUMENT;
    return AOTC_OK;
}

static int launch_step(aotc_gpu_context *c, const aotc_gpu_step *step) {
    const aotc_gpu_model *m = c->m;
    int32_t buffers[AOTC_MAX_ARGS], a, l;
    int64_t offsets[AOTC_MAX_ARGS];
    int rc;
    if (step->num_args < 0 || step->num_args > AOTC_MAX_ARGS) return AOTC_ERR_INTERNAL;
    for (a = 0; a < step->num_args; ++a)
        if (resolve(m, &m->refs[step->first_ref + a], &buffers[a], &offsets[a]) != AOTC_OK)
            return AOTC_ERR_INTERNAL;
    for (l = 0; l < step->num_launches; ++l) {
        const aotc_gpu_launch *launch = &m->launches[step->first_launch + l];
        if (launch->blocks <= 0) continue;
        rc = c->api->launch(c, launch, step->num_args, buffers, offsets);
        if (rc != AOTC_OK) {
            size_t len = strlen(c->error);
            snprintf(c->error + len, sizeof c->error - len, " (%s, node %s)",
                     m->functions[launch->function], step->node);
            return rc;
        }
    }
    return AOTC_OK;
}

/* The bytes of an input or output at the run's length: with the run-time dimension on `axis`
 * (the first axis longer than 1), the dense tensor is a prefix of the buffer laid out for the
 * maximum (one byte or more per element, so the maximum's size divides evenly). */
static uint64_t bytes_at(const aotc_model_desc *d, const aotc_tensor_desc *t, const int32_t *axes,
                         int32_t i, const int64_t *dims) {
    int32_t axis = d->num_dims > 0 ? axes[i] : -1;
    if (axis < 0 || axis >= t->rank || t->shape[axis] <= 0 || dims == NULL) return t->num_bytes;
    return t->num_bytes / (uint64_t)t->shape[axis] * (uint64_t)dims[0];
}

/* Inputs written, every step launched, outputs read; on the application's own device buffers
 * (`device`: set as c->device_inputs/outputs) the launches alone. */
static int run_steps(aotc_gpu_context *c, const void *const *inputs, void *const *outputs, int device) {
    const aotc_model_desc *d = c->m->model->desc;
    int32_t i;
    int rc = AOTC_OK;
    if (device) {
        for (i = 0; i < c->m->num_steps && rc == AOTC_OK; ++i) rc = launch_step(c, &c->m->steps[i]);
        return rc;
    }
    for (i = 0; i < d->num_inputs && rc == AOTC_OK; ++i) {
        uint64_t bytes = bytes_at(d, &d->inputs[i], d->input_dim_axes, i, c->dims);
        if (bytes > 0) rc = c->api->write(c, AOTC_GPU_FIRST_INPUT + i, inputs[i], bytes);
    }
    for (i = 0; i < c->m->num_steps && rc == AOTC_OK; ++i) rc = launch_step(c, &c->m->steps[i]);
    for (i = 0; i < d->num_outputs && rc == AOTC_OK; ++i) {
        uint64_t bytes = bytes_at(d, &d->outputs[i], d->output_dim_axes, i, c->dims);
        if (bytes > 0) rc = c->api->read(c, AOTC_GPU_FIRST_INPUT + d->num_inputs + i, outputs[i], bytes);
    }
    return rc;
}

/* The run's dimensions into c->dims (NULL: the maxima), each checked against its range. */
static int set_dims(aotc_gpu_context *c, const int64_t *dims) {
    const aotc_model_desc *d = c->m->model->desc;
    int32_t k;
    c->dims = d->num_dims > 0 ? (dims != NULL ? dims : d->dims_max) : NULL;
    if (d->num_dims > AOTC_GPU_MAX_DIMS) return AOTC_ERR_INTERNAL;
    for (k = 0; dims != NULL && k < d->num_dims; ++k)
        if (dims[k] < d->dims_min[k] || dims[k] > d->dims_max[k]) {
            c->dims = NULL;
            return aotc_gpu_fail(c, AOTC_ERR_BAD_SIZE, "run-time dimension %d is %lld; the model runs %lld to %lld",
                                 (int)k, (long long)dims[k], (long long)d->dims_min[k], (long long)d->dims_max[k]);
        }
    return AOTC_OK;
}

/* Every application buffer of a device run belongs to the context and is large enough. */
static int check_device_buffers(aotc_gpu_context *c, void *const *inputs, void *const *outputs) {
    const aotc_model_desc *d = c->m->model->desc;
    char what[64];
    int32_t i;
    int rc = AOTC_OK;
    for (i = 0; i < d->num_inputs && rc == AOTC_OK; ++i) {
        snprintf(what, sizeof what, "input %d", (int)i);
        rc = c->api->check_device_buffer(c, inputs[i], d->inputs[i].num_bytes, what);
    }
    for (i = 0; i < d->num_outputs && rc == AOTC_OK; ++i) {
        snprintf(what, sizeof what, "output %d", (int)i);
        rc = c->api->check_device_buffer(c, outputs[i], d->outputs[i].num_bytes, what);
    }
    return rc;
}

/* One run at `dims` (NULL: the maxima): on host memory, or (`device_inputs`, the same pointers
 * as `inputs`, and `device`) on the application's device buffers after checking them. The wait
 * comes after every attempt (the device may still read the caller's inputs or write its
 * outputs) and keeps the first failure's message. */
static int run(aotc_gpu_context *c, const int64_t *dims, const void *const *inputs,
               void *const *outputs, void *const *device_inputs, int device) {
    char first[AOTC_GPU_MESSAGE_SIZE];
    int rc, waited;
    if (c == NULL) return AOTC_ERR_NULL_ARGUMENT;
    c->error[0] = '\0';
    rc = check_run(c->m, inputs, outputs);
    if (rc != AOTC_OK) return rc;
    if ((rc = set_dims(c, dims)) != AOTC_OK) return rc;
    if (c->api->begin != NULL && (rc = c->api->begin(c)) != AOTC_OK) return rc;
    if (device && (rc = check_device_buffers(c, device_inputs, outputs)) == AOTC_OK) {
        c->device_inputs = device_inputs;
        c->device_outputs = outputs;
    }
    if (rc == AOTC_OK) rc = run_steps(c, inputs, outputs, device);
    c->device_inputs = NULL;
    c->device_outputs = NULL;
    memcpy(first, c->error, sizeof first);
    waited = c->api->finish(c);
    if (rc == AOTC_OK) rc = waited;
    else memcpy(c->error, first, sizeof first);
    if (c->api->end != NULL) c->api->end(c);
    c->dims = NULL;
    return rc;
}

int aotc_gpu_run_dims(aotc_gpu_context *c, const int64_t *dims, const void *const *inputs,
                      void *const *outputs) {
    return run(c, dims, inputs, outputs, NULL, 0);
}

int aotc_gpu_run(aotc_gpu_context *c, const void *const *inputs, void *const *outputs) {
    return aotc_gpu_run_dims(c, NULL, inputs, outputs);
}

int aotc_gpu_run_device(aotc_gpu_context *c, void *const *inputs, void *const *outputs) {
    return run(c, NULL, (const void *const *)inputs, outputs, inputs, 1);
}

int aotc_gpu_native(const aotc_gpu_context *c, void **device_context, void **queue) {
    void *ignored;
    if (c == NULL) return AOTC_ERR_NULL_ARGUMENT;
    c->api->native(c, device_context != NULL ? device_context : &ignored,
                   queue != NULL ? queue : &ignored);
    return AOTC_OK;
}

void aotc_gpu_destroy(aotc_gpu_context *c) {
    if (c == NULL) return;
    c->api->release(c);
    free(c);
}

const char *aotc_gpu_error(const aotc_gpu_context *c) { return c == NULL ? "" : c->error; }

const char *aotc_gpu_device_name(const aotc_gpu_context *c) { return c == NULL ? "" : c->device_name; }
