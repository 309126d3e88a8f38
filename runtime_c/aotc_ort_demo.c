/* aotc_ort_demo.c: runs a model of `aotc optimize --emit ort` in onnxruntime from C, without Python.
 *
 *   ort_demo [--ort LIBONNXRUNTIME] [--threads N] [--aotc-threads N] [--bench N]
 *            MODEL.onnx LIBRARY.so [-i NAME=IN.npy]... [-o OUTDIR]
 *
 * It loads onnxruntime's shared library with dlopen (the path from --ort, else from the
 * environment variable AOTC_ONNXRUNTIME; the onnxruntime Python wheel ships one as
 * onnxruntime/capi/libonnxruntime.so.1.*), asks it for its C API (version AOTC_ORT_API_VERSION),
 * registers the custom-op library (RegisterCustomOpsLibrary_V2), creates a session from the model,
 * feeds each input NAME from its .npy file, runs the model and writes each output as
 * OUTDIR/<output name>.npy (characters other than letters, digits, '.', '-' and '_' become '_').
 * "-i NAME=" may be left out when the model has one input. Nothing is linked against onnxruntime:
 * the program builds with any C99 compiler and -ldl, and declares onnxruntime's C ABI itself
 * (aotc_ort_abi.h).
 *
 * --threads N sets onnxruntime's intra-op threads (SetIntraOpNumThreads; 0, the default, is
 * onnxruntime's default), the pool the library's islands run their loops on too.
 * --aotc-threads N sets the session config entry "aotc.threads" before the library is
 * registered: the islands then get a pool of N threads of their own (0: every core). --bench N
 * runs N timed runs after one warm-up and prints "latency ms: min A median B max C (N runs)".
 *
 * Exit status: 0 ok; 2 an error (bad usage, no onnxruntime, a file that cannot be read or written,
 * or any error onnxruntime or the library reports, printed with its message); 1 out of memory.
 * No global mutable state: everything lives in one struct on main's stack.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "aotc_npy.h"
#include "aotc_ort_abi.h"

#define DEMO "ort_demo"
#define ENV_ORT "AOTC_ONNXRUNTIME"
#define THREADS_KEY "aotc.threads"
#define FIND_ORT                                                                                        \
    "python -c \"import onnxruntime, pathlib; print(next(pathlib.Path(onnxruntime.__file__).parent"    \
    ".glob('capi/libonnxruntime.so*')))\""

/* An -i argument: NAME=FILE (name_len characters of name), or FILE alone (name NULL). */
typedef struct feed {
    const char *name;
    size_t name_len;
    const char *path;
} feed;

typedef struct options {
    const char *ort_path, *model, *library, *out_dir;
    int threads, runs;
    const char *aotc_threads; /* NULL: no "aotc.threads" entry */
    feed *feeds;
    int num_feeds;
} options;

/* Everything the demo holds; released by demo_free in reverse order of creation. */
typedef struct demo {
    void *ort; /* dlopen handle */
    const OrtApi *api;
    const char *version;
    OrtEnv *env;
    OrtSessionOptions *session_options;
    OrtSession *session;
    OrtAllocator *allocator; /* onnxruntime's default allocator (not freed) */
    OrtMemoryInfo *memory;
    size_t num_inputs, num_outputs;
    char **input_names, **output_names; /* allocated by `allocator` */
    aotc_npy_array *arrays;             /* one per session input */
    OrtValue **inputs, **outputs;
    double *times; /* --bench */
} demo;

/* ONNX element types (onnxruntime's numbering) and aotc_npy dtypes, both ways. */
static const struct {
    ONNXTensorElementDataType ort;
    int32_t npy;
} DTYPES[] = {
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, AOTC_DTYPE_FLOAT32}, {ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, AOTC_DTYPE_FLOAT64},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, AOTC_DTYPE_INT64},   {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, AOTC_DTYPE_INT32},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, AOTC_DTYPE_INT8},     {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, AOTC_DTYPE_UINT8},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, AOTC_DTYPE_BOOL},     {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, AOTC_DTYPE_INT16},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, AOTC_DTYPE_UINT16}, {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, AOTC_DTYPE_UINT32},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, AOTC_DTYPE_UINT64}, {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, AOTC_DTYPE_FLOAT16},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, AOTC_DTYPE_BFLOAT16},
    /* the one-byte float8 kinds (onnxruntime packs the 4- and 2-bit types, aotc does not) */
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN, AOTC_DTYPE_FLOAT8E4M3FN},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ, AOTC_DTYPE_FLOAT8E4M3FNUZ},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2, AOTC_DTYPE_FLOAT8E5M2},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ, AOTC_DTYPE_FLOAT8E5M2FNUZ},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0, AOTC_DTYPE_FLOAT8E8M0},
};
#define NUM_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

static int32_t npy_dtype_of(ONNXTensorElementDataType t) {
    size_t i;
    for (i = 0; i < NUM_DTYPES; ++i)
        if (DTYPES[i].ort == t) return DTYPES[i].npy;
    return 0;
}

static ONNXTensorElementDataType ort_type_of(int32_t dtype) {
    size_t i;
    for (i = 0; i < NUM_DTYPES; ++i)
        if (DTYPES[i].npy == dtype) return DTYPES[i].ort;
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: " DEMO " [--ort LIBONNXRUNTIME] [--threads N] [--aotc-threads N] [--bench N]\n"
            "                MODEL.onnx LIBRARY.so [-i NAME=IN.npy]... [-o OUTDIR]\n"
            "  --ort PATH        onnxruntime's shared library (default: $" ENV_ORT ")\n"
            "  --threads N       onnxruntime's intra-op threads, which the islands use too\n"
            "                    (0: onnxruntime's default)\n"
            "  --aotc-threads N  give the islands a pool of N threads of their own (0: every core)\n"
            "  --bench N         time N runs after a warm-up and print the median latency\n"
            "  -i NAME=FILE      the model input NAME from a .npy file (NAME= may be left out\n"
            "                    for a model with one input)\n"
            "  -o OUTDIR         write each output as OUTDIR/<output name>.npy\n");
}

static int parse_count(const char *flag, const char *text, int min, int *out) {
    char *end = NULL;
    long v;
    errno = 0;
    v = text ? strtol(text, &end, 10) : 0;
    if (text == NULL || errno != 0 || end == text || *end != '\0' || v < min || v > 1000000000L) {
        fprintf(stderr, DEMO ": %s needs an integer >= %d\n", flag, min);
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* Fills o from argv; 0 after a message when the command line is wrong, -1 for --help. */
static int parse_args(int argc, char **argv, options *o) {
    const char *positional[2];
    int num_positional = 0, i;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1;
        if (strcmp(a, "--threads") == 0) {
            if (!parse_count(a, value, 0, &o->threads)) return 0;
            ++i;
        } else if (strcmp(a, "--aotc-threads") == 0) {
            int n;
            if (!parse_count(a, value, 0, &n)) return 0;
            o->aotc_threads = value;
            ++i;
        } else if (strcmp(a, "--bench") == 0) {
            if (!parse_count(a, value, 1, &o->runs)) return 0;
            ++i;
        } else if (strcmp(a, "--ort") == 0 || strcmp(a, "-o") == 0 || strcmp(a, "-i") == 0) {
            if (value == NULL || value[0] == '\0') {
                fprintf(stderr, DEMO ": %s needs %s\n", a,
                        a[1] == 'i' ? "NAME=FILE.npy" : a[1] == 'o' ? "a folder" : "a path");
                return 0;
            }
            if (a[1] == 'i') {
                feed *f = &o->feeds[o->num_feeds++];
                const char *eq = strchr(value, '=');
                f->name = eq ? value : NULL;
                f->name_len = eq ? (size_t)(eq - value) : 0;
                f->path = eq ? eq + 1 : value;
                if (f->path[0] == '\0') {
                    fprintf(stderr, DEMO ": -i %s names no file\n", value);
                    return 0;
                }
            } else if (a[1] == 'o') {
                o->out_dir = value;
            } else {
                o->ort_path = value;
            }
            ++i;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, DEMO ": unknown option %s\n", a);
            return 0;
        } else if (num_positional < 2) {
            positional[num_positional++] = a;
        } else {
            fprintf(stderr, DEMO ": unexpected argument %s (inputs go after -i)\n", a);
            return 0;
        }
    }
    if (num_positional != 2) {
        fprintf(stderr, DEMO ": expected MODEL.onnx and LIBRARY.so\n");
        return 0;
    }
    o->model = positional[0];
    o->library = positional[1];
    return 1;
}

/* 1 when st is NULL (success); otherwise prints "ort_demo: WHAT: message", frees st, returns 0. */
static int ok(const demo *d, OrtStatus *st, const char *what) {
    if (st == NULL) return 1;
    fprintf(stderr, DEMO ": %s: %s\n", what, d->api->GetErrorMessage(st));
    d->api->ReleaseStatus(st);
    return 0;
}

/* Loads onnxruntime and gets its API table; 0 after a message when it cannot. */
static int load_onnxruntime(demo *d, const char *path) {
    void *sym;
    AotcOrtGetApiBaseFn get_api_base;
    const OrtApiBase *base;
    if (path == NULL || path[0] == '\0') {
        fprintf(stderr,
                DEMO ": where is onnxruntime? Pass --ort PATH or set " ENV_ORT " to its shared library "
                "libonnxruntime.so; the onnxruntime Python wheel has one, printed by\n  " FIND_ORT "\n");
        return 0;
    }
    d->ort = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (d->ort == NULL) {
        fprintf(stderr, DEMO ": cannot load onnxruntime from %s: %s\n", path, dlerror());
        return 0;
    }
    sym = dlsym(d->ort, "OrtGetApiBase");
    if (sym == NULL) {
        fprintf(stderr, DEMO ": %s is not onnxruntime's library (it has no OrtGetApiBase)\n", path);
        return 0;
    }
    /* POSIX guarantees that a data pointer holds a function address (aotc_ort_abi.h checks the
     * sizes); memcpy avoids the cast that ISO C leaves undefined. */
    memcpy(&get_api_base, &sym, sizeof get_api_base);
    base = get_api_base();
    d->version = base->GetVersionString();
    d->api = base->GetApi(AOTC_ORT_API_VERSION);
    if (d->api == NULL) {
        fprintf(stderr, DEMO ": onnxruntime %s (%s) is too old: the library needs its C API version %d, "
                "onnxruntime " AOTC_ORT_MIN_RELEASE " or newer\n", d->version, path, AOTC_ORT_API_VERSION);
        return 0;
    }
    return 1;
}

/* RegisterCustomOpsLibrary_V2 hands the path to dlopen, which searches the library path for a
 * name without a slash: "./" keeps a plain file name relative to the current folder. */
static int register_library(demo *d, const char *library) {
    char *path;
    int good;
    if (strchr(library, '/') != NULL)
        return ok(d, d->api->RegisterCustomOpsLibrary_V2(d->session_options, library), "registering the library");
    path = (char *)malloc(strlen(library) + 3);
    if (path == NULL) return -1;
    strcpy(path, "./");
    strcat(path, library);
    good = ok(d, d->api->RegisterCustomOpsLibrary_V2(d->session_options, path), "registering the library");
    free(path);
    return good;
}

/* The environment, the options (threads, the library) and the session. */
static int create_session(demo *d, const options *o) {
    const OrtApi *api = d->api;
    if (!ok(d, api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, DEMO, &d->env), "creating the environment")) return 0;
    if (!ok(d, api->CreateSessionOptions(&d->session_options), "creating the session options")) return 0;
    if (o->threads > 0 && !ok(d, api->SetIntraOpNumThreads(d->session_options, o->threads), "--threads"))
        return 0;
    /* before registering: the library reads it then */
    if (o->aotc_threads != NULL &&
        !ok(d, api->AddSessionConfigEntry(d->session_options, THREADS_KEY, o->aotc_threads), "--aotc-threads"))
        return 0;
    if (!register_library(d, o->library)) return 0;
    if (!ok(d, api->CreateSession(d->env, o->model, d->session_options, &d->session), "loading the model"))
        return 0;
    if (!ok(d, api->GetAllocatorWithDefaultOptions(&d->allocator), "getting the allocator")) return 0;
    if (!ok(d, api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &d->memory), "creating memory info"))
        return 0;
    return 1;
}

/* Allocates the per-input and per-output arrays and reads the session's input and output names. */
static int read_names(demo *d) {
    const OrtApi *api = d->api;
    size_t i;
    if (!ok(d, api->SessionGetInputCount(d->session, &d->num_inputs), "counting the inputs")) return 0;
    if (!ok(d, api->SessionGetOutputCount(d->session, &d->num_outputs), "counting the outputs")) return 0;
    d->input_names = (char **)calloc(d->num_inputs + 1, sizeof(char *));
    d->output_names = (char **)calloc(d->num_outputs + 1, sizeof(char *));
    d->arrays = (aotc_npy_array *)calloc(d->num_inputs + 1, sizeof(aotc_npy_array));
    d->inputs = (OrtValue **)calloc(d->num_inputs + 1, sizeof(OrtValue *));
    d->outputs = (OrtValue **)calloc(d->num_outputs + 1, sizeof(OrtValue *));
    if (!d->input_names || !d->output_names || !d->arrays || !d->inputs || !d->outputs) return -1;
    for (i = 0; i < d->num_inputs; ++i)
        if (!ok(d, api->SessionGetInputName(d->session, i, d->allocator, &d->input_names[i]), "naming the inputs"))
            return 0;
    for (i = 0; i < d->num_outputs; ++i)
        if (!ok(d, api->SessionGetOutputName(d->session, i, d->allocator, &d->output_names[i]),
                "naming the outputs"))
            return 0;
    return 1;
}

static void list_inputs(const demo *d) {
    size_t i;
    fprintf(stderr, DEMO ": the model's inputs:");
    for (i = 0; i < d->num_inputs; ++i) fprintf(stderr, " %s", d->input_names[i]);
    fprintf(stderr, "%s\n", d->num_inputs ? "" : " none");
}

static int feed_is(const feed *f, const char *name) {
    return f->name != NULL && strlen(name) == f->name_len && strncmp(f->name, name, f->name_len) == 0;
}

/* The -i file of each session input, in the session's order (paths[i]); 0 after a message when
 * one is missing, unknown or given twice. */
static int match_feeds(const demo *d, const options *o, const char **paths) {
    size_t i;
    int j, k;
    for (j = 0; j < o->num_feeds; ++j) {
        const feed *f = &o->feeds[j];
        if (f->name == NULL) {
            if (d->num_inputs != 1 || o->num_feeds != 1) {
                fprintf(stderr, DEMO ": -i %s: name the input (-i NAME=%s)\n", f->path, f->path);
                list_inputs(d);
                return 0;
            }
            paths[0] = f->path;
            return 1;
        }
        for (k = 0; k < j; ++k)
            if (o->feeds[k].name && o->feeds[k].name_len == f->name_len &&
                strncmp(o->feeds[k].name, f->name, f->name_len) == 0) {
                fprintf(stderr, DEMO ": the input %.*s is given twice\n", (int)f->name_len, f->name);
                return 0;
            }
        for (i = 0; i < d->num_inputs && !feed_is(f, d->input_names[i]); ++i) continue;
        if (i == d->num_inputs) {
            fprintf(stderr, DEMO ": the model has no input %.*s\n", (int)f->name_len, f->name);
            list_inputs(d);
            return 0;
        }
        paths[i] = f->path;
    }
    for (i = 0; i < d->num_inputs; ++i)
        if (paths[i] == NULL) {
            fprintf(stderr, DEMO ": no file for the input %s (-i %s=FILE.npy)\n", d->input_names[i],
                    d->input_names[i]);
            return 0;
        }
    return 1;
}

/* Reads every input's .npy file and wraps it in a tensor (onnxruntime reads it in place). */
static int read_inputs(demo *d, const options *o) {
    const char **paths = (const char **)calloc(d->num_inputs + 1, sizeof(const char *));
    char err[1024];
    size_t i;
    int status = 1;
    if (paths == NULL) return -1;
    if (!match_feeds(d, o, paths)) status = 0;
    for (i = 0; i < d->num_inputs && status == 1; ++i) {
        aotc_npy_array *a = &d->arrays[i];
        ONNXTensorElementDataType type;
        if (aotc_npy_read(paths[i], a, err, sizeof err) != 0) {
            fprintf(stderr, DEMO ": %s\n", err);
            status = 0;
            break;
        }
        type = ort_type_of(a->dtype);
        if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED) {
            fprintf(stderr, DEMO ": %s: the dtype %s is not one the demo reads\n", paths[i], a->descr);
            status = 0;
            break;
        }
        if (!ok(d, d->api->CreateTensorWithDataAsOrtValue(d->memory, a->data, (size_t)a->num_bytes, a->shape,
                                                          (size_t)a->rank, type, &d->inputs[i]),
                d->input_names[i]))
            status = 0;
    }
    free(paths);
    return status;
}

static void release_outputs(demo *d) {
    size_t i;
    for (i = 0; i < d->num_outputs; ++i) {
        d->api->ReleaseValue(d->outputs[i]);
        d->outputs[i] = NULL;
    }
}

static int run_once(demo *d) {
    release_outputs(d); /* Run allocates them afresh */
    return ok(d, d->api->Run(d->session, NULL, (const char *const *)d->input_names,
                             (const OrtValue *const *)d->inputs, d->num_inputs,
                             (const char *const *)d->output_names, d->num_outputs, d->outputs),
              "running the model");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One warm-up run, then `runs` timed runs; prints their min, median and max. */
static int bench(demo *d, int runs) {
    double *t;
    int i;
    d->times = t = (double *)malloc(sizeof(double) * (size_t)runs);
    if (t == NULL) return -1;
    if (!run_once(d)) return 0;
    for (i = 0; i < runs; ++i) {
        double start = now_ms();
        if (!run_once(d)) return 0;
        t[i] = now_ms() - start;
    }
    qsort(t, (size_t)runs, sizeof(double), compare_double);
    printf("latency ms: min %.3f median %.3f max %.3f (%d runs)\n", t[0],
           runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]), t[runs - 1], runs);
    return 1;
}

/* OUTDIR/<name>.npy, with characters other than [A-Za-z0-9._-] replaced by '_'; NULL when out of
 * memory. */
static char *output_path(const char *dir, const char *name) {
    size_t n = strlen(dir), m = strlen(name), i;
    char *p = (char *)malloc(n + m + 6), *q;
    if (p == NULL) return NULL;
    memcpy(p, dir, n);
    q = p + n;
    if (n > 0 && dir[n - 1] != '/') *q++ = '/';
    for (i = 0; i < m; ++i) {
        char c = name[i];
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                   c == '-' || c == '_';
        *q++ = keep ? c : '_';
    }
    strcpy(q, ".npy");
    return p;
}

/* Describes (and with -o writes) output i; 0 after a message, -1 out of memory. */
static int write_output(const demo *d, size_t i, const char *out_dir) {
    const OrtApi *api = d->api;
    const char *name = d->output_names[i];
    OrtTensorTypeAndShapeInfo *info = NULL;
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    int64_t *shape = NULL;
    size_t rank = 0, count = 0, r;
    int is_tensor = 0, status = 1;
    int32_t dtype;
    void *data = NULL;
    char *path = NULL, err[1024];
    if (!ok(d, api->IsTensor(d->outputs[i], &is_tensor), name)) return 0;
    if (!is_tensor) {
        fprintf(stderr, DEMO ": the output %s is not a tensor (a sequence or a map): the demo writes tensors only\n",
                name);
        return 0;
    }
    if (!ok(d, api->GetTensorTypeAndShape(d->outputs[i], &info), name)) return 0;
    if (!ok(d, api->GetTensorElementType(info, &type), name) || !ok(d, api->GetDimensionsCount(info, &rank), name) ||
        !ok(d, api->GetTensorShapeElementCount(info, &count), name))
        status = 0;
    if (status == 1 && (shape = (int64_t *)calloc(rank + 1, sizeof(int64_t))) == NULL) status = -1;
    if (status == 1 && !ok(d, api->GetDimensions(info, shape, rank), name)) status = 0;
    api->ReleaseTensorTypeAndShapeInfo(info);
    dtype = npy_dtype_of(type);
    if (status == 1 && dtype == 0) {
        fprintf(stderr, DEMO ": the output %s has element type %d, which the demo cannot write as .npy\n", name,
                (int)type);
        status = 0;
    }
    if (status == 1) {
        printf("output %s: %s[", name, aotc_npy_dtype_name(dtype));
        for (r = 0; r < rank; ++r) printf(r ? ", %lld" : "%lld", (long long)shape[r]);
        printf("]");
    }
    if (status == 1 && out_dir != NULL) {
        if (!ok(d, api->GetTensorMutableData(d->outputs[i], &data), name)) status = 0;
        else if ((path = output_path(out_dir, name)) == NULL) status = -1;
        else if (aotc_npy_write(path, dtype, (int32_t)rank, shape, data, (uint64_t)count * aotc_npy_itemsize(dtype),
                                err, sizeof err) != 0) {
            printf("\n");
            fprintf(stderr, DEMO ": %s\n", err);
            status = 0;
        } else {
            printf(" -> %s", path);
        }
    }
    if (status == 1) printf("\n");
    free(path);
    free(shape);
    return status;
}

static int write_outputs(const demo *d, const char *out_dir) {
    size_t i;
    int status = 1;
    if (out_dir != NULL && mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, DEMO ": cannot create the folder %s: %s\n", out_dir, strerror(errno));
        return 0;
    }
    for (i = 0; i < d->num_outputs && status == 1; ++i) status = write_output(d, i, out_dir);
    return status;
}

static void demo_free(demo *d) {
    size_t i;
    if (d->api != NULL) {
        const OrtApi *api = d->api;
        release_outputs(d);
        for (i = 0; d->inputs && i < d->num_inputs; ++i) api->ReleaseValue(d->inputs[i]);
        for (i = 0; d->input_names && i < d->num_inputs; ++i)
            if (d->input_names[i]) api->ReleaseStatus(api->AllocatorFree(d->allocator, d->input_names[i]));
        for (i = 0; d->output_names && i < d->num_outputs; ++i)
            if (d->output_names[i]) api->ReleaseStatus(api->AllocatorFree(d->allocator, d->output_names[i]));
        api->ReleaseMemoryInfo(d->memory);
        api->ReleaseSession(d->session);
        api->ReleaseSessionOptions(d->session_options);
        api->ReleaseEnv(d->env);
    }
    for (i = 0; d->arrays && i < d->num_inputs; ++i) aotc_npy_free(&d->arrays[i]);
    free(d->arrays);
    free(d->inputs);
    free(d->outputs);
    free(d->input_names);
    free(d->output_names);
    free(d->times);
    if (d->ort != NULL) dlclose(d->ort);
}

/* 0 ok, 2 an error (reported), 1 out of memory, from a step's 1 / 0 / -1. */
static int exit_status(int step) {
    if (step < 0) fprintf(stderr, DEMO ": out of memory\n");
    return step > 0 ? 0 : step == 0 ? 2 : 1;
}

int main(int argc, char **argv) {
    options o;
    demo d;
    int step, parsed;
    memset(&o, 0, sizeof o);
    memset(&d, 0, sizeof d);
    o.feeds = (feed *)calloc((size_t)argc + 1, sizeof(feed));
    if (o.feeds == NULL) return exit_status(-1);
    parsed = parse_args(argc, argv, &o);
    if (parsed <= 0) {
        usage(parsed < 0 ? stdout : stderr);
        free(o.feeds);
        return parsed < 0 ? 0 : 2;
    }
    if (o.ort_path == NULL) o.ort_path = getenv(ENV_ORT);
    step = load_onnxruntime(&d, o.ort_path);
    if (step == 1) step = create_session(&d, &o);
    if (step == 1) step = read_names(&d);
    if (step == 1) step = read_inputs(&d, &o);
    if (step == 1) step = o.runs > 0 ? bench(&d, o.runs) : run_once(&d);
    if (step == 1) {
        printf("onnxruntime %s, %s with %s: %d input%s, %d output%s\n", d.version, o.model, o.library,
               (int)d.num_inputs, d.num_inputs == 1 ? "" : "s", (int)d.num_outputs, d.num_outputs == 1 ? "" : "s");
        step = write_outputs(&d, o.out_dir);
    }
    demo_free(&d);
    free(o.feeds);
    return exit_status(step);
}
