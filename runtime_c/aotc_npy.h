/* aotc_npy.h: reading and writing NumPy .npy files (little-endian, C order) for run_model. */
#ifndef AOTC_NPY_H
#define AOTC_NPY_H

#include "aotc_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AOTC_NPY_MAX_RANK 32

typedef struct aotc_npy_array {
    int32_t dtype; /* enum aotc_dtype, 0 when the file's dtype is not one aotc knows */
    char descr[16]; /* the file's dtype string, e.g. "<f4" */
    int32_t rank;
    int64_t shape[AOTC_NPY_MAX_RANK];
    void *data;         /* 64-byte aligned; free with aotc_npy_free */
    uint64_t num_bytes; /* product(shape) * itemsize */
} aotc_npy_array;

/* Reads path into out (owned by the caller afterwards). Returns 0, or -1 with a message in err. */
int aotc_npy_read(const char *path, aotc_npy_array *out, char *err, size_t err_size);

/* Writes a version 1.0 .npy file. Returns 0, or -1 with a message in err. */
int aotc_npy_write(const char *path, int32_t dtype, int32_t rank, const int64_t *shape,
                   const void *data, uint64_t num_bytes, char *err, size_t err_size);

void aotc_npy_free(aotc_npy_array *array);

/* 1 when array (read from a file) holds dtype's elements: its dtype, or for a one-byte narrow
 * type (FLOAT8*, FLOAT4E2M1, [U]INT4, [U]INT2) any file ml_dtypes writes for one ('<V1',
 * '<f1'), since such a file does not say which. */
int aotc_npy_holds(const aotc_npy_array *array, int32_t dtype);

/* "float32", ... for an enum aotc_dtype; "unknown" otherwise. */
const char *aotc_npy_dtype_name(int32_t dtype);

/* Bytes per element of an enum aotc_dtype; 0 for unknown. */
size_t aotc_npy_itemsize(int32_t dtype);

/* Allocates size bytes (at least 1) aligned to 64; free with free(). NULL on failure. */
void *aotc_npy_alloc(uint64_t size);

#ifdef __cplusplus
}
#endif

#endif /* AOTC_NPY_H */
