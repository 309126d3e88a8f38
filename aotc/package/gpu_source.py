"""A GPU bundle's C sources: NAME.c (launch tables, descriptor, the API over the device context of
runtime_c/aotc_opencl.c or aotc_cuda.c), NAME_linked.c (the entry points on the linked-in
weights), the kernels' source (NAME_kernels.cl, or NAME_kernels.cu with its PTX) and
NAME_kernel_code.c, which embeds what the device loads (the OpenCL C source, or the PTX)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aotc.package.c_source import descriptor, linked_source, ref_row
from aotc.package.c_text import banner, c_string, comment_safe
from aotc.package.program import Program, Step

if TYPE_CHECKING:
    from targets.gpu.codegen import GpuModule

# clBuildProgram's options: the kernels are OpenCL C 1.2 (targets/gpu/render.py)
OPENCL_BUILD_OPTIONS = "-cl-std=CL1.2"

def gpu_module(program: Program) -> GpuModule:
    if program.gpu is None:
        raise ValueError("not a GPU program")
    return program.gpu


def target_text(program: Program) -> str:
    """The descriptor's target: the API and what the kernels were compiled for."""
    return f"{gpu_module(program).dialect} {program.cpu}"


def code_file(program: Program) -> str:
    """The kernels' source in the bundle (the CUDA one is compiled to NAME_kernels.ptx)."""
    return f"{program.name}_kernels.{'cu' if gpu_module(program).dialect == 'cuda' else 'cl'}"


def code_bytes(program: Program) -> bytes:
    """What the device loads: OpenCL C source, or PTX."""
    gpu = gpu_module(program)
    return gpu.source.encode() if gpu.dialect == "opencl" else bytes(program.kernel_object)


def code_array(program: Program, what: str) -> str:
    """NAME_kernel_code.c: what the device loads as a NUL-terminated C array, and the target it
    was compiled for, which the descriptor reports (`make ptx` rewrites both in the same form
    from a rebuilt NAME_kernels.ptx)."""
    n, data = program.name, code_bytes(program)
    rows = ["    " + ",".join(str(b) for b in data[i:i + 24]) + "," for i in range(0, len(data), 24)]
    return "\n".join([
        banner(what),
        '#include "aotc_gpu.h"',
        f"extern const char {n}_kernel_target[] AOTC_INTERNAL;",
        f"const char {n}_kernel_target[] AOTC_INTERNAL = {c_string(target_text(program))};",
        f"extern const unsigned char {n}_kernel_code[] AOTC_INTERNAL;",
        f"const unsigned char {n}_kernel_code[] AOTC_INTERNAL = {{",
        *rows,
        "0};",
        "",
    ])


def code_files(program: Program) -> dict[str, bytes]:
    """The kernels' files: their source (and CUDA's PTX) and the C array embedding what the
    device loads."""
    n, gpu = program.name, gpu_module(program)
    if gpu.dialect == "cuda":
        return {code_file(program): gpu.source.encode(),
                f"{n}_kernels.ptx": bytes(program.kernel_object),
                f"{n}_kernel_code.c": code_array(
                    program, f"{n}_kernels.ptx ({program.cpu}) as a C array").encode()}
    return {code_file(program): gpu.source.encode(),
            f"{n}_kernel_code.c": code_array(
                program, f"{n}_kernels.cl, the OpenCL C source, as a C array").encode()}


def _tables(program: Program) -> list[str]:
    """The entry points, their launches, the steps and their buffer references."""
    n, gpu = program.name, gpu_module(program)
    functions = list(dict.fromkeys(launch.function for ls in gpu.launches.values()
                                   for launch in ls))
    index = {f: i for i, f in enumerate(functions)}
    launches, steps, refs = [], [], []
    first_launch = first_ref = 0
    for i, step in enumerate(program.steps):
        assert isinstance(step, Step), "a GPU program has kernel steps only"
        mine = gpu.launches[step.kernel]
        launches += [f"    {{{index[la.function]}, {la.threads}, {la.blocks}}}," for la in mine]
        refs.append(f"    /* step {i}: {step.kernel} ({comment_safe(step.node)}) */")
        refs += [ref_row(r) for r in step.args]
        steps.append(f"    {{{first_launch}, {len(mine)}, {first_ref}, {len(step.args)}, "
                     f"{c_string(step.node)}}},")
        first_launch += len(mine)
        first_ref += len(step.args)
    # C has no empty arrays
    launches = launches or ["    {0, 0, 0} /* no launches */"]
    refs = refs if first_ref else [*refs, "    {AOTC_REF_ARENA, -1, 0, 0, 0, -1} /* no arguments */"]
    steps = steps or ["    {0, 0, 0, 0, \"\"} /* no steps */"]
    names = [f"    {c_string(f)}," for f in functions] or ["    \"\" /* no kernels */"]
    return [
        f"static const char *const {n}_functions[] = {{", *names, "};",
        f"static const aotc_gpu_launch {n}_launches[] = {{", *launches, "};",
        f"static const aotc_ref {n}_refs[] = {{", *refs, "};",
        f"static const aotc_gpu_step {n}_steps[] = {{", *steps, "};",
        "",
        f"static const aotc_model {n}_model = {{&{n}_desc, NULL, 0, NULL, "
        f"{n.upper()}_WEIGHTS_SIZE, NULL, 0, NULL}};",
        "",
        f"static const aotc_gpu_model {n}_program = {{",
        f"    &{n}_model, {n}_functions, {len(functions)}, {n}_launches, {n}_steps, "
        f"{len(program.steps)}, {n}_refs,",
        f"    {n}_kernel_code, {c_string(OPENCL_BUILD_OPTIONS)}, {int(gpu.uses_f64)}",
        "};",
    ]


def _dims_api(n: str, ctx: str) -> str:
    """NAME_run_context_dims: NAME_run_context at the run-time dimensions (aotc_gpu_run_dims
    checks their ranges)."""
    return f"""int {n}_run_context_dims({n}_context *ctx, const int64_t *dims, const void *const *inputs,
                         void *const *outputs) {{
    if (dims == NULL) return AOTC_ERR_NULL_ARGUMENT;
    return aotc_gpu_run_dims({ctx}, dims, inputs, outputs);
}}

"""


def _api(n: str, api: str, dims: bool) -> str:
    ctx = "(aotc_gpu_context *)(void *)ctx"
    const_ctx = "(const aotc_gpu_context *)(const void *)ctx"
    return f"""\
int {n}_create_with_weights_options({n}_context **out_ctx, const void *weights,
                                    uint64_t weights_size, const aotc_gpu_options *options) {{
    aotc_gpu_context *ctx = NULL;
    int rc;
    if (out_ctx == NULL) return AOTC_ERR_NULL_ARGUMENT;
    rc = aotc_gpu_create(&aotc_{api}_api, &{n}_program, (const unsigned char *)weights,
                         weights_size, options, &ctx);
    *out_ctx = ({n}_context *)(void *)ctx;
    return rc;
}}

int {n}_create_with_weights({n}_context **out_ctx, int num_threads, const void *weights,
                            uint64_t weights_size) {{
    if (num_threads < 0) {{
        if (out_ctx != NULL) *out_ctx = NULL;
        return AOTC_ERR_BAD_ARGUMENT;
    }}
    return {n}_create_with_weights_options(out_ctx, weights, weights_size, NULL);
}}

int {n}_run_context({n}_context *ctx, const void *const *inputs, void *const *outputs) {{
    return aotc_gpu_run({ctx}, inputs, outputs);
}}

{_dims_api(n, ctx) if dims else ""}int {n}_run_device({n}_context *ctx, void *const *inputs, void *const *outputs) {{
    return aotc_gpu_run_device({ctx}, inputs, outputs);
}}

int {n}_context_native(const {n}_context *ctx, void **device_context, void **queue) {{
    return aotc_gpu_native({const_ctx}, device_context, queue);
}}

void {n}_destroy({n}_context *ctx) {{ aotc_gpu_destroy({ctx}); }}

int {n}_context_num_threads(const {n}_context *ctx) {{ return ctx == NULL ? 0 : 1; }}

const char *{n}_context_error(const {n}_context *ctx) {{ return aotc_gpu_error({const_ctx}); }}

const char *{n}_context_device(const {n}_context *ctx) {{
    return aotc_gpu_device_name({const_ctx});
}}

const char *{n}_status_message(int status) {{ return aotc_status_message(status); }}

const char *{n}_missing_cpu_feature(void) {{ return NULL; }}

const aotc_model_desc *{n}_describe(void) {{ return &{n}_desc; }}
"""


def render_gpu_source(program: Program) -> str:
    n, gpu = program.name, gpu_module(program)
    return "\n".join([
        banner(f"launch tables and API of the model '{n}' on {gpu.dialect} (see {n}.h)"),
        f'#include "{n}.h"',
        '#include "aotc_gpu.h"',
        "",
        f"/* What the device loads ({'OpenCL C source' if gpu.dialect == 'opencl' else 'PTX'}), "
        f"NUL-terminated, in {n}_kernel_code.c. */",
        f"extern const unsigned char {n}_kernel_code[] AOTC_INTERNAL;",
        "/* What the kernels were compiled for (the descriptor's target), beside them. */",
        f"extern const char {n}_kernel_target[] AOTC_INTERNAL;",
        "",
        *descriptor(program, target_text(program), f"{n}_kernel_target"),
        "",
        *_tables(program),
        "",
        _api(n, gpu.dialect, bool(program.dims)),
    ])


def render_gpu_linked_source(program: Program) -> str:
    """NAME_linked.c: the creates that use the weights linked into the library (run_model, which
    reads NAME_weights.bin, never references them)."""
    n, up = program.name, program.name.upper()
    return linked_source(program, [
        f"int {n}_create({n}_context **out_ctx, int num_threads) {{",
        f"    return {n}_create_with_weights(out_ctx, num_threads, {n}_weights, "
        f"{up}_WEIGHTS_SIZE);",
        "}",
        "",
        f"int {n}_create_with_options({n}_context **out_ctx, const aotc_gpu_options *options) {{",
        f"    return {n}_create_with_weights_options(out_ctx, {n}_weights, {up}_WEIGHTS_SIZE, "
        "options);",
        "}",
        "",
    ])
