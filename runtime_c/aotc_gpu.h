/* aotc_gpu.h: what a GPU bundle's NAME.c links against: its launch tables and the device context
 * behind NAME_create (aotc_gpu.c), on OpenCL 1.2 (aotc_opencl.c) or on the CUDA driver API
 * (aotc_cuda.c), each of which implements an aotc_gpu_api.
 *
 * A step runs one kernel: its entry points (launches) in order, each over a 1-D grid of `blocks`
 * blocks of `threads` threads, all with the step's arguments: per kernel buffer a device buffer
 * and a byte offset into it (the arena, the weights, an input or an output; aotc_ref), then, in a
 * model with run-time dimensions, each dimension's value as a 64-bit integer. Grids are sized
 * for the dimensions' maxima; the kernels' threads past a run's length do nothing.
 *
 * Not part of a bundle's public API (applications include NAME.h only). No global mutable state:
 * everything lives in a context.
 */
#ifndef AOTC_GPU_H
#define AOTC_GPU_H

#include "aotc_runtime.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOTC_GPU_MESSAGE_SIZE 2048 /* bytes of a context's last error message */
#define AOTC_GPU_MAX_DIMS 8 /* run-time dimensions a GPU model may have */

/* One entry point launch: functions[function] over `blocks` blocks of `threads` threads. */
typedef struct aotc_gpu_launch {
    int32_t function;
    int32_t threads;
    int64_t blocks;
} aotc_gpu_launch;

/* One kernel step: launches[first_launch ..] and its arguments refs[first_ref ..]. */
typedef struct aotc_gpu_step {
    int32_t first_launch;
    int32_t num_launches;
    int32_t first_ref;
    int32_t num_args;
    const char *node; /* the ONNX node it computes (for messages) */
} aotc_gpu_step;

/* Everything a generated GPU NAME.c hands to the runtime: constant tables only. */
typedef struct aotc_gpu_model {
    const aotc_model *model;        /* the descriptor and the weights' size (no CPU steps) */
    const char *const *functions;   /* the entry points' names */
    int32_t num_functions;
    const aotc_gpu_launch *launches;
    const aotc_gpu_step *steps;
    int32_t num_steps;
    const aotc_ref *refs;
    const unsigned char *code;      /* NUL-terminated: OpenCL C source, or PTX */
    const char *build_options;      /* OpenCL: clBuildProgram's options */
    int32_t uses_f64;               /* the kernels compute in double precision */
} aotc_gpu_model;

/* The device buffers of a context, by index: the arena, the weights, then one per input, then
 * one per output. */
enum { AOTC_GPU_ARENA = 0, AOTC_GPU_WEIGHTS = 1, AOTC_GPU_FIRST_INPUT = 2 };

/* ---- a device context, over either API ---- */

typedef struct aotc_gpu_context aotc_gpu_context;

/* What an API's host code implements (aotc_opencl.c: aotc_opencl_api, aotc_cuda.c:
 * aotc_cuda_api). Its context is a struct whose first member is an aotc_gpu_context, of
 * context_size bytes (allocated zeroed). Each function returns AOTC_OK or a status, with a
 * message in c->error. */
typedef struct aotc_gpu_api {
    size_t context_size;
    /* The device (its name in c->device_name), the kernels, the device buffers (the weights
     * copied once); `choice` is the device asked for (NULL: the default). */
    int (*set_up)(aotc_gpu_context *c, const char *choice, const unsigned char *weights,
                  const aotc_gpu_options *options);
    /* The most threads a block (work-group) of the entry point may have. */
    int (*max_threads)(aotc_gpu_context *c, int32_t function, int64_t *most);
    int (*begin)(aotc_gpu_context *c);  /* before a run's calls (may be NULL) */
    int (*write)(aotc_gpu_context *c, int32_t buffer, const void *host, uint64_t bytes);
    /* Queues one launch with the step's arguments (buffer indices and byte offsets), then the
     * run's c->dims (desc->num_dims values). */
    int (*launch)(aotc_gpu_context *c, const aotc_gpu_launch *launch, int32_t num_args,
                  const int32_t *buffers, const int64_t *offsets);
    int (*read)(aotc_gpu_context *c, int32_t buffer, void *host, uint64_t bytes);
    int (*finish)(aotc_gpu_context *c); /* waits for the device; after every run, failed or not */
    void (*end)(aotc_gpu_context *c);   /* after a run (may be NULL) */
    void (*release)(aotc_gpu_context *c); /* whatever set_up made, also when it stopped halfway */
    /* Checks an application's device buffer (aotc_gpu_run_device) after begin: it belongs to
     * this context's device context and holds at least `bytes`; `what` names it for messages. */
    int (*check_device_buffer)(aotc_gpu_context *c, void *buffer, uint64_t bytes, const char *what);
    /* The API's own objects: OpenCL's cl_context and cl_command_queue, CUDA's CUcontext (the
     * device's primary context) and CUstream. */
    void (*native)(const aotc_gpu_context *c, void **device_context, void **queue);
    const char *device_env;             /* the environment variable choosing the device */
} aotc_gpu_api;

struct aotc_gpu_context {
    const aotc_gpu_api *api;
    const aotc_gpu_model *m;
    char device_name[256];
    char error[AOTC_GPU_MESSAGE_SIZE]; /* the last failure's message ("" after a good run) */
    /* During aotc_gpu_run_device: the application's buffers of the inputs and outputs, which
     * launches use in place of the context's own (aotc_gpu_buffer_override); NULL otherwise. */
    void *const *device_inputs;
    void *const *device_outputs;
    /* During a run: the run-time dimensions' values (desc->num_dims of them, checked; the
     * maxima for a run without them) that every launch passes after the buffers. */
    const int64_t *dims;
};

extern const aotc_gpu_api aotc_opencl_api AOTC_INTERNAL;
extern const aotc_gpu_api aotc_cuda_api AOTC_INTERNAL;

/* A context of `m` on `api`'s device with `weights` (aotc_check_weights), the device chosen by
 * options->device, else $api->device_env, else the API's default; a failure's message also
 * goes to options->error. */
int aotc_gpu_create(const aotc_gpu_api *api, const aotc_gpu_model *m, const unsigned char *weights,
                    uint64_t weights_size, const aotc_gpu_options *options,
                    aotc_gpu_context **out_ctx) AOTC_INTERNAL;
/* Writes the inputs, launches every step, reads the outputs, waits for the device. */
int aotc_gpu_run(aotc_gpu_context *c, const void *const *inputs, void *const *outputs) AOTC_INTERNAL;
/* aotc_gpu_run at the run-time dimensions `dims` (desc->num_dims values; NULL: the maxima):
 * a value out of its range is AOTC_ERR_BAD_SIZE with a message, nothing run; the inputs and
 * outputs are dense at those lengths, and only those bytes are copied. */
int aotc_gpu_run_dims(aotc_gpu_context *c, const int64_t *dims, const void *const *inputs,
                      void *const *outputs) AOTC_INTERNAL;
/* Launches every step on the application's device buffers (OpenCL: cl_mem; CUDA: CUdeviceptr
 * as void *), each checked first, and waits for the device: no copy to or from the host. */
int aotc_gpu_run_device(aotc_gpu_context *c, void *const *inputs, void *const *outputs) AOTC_INTERNAL;
/* The API's objects (aotc_gpu_api.native) into *device_context and *queue (either may be NULL). */
int aotc_gpu_native(const aotc_gpu_context *c, void **device_context, void **queue) AOTC_INTERNAL;
void aotc_gpu_destroy(aotc_gpu_context *c) AOTC_INTERNAL;
/* The message of the last failed run ("" after a successful one and for NULL). */
const char *aotc_gpu_error(const aotc_gpu_context *c) AOTC_INTERNAL;
const char *aotc_gpu_device_name(const aotc_gpu_context *c) AOTC_INTERNAL;

/* ---- helpers for the APIs' host code ---- */

/* How many device buffers a context of `m` holds. */
int32_t aotc_gpu_num_buffers(const aotc_gpu_model *m) AOTC_INTERNAL;
/* The byte size of device buffer `index` (at least 1: no API allocates 0 bytes). */
uint64_t aotc_gpu_buffer_size(const aotc_gpu_model *m, int32_t index) AOTC_INTERNAL;
/* The application's buffer that stands for buffer `index` during aotc_gpu_run_device (an input
 * or an output), else NULL: the context's own buffer. */
void *aotc_gpu_buffer_override(const aotc_gpu_context *c, int32_t index) AOTC_INTERNAL;
/* printf into c->error; returns `status`. */
int aotc_gpu_fail(aotc_gpu_context *c, int status, const char *fmt, ...) AOTC_INTERNAL
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* AOTC_GPU_H */
