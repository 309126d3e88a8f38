"""NAME.h: the one header an application includes: sizes as macros, the run/create API, docs."""

from __future__ import annotations

from aotc.package.c_text import banner, c_string, comment_safe, describe_tensor
from aotc.package.program import Check, Program, flat_items
from lowering.intrinsics import mma_roundings

WORKSPACE_ALIGN = 64
WEIGHTS_ALIGN = 64  # AOTC_WEIGHTS_ALIGN in runtime_c/aotc_runtime.h


def _io_comment(program: Program) -> list[str]:
    lines = [" * Inputs (caller-owned, dense C order, read only):"]
    if not program.inputs:
        lines.append(" *   (none)")
    for i, t in enumerate(program.inputs):
        lines.append(f" *   {i}: {describe_tensor(t)}")
    lines.append(" * Outputs (caller-owned, dense C order, fully written by every successful run):")
    for i, t in enumerate(program.outputs):
        lines.append(f" *   {i}: {describe_tensor(t)}")
    return lines


def _macros(program: Program) -> list[str]:
    up = program.name.upper()
    if program.gpu is None:
        memory = [
            f"#define {up}_WORKSPACE_SIZE {program.arena_size} /* bytes of workspace {program.name}_run needs */",
            f"#define {up}_WORKSPACE_ALIGN {WORKSPACE_ALIGN} /* required alignment of that workspace */",
        ]
    else:
        memory = [
            f"#define {up}_GPU_API {c_string(program.gpu.dialect)} /* the device API the bundle runs on */",
            f"#define {up}_DEVICE_ARENA_SIZE {program.arena_size} /* bytes of device memory a context "
            "holds for intermediate values */",
        ]
    lines = [
        *memory,
        f"#define {up}_WEIGHTS_SIZE {len(program.weights)}u /* bytes of weights ({program.name}_weights.bin) */",
        f"#define {up}_WEIGHTS_ALIGN {WEIGHTS_ALIGN} /* required alignment of caller-provided weights */",
        f"#define {up}_NUM_INPUTS {len(program.inputs)}",
        f"#define {up}_NUM_OUTPUTS {len(program.outputs)}",
    ]
    for i, t in enumerate(program.inputs):
        lines.append(f"#define {up}_INPUT_{i}_SIZE {t.nbytes} /* {describe_tensor(t)} */")
    for i, t in enumerate(program.outputs):
        lines.append(f"#define {up}_OUTPUT_{i}_SIZE {t.nbytes} /* {describe_tensor(t)} */")
    if program.dims:
        lines.append(f"#define {up}_NUM_DIMS {len(program.dims)} /* dimensions known only at run time */")
        for k, d in enumerate(program.dims):
            lines.append(f"#define {up}_DIM_{k}_MIN {d.lo} /* {comment_safe(d.name)} */")
            lines.append(f"#define {up}_DIM_{k}_MAX {d.hi} /* the bound sizes are planned for */")
    return lines


def _dims_comment(program: Program) -> list[str]:
    if not program.dims:
        return []
    lines = [" *", " * Dimensions known only at run time (the sizes above are at their maximum):"]
    for k, d in enumerate(program.dims):
        lines.append(f" *   dim {k}: {comment_safe(d.name)}, {d.lo} to {d.hi}")
    for kind, tensors in (("input", program.inputs), ("output", program.outputs)):
        for i, t in enumerate(tensors):
            if t.dyn_axes:
                lines.append(f" *   {kind} {i} axis {t.dyn_axes[0]} is dim 0")
    runs = (f"{program.name}_run_context_dims takes" if program.gpu is not None else
            f"{program.name}_run_dims / {program.name}_run_context_dims take")
    lines.append(f" * {runs} their values; at a shorter length")
    lines.append(" * inputs and outputs are dense at that length (a prefix of the buffers above); "
                 "a value out")
    lines.append(" * of range returns AOTC_ERR_BAD_SIZE. The other run functions run at the maximum.")
    return lines


def _computed_comment(program: Program) -> list[str]:
    """Outputs whose length the input data decides (sized above for their bound)."""
    computed = [(i, t) for i, t in enumerate(program.outputs) if t.computed_axis >= 0]
    if not computed:
        return []
    n = program.name
    lines = [" *", " * Lengths the input data decides (the sizes above are at their bound):"]
    lines += [f" *   output {i} axis {t.computed_axis}: at most {t.shape[t.computed_axis]}"
              for i, t in computed]
    lines += [" * The run writes such an output dense at its length (a prefix of its buffer); "
              f"{n}_output_shape", f" * and {n}_context_output_shape give its shape after "
              "the run."]
    return lines


def _computed_api(program: Program) -> list[str]:
    if not any(t.computed_axis >= 0 for t in program.outputs):
        return []
    n, up = program.name, program.name.upper()
    return [
        f"#define {up}_COMPUTED_LENGTHS 1 /* some output's length is the data's: see above */",
        "",
        "/* After a run that returned AOTC_OK: the shape of output `output` (rank entries), with the",
        " * length the run computed; the output's dense data is the prefix of its buffer. "
        f"{n}_output_shape",
        f" * reads the workspace {n}_run / {n}_run_with_weights ran in. AOTC_ERR_BAD_ARGUMENT: "
        "no such",
        " * output; AOTC_ERR_INTERNAL: no completed run in that workspace. */",
        f"int {n}_output_shape(const void *workspace, int32_t output, int64_t *shape);",
        f"int {n}_context_output_shape(const {n}_context *ctx, int32_t output, int64_t *shape);",
        "",
    ]


def _checks_comment(program: Program) -> list[str]:
    """The parameters given as inputs that the kernels were compiled for (pinned by the
    model's declared shapes): a run whose inputs hold another value stops with an error."""
    checks = [item for item in flat_items(program.steps) if isinstance(item, Check)]
    if not checks:
        return []
    lines = [" *", " * Checked at run time (parameters given as inputs, compiled for the value the "
             "model's", " * declared shapes fix; another value returns AOTC_ERR_INPUT_VALUE, "
             "outputs unspecified):"]
    lines += [f" *   {comment_safe(c.what)}" for c in checks]
    return lines


def _dims_api(program: Program) -> list[str]:
    if not program.dims:
        return []
    n, up = program.name, program.name.upper()
    return [
        f"/* {n}_run, {n}_run_with_weights and {n}_run_context at the run-time dimensions",
        f" * dims[0 .. {up}_NUM_DIMS - 1], each within its {up}_DIM_k_MIN .. {up}_DIM_k_MAX",
        " * (else AOTC_ERR_BAD_SIZE, nothing run); inputs and outputs dense at those lengths. */",
        f"int {n}_run_dims(const int64_t *dims, const void *const *inputs, void *const *outputs,",
        "                 void *workspace);",
        f"int {n}_run_dims_with_weights(const int64_t *dims, const void *const *inputs,",
        "                              void *const *outputs, void *workspace, const void *weights,",
        "                              uint64_t weights_size);",
        f"int {n}_run_context_dims({n}_context *ctx, const int64_t *dims, const void *const *inputs,",
        "                         void *const *outputs);",
        "",
    ]


def _open(program: Program, target: list[str], contract: list[str]) -> list[str]:
    """The header's opening: what it is for, the inputs and outputs, `contract`, the guard."""
    guard = f"AOTC_{program.name.upper()}_H"
    return [
        banner(f"public API of the compiled model '{program.name}'"),
        "/*",
        *target,
        " *",
        *_io_comment(program),
        *_dims_comment(program),
        *_computed_comment(program),
        *_checks_comment(program),
        " *",
        *contract,
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "aotc_api.h"',
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        *_macros(program),
        "",
    ]


def _close(program: Program, api: list[str]) -> list[str]:
    """`api`, then the functions every bundle has, and the header's end."""
    n = program.name
    return [
        *api,
        "/* A static, never-freed English message for a status code; thread-safe. */",
        f"const char *{n}_status_message(int status);",
        "",
        "/* NULL when this CPU has every instruction set the kernels use, else the name of one it",
        " * lacks (for the message after AOTC_ERR_UNSUPPORTED_CPU). */",
        f"const char *{n}_missing_cpu_feature(void);",
        "",
        "/* The model's static descriptor (names, dtypes, shapes and byte sizes of inputs and outputs). */",
        f"const aotc_model_desc *{n}_describe(void);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* AOTC_{n.upper()}_H */",
        "",
    ]


def _device_run_doc(n: str, up: str, opencl: bool) -> list[str]:
    """The comment of NAME_run_device: what a device buffer is in either API."""
    what = ([" * inputs[i] and outputs[i] are cl_mem buffers made in the OpenCL context",
             f" * {n}_context_native gives (cast to void *),"] if opencl else
            [" * inputs[i] and outputs[i] are CUdeviceptr values cast to void * ((void *)(uintptr_t)p),",
             " * allocated on the context's device in its primary context (cuMemAlloc there, or cudaMalloc),"])
    ready = ("enqueued on the queue it gives, or finished" if opencl else
             "synchronised: the kernels run on a stream of their own")
    return ["/* Runs the model on device memory the application owns, with no copy to or from the host:",
            *what,
            f" * each holding at least the tensor's bytes ({up}_INPUT_<i>_SIZE, {up}_OUTPUT_<i>_SIZE). The",
            f" * inputs must be written before the call ({ready}); the",
            " * outputs are written when it returns. Outputs must not overlap the inputs or each other. A",
            " * buffer that is not one of the context's: AOTC_ERR_BAD_ARGUMENT; too small: AOTC_ERR_BAD_SIZE",
            f" * (with {n}_context_error's message). */"]


def _gpu_dims_api(program: Program) -> list[str]:
    """A GPU bundle's run at run-time dimensions (the CPU bundle's NAME_run_context_dims)."""
    if not program.dims:
        return []
    n, up = program.name, program.name.upper()
    return [
        f"/* {n}_run_context at the run-time dimensions dims[0 .. {up}_NUM_DIMS - 1], each within its",
        f" * {up}_DIM_k_MIN .. {up}_DIM_k_MAX (else AOTC_ERR_BAD_SIZE, nothing run, the reason in",
        f" * {n}_context_error); inputs and outputs dense at those lengths (only that prefix of each",
        " * is copied to and from the device; the kernels take the lengths as arguments and stop at",
        f" * them). {n}_run_context and {n}_run_device run at the maximum. */",
        f"int {n}_run_context_dims({n}_context *ctx, const int64_t *dims, const void *const *inputs,",
        "                         void *const *outputs);",
        "",
    ]


def render_gpu_header(program: Program) -> str:
    """NAME.h of a GPU bundle: the CPU bundle's contract where it applies (create, run with
    inputs and outputs in host memory, destroy, status codes), on a device."""
    assert program.gpu is not None
    n, up = program.name, program.name.upper()
    opencl = program.gpu.dialect == "opencl"
    env = "AOTC_OPENCL_DEVICE" if opencl else "AOTC_CUDA_DEVICE"
    target = ([f" * Target: an OpenCL 1.2 device (kernels scheduled for {comment_safe(program.cpu)}, "
               "built from source when a context", " * is created); link -lOpenCL."] if opencl else
              [f" * Target: an NVIDIA GPU through the CUDA driver API (PTX for {comment_safe(program.cpu)}, "
               "compiled by the driver", " * when a context is created); link -lcuda."])
    if program.allow_tf32:  # --allow-tf32: whether a kernel took it
        if "tf32" in mma_roundings(program.gpu.mma):
            target += [" * Compiled with --allow-tf32: float32 MatMul/Conv products round their "
                       "operands to tf32", " * on tensor cores (relative error up to 2^-11 per "
                       "operand; float32's is 2^-24)."]
        else:
            target += [" * Compiled with --allow-tf32, but no kernel runs on tf32 tensor cores "
                       "(none matched, or", " * the target has no tf32 instruction)."]
    contract = [
        " * Every function returns AOTC_OK (0) or an AOTC_ERR_* status (aotc_api.h); none aborts. A",
        " * failed create writes its message to aotc_gpu_options.error, a failed run leaves its",
        f" * message in {n}_context_error. Thread safety: one context per thread; different contexts",
        " * may run at the same time. The library has no global mutable state.",
    ]
    default = ("the first GPU, else the first device" if opencl else "device 0")
    api = [
        "/* A model instance on a device: its kernels, weights and buffers; use from one thread at a time. */",
        f"typedef struct {n}_context {n}_context;",
        "",
        f"/* Creates a context on the device ${env} names (else {default};",
        " * the choices: aotc_gpu_options.device in aotc_api.h): "
        + ("builds the kernels and" if opencl else "loads the kernels and"),
        " * allocates the device's memory once (the weights, copied once, the intermediate values,",
        " * the inputs and outputs). num_threads must be >= 0 and is unused (the device runs the",
        " * kernels, the calling thread the rest). The caller owns *out_ctx and frees it with",
        f" * {n}_destroy. */",
        f"int {n}_create({n}_context **out_ctx, int num_threads);",
        "",
        f"/* {n}_create with options: the device, "
        + ("a file caching the built program, " if opencl else "")
        + "and a buffer for the",
        " * message of a failure (aotc_gpu_options in aotc_api.h; NULL: the defaults). */",
        f"int {n}_create_with_options({n}_context **out_ctx, const aotc_gpu_options *options);",
        "",
        f"/* The same with the caller's weights instead of those linked in: the bytes of {n}_weights.bin",
        f" * ({up}_WEIGHTS_SIZE of them, {up}_WEIGHTS_ALIGN-aligned), copied to the device at create. A",
        " * program that calls only these links no weights. */",
        f"int {n}_create_with_weights({n}_context **out_ctx, int num_threads, const void *weights,",
        "                            uint64_t weights_size);",
        f"int {n}_create_with_weights_options({n}_context **out_ctx, const void *weights,",
        "                                    uint64_t weights_size, const aotc_gpu_options *options);",
        "",
        "/* Runs the model: copies the inputs (host memory) to the device, runs the kernels and copies",
        " * the outputs back; returns once they are written (the device synchronised). One call per",
        " * context at a time. */",
        f"int {n}_run_context({n}_context *ctx, const void *const *inputs, void *const *outputs);",
        "",
        *_gpu_dims_api(program),
        *_device_run_doc(n, up, opencl),
        f"int {n}_run_device({n}_context *ctx, void *const *inputs, void *const *outputs);",
        "",
        "/* The device API's objects of ctx, for an application that shares them: " + (
            "its cl_context and" if opencl else "the device's primary CUcontext and"),
        " * " + ("cl_command_queue" if opencl else "the CUstream the kernels run on")
        + " (either pointer may be NULL). AOTC_ERR_NULL_ARGUMENT for a NULL ctx. */",
        f"int {n}_context_native(const {n}_context *ctx, void **device_context, void **queue);",
        "",
        "/* Waits for the device and frees everything ctx owns on it and on the host; NULL is a no-op. */",
        f"void {n}_destroy({n}_context *ctx);",
        "",
        "/* 1: the host side of a run is the calling thread (0 for NULL). */",
        f"int {n}_context_num_threads(const {n}_context *ctx);",
        "",
        "/* The message of ctx's last failed run: the device API's call and error (\"\" after a",
        " * successful run and for NULL); valid until the next run or destroy. */",
        f"const char *{n}_context_error(const {n}_context *ctx);",
        "",
        "/* The name of ctx's device (\"\" for NULL). */",
        f"const char *{n}_context_device(const {n}_context *ctx);",
        "",
    ]
    return "\n".join([*_open(program, target, contract), *_close(program, api)])


def render_header(program: Program) -> str:
    if program.gpu is not None:
        return render_gpu_header(program)
    n, up = program.name, program.name.upper()
    feats = ", ".join(program.cpu_features) or "baseline"
    default = (
        f"{program.num_threads}, fixed at compile time" if program.num_threads
        else "all online cores"
    )
    target = [f" * Target: {comment_safe(program.triple)} (cpu {comment_safe(program.cpu)}; "
              f"needs {comment_safe(feats)})."]
    contract = [
        " * Every function returns AOTC_OK (0) or an AOTC_ERR_* status (aotc_api.h); none aborts.",
        " * Thread safety: one context per thread; different contexts (and "
        f"{n}_run calls with",
        " * different workspaces) may run at the same time. The library has no global mutable state.",
    ]
    api = [
        "/* A model instance with its own worker threads and workspace; use from one thread at a time. */",
        f"typedef struct {n}_context {n}_context;",
        "",
        f"/* Runs the model on the calling thread in the caller-owned workspace ({up}_WORKSPACE_SIZE bytes,",
        f" * {up}_WORKSPACE_ALIGN-aligned; may be NULL when that size is 0), allocating nothing; inputs and",
        f" * outputs are arrays of {up}_NUM_INPUTS / {up}_NUM_OUTPUTS caller-owned buffers; calls with",
        " * different workspaces may run concurrently. */",
        f"int {n}_run(const void *const *inputs, void *const *outputs, void *workspace);",
        "",
        "/* Creates a context owning num_threads threads (0 = the default: $AOTC_NUM_THREADS if set,",
        f" * else {default}) and its workspace; the caller owns *out_ctx and frees it with",
        f" * {n}_destroy. */",
        f"int {n}_create({n}_context **out_ctx, int num_threads);",
        "",
        f"/* {n}_run and {n}_create with the caller's weights instead of those linked in: the",
        f" * bytes of {n}_weights.bin ({up}_WEIGHTS_SIZE of them, {up}_WEIGHTS_ALIGN-aligned, e.g.",
        " * read or mapped from that file), which the caller keeps unchanged while they are in use",
        f" * (until {n}_destroy). A program that calls only these links no weights. */",
        f"int {n}_run_with_weights(const void *const *inputs, void *const *outputs, void *workspace,",
        "                         const void *weights, uint64_t weights_size);",
        f"int {n}_create_with_weights({n}_context **out_ctx, int num_threads, const void *weights,",
        "                            uint64_t weights_size);",
        "",
        "/* Runs the model with ctx's threads and workspace, allocating nothing; one call per context at",
        " * a time (different contexts may run concurrently). */",
        f"int {n}_run_context({n}_context *ctx, const void *const *inputs, void *const *outputs);",
        "",
        *_dims_api(program),
        *_computed_api(program),
        "/* Stops ctx's threads and frees everything it owns; NULL is a no-op. */",
        f"void {n}_destroy({n}_context *ctx);",
        "",
        "/* The number of threads ctx runs on (0 for NULL). */",
        f"int {n}_context_num_threads(const {n}_context *ctx);",
        "",
    ]
    return "\n".join([*_open(program, target, contract), *_close(program, api)])
