/* aotc_api.h: the public types every aotc bundle header uses (status codes, tensor descriptors).
 *
 * Part of the aotc runtime; identical in every bundle, so headers of several bundles can be
 * included in one translation unit.
 */
#ifndef AOTC_API_H
#define AOTC_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every aotc function that can fail returns one of these (0 = success). */
enum aotc_status {
    AOTC_OK = 0,
    AOTC_ERR_NULL_ARGUMENT = 1,        /* a required pointer (or an entry of inputs/outputs) is NULL */
    AOTC_ERR_BAD_SIZE = 2,             /* a size or shape does not match the model */
    AOTC_ERR_MISALIGNED_WORKSPACE = 3, /* the workspace is not aligned to the model's alignment */
    AOTC_ERR_UNSUPPORTED_CPU = 4,      /* this CPU lacks an instruction set the kernels use */
    AOTC_ERR_OUT_OF_MEMORY = 5,        /* allocation failed while creating a context */
    AOTC_ERR_THREAD = 6,               /* starting a worker thread failed */
    AOTC_ERR_BAD_ARGUMENT = 7,         /* an argument is out of range (e.g. a negative thread count) */
    AOTC_ERR_KERNEL = 8,               /* a kernel reported an error */
    AOTC_ERR_INTERNAL = 9,             /* inconsistent generated tables (a bug in aotc) */
    AOTC_ERR_MISALIGNED_WEIGHTS = 10,  /* caller-provided weights are not aligned as the model needs */
    AOTC_ERR_NO_DEVICE = 11,           /* GPU bundles: no device (or driver), or none matches the choice */
    AOTC_ERR_DEVICE = 12,              /* GPU bundles: the device's API failed (build, allocation, launch,
                                          copy); the context's message says which call and why */
    AOTC_ERR_INPUT_VALUE = 13          /* an input holds a parameter (axes, a shape, k, ...) whose value
                                          differs from the one the model was compiled for: the
                                          header's "Checked at run time" lists them */
};

/* Element types of model inputs and outputs. */
enum aotc_dtype {
    AOTC_DTYPE_FLOAT32 = 1,
    AOTC_DTYPE_FLOAT64 = 2,
    AOTC_DTYPE_INT64 = 3,
    AOTC_DTYPE_INT32 = 4,
    AOTC_DTYPE_INT8 = 5,
    AOTC_DTYPE_UINT8 = 6,
    AOTC_DTYPE_BOOL = 7, /* one byte per element, 0 or 1 */
    AOTC_DTYPE_INT16 = 8,
    AOTC_DTYPE_UINT16 = 9,
    AOTC_DTYPE_UINT32 = 10,
    AOTC_DTYPE_UINT64 = 11,
    AOTC_DTYPE_FLOAT16 = 12, /* IEEE 754 binary16, two bytes */
    AOTC_DTYPE_BFLOAT16 = 13, /* the top two bytes of a float32 (.npy: '<V2', as ml_dtypes saves it) */
    /* The narrow types take one byte per element (ml_dtypes' layout, not ONNX's packed raw
     * data): an 8-bit float's code; a 4-bit float's or 4-/2-bit integer's bits in the low
     * bits of the byte (written with the high bits 0, which are ignored when read). .npy:
     * '<V1' ('<f1' for FLOAT8E5M2), as ml_dtypes saves them. */
    AOTC_DTYPE_FLOAT8E4M3FN = 14,
    AOTC_DTYPE_FLOAT8E4M3FNUZ = 15,
    AOTC_DTYPE_FLOAT8E5M2 = 16,
    AOTC_DTYPE_FLOAT8E5M2FNUZ = 17,
    AOTC_DTYPE_FLOAT8E8M0 = 18,
    AOTC_DTYPE_FLOAT4E2M1 = 19,
    AOTC_DTYPE_INT4 = 20,
    AOTC_DTYPE_UINT4 = 21,
    AOTC_DTYPE_INT2 = 22,
    AOTC_DTYPE_UINT2 = 23
};

/* One model input or output: dense, C (row-major) order. */
typedef struct aotc_tensor_desc {
    const char *name;       /* the ONNX value name */
    int32_t dtype;          /* an enum aotc_dtype */
    const char *dtype_name; /* "float32", "int64", ... */
    int32_t rank;
    const int64_t *shape;   /* rank entries */
    uint64_t num_bytes;     /* size of the caller's buffer */
} aotc_tensor_desc;

/* Static description of a compiled model (all pointers refer to constant data). */
typedef struct aotc_model_desc {
    const char *name;
    int32_t num_inputs;
    const aotc_tensor_desc *inputs;
    int32_t num_outputs;
    const aotc_tensor_desc *outputs;
    uint64_t workspace_size;  /* bytes NAME_run needs as its workspace */
    uint64_t workspace_align; /* the workspace's required alignment */
    const char *triple;       /* target the kernels were compiled for */
    /* Dimensions known only at run time (0 for a static model): dimension k runs from
     * dims_min[k] to dims_max[k]; the shapes above hold dims_max[k] on the axes that follow it,
     * input_dim_axes[i] / output_dim_axes[i] (-1: none), the first axis longer than 1 of its
     * tensor, so a dense tensor at a shorter length is a prefix of its buffer. */
    int32_t num_dims;
    const int64_t *dims_min;
    const int64_t *dims_max;
    const int32_t *input_dim_axes;
    const int32_t *output_dim_axes;
    /* Outputs whose length the input data decides (NonZero, Unique, Compress by a run-time
     * condition; NULL when none has one): output_computed_axes[i] (-1: none) is the axis whose
     * length the run computes; the shape above holds its bound, for which the caller's buffer is
     * sized. The run writes the output dense at its length, a prefix of the buffer, and
     * NAME_output_shape / NAME_context_output_shape give that shape after a run. */
    const int32_t *output_computed_axes;
} aotc_model_desc;

/* Options of a GPU bundle's context (NAME_create_with_options): zero-initialise, then set what
 * you need. */
typedef struct aotc_gpu_options {
    /* The device: NULL takes $AOTC_OPENCL_DEVICE (OpenCL) or $AOTC_CUDA_DEVICE (CUDA), else the
     * default (OpenCL: the first GPU, else the first device; CUDA: device 0). OpenCL: a number
     * (the device's index over all platforms), "gpu", "cpu" or "accelerator" (the first of that
     * type), or text found in the device's or platform's name (case ignored). CUDA: an ordinal. */
    const char *device;
    /* OpenCL: a file holding the built program. Read at create when it was built from these
     * kernels for this device and driver; written (atomically) after a build from source. A
     * file that cannot be read or written only costs the build. NULL: no cache. */
    const char *binary_cache;
    /* When not NULL: a failed create writes its message here (NUL-terminated, truncated). */
    char *error;
    size_t error_size;
} aotc_gpu_options;

#ifdef __cplusplus
}
#endif

#endif /* AOTC_API_H */
