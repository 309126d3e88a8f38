/*
 * aotc_ort_abi.h -- the subset of onnxruntime's C ABI that aotc custom-op
 * libraries use, declared by aotc itself (the onnxruntime Python wheel ships
 * no C headers).
 *
 * Only binary layout is shared with onnxruntime: member order, argument
 * lists, return types and enum values.  Those facts were taken from
 * onnxruntime's public C API (include/onnxruntime/core/session/
 * onnxruntime_c_api.h) and from the function table plus offset
 * static_asserts in onnxruntime/core/session/onnxruntime_c_api.cc.  The
 * offset checks at the end of this file repeat onnxruntime's own
 * checkpoints, so a miscounted placeholder fails to compile.
 *
 * How versions work
 * -----------------
 *  * OrtApi is a table of function pointers that only grows.  API version N
 *    adds members at the end, and OrtApiBase::GetApi(N) returns NULL when
 *    the running onnxruntime is older than N.  Since onnxruntime 1.11 the
 *    API version equals the minor release number (API 16 <-> 1.16.0,
 *    API 25 <-> 1.25.0).
 *  * OrtCustomOp is filled in by us.  Its `version` field says which
 *    trailing members exist, and onnxruntime reads a member only when
 *    `version` is high enough.
 *
 * AOTC_ORT_API_VERSION = 16, so libraries need onnxruntime >= 1.16.0.
 *  * The last OrtApi member declared here is KernelContext_ParallelFor
 *    (API 17, onnxruntime 1.17): the library asks GetApi(17) for it and runs
 *    its loops on its own threads when that returns NULL.
 *    GetSessionConfigEntry and HasSessionConfigEntry are API 14.
 *  * OrtCustomOp::CreateKernelV2 and KernelComputeV2 are read only when
 *    OrtCustomOp::version >= 16 (onnxruntime 1.16).  Only KernelComputeV2
 *    can return an OrtStatus (a clean error with a message) from compute;
 *    the version-1 KernelCompute returns void and cannot report errors in C.
 *    onnxruntime also refuses a custom op whose version is above its own
 *    ORT_API_VERSION, and it passes GetApi(op->version) to CreateKernel*,
 *    so one number serves both structs.
 *
 * Calling convention
 * ------------------
 * onnxruntime's ORT_API_CALL is __stdcall on Windows and empty everywhere
 * else.  On Linux and macOS (x86-64 and AArch64) every function here uses
 * the platform's ordinary C convention (SysV / AAPCS64), so
 * AOTC_ORT_API_CALL is empty.  Windows is not supported: it also differs in
 * ORTCHAR_T (wchar_t paths).
 *
 * Pure C99; no onnxruntime header or library is needed at build time.
 * Custom-op libraries get the API at run time through RegisterCustomOps();
 * the demo program aotc_ort_demo.c loads libonnxruntime with dlopen and
 * gets it from the library's OrtGetApiBase.
 */
#ifndef AOTC_ORT_ABI_H
#define AOTC_ORT_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#error "aotc_ort_abi.h: Windows is not supported (onnxruntime uses __stdcall and wchar_t paths there)"
#endif

/* Plain C calling convention on Linux/macOS (x86-64, AArch64); see above. */
#define AOTC_ORT_API_CALL

/* The OrtApi version we ask for and the OrtCustomOp::version we declare.
 * API 16 shipped with onnxruntime 1.16.0. */
#define AOTC_ORT_API_VERSION 16
#define AOTC_ORT_MIN_RELEASE "1.16.0"

/* ------------------------------------------------------------------------ */
/* Opaque handles (onnxruntime owns these objects; we only hold pointers). */
/* ------------------------------------------------------------------------ */
typedef struct OrtEnv OrtEnv;
typedef struct OrtStatus OrtStatus; /* NULL OrtStatus* means success */
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtSession OrtSession;
typedef struct OrtValue OrtValue;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtCustomOp OrtCustomOp; /* defined below; filled in by us */
/* OrtAllocator is a versioned struct of callbacks in onnxruntime, not an
 * opaque handle.  We never look inside one, so only the name is declared. */
typedef struct OrtAllocator OrtAllocator;

/* ------------------------------------------------------------------------ */
/* Enums.  C enums are int-sized, the same as onnxruntime's unscoped enums.  */
/* ------------------------------------------------------------------------ */

/* Tensor element types, the C API numbering.
 * Values 0..23 are the same as ONNX TensorProto.DataType.  From 24 on they
 * DIFFER: ONNX numbers FLOAT8E8M0=24, UINT2=25, INT2=26, but onnxruntime's C
 * API has UINT2=24, INT2=25, FLOAT8E8M0=26 (onnxruntime converts between
 * the two itself).  Do not cast an ONNX dtype number >= 24 to this enum. */
typedef enum ONNXTensorElementDataType {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,       /* float */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,       /* uint8_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,        /* int8_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,      /* uint16_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,       /* int16_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,       /* int32_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,       /* int64_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,      /* std::string inside ORT */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,        /* 1 byte */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,    /* IEEE half, 2 bytes */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,     /* double */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,     /* uint32_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,     /* uint64_t */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64 = 14,  /* 2 x float */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128 = 15, /* 2 x double */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16,   /* 2 bytes */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN = 17,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ = 18,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2 = 19,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ = 20,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4 = 21,      /* two per byte */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4 = 22,       /* two per byte */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT4E2M1 = 23, /* two per byte */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT2 = 24,      /* four per byte; ONNX: 25 */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT2 = 25,       /* four per byte; ONNX: 26 */
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0 = 26  /* ONNX: 24 */
} ONNXTensorElementDataType;

/* Codes carried by an OrtStatus.  Values 12 and up come from newer
 * onnxruntime releases; older runtimes never produce them. */
typedef enum OrtErrorCode {
  ORT_OK = 0,
  ORT_FAIL = 1,
  ORT_INVALID_ARGUMENT = 2,
  ORT_NO_SUCHFILE = 3,
  ORT_NO_MODEL = 4,
  ORT_ENGINE_ERROR = 5,
  ORT_RUNTIME_EXCEPTION = 6,
  ORT_INVALID_PROTOBUF = 7,
  ORT_MODEL_LOADED = 8,
  ORT_NOT_IMPLEMENTED = 9,
  ORT_INVALID_GRAPH = 10,
  ORT_EP_FAIL = 11,
  ORT_MODEL_LOAD_CANCELED = 12,
  ORT_MODEL_REQUIRES_COMPILATION = 13,
  ORT_NOT_FOUND = 14,
  ORT_DEVICE_RESET = 15
} OrtErrorCode;

/* What OrtCustomOp::Get{Input,Output}Characteristic return. */
typedef enum OrtCustomOpInputOutputCharacteristic {
  INPUT_OUTPUT_REQUIRED = 0,
  INPUT_OUTPUT_OPTIONAL = 1, /* honoured for OrtCustomOp::version >= 8 */
  INPUT_OUTPUT_VARIADIC = 2  /* honoured for OrtCustomOp::version >= 14; last one only */
} OrtCustomOpInputOutputCharacteristic;

/* Where a kernel wants an input to live (OrtCustomOp::GetInputMemoryType). */
typedef enum OrtMemType {
  OrtMemTypeCPUInput = -2,  /* CPU memory used by a non-CPU execution provider */
  OrtMemTypeCPUOutput = -1, /* CPU-accessible output of a non-CPU provider */
  OrtMemTypeCPU = -1,       /* same value as OrtMemTypeCPUOutput */
  OrtMemTypeDefault = 0     /* the provider's default memory (host for the CPU EP) */
} OrtMemType;

/* Which allocator an OrtMemoryInfo describes (CreateCpuMemoryInfo).  Only
 * these three values are declared; later releases may add more. */
typedef enum OrtAllocatorType {
  OrtInvalidAllocator = -1,
  OrtDeviceAllocator = 0,
  OrtArenaAllocator = 1
} OrtAllocatorType;

/* The least severe message an OrtEnv logs (CreateEnv). */
typedef enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE = 0,
  ORT_LOGGING_LEVEL_INFO = 1,
  ORT_LOGGING_LEVEL_WARNING = 2,
  ORT_LOGGING_LEVEL_ERROR = 3,
  ORT_LOGGING_LEVEL_FATAL = 4
} OrtLoggingLevel;

/* ------------------------------------------------------------------------ */
/* OrtApiBase: what RegisterCustomOps receives.  Never versioned, never     */
/* grows: exactly two function pointers.                                    */
/* ------------------------------------------------------------------------ */
typedef struct OrtApi OrtApi;

typedef struct OrtApiBase {
  /* Returns the API table for `version`, or NULL (after printing a line to
   * stderr) if this onnxruntime is older than `version`. */
  const OrtApi *(AOTC_ORT_API_CALL *GetApi)(uint32_t version);
  /* The onnxruntime release, e.g. "1.32.0".  Static storage; do not free. */
  const char *(AOTC_ORT_API_CALL *GetVersionString)(void);
} OrtApiBase;

/* Exported by libonnxruntime itself; only for programs linked against it.
 * Custom-op libraries use the OrtApiBase passed to RegisterCustomOps. */
const OrtApiBase *AOTC_ORT_API_CALL OrtGetApiBase(void);
/* Its type, for a program that looks it up with dlsym(handle, "OrtGetApiBase")
 * in a libonnxruntime it loaded itself (aotc_ort_demo.c). */
typedef const OrtApiBase *(AOTC_ORT_API_CALL *AotcOrtGetApiBaseFn)(void);

/* ------------------------------------------------------------------------ */
/* OrtApi: onnxruntime's function table, in onnxruntime's member order,     */
/* from slot 0 to the last member aotc uses (KernelContext_ParallelFor,    */
/* slot 274, API 17).  Members we do not call are `void *` placeholders     */
/* named after the real member.  A data pointer and a function pointer have */
/* the same size and alignment on every supported target (POSIX requires   */
/* it).                                                                     */
/* Functions returning OrtStatus * return NULL on success.  The caller owns */
/* a non-NULL status and frees it with ReleaseStatus.                       */
/* ------------------------------------------------------------------------ */
struct OrtApi {
  /* ---- API 1: slots 0..101 ---- */
  /* Makes a status.  `msg` is copied.  Free it with ReleaseStatus, or
   * return it to onnxruntime, which then takes ownership. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateStatus)(OrtErrorCode code, const char *msg);
  OrtErrorCode (AOTC_ORT_API_CALL *GetErrorCode)(const OrtStatus *status);
  /* Owned by `status`; valid until the status is released. */
  const char *(AOTC_ORT_API_CALL *GetErrorMessage)(const OrtStatus *status);
  /* slot 3.  `logid` names the env in onnxruntime's log.  Free with ReleaseEnv. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateEnv)(OrtLoggingLevel log_severity_level, const char *logid, OrtEnv **out);
  void *CreateEnvWithCustomLogger;
  void *EnableTelemetryEvents;
  void *DisableTelemetryEvents;
  /* slot 7.  Loads the model file (a char path everywhere but Windows).  The
   * options are read, not kept.  Free with ReleaseSession. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateSession)(const OrtEnv *env, const char *model_path,
                                                 const OrtSessionOptions *options, OrtSession **out);
  void *CreateSessionFromArray;
  /* slot 9.  run_options may be NULL.  outputs[i] == NULL on entry: onnxruntime
   * allocates the value (the caller frees it with ReleaseValue). */
  OrtStatus *(AOTC_ORT_API_CALL *Run)(OrtSession *session, const OrtRunOptions *run_options,
                                       const char *const *input_names, const OrtValue *const *inputs,
                                       size_t input_len, const char *const *output_names,
                                       size_t output_names_len, OrtValue **outputs);
  /* slot 10.  Free with ReleaseSessionOptions. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateSessionOptions)(OrtSessionOptions **options);
  void *SetOptimizedModelFilePath;
  void *CloneSessionOptions;
  void *SetSessionExecutionMode;
  void *EnableProfiling;
  void *DisableProfiling;
  void *EnableMemPattern;
  void *DisableMemPattern;
  void *EnableCpuMemArena;
  void *DisableCpuMemArena;
  void *SetSessionLogId;
  void *SetSessionLogVerbosityLevel;
  void *SetSessionLogSeverityLevel;
  void *SetSessionGraphOptimizationLevel;
  /* slot 24.  0 = onnxruntime's default (one per physical core). */
  OrtStatus *(AOTC_ORT_API_CALL *SetIntraOpNumThreads)(OrtSessionOptions *options, int intra_op_num_threads);
  void *SetInterOpNumThreads;
  /* slot 26.  `domain` is the ONNX node domain, e.g. "ai.aotc".  Release
   * with ReleaseCustomOpDomain only once every session that uses it is gone. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateCustomOpDomain)(const char *domain, OrtCustomOpDomain **out);
  /* `op` is not copied: it must outlive the domain (use static storage). */
  OrtStatus *(AOTC_ORT_API_CALL *CustomOpDomain_Add)(OrtCustomOpDomain *custom_op_domain,
                                                      const OrtCustomOp *op);
  /* `custom_op_domain` is not copied: it must outlive the sessions built
   * from these options. */
  OrtStatus *(AOTC_ORT_API_CALL *AddCustomOpDomain)(OrtSessionOptions *options,
                                                     OrtCustomOpDomain *custom_op_domain);
  void *RegisterCustomOpsLibrary;
  /* slot 30 */
  OrtStatus *(AOTC_ORT_API_CALL *SessionGetInputCount)(const OrtSession *session, size_t *out);
  OrtStatus *(AOTC_ORT_API_CALL *SessionGetOutputCount)(const OrtSession *session, size_t *out);
  void *SessionGetOverridableInitializerCount;
  void *SessionGetInputTypeInfo;
  void *SessionGetOutputTypeInfo;
  void *SessionGetOverridableInitializerTypeInfo;
  /* slot 36.  *value is allocated with `allocator`; free it with AllocatorFree. */
  OrtStatus *(AOTC_ORT_API_CALL *SessionGetInputName)(const OrtSession *session, size_t index,
                                                       OrtAllocator *allocator, char **value);
  OrtStatus *(AOTC_ORT_API_CALL *SessionGetOutputName)(const OrtSession *session, size_t index,
                                                        OrtAllocator *allocator, char **value);
  void *SessionGetOverridableInitializerName;
  void *CreateRunOptions;
  void *RunOptionsSetRunLogVerbosityLevel;
  void *RunOptionsSetRunLogSeverityLevel;
  void *RunOptionsSetRunTag;
  void *RunOptionsGetRunLogVerbosityLevel;
  void *RunOptionsGetRunLogSeverityLevel;
  void *RunOptionsGetRunTag;
  void *RunOptionsSetTerminate;
  void *RunOptionsUnsetTerminate;
  void *CreateTensorAsOrtValue;
  /* slot 49.  A tensor over the caller's buffer (not copied, not freed by
   * ReleaseValue: it must outlive the value).  p_data_len in bytes. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo *info, void *p_data,
                                                                  size_t p_data_len, const int64_t *shape,
                                                                  size_t shape_len, ONNXTensorElementDataType type,
                                                                  OrtValue **out);
  /* slot 50.  *out = 1 for a tensor, 0 for a sequence, map, ... */
  OrtStatus *(AOTC_ORT_API_CALL *IsTensor)(const OrtValue *value, int *out);
  /* slot 51.  Borrowed pointer to the tensor's buffer (not for strings). */
  OrtStatus *(AOTC_ORT_API_CALL *GetTensorMutableData)(OrtValue *value, void **out);
  void *FillStringTensor;
  void *GetStringTensorDataLength;
  void *GetStringTensorContent;
  void *CastTypeInfoToTensorInfo;
  void *GetOnnxTypeFromTypeInfo;
  void *CreateTensorTypeAndShapeInfo;
  void *SetTensorElementType;
  void *SetDimensions;
  /* slot 60 */
  OrtStatus *(AOTC_ORT_API_CALL *GetTensorElementType)(const OrtTensorTypeAndShapeInfo *info,
                                                        ONNXTensorElementDataType *out);
  OrtStatus *(AOTC_ORT_API_CALL *GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out);
  /* Copies min(rank, dim_values_length) dimensions into dim_values. */
  OrtStatus *(AOTC_ORT_API_CALL *GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *dim_values,
                                                 size_t dim_values_length);
  void *GetSymbolicDimensions;
  /* Product of the dimensions ([] -> 1). */
  OrtStatus *(AOTC_ORT_API_CALL *GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo *info,
                                                              size_t *out);
  /* slot 65.  *out is new; free it with ReleaseTensorTypeAndShapeInfo. */
  OrtStatus *(AOTC_ORT_API_CALL *GetTensorTypeAndShape)(const OrtValue *value,
                                                         OrtTensorTypeAndShapeInfo **out);
  void *GetTypeInfo;
  void *GetValueType;
  void *CreateMemoryInfo;
  /* slot 69.  Free with ReleaseMemoryInfo. */
  OrtStatus *(AOTC_ORT_API_CALL *CreateCpuMemoryInfo)(OrtAllocatorType type, OrtMemType mem_type,
                                                       OrtMemoryInfo **out);
  void *CompareMemoryInfo;
  void *MemoryInfoGetName;
  void *MemoryInfoGetId;
  void *MemoryInfoGetMemType;
  void *MemoryInfoGetType;
  void *AllocatorAlloc;
  /* slot 76.  Frees what an API call allocated with `ort_allocator`. */
  OrtStatus *(AOTC_ORT_API_CALL *AllocatorFree)(OrtAllocator *ort_allocator, void *p);
  void *AllocatorGetInfo;
  /* slot 78.  onnxruntime's CPU allocator; always the same one, never freed. */
  OrtStatus *(AOTC_ORT_API_CALL *GetAllocatorWithDefaultOptions)(OrtAllocator **out);
  void *AddFreeDimensionOverride;
  void *GetValue;
  void *GetValueCount;
  void *CreateValue;
  void *CreateOpaqueValue;
  void *GetOpaqueValue;
  /* slot 85.  Node attributes.  A missing attribute gives an error status. */
  OrtStatus *(AOTC_ORT_API_CALL *KernelInfoGetAttribute_float)(const OrtKernelInfo *info, const char *name,
                                                                float *out);
  OrtStatus *(AOTC_ORT_API_CALL *KernelInfoGetAttribute_int64)(const OrtKernelInfo *info, const char *name,
                                                                int64_t *out);
  /* Size protocol: out == NULL -> *size = strlen + 1 (success); *size big
   * enough -> copy with NUL; too small -> *size = needed + error status. */
  OrtStatus *(AOTC_ORT_API_CALL *KernelInfoGetAttribute_string)(const OrtKernelInfo *info, const char *name,
                                                                 char *out, size_t *size);
  OrtStatus *(AOTC_ORT_API_CALL *KernelContext_GetInputCount)(const OrtKernelContext *context, size_t *out);
  OrtStatus *(AOTC_ORT_API_CALL *KernelContext_GetOutputCount)(const OrtKernelContext *context, size_t *out);
  /* Borrowed.  A missing optional input gives *out == NULL. */
  OrtStatus *(AOTC_ORT_API_CALL *KernelContext_GetInput)(const OrtKernelContext *context, size_t index,
                                                          const OrtValue **out);
  /* Allocates (or returns) output `index` with the given shape.  Borrowed. */
  OrtStatus *(AOTC_ORT_API_CALL *KernelContext_GetOutput)(OrtKernelContext *context, size_t index,
                                                           const int64_t *dim_values, size_t dim_count,
                                                           OrtValue **out);
  /* slot 92.  Every Release* below accepts NULL. */
  void (AOTC_ORT_API_CALL *ReleaseEnv)(OrtEnv *input);
  /* slot 93.  NULL is accepted. */
  void (AOTC_ORT_API_CALL *ReleaseStatus)(OrtStatus *input);
  void (AOTC_ORT_API_CALL *ReleaseMemoryInfo)(OrtMemoryInfo *input);
  void (AOTC_ORT_API_CALL *ReleaseSession)(OrtSession *input);
  void (AOTC_ORT_API_CALL *ReleaseValue)(OrtValue *input);
  void *ReleaseRunOptions;
  void *ReleaseTypeInfo;
  /* slot 99.  NULL is accepted. */
  void (AOTC_ORT_API_CALL *ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *input);
  /* slot 100 */
  void (AOTC_ORT_API_CALL *ReleaseSessionOptions)(OrtSessionOptions *input);
  /* slot 101 (last of API 1).  NULL is accepted. */
  void (AOTC_ORT_API_CALL *ReleaseCustomOpDomain)(OrtCustomOpDomain *input);

  /* ---- API 2: slots 102..118 ---- */
  void *GetDenotationFromTypeInfo;
  void *CastTypeInfoToMapTypeInfo;
  void *CastTypeInfoToSequenceTypeInfo;
  void *GetMapKeyType;
  void *GetMapValueType;
  void *GetSequenceElementType;
  void *ReleaseMapTypeInfo;
  void *ReleaseSequenceTypeInfo;
  void *SessionEndProfiling;
  void *SessionGetModelMetadata;
  void *ModelMetadataGetProducerName;
  void *ModelMetadataGetGraphName;
  void *ModelMetadataGetDomain;
  void *ModelMetadataGetDescription;
  void *ModelMetadataLookupCustomMetadataMap;
  void *ModelMetadataGetVersion;
  void *ReleaseModelMetadata;

  /* ---- API 3: slots 119..124 ---- */
  void *CreateEnvWithGlobalThreadPools;
  void *DisablePerSessionThreads;
  void *CreateThreadingOptions;
  void *ReleaseThreadingOptions;
  void *ModelMetadataGetCustomMetadataMapKeys;
  void *AddFreeDimensionOverrideByName;

  /* ---- API 4: slots 125..126 ---- */
  void *GetAvailableProviders;
  void *ReleaseAvailableProviders;

  /* ---- API 5: slots 127..149 ---- */
  void *GetStringTensorElementLength;
  void *GetStringTensorElement;
  void *FillStringTensorElement;
  /* slot 130.  Sets (or overwrites) a string entry that sessions and custom-op
   * libraries read, e.g. "aotc.threads" (set it before registering the library). */
  OrtStatus *(AOTC_ORT_API_CALL *AddSessionConfigEntry)(OrtSessionOptions *options, const char *config_key,
                                                         const char *config_value);
  void *CreateAllocator;
  void *ReleaseAllocator;
  void *RunWithBinding;
  void *CreateIoBinding;
  void *ReleaseIoBinding;
  void *BindInput;
  void *BindOutput;
  void *BindOutputToDevice;
  void *GetBoundOutputNames;
  void *GetBoundOutputValues;
  void *ClearBoundInputs;
  void *ClearBoundOutputs;
  void *TensorAt;
  void *CreateAndRegisterAllocator;
  void *SetLanguageProjection;
  void *SessionGetProfilingStartTimeNs;
  void *SetGlobalIntraOpNumThreads;
  void *SetGlobalInterOpNumThreads;
  void *SetGlobalSpinControl;

  /* ---- API 6: slots 150..157 ---- */
  void *AddInitializer;
  void *CreateEnvWithCustomLoggerAndGlobalThreadPools;
  void *SessionOptionsAppendExecutionProvider_CUDA;
  void *SessionOptionsAppendExecutionProvider_ROCM;
  void *SessionOptionsAppendExecutionProvider_OpenVINO;
  void *SetGlobalDenormalAsZero;
  void *CreateArenaCfg;
  void *ReleaseArenaCfg;

  /* ---- API 7: slots 158..161 ---- */
  void *ModelMetadataGetGraphDescription;
  void *SessionOptionsAppendExecutionProvider_TensorRT;
  void *SetCurrentGpuDeviceId;
  void *GetCurrentGpuDeviceId;

  /* ---- API 8: slots 162..169 ---- */
  void *KernelInfoGetAttributeArray_float;
  void *KernelInfoGetAttributeArray_int64;
  void *CreateArenaCfgV2;
  void *AddRunConfigEntry;
  void *CreatePrepackedWeightsContainer;
  void *ReleasePrepackedWeightsContainer;
  void *CreateSessionWithPrepackedWeightsContainer;
  void *CreateSessionFromArrayWithPrepackedWeightsContainer;

  /* ---- API 9: slots 170..191 ---- */
  void *SessionOptionsAppendExecutionProvider_TensorRT_V2;
  void *CreateTensorRTProviderOptions;
  void *UpdateTensorRTProviderOptions;
  void *GetTensorRTProviderOptionsAsString;
  void *ReleaseTensorRTProviderOptions;
  void *EnableOrtCustomOps;
  void *RegisterAllocator;
  void *UnregisterAllocator;
  void *IsSparseTensor;
  void *CreateSparseTensorAsOrtValue;
  void *FillSparseTensorCoo;
  void *FillSparseTensorCsr;
  void *FillSparseTensorBlockSparse;
  void *CreateSparseTensorWithValuesAsOrtValue;
  void *UseCooIndices;
  void *UseCsrIndices;
  void *UseBlockSparseIndices;
  void *GetSparseTensorFormat;
  void *GetSparseTensorValuesTypeAndShape;
  void *GetSparseTensorValues;
  void *GetSparseTensorIndicesTypeShape;
  void *GetSparseTensorIndices;

  /* ---- API 10: slots 192..203 ---- */
  void *HasValue;
  void *KernelContext_GetGPUComputeStream;
  void *GetTensorMemoryInfo;
  void *GetExecutionProviderApi;
  void *SessionOptionsSetCustomCreateThreadFn;
  void *SessionOptionsSetCustomThreadCreationOptions;
  void *SessionOptionsSetCustomJoinThreadFn;
  void *SetGlobalCustomCreateThreadFn;
  void *SetGlobalCustomThreadCreationOptions;
  void *SetGlobalCustomJoinThreadFn;
  void *SynchronizeBoundInputs;
  void *SynchronizeBoundOutputs;

  /* ---- API 11: slots 204..209 ---- */
  void *SessionOptionsAppendExecutionProvider_CUDA_V2;
  void *CreateCUDAProviderOptions;
  void *UpdateCUDAProviderOptions;
  void *GetCUDAProviderOptionsAsString;
  void *ReleaseCUDAProviderOptions;
  void *SessionOptionsAppendExecutionProvider_MIGraphX;

  /* ---- API 12: slots 210..218 ---- */
  void *AddExternalInitializers;
  void *CreateOpAttr;
  void *ReleaseOpAttr;
  void *CreateOp;
  void *InvokeOp;
  void *ReleaseOp;
  void *SessionOptionsAppendExecutionProvider;
  void *CopyKernelInfo;
  void *ReleaseKernelInfo;

  /* ---- API 13: slots 219..224 ---- */
  void *GetTrainingApi;
  void *SessionOptionsAppendExecutionProvider_CANN;
  void *CreateCANNProviderOptions;
  void *UpdateCANNProviderOptions;
  void *GetCANNProviderOptionsAsString;
  void *ReleaseCANNProviderOptions;

  /* ---- API 14: slots 225..238 ---- */
  void *MemoryInfoGetDeviceType;
  void *UpdateEnvWithCustomLogLevel;
  void *SetGlobalIntraOpThreadAffinity;
  /* slot 228.  Loads the shared library at `library_name` (a char path
   * everywhere but Windows), calls its RegisterCustomOps(options, api_base) and
   * keeps the library loaded for onnxruntime's lifetime. */
  OrtStatus *(AOTC_ORT_API_CALL *RegisterCustomOpsLibrary_V2)(OrtSessionOptions *options, const char *library_name);
  void *RegisterCustomOpsUsingFunction;
  void *KernelInfo_GetInputCount;
  void *KernelInfo_GetOutputCount;
  void *KernelInfo_GetInputName;
  void *KernelInfo_GetOutputName;
  void *KernelInfo_GetInputTypeInfo;
  void *KernelInfo_GetOutputTypeInfo;
  void *KernelInfoGetAttribute_tensor;
  /* slot 237.  *out = 1 if `config_key` was set on the options, else 0. */
  OrtStatus *(AOTC_ORT_API_CALL *HasSessionConfigEntry)(const OrtSessionOptions *options, const char *config_key,
                                                         int *out);
  /* slot 238.  A missing key is an error status (ORT_INVALID_ARGUMENT).
   * Size protocol as for KernelInfoGetAttribute_string: config_value == NULL
   * -> *size = strlen + 1. */
  OrtStatus *(AOTC_ORT_API_CALL *GetSessionConfigEntry)(const OrtSessionOptions *options, const char *config_key,
                                                         char *config_value, size_t *size);

  /* ---- API 15: slots 239..244 ---- */
  void *SessionOptionsAppendExecutionProvider_Dnnl;
  void *CreateDnnlProviderOptions;
  void *UpdateDnnlProviderOptions;
  void *GetDnnlProviderOptionsAsString;
  void *ReleaseDnnlProviderOptions;
  /* slot 244.  The node's name.  out == NULL -> *size = strlen + 1. */
  OrtStatus *(AOTC_ORT_API_CALL *KernelInfo_GetNodeName)(const OrtKernelInfo *info, char *out, size_t *size);
  /* ---- slots 245..273: API 16 and 17 members aotc does not call ---- */
  void *KernelInfo_GetLogger;
  void *KernelContext_GetLogger;
  void *Logger_LogMessage;
  void *Logger_GetLoggingSeverityLevel;
  void *KernelInfoGetConstantInput_tensor;
  void *CastTypeInfoToOptionalTypeInfo;
  void *GetOptionalContainedTypeInfo;
  void *GetResizedStringTensorElementBuffer;
  void *KernelContext_GetAllocator;
  void *GetBuildInfoString;
  void *CreateROCMProviderOptions;
  void *UpdateROCMProviderOptions;
  void *GetROCMProviderOptionsAsString;
  void *ReleaseROCMProviderOptions;
  void *CreateAndRegisterAllocatorV2;
  void *RunAsync;
  void *UpdateTensorRTProviderOptionsWithValue;
  void *GetTensorRTProviderOptionsByName;
  void *UpdateCUDAProviderOptionsWithValue;
  void *GetCUDAProviderOptionsByName;
  void *KernelContext_GetResource;
  void *SetUserLoggingFunction;
  void *ShapeInferContext_GetInputCount;
  void *ShapeInferContext_GetInputTypeShape;
  void *ShapeInferContext_GetAttribute;
  void *ShapeInferContext_SetOutputTypeShape;
  void *SetSymbolicDimensions;
  void *ReadOpAttr;
  void *SetDeterministicCompute;
  /* slot 274 (API 17; onnxruntime 1.17).  Calls fn(usr_data, i) for every i
   * in [0, total) on the session's intra-op thread pool, the calling thread
   * included, and returns when all calls have returned.  num_batch: at most
   * that many batches of consecutive i (0: no limit).  Read this member only
   * from the table GetApi(17) returned. */
  OrtStatus *(AOTC_ORT_API_CALL *KernelContext_ParallelFor)(const OrtKernelContext *context,
                                                             void (*fn)(void *, size_t), size_t total,
                                                             size_t num_batch, void *usr_data);
  /* onnxruntime's table goes on.  We never index past this point and never
   * copy or allocate an OrtApi, so its real length does not matter. */
};

/* ------------------------------------------------------------------------ */
/* OrtCustomOp, version-16 layout.  The library fills it in (static storage: */
/* onnxruntime keeps the pointer) and sets version = AOTC_ORT_API_VERSION.  */
/* onnxruntime reads a member only if `version` is at least the API version */
/* noted next to it, so the members of later versions (InferOutputShapeFn,  */
/* GetStartVersion/GetEndVersion and GetMayInplace/GetAliasMap in 17-18)    */
/* are not declared and never read.                                         */
/*                                                                          */
/* Members onnxruntime calls WITHOUT a NULL check (must be non-NULL):       */
/*   GetName, GetExecutionProviderType, GetInputType, GetInputTypeCount,    */
/*   GetOutputType, GetOutputTypeCount, KernelDestroy,                      */
/*   GetInputCharacteristic, GetOutputCharacteristic, GetInputMemoryType;   */
/*   CreateKernel and KernelCompute whenever the V2 member is NULL;         */
/*   the four variadic getters if any input or output is VARIADIC.          */
/* ------------------------------------------------------------------------ */
struct OrtCustomOp {
  /* API version of this struct's layout; becomes the OrtApi version handed
   * to CreateKernel(V2).  onnxruntime refuses the op (when it creates the
   * kernel) if this is above its own ORT_API_VERSION. */
  uint32_t version;

  /* [v1] Used when CreateKernelV2 is NULL.  Returns the kernel state that
   * KernelCompute/KernelDestroy receive.  `api` is GetApi(version).
   * `info` is valid only during the call. */
  void *(AOTC_ORT_API_CALL *CreateKernel)(const struct OrtCustomOp *op, const OrtApi *api,
                                          const OrtKernelInfo *info);
  /* [v1] Op type as written in the model (NodeProto.op_type).  The domain
   * comes from the OrtCustomOpDomain.  Must stay valid. */
  const char *(AOTC_ORT_API_CALL *GetName)(const struct OrtCustomOp *op);
  /* [v1] Execution provider name, e.g. "CPUExecutionProvider".  NULL means
   * the CPU provider. */
  const char *(AOTC_ORT_API_CALL *GetExecutionProviderType)(const struct OrtCustomOp *op);
  /* [v1] Element type of input `index`.  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED
   * lets any tensor type through (type check moves to compute). */
  ONNXTensorElementDataType (AOTC_ORT_API_CALL *GetInputType)(const struct OrtCustomOp *op, size_t index);
  /* [v1] Number of declared inputs (for VARIADIC, the last one counts once). */
  size_t (AOTC_ORT_API_CALL *GetInputTypeCount)(const struct OrtCustomOp *op);
  /* [v1] Element type of output `index`.  UNDEFINED is allowed only if
   * exactly one input is UNDEFINED; the output then gets that input's type. */
  ONNXTensorElementDataType (AOTC_ORT_API_CALL *GetOutputType)(const struct OrtCustomOp *op, size_t index);
  /* [v1] Number of declared outputs. */
  size_t (AOTC_ORT_API_CALL *GetOutputTypeCount)(const struct OrtCustomOp *op);
  /* [v1] Used when KernelComputeV2 is NULL.  Returns void, so it cannot
   * report errors. */
  void (AOTC_ORT_API_CALL *KernelCompute)(void *op_kernel, OrtKernelContext *context);
  /* [v1] Frees what CreateKernel(V2) produced, once per kernel that was
   * created.  Not called when CreateKernelV2 returned an error, so free any
   * partial state before returning one. */
  void (AOTC_ORT_API_CALL *KernelDestroy)(void *op_kernel);

  /* [v8] REQUIRED / OPTIONAL / VARIADIC for each input and output. */
  OrtCustomOpInputOutputCharacteristic (AOTC_ORT_API_CALL *GetInputCharacteristic)(const struct OrtCustomOp *op,
                                                                                  size_t index);
  OrtCustomOpInputOutputCharacteristic (AOTC_ORT_API_CALL *GetOutputCharacteristic)(const struct OrtCustomOp *op,
                                                                                   size_t index);

  /* [v13] Memory type per input.  OrtMemTypeDefault for plain CPU kernels. */
  OrtMemType (AOTC_ORT_API_CALL *GetInputMemoryType)(const struct OrtCustomOp *op, size_t index);

  /* [v14] Variadic last input/output: minimum arity (>= 1), and
   * homogeneity (non-zero: every element has the same type). */
  int (AOTC_ORT_API_CALL *GetVariadicInputMinArity)(const struct OrtCustomOp *op);
  int (AOTC_ORT_API_CALL *GetVariadicInputHomogeneity)(const struct OrtCustomOp *op);
  int (AOTC_ORT_API_CALL *GetVariadicOutputMinArity)(const struct OrtCustomOp *op);
  int (AOTC_ORT_API_CALL *GetVariadicOutputHomogeneity)(const struct OrtCustomOp *op);

  /* [v16] Used instead of CreateKernel when non-NULL.  Stores the kernel
   * state in *kernel.  A non-NULL status fails session creation with its
   * message; onnxruntime consumes the status (do not use it afterwards). */
  OrtStatus *(AOTC_ORT_API_CALL *CreateKernelV2)(const struct OrtCustomOp *op, const OrtApi *api,
                                                 const OrtKernelInfo *info, void **kernel);
  /* [v16] Used instead of KernelCompute when non-NULL.  A non-NULL status
   * fails Run() with its message (Python sees an exception); onnxruntime
   * consumes the status (do not use it afterwards). */
  OrtStatus *(AOTC_ORT_API_CALL *KernelComputeV2)(void *op_kernel, OrtKernelContext *context);
};

/* The symbol onnxruntime looks up in a custom-op library
 * (SessionOptions.register_custom_ops_library / RegisterCustomOpsLibrary*):
 *   OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *api_base);
 * Return NULL on success, or a status made with the API's CreateStatus. */
typedef OrtStatus *(AOTC_ORT_API_CALL *AotcRegisterCustomOpsFn)(OrtSessionOptions *options,
                                                               const OrtApiBase *api_base);

/* ------------------------------------------------------------------------ */
/* Compile-time layout checks (C99: a negative array size is an error).     */
/* The OrtApi slot numbers are the ones onnxruntime static_asserts for the  */
/* last member of each API version.                                         */
/* ------------------------------------------------------------------------ */
#define AOTC_ORT_SLOT(member) (offsetof(OrtApi, member) / sizeof(void *))
#define AOTC_ORT_LAYOUT_CHECK(name, cond) typedef char aotc_ort_layout_check_##name[(cond) ? 1 : -1]

AOTC_ORT_LAYOUT_CHECK(fnptr_size, sizeof(void *) == sizeof(void (*)(void)));
AOTC_ORT_LAYOUT_CHECK(api_base_size, sizeof(OrtApiBase) == 2 * sizeof(void *));
AOTC_ORT_LAYOUT_CHECK(api_v1_end, AOTC_ORT_SLOT(ReleaseCustomOpDomain) == 101);
AOTC_ORT_LAYOUT_CHECK(api_v2_end, AOTC_ORT_SLOT(ReleaseModelMetadata) == 118);
AOTC_ORT_LAYOUT_CHECK(api_v3_end, AOTC_ORT_SLOT(AddFreeDimensionOverrideByName) == 124);
AOTC_ORT_LAYOUT_CHECK(api_v4_end, AOTC_ORT_SLOT(ReleaseAvailableProviders) == 126);
AOTC_ORT_LAYOUT_CHECK(api_v5_end, AOTC_ORT_SLOT(SetGlobalSpinControl) == 149);
AOTC_ORT_LAYOUT_CHECK(api_v6_end, AOTC_ORT_SLOT(ReleaseArenaCfg) == 157);
AOTC_ORT_LAYOUT_CHECK(api_v7_end, AOTC_ORT_SLOT(GetCurrentGpuDeviceId) == 161);
AOTC_ORT_LAYOUT_CHECK(api_v8_end, AOTC_ORT_SLOT(CreateSessionFromArrayWithPrepackedWeightsContainer) == 169);
AOTC_ORT_LAYOUT_CHECK(api_v9_end, AOTC_ORT_SLOT(GetSparseTensorIndices) == 191);
AOTC_ORT_LAYOUT_CHECK(api_v10_end, AOTC_ORT_SLOT(SynchronizeBoundOutputs) == 203);
AOTC_ORT_LAYOUT_CHECK(api_v11_end, AOTC_ORT_SLOT(SessionOptionsAppendExecutionProvider_MIGraphX) == 209);
AOTC_ORT_LAYOUT_CHECK(api_v12_end, AOTC_ORT_SLOT(ReleaseKernelInfo) == 218);
AOTC_ORT_LAYOUT_CHECK(api_v13_end, AOTC_ORT_SLOT(ReleaseCANNProviderOptions) == 224);
AOTC_ORT_LAYOUT_CHECK(api_v14_end, AOTC_ORT_SLOT(GetSessionConfigEntry) == 238);
/* Spot checks inside versions (member positions used by aotc). */
AOTC_ORT_LAYOUT_CHECK(slot_create_env, AOTC_ORT_SLOT(CreateEnv) == 3);
AOTC_ORT_LAYOUT_CHECK(slot_create_session, AOTC_ORT_SLOT(CreateSession) == 7);
AOTC_ORT_LAYOUT_CHECK(slot_run, AOTC_ORT_SLOT(Run) == 9);
AOTC_ORT_LAYOUT_CHECK(slot_create_session_options, AOTC_ORT_SLOT(CreateSessionOptions) == 10);
AOTC_ORT_LAYOUT_CHECK(slot_set_intra_op_num_threads, AOTC_ORT_SLOT(SetIntraOpNumThreads) == 24);
AOTC_ORT_LAYOUT_CHECK(slot_create_custom_op_domain, AOTC_ORT_SLOT(CreateCustomOpDomain) == 26);
AOTC_ORT_LAYOUT_CHECK(slot_session_get_input_count, AOTC_ORT_SLOT(SessionGetInputCount) == 30);
AOTC_ORT_LAYOUT_CHECK(slot_session_get_output_count, AOTC_ORT_SLOT(SessionGetOutputCount) == 31);
AOTC_ORT_LAYOUT_CHECK(slot_session_get_input_name, AOTC_ORT_SLOT(SessionGetInputName) == 36);
AOTC_ORT_LAYOUT_CHECK(slot_session_get_output_name, AOTC_ORT_SLOT(SessionGetOutputName) == 37);
AOTC_ORT_LAYOUT_CHECK(slot_create_tensor_with_data, AOTC_ORT_SLOT(CreateTensorWithDataAsOrtValue) == 49);
AOTC_ORT_LAYOUT_CHECK(slot_is_tensor, AOTC_ORT_SLOT(IsTensor) == 50);
AOTC_ORT_LAYOUT_CHECK(slot_get_tensor_mutable_data, AOTC_ORT_SLOT(GetTensorMutableData) == 51);
AOTC_ORT_LAYOUT_CHECK(slot_get_tensor_element_type, AOTC_ORT_SLOT(GetTensorElementType) == 60);
AOTC_ORT_LAYOUT_CHECK(slot_get_tensor_type_and_shape, AOTC_ORT_SLOT(GetTensorTypeAndShape) == 65);
AOTC_ORT_LAYOUT_CHECK(slot_create_cpu_memory_info, AOTC_ORT_SLOT(CreateCpuMemoryInfo) == 69);
AOTC_ORT_LAYOUT_CHECK(slot_allocator_free, AOTC_ORT_SLOT(AllocatorFree) == 76);
AOTC_ORT_LAYOUT_CHECK(slot_get_allocator_with_default_options, AOTC_ORT_SLOT(GetAllocatorWithDefaultOptions) == 78);
AOTC_ORT_LAYOUT_CHECK(slot_kernel_info_attr_float, AOTC_ORT_SLOT(KernelInfoGetAttribute_float) == 85);
AOTC_ORT_LAYOUT_CHECK(slot_release_env, AOTC_ORT_SLOT(ReleaseEnv) == 92);
AOTC_ORT_LAYOUT_CHECK(slot_release_status, AOTC_ORT_SLOT(ReleaseStatus) == 93);
AOTC_ORT_LAYOUT_CHECK(slot_release_memory_info, AOTC_ORT_SLOT(ReleaseMemoryInfo) == 94);
AOTC_ORT_LAYOUT_CHECK(slot_release_session, AOTC_ORT_SLOT(ReleaseSession) == 95);
AOTC_ORT_LAYOUT_CHECK(slot_release_value, AOTC_ORT_SLOT(ReleaseValue) == 96);
AOTC_ORT_LAYOUT_CHECK(slot_release_session_options, AOTC_ORT_SLOT(ReleaseSessionOptions) == 100);
AOTC_ORT_LAYOUT_CHECK(slot_add_session_config_entry, AOTC_ORT_SLOT(AddSessionConfigEntry) == 130);
AOTC_ORT_LAYOUT_CHECK(slot_register_custom_ops_library_v2, AOTC_ORT_SLOT(RegisterCustomOpsLibrary_V2) == 228);
AOTC_ORT_LAYOUT_CHECK(slot_has_session_config_entry, AOTC_ORT_SLOT(HasSessionConfigEntry) == 237);
AOTC_ORT_LAYOUT_CHECK(slot_kernel_info_get_node_name, AOTC_ORT_SLOT(KernelInfo_GetNodeName) == 244);
AOTC_ORT_LAYOUT_CHECK(slot_kernel_context_get_resource, AOTC_ORT_SLOT(KernelContext_GetResource) == 265);
AOTC_ORT_LAYOUT_CHECK(slot_kernel_context_parallel_for, AOTC_ORT_SLOT(KernelContext_ParallelFor) == 274);
AOTC_ORT_LAYOUT_CHECK(api_size, sizeof(OrtApi) == 275 * sizeof(void *));
/* OrtCustomOp: uint32_t version, padded to pointer alignment, then 18 pointers. */
AOTC_ORT_LAYOUT_CHECK(custom_op_create_kernel, offsetof(OrtCustomOp, CreateKernel) == sizeof(void *));
AOTC_ORT_LAYOUT_CHECK(custom_op_get_input_characteristic,
                      offsetof(OrtCustomOp, GetInputCharacteristic) == 10 * sizeof(void *));
AOTC_ORT_LAYOUT_CHECK(custom_op_get_input_memory_type,
                      offsetof(OrtCustomOp, GetInputMemoryType) == 12 * sizeof(void *));
AOTC_ORT_LAYOUT_CHECK(custom_op_create_kernel_v2, offsetof(OrtCustomOp, CreateKernelV2) == 17 * sizeof(void *));
AOTC_ORT_LAYOUT_CHECK(custom_op_size, sizeof(OrtCustomOp) == 19 * sizeof(void *));
AOTC_ORT_LAYOUT_CHECK(enum_size, sizeof(ONNXTensorElementDataType) == sizeof(int) && sizeof(OrtMemType) == sizeof(int));
AOTC_ORT_LAYOUT_CHECK(enum_size_env, sizeof(OrtAllocatorType) == sizeof(int) && sizeof(OrtLoggingLevel) == sizeof(int));

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* AOTC_ORT_ABI_H */
