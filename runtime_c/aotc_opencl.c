/* aotc_opencl.c: the device context of an OpenCL bundle, on the OpenCL 1.2 API.
 *
 * aotc_opencl_api (aotc_gpu.h). create: picks a device (aotc_gpu_options.device, else
 * $AOTC_OPENCL_DEVICE, else the first GPU, else the first device), builds the program from the
 * embedded source (or loads the binary a cache file holds for this source, device and driver),
 * creates each entry point's kernel once, and allocates the device buffers once: the arena, the
 * weights (copied once), one per input and one per output. A run (aotc_gpu.c) writes the inputs,
 * enqueues every step's launches (per kernel buffer a cl_mem and a cl_long byte offset), reads
 * the outputs and waits for the queue (clFinish). Every OpenCL error becomes AOTC_ERR_NO_DEVICE
 * or AOTC_ERR_DEVICE with a message naming the call.
 */
#define _POSIX_C_SOURCE 200809L
#define CL_TARGET_OPENCL_VERSION 120

#include "aotc_gpu.h"

#if defined(__APPLE__)
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cl_context_data {
    aotc_gpu_context base; /* first: the generic context (aotc_gpu.h) */
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_program program;
    cl_kernel *kernels; /* one per entry point */
    cl_mem *buffers;    /* aotc_gpu_num_buffers of them (aotc_gpu.h) */
} cl_context_data;

static const char *cl_error_name(cl_int e) {
    switch (e) {
#define AOTC_CL_ERROR(name) case name: return #name;
    AOTC_CL_ERROR(CL_DEVICE_NOT_FOUND) AOTC_CL_ERROR(CL_DEVICE_NOT_AVAILABLE)
    AOTC_CL_ERROR(CL_COMPILER_NOT_AVAILABLE) AOTC_CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    AOTC_CL_ERROR(CL_OUT_OF_RESOURCES) AOTC_CL_ERROR(CL_OUT_OF_HOST_MEMORY)
    AOTC_CL_ERROR(CL_BUILD_PROGRAM_FAILURE) AOTC_CL_ERROR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    AOTC_CL_ERROR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    AOTC_CL_ERROR(CL_INVALID_VALUE) AOTC_CL_ERROR(CL_INVALID_DEVICE_TYPE)
    AOTC_CL_ERROR(CL_INVALID_PLATFORM) AOTC_CL_ERROR(CL_INVALID_DEVICE)
    AOTC_CL_ERROR(CL_INVALID_CONTEXT) AOTC_CL_ERROR(CL_INVALID_QUEUE_PROPERTIES)
    AOTC_CL_ERROR(CL_INVALID_COMMAND_QUEUE) AOTC_CL_ERROR(CL_INVALID_HOST_PTR)
    AOTC_CL_ERROR(CL_INVALID_MEM_OBJECT) AOTC_CL_ERROR(CL_INVALID_BINARY)
    AOTC_CL_ERROR(CL_INVALID_BUILD_OPTIONS) AOTC_CL_ERROR(CL_INVALID_PROGRAM)
    AOTC_CL_ERROR(CL_INVALID_PROGRAM_EXECUTABLE) AOTC_CL_ERROR(CL_INVALID_KERNEL_NAME)
    AOTC_CL_ERROR(CL_INVALID_KERNEL) AOTC_CL_ERROR(CL_INVALID_ARG_INDEX)
    AOTC_CL_ERROR(CL_INVALID_ARG_VALUE) AOTC_CL_ERROR(CL_INVALID_ARG_SIZE)
    AOTC_CL_ERROR(CL_INVALID_KERNEL_ARGS) AOTC_CL_ERROR(CL_INVALID_WORK_DIMENSION)
    AOTC_CL_ERROR(CL_INVALID_WORK_GROUP_SIZE) AOTC_CL_ERROR(CL_INVALID_WORK_ITEM_SIZE)
    AOTC_CL_ERROR(CL_INVALID_GLOBAL_OFFSET) AOTC_CL_ERROR(CL_INVALID_EVENT_WAIT_LIST)
    AOTC_CL_ERROR(CL_INVALID_OPERATION) AOTC_CL_ERROR(CL_INVALID_BUFFER_SIZE)
    AOTC_CL_ERROR(CL_INVALID_GLOBAL_WORK_SIZE)
#undef AOTC_CL_ERROR
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an OpenCL error";
    }
}

/* AOTC_ERR_DEVICE with "CALL failed: NAME (code)" (+ what), in the context's message. */
static int cl_fail(cl_context_data *c, const char *call, cl_int e, const char *what) {
    return aotc_gpu_fail(&c->base, AOTC_ERR_DEVICE, "%s failed: %s (%d)%s%s", call,
                         cl_error_name(e), (int)e, what[0] ? ": " : "", what);
}

/* ---- choosing the device ---- */

static int contains_nocase(const char *text, const char *part) {
    size_t n = strlen(part), i, j;
    for (i = 0; text[i] != '\0'; ++i) {
        for (j = 0; j < n && text[i + j] != '\0'; ++j)
            if (tolower((unsigned char)text[i + j]) != tolower((unsigned char)part[j])) break;
        if (j == n) return 1;
    }
    return n == 0;
}

/* Whether device number `index` (over all platforms), of platform `pname`, matches `choice`. */
static int device_matches(const char *choice, int index, cl_device_type type, const char *pname,
                          const char *dname) {
    char *end = NULL;
    long want = strtol(choice, &end, 10);
    if (end != choice && *end == '\0') return want == index;
    if (strcmp(choice, "gpu") == 0) return (type & CL_DEVICE_TYPE_GPU) != 0;
    if (strcmp(choice, "cpu") == 0) return (type & CL_DEVICE_TYPE_CPU) != 0;
    if (strcmp(choice, "accelerator") == 0) return (type & CL_DEVICE_TYPE_ACCELERATOR) != 0;
    return contains_nocase(dname, choice) || contains_nocase(pname, choice);
}

#define AOTC_CL_MAX_PLATFORMS 16
#define AOTC_CL_MAX_DEVICES 64

static int pick_device(cl_context_data *c, const char *choice) {
    cl_platform_id platforms[AOTC_CL_MAX_PLATFORMS];
    cl_uint num_platforms = 0, p;
    char list[1024] = "";
    size_t listed = 0;
    int index = 0, found = 0;
    cl_int e = clGetPlatformIDs(AOTC_CL_MAX_PLATFORMS, platforms, &num_platforms);
    if (e == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (e == CL_SUCCESS && num_platforms == 0))
        return aotc_gpu_fail(&c->base, AOTC_ERR_NO_DEVICE,
                             "no OpenCL platform: install the driver of the device (an OpenCL "
                             "ICD; PoCL runs OpenCL on the CPU)");
    if (e != CL_SUCCESS) return cl_fail(c, "clGetPlatformIDs", e, "");
    if (num_platforms > AOTC_CL_MAX_PLATFORMS) num_platforms = AOTC_CL_MAX_PLATFORMS;
    /* the choice, else the first GPU, else (no choice, no GPU) the first device */
    for (p = 0; p < num_platforms && !found; ++p) {
        cl_device_id devices[AOTC_CL_MAX_DEVICES];
        cl_uint num_devices = 0, d;
        char pname[256] = "";
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, AOTC_CL_MAX_DEVICES, devices,
                           &num_devices) != CL_SUCCESS)
            continue;
        if (num_devices > AOTC_CL_MAX_DEVICES) num_devices = AOTC_CL_MAX_DEVICES;
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        for (d = 0; d < num_devices && !found; ++d, ++index) {
            cl_device_type type = 0;
            char dname[256] = "";
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
            if (listed < sizeof list)
                listed += (size_t)snprintf(list + listed, sizeof list - listed, "%s%d: %s / %s",
                                           index ? ", " : "", index, pname, dname);
            if (choice != NULL ? device_matches(choice, index, type, pname, dname)
                               : (type & CL_DEVICE_TYPE_GPU) != 0) {
                c->device = devices[d];
                found = 1;
            } else if (choice == NULL && c->device == NULL) {
                c->device = devices[d]; /* the first device, should no GPU follow */
            }
        }
    }
    if (found || (choice == NULL && c->device != NULL)) return AOTC_OK;
    if (index == 0)
        return aotc_gpu_fail(&c->base, AOTC_ERR_NO_DEVICE,
                             "no OpenCL device: the platforms list none");
    c->device = NULL;
    return aotc_gpu_fail(&c->base, AOTC_ERR_NO_DEVICE,
                         "no OpenCL device matches '%s' (AOTC_OPENCL_DEVICE or the create "
                         "option: an index, gpu, cpu, accelerator or part of a name); devices: %s",
                         choice, list);
}

/* ---- the program, built or from the cache ---- */

static const char CACHE_MAGIC[8] = {'A', 'O', 'T', 'C', 'C', 'L', 'B', '1'};

static uint64_t fnv1a(uint64_t h, const char *text) {
    for (; *text != '\0'; ++text) h = (h ^ (unsigned char)*text) * 1099511628211ULL;
    return (h ^ 0xffu) * 1099511628211ULL; /* a separator between the texts hashed */
}

/* What a cached binary must have been built from: the source, the options, the device, its
 * version and the driver's. */
static uint64_t cache_key(cl_context_data *c) {
    char info[512];
    uint64_t h = 14695981039346656037ULL;
    cl_device_info what[3] = {CL_DEVICE_VERSION, CL_DRIVER_VERSION, CL_DEVICE_VENDOR};
    int i;
    h = fnv1a(h, (const char *)c->base.m->code);
    h = fnv1a(h, c->base.m->build_options);
    h = fnv1a(h, c->base.device_name);
    for (i = 0; i < 3; ++i) {
        info[0] = '\0';
        clGetDeviceInfo(c->device, what[i], sizeof info - 1, info, NULL);
        info[sizeof info - 1] = '\0';
        h = fnv1a(h, info);
    }
    return h;
}

/* The cached binary for `key`, malloc'ed (NULL when absent or stale). */
static unsigned char *read_cache(const char *path, uint64_t key, size_t *size) {
    FILE *f = fopen(path, "rb");
    char magic[8];
    uint64_t header[2];
    unsigned char *data = NULL;
    long total;
    if (f == NULL) return NULL;
    if (fread(magic, 1, 8, f) == 8 && memcmp(magic, CACHE_MAGIC, 8) == 0 &&
        fread(header, sizeof header[0], 2, f) == 2 && header[0] == key && header[1] > 0 &&
        fseek(f, 0, SEEK_END) == 0 && (total = ftell(f)) >= 0 &&
        (uint64_t)total == 8 + sizeof header + header[1] &&
        fseek(f, (long)(8 + sizeof header), SEEK_SET) == 0 &&
        (data = (unsigned char *)malloc((size_t)header[1])) != NULL) {
        if (fread(data, 1, (size_t)header[1], f) == (size_t)header[1]) {
            *size = (size_t)header[1];
        } else {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    return data;
}

/* Writes the built program's binary to `path` (through a temporary file renamed over it); a
 * failure only loses the cache. */
static void write_cache(cl_context_data *c, const char *path, uint64_t key) {
    size_t size = 0;
    unsigned char *data;
    char tmp[4096];
    FILE *f;
    int ok;
    uint64_t header[2];
    if (clGetProgramInfo(c->program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0 || (data = (unsigned char *)malloc(size)) == NULL)
        return;
    if (clGetProgramInfo(c->program, CL_PROGRAM_BINARIES, sizeof data, &data, NULL) != CL_SUCCESS ||
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp ||
        (f = fopen(tmp, "wb")) == NULL) {
        free(data);
        return;
    }
    header[0] = key;
    header[1] = size;
    ok = fwrite(CACHE_MAGIC, 1, 8, f) == 8 && fwrite(header, sizeof header[0], 2, f) == 2 &&
         fwrite(data, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) remove(tmp);
    free(data);
}

/* "clBuildProgram failed: ...: <the build log>" */
static int build_failed(cl_context_data *c, cl_int e) {
    char log[AOTC_GPU_MESSAGE_SIZE - 128];
    size_t size = 0;
    log[0] = '\0';
    clGetProgramBuildInfo(c->program, c->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &size);
    log[sizeof log - 1] = '\0';
    return cl_fail(c, "clBuildProgram", e, log[0] ? log : "the build log is empty");
}

static int build_program(cl_context_data *c, const char *cache) {
    const char *source = (const char *)c->base.m->code;
    uint64_t key = 0;
    cl_int e;
    if (cache != NULL) {
        size_t size = 0;
        unsigned char *binary;
        key = cache_key(c);
        binary = read_cache(cache, key, &size);
        if (binary != NULL) {
            const unsigned char *bins[1];
            cl_int status = CL_SUCCESS;
            bins[0] = binary;
            c->program = clCreateProgramWithBinary(c->context, 1, &c->device, &size, bins,
                                                   &status, &e);
            free(binary);
            if (c->program != NULL && e == CL_SUCCESS && status == CL_SUCCESS &&
                clBuildProgram(c->program, 1, &c->device, c->base.m->build_options, NULL, NULL) == CL_SUCCESS)
                return AOTC_OK;
            if (c->program != NULL) clReleaseProgram(c->program); /* stale: build from source */
            c->program = NULL;
        }
    }
    c->program = clCreateProgramWithSource(c->context, 1, &source, NULL, &e);
    if (e != CL_SUCCESS) {
        c->program = NULL;
        return cl_fail(c, "clCreateProgramWithSource", e, "");
    }
    e = clBuildProgram(c->program, 1, &c->device, c->base.m->build_options, NULL, NULL);
    if (e != CL_SUCCESS) return build_failed(c, e);
    if (cache != NULL) write_cache(c, cache, key);
    return AOTC_OK;
}

static int create_kernels(cl_context_data *c) {
    const aotc_gpu_model *m = c->base.m;
    int32_t i;
    cl_int e;
    c->kernels = (cl_kernel *)calloc((size_t)(m->num_functions > 0 ? m->num_functions : 1), sizeof *c->kernels);
    if (c->kernels == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    for (i = 0; i < m->num_functions; ++i) {
        c->kernels[i] = clCreateKernel(c->program, m->functions[i], &e);
        if (e != CL_SUCCESS) {
            c->kernels[i] = NULL;
            return cl_fail(c, "clCreateKernel", e, m->functions[i]);
        }
    }
    return AOTC_OK;
}

static int allocate_buffers(cl_context_data *c, const unsigned char *weights) {
    const aotc_gpu_model *m = c->base.m;
    int32_t n = aotc_gpu_num_buffers(m), i;
    cl_int e;
    c->buffers = (cl_mem *)calloc((size_t)n, sizeof *c->buffers);
    if (c->buffers == NULL) return AOTC_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; ++i) {
        uint64_t size = aotc_gpu_buffer_size(m, i);
        cl_mem_flags flags = CL_MEM_READ_WRITE;
        if (i == AOTC_GPU_WEIGHTS || (i >= AOTC_GPU_FIRST_INPUT &&
                                      i < AOTC_GPU_FIRST_INPUT + m->model->desc->num_inputs))
            flags = CL_MEM_READ_ONLY;
        if (i == AOTC_GPU_WEIGHTS && m->model->weights_size > 0) flags |= CL_MEM_COPY_HOST_PTR;
        c->buffers[i] = clCreateBuffer(c->context, flags, (size_t)size,
                                       (flags & CL_MEM_COPY_HOST_PTR) ? (void *)(uintptr_t)weights : NULL, &e);
        if (e != CL_SUCCESS) {
            char what[64];
            c->buffers[i] = NULL;
            snprintf(what, sizeof what, "%llu bytes", (unsigned long long)size);
            return cl_fail(c, "clCreateBuffer", e, what);
        }
    }
    return AOTC_OK;
}

static int cl_set_up(aotc_gpu_context *base, const char *choice, const unsigned char *weights,
                     const aotc_gpu_options *options) {
    cl_context_data *c = (cl_context_data *)base;
    cl_int e;
    int rc = pick_device(c, choice);
    if (rc != AOTC_OK) return rc;
    clGetDeviceInfo(c->device, CL_DEVICE_NAME, sizeof base->device_name - 1, base->device_name, NULL);
    if (base->m->uses_f64) {
        cl_device_fp_config fp64 = 0;
        clGetDeviceInfo(c->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
        if (fp64 == 0)
            return aotc_gpu_fail(base, AOTC_ERR_NO_DEVICE, "the kernels compute in double precision, "
                                 "which %s lacks (cl_khr_fp64)", base->device_name);
    }
    c->context = clCreateContext(NULL, 1, &c->device, NULL, NULL, &e);
    if (e != CL_SUCCESS) {
        c->context = NULL;
        return cl_fail(c, "clCreateContext", e, base->device_name);
    }
    c->queue = clCreateCommandQueue(c->context, c->device, 0, &e);
    if (e != CL_SUCCESS) {
        c->queue = NULL;
        return cl_fail(c, "clCreateCommandQueue", e, base->device_name);
    }
    rc = build_program(c, options != NULL ? options->binary_cache : NULL);
    if (rc == AOTC_OK) rc = create_kernels(c);
    if (rc == AOTC_OK) rc = allocate_buffers(c, weights);
    if (rc == AOTC_OK && (e = clFinish(c->queue)) != CL_SUCCESS) rc = cl_fail(c, "clFinish", e, "");
    return rc;
}

static int cl_max_threads(aotc_gpu_context *base, int32_t function, int64_t *most) {
    cl_context_data *c = (cl_context_data *)base;
    size_t size = 0;
    cl_int e = clGetKernelWorkGroupInfo(c->kernels[function], c->device, CL_KERNEL_WORK_GROUP_SIZE,
                                        sizeof size, &size, NULL);
    if (e != CL_SUCCESS) return cl_fail(c, "clGetKernelWorkGroupInfo", e, base->m->functions[function]);
    *most = (int64_t)size;
    return AOTC_OK;
}

static int cl_write(aotc_gpu_context *base, int32_t buffer, const void *host, uint64_t bytes) {
    cl_context_data *c = (cl_context_data *)base;
    cl_int e = clEnqueueWriteBuffer(c->queue, c->buffers[buffer], CL_FALSE, 0, (size_t)bytes, host,
                                    0, NULL, NULL);
    return e == CL_SUCCESS ? AOTC_OK : cl_fail(c, "clEnqueueWriteBuffer", e, "an input");
}

static int cl_launch(aotc_gpu_context *base, const aotc_gpu_launch *launch, int32_t num_args,
                     const int32_t *buffers, const int64_t *offsets) {
    cl_context_data *c = (cl_context_data *)base;
    cl_kernel k = c->kernels[launch->function];
    size_t local = (size_t)launch->threads, global = (size_t)launch->blocks * local;
    int32_t a;
    cl_int e = CL_SUCCESS;
    for (a = 0; a < num_args && e == CL_SUCCESS; ++a) {
        cl_long offset = (cl_long)offsets[a];
        cl_mem mem = (cl_mem)aotc_gpu_buffer_override(base, buffers[a]);
        if (mem == NULL) mem = c->buffers[buffers[a]];
        e = clSetKernelArg(k, (cl_uint)(2 * a), sizeof(cl_mem), &mem);
        if (e == CL_SUCCESS) e = clSetKernelArg(k, (cl_uint)(2 * a + 1), sizeof offset, &offset);
    }
    for (a = 0; base->dims != NULL && a < base->m->model->desc->num_dims && e == CL_SUCCESS; ++a) {
        cl_long value = (cl_long)base->dims[a]; /* the run-time lengths, after the buffers */
        e = clSetKernelArg(k, (cl_uint)(2 * num_args + a), sizeof value, &value);
    }
    if (e != CL_SUCCESS) return cl_fail(c, "clSetKernelArg", e, "");
    e = clEnqueueNDRangeKernel(c->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    return e == CL_SUCCESS ? AOTC_OK : cl_fail(c, "clEnqueueNDRangeKernel", e, "");
}

static int cl_read(aotc_gpu_context *base, int32_t buffer, void *host, uint64_t bytes) {
    cl_context_data *c = (cl_context_data *)base;
    cl_int e = clEnqueueReadBuffer(c->queue, c->buffers[buffer], CL_FALSE, 0, (size_t)bytes, host,
                                   0, NULL, NULL);
    return e == CL_SUCCESS ? AOTC_OK : cl_fail(c, "clEnqueueReadBuffer", e, "an output");
}

static int cl_finish(aotc_gpu_context *base) {
    cl_context_data *c = (cl_context_data *)base;
    cl_int e = clFinish(c->queue);
    return e == CL_SUCCESS ? AOTC_OK : cl_fail(c, "clFinish", e, "running the kernels");
}

static int cl_check_device_buffer(aotc_gpu_context *base, void *buffer, uint64_t bytes,
                                  const char *what) {
    cl_context_data *c = (cl_context_data *)base;
    cl_context owner = NULL;
    size_t size = 0;
    cl_int e = clGetMemObjectInfo((cl_mem)buffer, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (e == CL_SUCCESS) e = clGetMemObjectInfo((cl_mem)buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (e != CL_SUCCESS)
        return aotc_gpu_fail(base, AOTC_ERR_BAD_ARGUMENT, "%s is not an OpenCL buffer (clGetMemObjectInfo: %s)",
                             what, cl_error_name(e));
    if (owner != c->context)
        return aotc_gpu_fail(base, AOTC_ERR_BAD_ARGUMENT,
                             "%s is a buffer of another OpenCL context (make it in the context's own)", what);
    if ((uint64_t)size < bytes)
        return aotc_gpu_fail(base, AOTC_ERR_BAD_SIZE, "%s holds %llu bytes; the model's holds %llu", what,
                             (unsigned long long)size, (unsigned long long)bytes);
    return AOTC_OK;
}

static void cl_native(const aotc_gpu_context *base, void **device_context, void **queue) {
    const cl_context_data *c = (const cl_context_data *)base;
    *device_context = (void *)c->context;
    *queue = (void *)c->queue;
}

static void cl_release(aotc_gpu_context *base) {
    cl_context_data *c = (cl_context_data *)base;
    int32_t i;
    if (c->queue != NULL) clFinish(c->queue);
    if (c->buffers != NULL) {
        for (i = 0; i < aotc_gpu_num_buffers(base->m); ++i)
            if (c->buffers[i] != NULL) clReleaseMemObject(c->buffers[i]);
        free(c->buffers);
    }
    if (c->kernels != NULL) {
        for (i = 0; i < base->m->num_functions; ++i)
            if (c->kernels[i] != NULL) clReleaseKernel(c->kernels[i]);
        free(c->kernels);
    }
    if (c->program != NULL) clReleaseProgram(c->program);
    if (c->queue != NULL) clReleaseCommandQueue(c->queue);
    if (c->context != NULL) clReleaseContext(c->context);
}

const aotc_gpu_api aotc_opencl_api = {
    sizeof(cl_context_data), cl_set_up, cl_max_threads, NULL, cl_write, cl_launch, cl_read,
    cl_finish, NULL, cl_release, cl_check_device_buffer, cl_native, "AOTC_OPENCL_DEVICE",
};
