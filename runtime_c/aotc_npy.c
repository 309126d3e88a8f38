/* aotc_npy.c: .npy reading (versions 1.0, 2.0, 3.0) and writing (1.0) for run_model. */
#define _POSIX_C_SOURCE 200809L

#include "aotc_npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dtype_info {
    int32_t dtype;
    const char *name;
    char kind; /* numpy kind letter */
    size_t size;
};

static const struct dtype_info DTYPES[] = {
    {AOTC_DTYPE_FLOAT32, "float32", 'f', 4}, {AOTC_DTYPE_FLOAT64, "float64", 'f', 8},
    {AOTC_DTYPE_INT64, "int64", 'i', 8},     {AOTC_DTYPE_INT32, "int32", 'i', 4},
    {AOTC_DTYPE_INT8, "int8", 'i', 1},       {AOTC_DTYPE_UINT8, "uint8", 'u', 1},
    {AOTC_DTYPE_BOOL, "bool", 'b', 1},       {AOTC_DTYPE_INT16, "int16", 'i', 2},
    {AOTC_DTYPE_UINT16, "uint16", 'u', 2},   {AOTC_DTYPE_UINT32, "uint32", 'u', 4},
    {AOTC_DTYPE_UINT64, "uint64", 'u', 8},   {AOTC_DTYPE_FLOAT16, "float16", 'f', 2},
    {AOTC_DTYPE_BFLOAT16, "bfloat16", 'V', 2}, /* numpy has no bfloat16: ml_dtypes saves '<V2' */
    /* ml_dtypes saves every one-byte narrow type as '<V1', so a file names none of them
     * (aotc_npy_holds); files are written '|V1', which numpy loads as raw bytes */
    {AOTC_DTYPE_FLOAT8E4M3FN, "float8_e4m3fn", 'V', 1}, {AOTC_DTYPE_FLOAT8E4M3FNUZ, "float8_e4m3fnuz", 'V', 1},
    {AOTC_DTYPE_FLOAT8E5M2, "float8_e5m2", 'V', 1},     {AOTC_DTYPE_FLOAT8E5M2FNUZ, "float8_e5m2fnuz", 'V', 1},
    {AOTC_DTYPE_FLOAT8E8M0, "float8_e8m0fnu", 'V', 1},  {AOTC_DTYPE_FLOAT4E2M1, "float4_e2m1fn", 'V', 1},
    {AOTC_DTYPE_INT4, "int4", 'V', 1},                  {AOTC_DTYPE_UINT4, "uint4", 'V', 1},
    {AOTC_DTYPE_INT2, "int2", 'V', 1},                  {AOTC_DTYPE_UINT2, "uint2", 'V', 1},
    {AOTC_DTYPE_FLOAT8E5M2, "float8_e5m2", 'f', 1}, /* read only: ml_dtypes saves it '<f1' */
};
#define NUM_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

static const struct dtype_info *find_dtype(int32_t dtype) {
    size_t i;
    for (i = 0; i < NUM_DTYPES; ++i)
        if (DTYPES[i].dtype == dtype) return &DTYPES[i];
    return NULL;
}

const char *aotc_npy_dtype_name(int32_t dtype) {
    const struct dtype_info *d = find_dtype(dtype);
    return d ? d->name : "unknown";
}

size_t aotc_npy_itemsize(int32_t dtype) {
    const struct dtype_info *d = find_dtype(dtype);
    return d ? d->size : 0;
}

void *aotc_npy_alloc(uint64_t size) {
    void *p = NULL;
    if (size == 0) size = 1;
    if ((uint64_t)(size_t)size != size) return NULL;
    if (posix_memalign(&p, 64, (size_t)size) != 0) return NULL;
    return p;
}

void aotc_npy_free(aotc_npy_array *array) {
    if (array == NULL) return;
    free(array->data);
    array->data = NULL;
}

static int fail(char *err, size_t err_size, const char *fmt, ...) {
    va_list ap;
    if (err != NULL && err_size > 0) {
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Maps a descr such as "<f4" or "|b1" to an enum aotc_dtype (0 = not supported). */
static int32_t dtype_from_descr(const char *descr, int *big_endian) {
    const char *p = descr;
    char order = '=';
    size_t i, size;
    char *end = NULL;
    *big_endian = 0;
    if (*p == '<' || *p == '>' || *p == '|' || *p == '=') order = *p++;
    if (*p == '\0' || !isdigit((unsigned char)p[1])) return 0;
    size = (size_t)strtoul(p + 1, &end, 10);
    if (*end != '\0') return 0;
    for (i = 0; i < NUM_DTYPES; ++i) {
        if (DTYPES[i].kind == *p && DTYPES[i].size == size) {
            if (order == '>' && size > 1) {
                *big_endian = 1;
                return 0;
            }
            return DTYPES[i].dtype;
        }
    }
    return 0;
}

int aotc_npy_holds(const aotc_npy_array *array, int32_t dtype) {
    const struct dtype_info *d = find_dtype(dtype);
    if (array->dtype == dtype) return 1;
    if (d == NULL || d->kind != 'V' || d->size != 1) return 0;
    /* a one-byte narrow type: ml_dtypes' '<V1' (read as the first such entry) or '<f1' */
    return array->dtype == AOTC_DTYPE_FLOAT8E4M3FN || strcmp(array->descr, "<f1") == 0;
}

static const char *skip_space(const char *p) {
    while (*p == ' ') ++p;
    return p;
}

/* Finds the value after 'key': in the header dict. */
static const char *find_key(const char *header, const char *key) {
    char quoted[32];
    const char *p;
    snprintf(quoted, sizeof quoted, "'%s'", key);
    p = strstr(header, quoted);
    if (p == NULL) {
        snprintf(quoted, sizeof quoted, "\"%s\"", key);
        p = strstr(header, quoted);
    }
    if (p == NULL) return NULL;
    p = skip_space(p + strlen(quoted));
    if (*p != ':') return NULL;
    return skip_space(p + 1);
}

static int parse_header(const char *header, aotc_npy_array *out, char *err, size_t err_size,
                        const char *path) {
    const char *p;
    size_t n = 0;
    int big_endian = 0;
    char quote;

    p = find_key(header, "descr");
    if (p == NULL || (*p != '\'' && *p != '"')) return fail(err, err_size, "%s: no 'descr' in the .npy header", path);
    quote = *p++;
    while (*p != quote && *p != '\0' && n + 1 < sizeof out->descr) out->descr[n++] = *p++;
    out->descr[n] = '\0';
    if (*p != quote) return fail(err, err_size, "%s: unsupported dtype in the .npy header", path);
    out->dtype = dtype_from_descr(out->descr, &big_endian);
    if (big_endian) return fail(err, err_size, "%s: big-endian data ('%s') is not supported; save it little-endian", path, out->descr);

    p = find_key(header, "fortran_order");
    if (p == NULL) return fail(err, err_size, "%s: no 'fortran_order' in the .npy header", path);
    if (strncmp(p, "True", 4) == 0) return fail(err, err_size, "%s: Fortran-order arrays are not supported; save a C-contiguous array", path);
    if (strncmp(p, "False", 5) != 0) return fail(err, err_size, "%s: bad 'fortran_order' in the .npy header", path);

    p = find_key(header, "shape");
    if (p == NULL || *p != '(') return fail(err, err_size, "%s: no 'shape' in the .npy header", path);
    p = skip_space(p + 1);
    out->rank = 0;
    while (*p != ')') {
        char *end = NULL;
        long long v;
        if (!isdigit((unsigned char)*p)) return fail(err, err_size, "%s: bad 'shape' in the .npy header", path);
        errno = 0;
        v = strtoll(p, &end, 10);
        if (errno != 0 || v < 0) return fail(err, err_size, "%s: bad dimension in the .npy header", path);
        if (out->rank == AOTC_NPY_MAX_RANK) return fail(err, err_size, "%s: more than %d dimensions", path, AOTC_NPY_MAX_RANK);
        out->shape[out->rank++] = (int64_t)v;
        p = skip_space(end);
        if (*p == ',') p = skip_space(p + 1);
        else if (*p != ')') return fail(err, err_size, "%s: bad 'shape' in the .npy header", path);
    }
    return 0;
}

int aotc_npy_read(const char *path, aotc_npy_array *out, char *err, size_t err_size) {
    unsigned char pre[12];
    char *header = NULL;
    size_t header_len, itemsize;
    uint64_t count = 1;
    int32_t i;
    FILE *f;

    memset(out, 0, sizeof *out);
    f = fopen(path, "rb");
    if (f == NULL) return fail(err, err_size, "%s: cannot open: %s", path, strerror(errno));
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fclose(f);
        return fail(err, err_size, "%s: not a .npy file", path);
    }
    if (pre[6] == 1) {
        header_len = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            fclose(f);
            return fail(err, err_size, "%s: truncated .npy header", path);
        }
        header_len = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        fclose(f);
        return fail(err, err_size, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
    }
    if (header_len > (1u << 24)) {
        fclose(f);
        return fail(err, err_size, "%s: .npy header too large", path);
    }
    header = (char *)malloc(header_len + 1);
    if (header == NULL || fread(header, 1, header_len, f) != header_len) {
        free(header);
        fclose(f);
        return fail(err, err_size, "%s: truncated .npy header", path);
    }
    header[header_len] = '\0';
    if (parse_header(header, out, err, err_size, path) != 0) {
        free(header);
        fclose(f);
        return -1;
    }
    free(header);

    itemsize = aotc_npy_itemsize(out->dtype);
    if (itemsize == 0) {
        /* Unknown dtype: report it through out->descr without reading the data. */
        fclose(f);
        return 0;
    }
    for (i = 0; i < out->rank; ++i) {
        if (out->shape[i] != 0 && count > UINT64_MAX / (uint64_t)out->shape[i]) {
            fclose(f);
            return fail(err, err_size, "%s: array too large", path);
        }
        count *= (uint64_t)out->shape[i];
    }
    out->num_bytes = count * itemsize;
    out->data = aotc_npy_alloc(out->num_bytes);
    if (out->data == NULL) {
        fclose(f);
        return fail(err, err_size, "%s: out of memory (%llu bytes)", path, (unsigned long long)out->num_bytes);
    }
    if (fread(out->data, 1, (size_t)out->num_bytes, f) != (size_t)out->num_bytes) {
        fclose(f);
        aotc_npy_free(out);
        return fail(err, err_size, "%s: truncated data (expected %llu bytes)", path, (unsigned long long)out->num_bytes);
    }
    fclose(f);
    return 0;
}

int aotc_npy_write(const char *path, int32_t dtype, int32_t rank, const int64_t *shape,
                   const void *data, uint64_t num_bytes, char *err, size_t err_size) {
    const struct dtype_info *d = find_dtype(dtype);
    char dict[64 + 24 * AOTC_NPY_MAX_RANK];
    size_t len, total, pad;
    unsigned char pre[10];
    int32_t i;
    FILE *f;
    int ok;

    if (d == NULL) return fail(err, err_size, "%s: unknown dtype %d", path, (int)dtype);
    if (rank < 0 || rank > AOTC_NPY_MAX_RANK) return fail(err, err_size, "%s: bad rank %d", path, (int)rank);
    len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%c%c%u', 'fortran_order': False, 'shape': (",
                           d->size == 1 ? '|' : '<', d->kind, (unsigned)d->size);
    for (i = 0; i < rank; ++i)
        len += (size_t)snprintf(dict + len, sizeof dict - len, rank == 1 ? "%lld," : (i ? ", %lld" : "%lld"),
                                (long long)shape[i]);
    len += (size_t)snprintf(dict + len, sizeof dict - len, "), }");
    total = 10 + len + 1;
    pad = (64 - total % 64) % 64;

    f = fopen(path, "wb");
    if (f == NULL) return fail(err, err_size, "%s: cannot create: %s", path, strerror(errno));
    memcpy(pre, "\x93NUMPY\x01\x00", 8);
    pre[8] = (unsigned char)((len + pad + 1) & 0xff);
    pre[9] = (unsigned char)((len + pad + 1) >> 8);
    ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, len, f) == len;
    for (i = 0; ok && (size_t)i < pad; ++i) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, 1, (size_t)num_bytes, f) == (size_t)num_bytes;
    if (fclose(f) != 0) ok = 0;
    if (!ok) return fail(err, err_size, "%s: write failed", path);
    return 0;
}
