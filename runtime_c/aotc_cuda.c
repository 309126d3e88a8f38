/* aotc_cuda.c: the device context of a CUDA bundle, on the CUDA driver API (the application links
 * libcuda alone).
 *
 * aotc_cuda_api (aotc_gpu.h). create: cuInit, the device (aotc_gpu_options.device, else
 * $AOTC_CUDA_DEVICE, else device 0) and its primary context, cuModuleLoadDataEx on the embedded
 * PTX (the driver compiles it for the device), each entry point's function once, one stream, and
 * the device buffers once: the arena, the weights (copied once), one per input and one per
 * output. A run (aotc_gpu.c) copies the inputs in, launches every step's entry points (per kernel
 * buffer a device pointer and a byte offset, the kernels' ABI), copies the outputs out and
 * synchronises the stream. The context is made current only
 * around these calls (pushed and popped), so the caller's own current context is kept. Every CUDA
 * error becomes AOTC_ERR_NO_DEVICE or AOTC_ERR_DEVICE with a message naming the call.
 */
#include "aotc_gpu.h"

#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cu_context_data {
    aotc_gpu_context base; /* first: the generic context (aotc_gpu.h) */
    CUdevice device;
    CUcontext context; /* the device's primary context, retained */
    int retained;
    CUmodule module;
    CUstream stream;
    CUfunction *functions; /* one per entry point */
    CUdeviceptr *buffers;  /* aotc_gpu_num_buffers of them (aotc_gpu.h) */
} cu_context_data;

/* `status` with "CALL failed: NAME (code, text)" (+ what), in the context's message. */
static int cu_fail_as(cu_context_data *c, int status, const char *call, CUresult e, const char *what) {
    const char *name = NULL, *text = NULL;
    if (cuGetErrorName(e, &name) != CUDA_SUCCESS || name == NULL) name = "a CUDA error";
    if (cuGetErrorString(e, &text) != CUDA_SUCCESS || text == NULL) text = "";
    return aotc_gpu_fail(&c->base, status, "%s failed: %s (%d%s%s)%s%s", call, name, (int)e,
                         text[0] ? ", " : "", text, what[0] ? ": " : "", what);
}

static int cu_fail(cu_context_data *c, const char *call, CUresult e, const char *what) {
    return cu_fail_as(c, AOTC_ERR_DEVICE, call, e, what);
}

static int pick_device(cu_context_data *c, const char *choice) {
    int count = 0;
    long want = 0;
    CUresult e = cuInit(0);
    if (e != CUDA_SUCCESS) return cu_fail_as(c, AOTC_ERR_NO_DEVICE, "cuInit", e, "no usable CUDA driver or device");
    e = cuDeviceGetCount(&count);
    if (e != CUDA_SUCCESS) return cu_fail_as(c, AOTC_ERR_NO_DEVICE, "cuDeviceGetCount", e, "");
    if (choice != NULL) {
        char *end = NULL;
        want = strtol(choice, &end, 10);
        if (end == choice || *end != '\0' || want < 0)
            return aotc_gpu_fail(&c->base, AOTC_ERR_NO_DEVICE, "the CUDA device is chosen by its "
                                 "ordinal (AOTC_CUDA_DEVICE or the create option), not '%s'", choice);
    }
    if (want >= count)
        return aotc_gpu_fail(&c->base, AOTC_ERR_NO_DEVICE, "no CUDA device %ld: this machine has %d",
                             want, count);
    e = cuDeviceGet(&c->device, (int)want);
    if (e != CUDA_SUCCESS) return cu_fail_as(c, AOTC_ERR_NO_DEVICE, "cuDeviceGet", e, "");
    if (cuDeviceGetName(c->base.device_name, (int)sizeof c->base.device_name - 1, c->device) != CUDA_SUCCESS)
        snprintf(c->base.device_name, sizeof c->base.device_name, "CUDA device %ld", want);
    return AOTC_OK;
}

static int load_module(cu_context_data *c) {
    char log[AOTC_GPU_MESSAGE_SIZE - 256];
    CUjit_option names[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[2];
    const aotc_gpu_model *m = c->base.m;
    int32_t i;
    CUresult e;
    log[0] = '\0';
    values[0] = log;
    values[1] = (void *)(uintptr_t)(sizeof log - 1);
    e = cuModuleLoadDataEx(&c->module, m->code, 2, names, values);
    if (e != CUDA_SUCCESS) {
        c->module = NULL;
        log[sizeof log - 1] = '\0';
        return cu_fail(c, "cuModuleLoadDataEx", e,
                       log[0] ? log : "the PTX does not load on this device (rebuild it for its "
                                      "architecture: make ptx CUDA_ARCH=sm_XX)");
    }
    c->functions = (CUfunction *)calloc((size_t)(m->num_functions > 0 ? m->num_functions : 1), sizeof *c->functions);
    if (c->functions == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    for (i = 0; i < m->num_functions; ++i) {
        e = cuModuleGetFunction(&c->functions[i], c->module, m->functions[i]);
        if (e != CUDA_SUCCESS) return cu_fail(c, "cuModuleGetFunction", e, m->functions[i]);
    }
    return AOTC_OK;
}

static int allocate_buffers(cu_context_data *c, const unsigned char *weights) {
    const aotc_gpu_model *m = c->base.m;
    int32_t n = aotc_gpu_num_buffers(m), i;
    CUresult e;
    c->buffers = (CUdeviceptr *)calloc((size_t)n, sizeof *c->buffers);
    if (c->buffers == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; ++i) {
        uint64_t size = aotc_gpu_buffer_size(m, i);
        e = cuMemAlloc(&c->buffers[i], (size_t)size);
        if (e != CUDA_SUCCESS) {
            char what[64];
            c->buffers[i] = 0;
            snprintf(what, sizeof what, "%llu bytes", (unsigned long long)size);
            return cu_fail(c, "cuMemAlloc", e, what);
        }
    }
    if (m->model->weights_size > 0) {
        e = cuMemcpyHtoD(c->buffers[AOTC_GPU_WEIGHTS], weights, (size_t)m->model->weights_size);
        if (e != CUDA_SUCCESS) return cu_fail(c, "cuMemcpyHtoD", e, "the weights");
    }
    return AOTC_OK;
}

static int cu_begin(aotc_gpu_context *base) {
    cu_context_data *c = (cu_context_data *)base;
    CUresult e = cuCtxPushCurrent(c->context);
    return e == CUDA_SUCCESS ? AOTC_OK : cu_fail(c, "cuCtxPushCurrent", e, base->device_name);
}

static void cu_end(aotc_gpu_context *base) {
    CUcontext popped;
    (void)base;
    cuCtxPopCurrent(&popped);
}

static int cu_set_up(aotc_gpu_context *base, const char *choice, const unsigned char *weights,
                     const aotc_gpu_options *options) {
    cu_context_data *c = (cu_context_data *)base;
    CUresult e;
    int rc = pick_device(c, choice);
    (void)options; /* binary_cache: OpenCL's; the driver caches compiled PTX itself */
    if (rc != AOTC_OK) return rc;
    e = cuDevicePrimaryCtxRetain(&c->context, c->device);
    if (e != CUDA_SUCCESS) return cu_fail(c, "cuDevicePrimaryCtxRetain", e, base->device_name);
    c->retained = 1;
    rc = cu_begin(base);
    if (rc != AOTC_OK) return rc;
    rc = load_module(c);
    if (rc == AOTC_OK) {
        e = cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING);
        if (e != CUDA_SUCCESS) {
            c->stream = NULL;
            rc = cu_fail(c, "cuStreamCreate", e, "");
        }
    }
    if (rc == AOTC_OK) rc = allocate_buffers(c, weights);
    cu_end(base);
    return rc;
}

static int cu_max_threads(aotc_gpu_context *base, int32_t function, int64_t *most) {
    cu_context_data *c = (cu_context_data *)base;
    int value = 0;
    CUresult e = cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, c->functions[function]);
    if (e != CUDA_SUCCESS) return cu_fail(c, "cuFuncGetAttribute", e, base->m->functions[function]);
    *most = value;
    return AOTC_OK;
}

static int cu_write(aotc_gpu_context *base, int32_t buffer, const void *host, uint64_t bytes) {
    cu_context_data *c = (cu_context_data *)base;
    CUresult e = cuMemcpyHtoDAsync(c->buffers[buffer], host, (size_t)bytes, c->stream);
    return e == CUDA_SUCCESS ? AOTC_OK : cu_fail(c, "cuMemcpyHtoDAsync", e, "an input");
}

static int cu_launch(aotc_gpu_context *base, const aotc_gpu_launch *launch, int32_t num_args,
                     const int32_t *buffers, const int64_t *offsets) {
    cu_context_data *c = (cu_context_data *)base;
    CUdeviceptr pointers[AOTC_MAX_ARGS];
    long long values[AOTC_MAX_ARGS], lengths[AOTC_GPU_MAX_DIMS];
    void *params[2 * AOTC_MAX_ARGS + AOTC_GPU_MAX_DIMS];
    int32_t a, num_dims = base->dims != NULL ? base->m->model->desc->num_dims : 0;
    CUresult e;
    if (num_args < 0 || num_args > AOTC_MAX_ARGS || num_dims > AOTC_GPU_MAX_DIMS) return AOTC_ERR_INTERNAL;
    for (a = 0; a < num_args; ++a) { /* the kernels take (pointer, byte offset) per buffer */
        void *mine = aotc_gpu_buffer_override(base, buffers[a]);
        pointers[a] = mine != NULL ? (CUdeviceptr)(uintptr_t)mine : c->buffers[buffers[a]];
        values[a] = (long long)offsets[a];
        params[2 * a] = &pointers[a];
        params[2 * a + 1] = &values[a];
    }
    for (a = 0; a < num_dims; ++a) { /* then the run-time lengths */
        lengths[a] = (long long)base->dims[a];
        params[2 * num_args + a] = &lengths[a];
    }
    e = cuLaunchKernel(c->functions[launch->function], (unsigned)launch->blocks, 1, 1,
                       (unsigned)launch->threads, 1, 1, 0, c->stream, params, NULL);
    return e == CUDA_SUCCESS ? AOTC_OK : cu_fail(c, "cuLaunchKernel", e, "");
}

static int cu_read(aotc_gpu_context *base, int32_t buffer, void *host, uint64_t bytes) {
    cu_context_data *c = (cu_context_data *)base;
    CUresult e = cuMemcpyDtoHAsync(host, c->buffers[buffer], (size_t)bytes, c->stream);
    return e == CUDA_SUCCESS ? AOTC_OK : cu_fail(c, "cuMemcpyDtoHAsync", e, "an output");
}

static int cu_finish(aotc_gpu_context *base) {
    cu_context_data *c = (cu_context_data *)base;
    CUresult e = cuStreamSynchronize(c->stream);
    return e == CUDA_SUCCESS ? AOTC_OK : cu_fail(c, "cuStreamSynchronize", e, "running the kernels");
}

static int cu_check_device_buffer(aotc_gpu_context *base, void *buffer, uint64_t bytes,
                                  const char *what) {
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)buffer, start = 0;
    size_t size = 0;
    CUresult e = cuMemGetAddressRange(&start, &size, at);
    if (e != CUDA_SUCCESS)
        return aotc_gpu_fail(base, AOTC_ERR_BAD_ARGUMENT,
                             "%s is not device memory of the device's primary context (cuMemGetAddressRange: %d)",
                             what, (int)e);
    if ((uint64_t)(start + size - at) < bytes)
        return aotc_gpu_fail(base, AOTC_ERR_BAD_SIZE, "%s: %llu bytes from it to the end of its allocation; "
                             "the model's holds %llu", what, (unsigned long long)(start + size - at),
                             (unsigned long long)bytes);
    return AOTC_OK;
}

static void cu_native(const aotc_gpu_context *base, void **device_context, void **queue) {
    const cu_context_data *c = (const cu_context_data *)base;
    *device_context = (void *)c->context;
    *queue = (void *)c->stream;
}

static void cu_release(aotc_gpu_context *base) {
    cu_context_data *c = (cu_context_data *)base;
    int32_t i;
    if (c->retained && cu_begin(base) == AOTC_OK) {
        if (c->stream != NULL) {
            cuStreamSynchronize(c->stream);
            cuStreamDestroy(c->stream);
        }
        if (c->buffers != NULL)
            for (i = 0; i < aotc_gpu_num_buffers(base->m); ++i)
                if (c->buffers[i] != 0) cuMemFree(c->buffers[i]);
        if (c->module != NULL) cuModuleUnload(c->module);
        cu_end(base);
    }
    if (c->retained) cuDevicePrimaryCtxRelease(c->device);
    free(c->buffers);
    free(c->functions);
}

const aotc_gpu_api aotc_cuda_api = {
    sizeof(cu_context_data), cu_set_up, cu_max_threads, cu_begin, cu_write, cu_launch, cu_read,
    cu_finish, cu_end, cu_release, cu_check_device_buffer, cu_native, "AOTC_CUDA_DEVICE",
};
