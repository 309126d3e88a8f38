/* aotc_ort.c: an onnxruntime custom-op library over aotc-compiled islands.
 *
 * Part of the aotc runtime. RegisterCustomOps adds one custom op per island (the table
 * NAME_ort_ops.c lists them) in the domain AOTC_ORT_DOMAIN. Each kernel onnxruntime creates
 * owns one context of the island's program (its arena and thread pool); a compute checks every
 * input's element type and shape against what the island was compiled for, asks onnxruntime
 * for outputs of the compiled shapes and runs the program. Runs of one kernel are serialised
 * (a context has one arena); onnxruntime may run two kernels at once.
 *
 * An island compiled with a run-time dimension (aotc optimize --input-shape x=1,1..512) takes
 * its length from the inputs' axes that follow it (each within the compiled range, the same in
 * every input; the other axes as compiled), gives the outputs that length on their axes that
 * follow it and runs the program at it (NAME_run_context_dims). Those axes are the first longer
 * than 1 of their tensors, so onnxruntime's dense tensors are prefixes of the buffers the
 * program was laid out for.
 *
 * Threads, one pool for the whole session:
 *  - by default the islands' parallel loops run on onnxruntime's own intra-op pool
 *    (KernelContext_ParallelFor, onnxruntime >= 1.17): its size is the session's
 *    intra_op_num_threads, and aotc's loops never compete with onnxruntime's threads;
 *  - the session config entry "aotc.threads" (set it before registering the library) gives the
 *    library a pool of its own of that many threads (0: every online core, or
 *    $AOTC_NUM_THREADS), shared by all its kernels; 1 runs the islands on the calling thread.
 *    The same happens on an onnxruntime older than 1.17. Two islands that onnxruntime runs at
 *    once (parallel execution mode) do not share the pool: the second runs on its own thread.
 *
 * The op descriptors and the domain are allocated once per registration and stay for the life
 * of the process: onnxruntime keeps pointers to them for every session built from the options,
 * and tells the library nothing when the last one goes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_ort_abi.h"
#include "aotc_ort_islands.h"
#include "aotc_runtime.h"

#define AOTC_ORT_DOMAIN "ai.aotc.kernels"
#define AOTC_ORT_THREADS_KEY "aotc.threads"
#define AOTC_ORT_MESSAGE 512

#define AOTC_ORT_PIECES_PER_THREAD 4 /* pieces of a loop handed to onnxruntime's pool */

/* What one registration (one SessionOptions) shares among its kernels. */
typedef struct aotc_ort_library {
    const OrtApi *api;
    const OrtApi *api17; /* the table with KernelContext_ParallelFor; NULL before 1.17 */
    int threads;         /* "aotc.threads"; -1 when the entry is absent */
    int max_pieces;      /* at most this many pieces per loop on onnxruntime's pool */
    pthread_mutex_t lock; /* guards pool and users */
    aotc_pool *pool;      /* the library's own threads, while a kernel uses them */
    int users;
    pthread_mutex_t run_lock; /* held by the island whose loop runs on `pool` */
} aotc_ort_library;

typedef struct aotc_ort_op {
    OrtCustomOp base; /* first: onnxruntime hands &base back to every callback */
    const aotc_ort_island *island;
    aotc_ort_library *library;
    size_t num_inputs; /* the node's: the island's activations, then the weights it shares */
} aotc_ort_op;

typedef struct aotc_ort_kernel {
    const aotc_ort_op *op;
    void *ctx;
    int on_ort_pool;  /* loops go to onnxruntime's pool (else to the library's, if any) */
    int on_own_pool;  /* holds a use of the library's pool */
    pthread_mutex_t lock;
    const void **inputs; /* the program's inputs and outputs of the run in progress */
    void **outputs;
} aotc_ort_kernel;

/* One run's loops on onnxruntime's pool. */
typedef struct aotc_ort_run {
    const aotc_ort_library *library;
    const OrtKernelContext *kc;
    OrtStatus *err; /* the first failure to hand out a loop */
    aotc_body_fn body;
    void *env;
    int64_t n;
    size_t pieces;
} aotc_ort_run;

static void run_piece(void *user, size_t i) {
    const aotc_ort_run *r = (const aotc_ort_run *)user;
    int64_t lo, hi;
    aotc_range_part(r->n, (int64_t)r->pieces, (int64_t)i, &lo, &hi);
    r->body(r->env, lo, hi);
}

static void on_ort_pool(void *user, aotc_body_fn body, void *env, int64_t n) {
    aotc_ort_run *r = (aotc_ort_run *)user;
    const OrtApi *api = r->library->api17;
    OrtStatus *err;
    r->body = body;
    r->env = env;
    r->n = n;
    r->pieces = (size_t)(n < r->library->max_pieces ? n : r->library->max_pieces);
    err = api->KernelContext_ParallelFor(r->kc, run_piece, r->pieces, 0, r);
    if (err == NULL) return;
    if (r->err == NULL)
        r->err = err;
    else
        api->ReleaseStatus(err);
}

static void on_own_pool(void *user, aotc_body_fn body, void *env, int64_t n) {
    aotc_ort_library *lib = (aotc_ort_library *)user;
    if (pthread_mutex_trylock(&lib->run_lock) != 0) { /* another island has the pool */
        body(env, 0, n);
        return;
    }
    aotc_parallel_for(lib->pool, body, env, n);
    pthread_mutex_unlock(&lib->run_lock);
}

/* Takes a use of the library's pool, starting it for the first user. */
static int use_own_pool(aotc_ort_library *lib) {
    int rc = AOTC_OK, threads = 1;
    pthread_mutex_lock(&lib->lock);
    if (lib->users == 0) {
        rc = aotc_resolve_num_threads(lib->threads > 0 ? lib->threads : 0, 0, &threads);
        if (rc == AOTC_OK) rc = aotc_pool_create(&lib->pool, threads);
    }
    if (rc == AOTC_OK) ++lib->users;
    pthread_mutex_unlock(&lib->lock);
    return rc;
}

/* Gives a use back; the last one stops the threads. */
static void drop_own_pool(aotc_ort_library *lib) {
    pthread_mutex_lock(&lib->lock);
    if (--lib->users == 0) {
        aotc_pool_destroy(lib->pool);
        lib->pool = NULL;
    }
    pthread_mutex_unlock(&lib->lock);
}

static const aotc_ort_op *op_of(const OrtCustomOp *op) { return (const aotc_ort_op *)(const void *)op; }

static OrtStatus *fail(const OrtApi *api, const char *island, const char *what) {
    char msg[AOTC_ORT_MESSAGE + 128]; /* room for the island's name */
    snprintf(msg, sizeof msg, "aotc island %s: %s", island, what);
    return api->CreateStatus(ORT_FAIL, msg);
}

static const char *get_name(const OrtCustomOp *op) { return op_of(op)->island->op_name; }

static const char *get_provider(const OrtCustomOp *op) {
    (void)op;
    return "CPUExecutionProvider";
}

static ONNXTensorElementDataType get_input_type(const OrtCustomOp *op, size_t index) {
    return (ONNXTensorElementDataType)op_of(op)->island->input_types[index];
}

static size_t get_input_count(const OrtCustomOp *op) { return op_of(op)->num_inputs; }

static ONNXTensorElementDataType get_output_type(const OrtCustomOp *op, size_t index) {
    return (ONNXTensorElementDataType)op_of(op)->island->output_types[index];
}

static size_t get_output_count(const OrtCustomOp *op) {
    return (size_t)op_of(op)->island->describe()->num_outputs;
}

static OrtCustomOpInputOutputCharacteristic get_characteristic(const OrtCustomOp *op, size_t index) {
    (void)op;
    (void)index;
    return INPUT_OUTPUT_REQUIRED;
}

static OrtMemType get_memory_type(const OrtCustomOp *op, size_t index) {
    (void)op;
    (void)index;
    return OrtMemTypeDefault;
}

static int get_one(const OrtCustomOp *op) {
    (void)op;
    return 1;
}

static void destroy_kernel(void *kernel_) {
    aotc_ort_kernel *k = (aotc_ort_kernel *)kernel_;
    if (k == NULL) return;
    k->op->island->destroy(k->ctx);
    if (k->on_own_pool) drop_own_pool(k->op->library);
    pthread_mutex_destroy(&k->lock);
    free(k->inputs);
    free(k->outputs);
    free(k);
}

static OrtStatus *create_kernel(const OrtCustomOp *op_, const OrtApi *api, const OrtKernelInfo *info,
                                void **out) {
    const aotc_ort_op *op = op_of(op_);
    const aotc_model_desc *desc = op->island->describe();
    aotc_ort_kernel *k = (aotc_ort_kernel *)calloc(1, sizeof *k);
    int status;
    (void)info;
    if (k == NULL) return fail(api, op->island->op_name, "out of memory");
    k->op = op;
    k->inputs = (const void **)calloc((size_t)desc->num_inputs + 1, sizeof(void *));
    k->outputs = (void **)calloc((size_t)desc->num_outputs + 1, sizeof(void *));
    if (k->inputs == NULL || k->outputs == NULL || pthread_mutex_init(&k->lock, NULL) != 0) {
        free(k->inputs);
        free(k->outputs);
        free(k);
        return fail(api, op->island->op_name, "out of memory");
    }
    /* the island's own context never starts threads: its loops go to a shared pool */
    status = op->island->create(&k->ctx, 1);
    if (status == 0 && op->library->threads != 1) {
        k->on_ort_pool = op->library->threads < 0 && op->library->api17 != NULL;
        if (!k->on_ort_pool) {
            status = use_own_pool(op->library);
            k->on_own_pool = status == 0;
            if (k->on_own_pool) aotc_context_set_outside((aotc_context *)k->ctx, on_own_pool, op->library);
        }
    }
    if (status != 0) {
        op->island->destroy(k->ctx);
        pthread_mutex_destroy(&k->lock);
        free(k->inputs);
        free(k->outputs);
        free(k);
        return fail(api, op->island->op_name, op->island->status_message(status));
    }
    *out = k;
    return NULL;
}

/* "[1, 3, 224, 224]"; with a run-time axis (axis >= 0), "[1, 1..512]" */
static void format_shape(char *buf, size_t size, const int64_t *dims, size_t rank, int axis, int64_t lo) {
    size_t used = 0;
    size_t i;
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (i = 0; i < rank && used < size; ++i) {
        if ((int)i == axis)
            used += (size_t)snprintf(buf + used, size - used, "%s%lld..%lld", i ? ", " : "", (long long)lo,
                                     (long long)dims[i]);
        else
            used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    }
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* The axis of input (or output) i that follows the island's run-time dimension; -1: none. */
static int dim_axis(const aotc_model_desc *desc, const int32_t *axes, int i) {
    return desc->num_dims > 0 ? (int)axes[i] : -1;
}

/* The data of input `i` after checking it against the compiled input: its run-time axis (if any)
 * within the island's range and equal to *length where another input gave it already (-1: none
 * did; it is set here); NULL and a status in *err otherwise. */
static const void *checked_input(const aotc_ort_kernel *k, OrtKernelContext *kc, int i, int64_t *length,
                                 OrtStatus **err) {
    const OrtApi *api = k->op->library->api;
    const aotc_ort_island *island = k->op->island;
    const aotc_model_desc *desc = island->describe();
    const aotc_tensor_desc *want = &desc->inputs[i];
    const int axis = dim_axis(desc, desc->input_dim_axes, i);
    const OrtValue *value = NULL;
    OrtTensorTypeAndShapeInfo *info = NULL;
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    int64_t dims[16];
    size_t rank = 0, d;
    void *data = NULL;
    char msg[AOTC_ORT_MESSAGE], got[160], wanted[160];
    int ok;
    *err = api->KernelContext_GetInput(kc, (size_t)i, &value);
    if (*err != NULL) return NULL;
    if (value == NULL) {
        snprintf(msg, sizeof msg, "input %d ('%s') is missing", i, want->name);
        *err = fail(api, island->op_name, msg);
        return NULL;
    }
    *err = api->GetTensorTypeAndShape(value, &info);
    if (*err != NULL) return NULL;
    ok = api->GetTensorElementType(info, &type) == NULL && api->GetDimensionsCount(info, &rank) == NULL &&
         rank <= 16 && api->GetDimensions(info, dims, rank) == NULL;
    api->ReleaseTensorTypeAndShapeInfo(info);
    if (!ok) {
        *err = fail(api, island->op_name, "cannot read an input's type and shape");
        return NULL;
    }
    if ((int)type != island->input_types[i]) {
        snprintf(msg, sizeof msg, "input %d ('%s') has element type %d, compiled for %s (%d)", i, want->name,
                 (int)type, want->dtype_name, island->input_types[i]);
        *err = fail(api, island->op_name, msg);
        return NULL;
    }
    ok = rank == (size_t)want->rank;
    for (d = 0; ok && d < rank; ++d) ok = (int)d == axis || dims[d] == want->shape[d];
    if (!ok) {
        format_shape(got, sizeof got, dims, rank, -1, 0);
        format_shape(wanted, sizeof wanted, want->shape, (size_t)want->rank, axis,
                     axis >= 0 ? desc->dims_min[0] : 0);
        snprintf(msg, sizeof msg, "input %d ('%s') has shape %s, compiled for %s", i, want->name, got, wanted);
        *err = fail(api, island->op_name, msg);
        return NULL;
    }
    if (axis >= 0) {
        const int64_t n = dims[axis];
        if (n < desc->dims_min[0] || n > desc->dims_max[0]) {
            snprintf(msg, sizeof msg,
                     "input %d ('%s') has length %lld on axis %d, the run-time dimension, which was compiled "
                     "for %lld to %lld",
                     i, want->name, (long long)n, axis, (long long)desc->dims_min[0],
                     (long long)desc->dims_max[0]);
            *err = fail(api, island->op_name, msg);
            return NULL;
        }
        if (*length >= 0 && n != *length) {
            snprintf(msg, sizeof msg,
                     "input %d ('%s') has length %lld on axis %d, the run-time dimension, where an input "
                     "before it has %lld",
                     i, want->name, (long long)n, axis, (long long)*length);
            *err = fail(api, island->op_name, msg);
            return NULL;
        }
        *length = n;
    }
    *err = api->GetTensorMutableData((OrtValue *)(uintptr_t)value, &data);
    return data;
}

static OrtStatus *compute(void *kernel_, OrtKernelContext *kc) {
    aotc_ort_kernel *k = (aotc_ort_kernel *)kernel_;
    const OrtApi *api = k->op->library->api;
    const aotc_ort_island *island = k->op->island;
    const aotc_model_desc *desc = island->describe();
    OrtStatus *err = NULL;
    int64_t length = -1; /* the run-time dimension, from the inputs' shapes */
    int i, status;
    pthread_mutex_lock(&k->lock);
    for (i = 0; i < desc->num_inputs && err == NULL; ++i)
        k->inputs[i] = checked_input(k, kc, i, &length, &err);
    if (desc->num_dims > 0 && length < 0) length = desc->dims_max[0]; /* (no input has it) */
    for (i = 0; i < desc->num_outputs && err == NULL; ++i) {
        const aotc_tensor_desc *o = &desc->outputs[i];
        const int axis = dim_axis(desc, desc->output_dim_axes, i);
        int64_t shape[16];
        OrtValue *value = NULL;
        if (axis >= 0 && o->rank <= 16) { /* dense at the length: a prefix of the compiled buffer */
            memcpy(shape, o->shape, (size_t)o->rank * sizeof(int64_t));
            shape[axis] = length;
        }
        err = api->KernelContext_GetOutput(kc, (size_t)i, axis >= 0 ? shape : o->shape, (size_t)o->rank, &value);
        if (err == NULL) err = api->GetTensorMutableData(value, &k->outputs[i]);
    }
    if (err == NULL) {
        aotc_ort_run run;
        memset(&run, 0, sizeof run);
        run.library = k->op->library;
        run.kc = kc;
        if (k->on_ort_pool) aotc_context_set_outside((aotc_context *)k->ctx, on_ort_pool, &run);
        status = desc->num_dims > 0 ? island->run_dims(k->ctx, &length, k->inputs, k->outputs)
                                    : island->run(k->ctx, k->inputs, k->outputs);
        if (k->on_ort_pool) aotc_context_set_outside((aotc_context *)k->ctx, NULL, NULL);
        if (run.err != NULL) {
            err = run.err; /* a loop did not run: whatever the status says */
            if (status == 0) status = AOTC_ERR_THREAD;
        } else if (status != 0) {
            err = fail(api, island->op_name, island->status_message(status));
        }
    }
    pthread_mutex_unlock(&k->lock);
    return err;
}

/* The thread count from the session config entry, -1 without one (and -1 with a status in
 * *err when it is not a count). */
static int configured_threads(const OrtApi *api, const OrtSessionOptions *options, OrtStatus **err) {
    int has = 0;
    char value[32];
    size_t size = sizeof value;
    char *end = NULL;
    long n;
    *err = api->HasSessionConfigEntry(options, AOTC_ORT_THREADS_KEY, &has);
    if (*err != NULL || !has) return -1;
    *err = api->GetSessionConfigEntry(options, AOTC_ORT_THREADS_KEY, value, &size);
    if (*err != NULL) return -1;
    n = strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < 0 || n > 4096) {
        *err = api->CreateStatus(ORT_INVALID_ARGUMENT,
                                 "aotc: the session config entry 'aotc.threads' must be a thread count "
                                 "(0 = every core)");
        return -1;
    }
    return (int)n;
}

OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *api_base);

OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *api_base) {
    const OrtApi *api = api_base->GetApi(AOTC_ORT_API_VERSION);
    OrtCustomOpDomain *domain = NULL;
    aotc_ort_op *ops;
    aotc_ort_library *library;
    OrtStatus *err = NULL;
    int threads, cores = 1, i;
    if (api == NULL) {
        fprintf(stderr,
                "aotc: the custom-op library '%s' needs onnxruntime's C API version %d (onnxruntime "
                "1.%d or newer); this onnxruntime is %s\n",
                aotc_ort_library_name, AOTC_ORT_API_VERSION, AOTC_ORT_API_VERSION,
                api_base->GetVersionString());
        return NULL; /* without an API table there is no way to make a status: the session then
                        fails on the unknown operators, or runs their functions */
    }
    threads = configured_threads(api, options, &err);
    if (err != NULL) return err;
    if (aotc_resolve_num_threads(0, 0, &cores) != AOTC_OK) cores = 1;
    library = (aotc_ort_library *)calloc(1, sizeof *library);
    ops = (aotc_ort_op *)calloc((size_t)aotc_ort_num_islands + 1, sizeof *ops);
    if (library == NULL || ops == NULL || pthread_mutex_init(&library->lock, NULL) != 0 ||
        pthread_mutex_init(&library->run_lock, NULL) != 0) {
        free(library); /* (a mutex that did initialise is never used) */
        free(ops);
        return api->CreateStatus(ORT_FAIL, "aotc: out of memory");
    }
    library->api = api;
    library->api17 = api_base->GetApi(17);
    library->threads = threads;
    library->max_pieces = cores * AOTC_ORT_PIECES_PER_THREAD;
    err = api->CreateCustomOpDomain(AOTC_ORT_DOMAIN, &domain);
    for (i = 0; i < aotc_ort_num_islands && err == NULL; ++i) {
        aotc_ort_op *op = &ops[i];
        const aotc_ort_island *island = &aotc_ort_islands[i];
        op->island = island;
        op->library = library;
        op->num_inputs = 0;
        while (island->input_types[op->num_inputs] != 0) ++op->num_inputs;
        op->base.version = AOTC_ORT_API_VERSION;
        op->base.GetName = get_name;
        op->base.GetExecutionProviderType = get_provider;
        op->base.GetInputType = get_input_type;
        op->base.GetInputTypeCount = get_input_count;
        op->base.GetOutputType = get_output_type;
        op->base.GetOutputTypeCount = get_output_count;
        op->base.KernelDestroy = destroy_kernel;
        op->base.GetInputCharacteristic = get_characteristic;
        op->base.GetOutputCharacteristic = get_characteristic;
        op->base.GetInputMemoryType = get_memory_type;
        op->base.GetVariadicInputMinArity = get_one;
        op->base.GetVariadicInputHomogeneity = get_one;
        op->base.GetVariadicOutputMinArity = get_one;
        op->base.GetVariadicOutputHomogeneity = get_one;
        op->base.CreateKernelV2 = create_kernel;
        op->base.KernelComputeV2 = compute;
        err = api->CustomOpDomain_Add(domain, &op->base);
    }
    if (err == NULL) err = api->AddCustomOpDomain(options, domain);
    return err;
}
