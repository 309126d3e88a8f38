"""NAME.c: the executor's step and buffer-reference tables, the descriptor, and thin API wrappers."""

from __future__ import annotations

from aotc.package import cpu_check
from aotc.package.c_header import WORKSPACE_ALIGN
from aotc.package.c_text import C_DTYPE_ENUM, banner, c_string, comment_safe
from aotc.package.control_table import STEP_ENUM, flatten
from aotc.package.program import BufferRef, Program, TensorInfo, kernel_steps

STORAGE_ENUM = {
    "arena": "AOTC_REF_ARENA",
    "weight": "AOTC_REF_WEIGHT",
    "input": "AOTC_REF_INPUT",
    "output": "AOTC_REF_OUTPUT",
}


def _tensor_table(n: str, kind: str, tensors: list[TensorInfo]) -> tuple[list[str], str]:
    """Shape arrays plus the aotc_tensor_desc array; returns (lines, C expression for the array)."""
    if not tensors:
        return [], "NULL"
    lines = []
    for i, t in enumerate(tensors):
        dims = ", ".join(str(d) for d in t.shape) or "0"
        lines.append(f"static const int64_t {n}_{kind}{i}_shape[] = {{{dims}}};")
    lines.append(f"static const aotc_tensor_desc {n}_{kind}s[] = {{")
    for i, t in enumerate(tensors):
        lines.append(
            f"    {{{c_string(t.name)}, {C_DTYPE_ENUM[t.dtype]}, {c_string(t.dtype)}, "
            f"{len(t.shape)}, {n}_{kind}{i}_shape, {t.nbytes}u}},"
        )
    lines.append("};")
    return lines, f"{n}_{kind}s"


def ref_row(r: BufferRef) -> str:
    """One `aotc_ref` initializer (a line of a refs table)."""
    odd = -1 if r.odd_offset is None else r.odd_offset
    return (f"    {{{STORAGE_ENUM[r.storage]}, {r.loop}, {r.offset}, {r.shift}, {r.stride}, "
            f"{odd}}},")


def _tables(program: Program) -> tuple[list[str], str, str, int]:
    """The ref and step tables (control_table.flatten's rows), their C names and the step
    count."""
    n = program.name
    rows = flatten(program.steps)
    if not rows:
        return [], "NULL", "NULL", 0
    refs, steps = [], []
    first = 0
    for i, row in enumerate(rows):
        what = comment_safe(row.node)
        refs.append(f"    /* step {i}: {row.kernel or row.kind} ({what}) */")
        refs.extend(ref_row(r) for r in row.args)
        kernel = row.kernel or "NULL"
        steps.append(f"    {{{kernel}, {len(row.args)}, {first}, {STEP_ENUM[row.kind]}, "
                     f"{row.level}, {row.target}, {row.count}}}, /* {what} */")
        first += len(row.args)
    if first == 0:
        refs.append("    {AOTC_REF_ARENA, -1, 0, 0, 0, -1} /* no step takes arguments */")
    lines = [
        f"static const aotc_ref {n}_refs[] = {{",
        *refs,
        "};",
        "",
        f"static const aotc_step {n}_steps[] = {{",
        *steps,
        "};",
    ]
    return lines, f"{n}_steps", f"{n}_refs", len(rows)


def _computed_tables(program: Program) -> tuple[list[str], str, str]:
    """Outputs whose length the data decides: their axes (the descriptor's last field) and
    the workspace offsets of their lengths (the model's); NULL each when none has one."""
    outs = program.outputs
    if not any(t.computed_axis >= 0 for t in outs):
        return [], "NULL", "NULL"
    n = program.name
    axes = ", ".join(str(t.computed_axis) for t in outs)
    offsets = ", ".join(str(t.length_offset) for t in outs)
    return [f"static const int32_t {n}_output_computed_axes[] = {{{axes}}};",
            f"static const int64_t {n}_output_length_offsets[] = {{{offsets}}};"], \
        f"{n}_output_computed_axes", f"{n}_output_length_offsets"


def _computed_api(n: str) -> str:
    return f"""
int {n}_output_shape(const void *workspace, int32_t output, int64_t *shape) {{
    return aotc_model_output_shape(&{n}_program, workspace, output, shape);
}}

int {n}_context_output_shape(const {n}_context *ctx, int32_t output, int64_t *shape) {{
    return aotc_context_output_shape((const aotc_context *)(const void *)ctx, output, shape);
}}
"""


def _dims_table(program: Program) -> tuple[list[str], str]:
    """A model with run-time dimensions: their ranges and the inputs'/outputs' axes that follow
    them, as the descriptor's trailing fields (zeros for a static model)."""
    if not program.dims:
        return [], ",\n    0, NULL, NULL, NULL, NULL"
    n = program.name

    def axes(tensors: list[TensorInfo]) -> str:
        return ", ".join(str(t.dyn_axes[0] if t.dyn_axes else -1) for t in tensors) or "-1"

    lines = [
        f"static const int64_t {n}_dims_min[] = {{{', '.join(str(d.lo) for d in program.dims)}}};",
        f"static const int64_t {n}_dims_max[] = {{{', '.join(str(d.hi) for d in program.dims)}}};",
        f"static const int32_t {n}_input_dim_axes[] = {{{axes(program.inputs)}}};",
        f"static const int32_t {n}_output_dim_axes[] = {{{axes(program.outputs)}}};",
    ]
    return lines, (f",\n    {len(program.dims)}, {n}_dims_min, {n}_dims_max, "
                   f"{n}_input_dim_axes, {n}_output_dim_axes")


def _dims_api(n: str) -> str:
    return f"""
int {n}_run_dims_with_weights(const int64_t *dims, const void *const *inputs,
                              void *const *outputs, void *workspace, const void *weights,
                              uint64_t weights_size) {{
    int rc = aotc_check_weights(&{n}_program, weights, weights_size);
    if (rc != AOTC_OK) return rc;
    if (dims == NULL) return AOTC_ERR_NULL_ARGUMENT;
    return aotc_model_run_dims(&{n}_program, (const unsigned char *)weights, dims, inputs,
                               outputs, workspace);
}}

int {n}_run_context_dims({n}_context *ctx, const int64_t *dims, const void *const *inputs,
                         void *const *outputs) {{
    if (dims == NULL) return AOTC_ERR_NULL_ARGUMENT;
    return aotc_context_run_dims((aotc_context *)(void *)ctx, dims, inputs, outputs);
}}
"""


def _api(n: str) -> str:
    return f"""\
int {n}_run_with_weights(const void *const *inputs, void *const *outputs, void *workspace,
                         const void *weights, uint64_t weights_size) {{
    int rc = aotc_check_weights(&{n}_program, weights, weights_size);
    if (rc != AOTC_OK) return rc;
    return aotc_model_run(&{n}_program, (const unsigned char *)weights, inputs, outputs, workspace);
}}

int {n}_create_with_weights({n}_context **out_ctx, int num_threads, const void *weights,
                            uint64_t weights_size) {{
    aotc_context *ctx = NULL;
    int rc;
    if (out_ctx == NULL) return AOTC_ERR_NULL_ARGUMENT;
    *out_ctx = NULL;
    rc = aotc_check_weights(&{n}_program, weights, weights_size);
    if (rc != AOTC_OK) return rc;
    rc = aotc_context_create(&{n}_program, (const unsigned char *)weights, &ctx, num_threads);
    if (rc == AOTC_OK) *out_ctx = ({n}_context *)(void *)ctx;
    return rc;
}}

int {n}_run_context({n}_context *ctx, const void *const *inputs, void *const *outputs) {{
    return aotc_context_run((aotc_context *)(void *)ctx, inputs, outputs);
}}

void {n}_destroy({n}_context *ctx) {{ aotc_context_destroy((aotc_context *)(void *)ctx); }}

int {n}_context_num_threads(const {n}_context *ctx) {{
    return aotc_context_num_threads((const aotc_context *)(const void *)ctx);
}}

const char *{n}_status_message(int status) {{ return aotc_status_message(status); }}

const char *{n}_missing_cpu_feature(void) {{ return {n}_cpu_missing(); }}

const aotc_model_desc *{n}_describe(void) {{ return &{n}_desc; }}
"""


def linked_source(program: Program, functions: list[str]) -> str:
    """NAME_linked.c holding `functions`, which read the weights linked into the library as
    `NAME_weights`. A program that passes its own weights (run_model reads NAME_weights.bin)
    never references them, so the static library's weights stay out of it."""
    n = program.name
    return "\n".join([
        banner(f"the entry points of '{n}' that use its linked-in weights (see {n}.h)"),
        f'#include "{n}.h"',
        '#include "aotc_runtime.h"',
        "",
        f"/* {len(program.weights)} bytes of weights, 64-byte aligned, in {n}_weights. */",
        f"extern const unsigned char {n}_weights[] AOTC_INTERNAL;",
        "",
        *functions,
    ])


def render_linked_source(program: Program) -> str:
    """NAME_linked.c: the entry points that use the weights linked into the library."""
    n, up = program.name, program.name.upper()
    return linked_source(program, [
        f"int {n}_run(const void *const *inputs, void *const *outputs, void *workspace) {{",
        f"    return {n}_run_with_weights(inputs, outputs, workspace, {n}_weights, "
        f"{up}_WEIGHTS_SIZE);",
        "}",
        "",
        f"int {n}_create({n}_context **out_ctx, int num_threads) {{",
        f"    return {n}_create_with_weights(out_ctx, num_threads, {n}_weights, "
        f"{up}_WEIGHTS_SIZE);",
        "}",
        "",
        *([f"int {n}_run_dims(const int64_t *dims, const void *const *inputs, "
           "void *const *outputs, void *workspace) {",
           f"    return {n}_run_dims_with_weights(dims, inputs, outputs, workspace, "
           f"{n}_weights, {up}_WEIGHTS_SIZE);",
           "}",
           ""] if program.dims else []),
    ])


def descriptor(program: Program, target: str, target_symbol: str | None = None) -> list[str]:
    """The inputs' and outputs' tables and the model's descriptor `NAME_desc` (`target`: its
    triple field; `target_symbol`: a C string defined elsewhere to use instead, one a build
    step may rewrite)."""
    n = program.name
    in_lines, in_expr = _tensor_table(n, "input", program.inputs)
    out_lines, out_expr = _tensor_table(n, "output", program.outputs)
    dims_lines, dims_fields = _dims_table(program)
    computed_lines, axes_expr, _ = _computed_tables(program)
    return [
        *in_lines,
        *out_lines,
        *dims_lines,
        *computed_lines,
        "",
        f"static const aotc_model_desc {n}_desc = {{",
        f"    {c_string(n)}, {len(program.inputs)}, {in_expr}, {len(program.outputs)}, {out_expr},",
        f"    {program.arena_size}u, {WORKSPACE_ALIGN}u, {target_symbol or c_string(target)}"
        f"{dims_fields}, {axes_expr}",
        "};",
    ]


def render_source(program: Program) -> str:
    n = program.name
    kernels = list(dict.fromkeys(s.kernel for s in kernel_steps(program.steps)))
    table_lines, steps_expr, refs_expr, num_steps = _tables(program)
    auxv = cpu_check.needs_auxv(program.triple, program.cpu_features)
    cpuid = cpu_check.needs_cpuid(program.triple, program.cpu_features)
    lines = [
        banner(f"executor tables and API of the model '{n}' (see {n}.h)"),
        f'#include "{n}.h"',
        '#include "aotc_runtime.h"',
        *(["#if defined(__aarch64__) && defined(__linux__)", "#include <sys/auxv.h>", "#endif"]
          if auxv else []),
        *(["#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))",
           "#include <cpuid.h>", "#endif"] if cpuid else []),
        "",
        cpu_check.arch_guard(program.triple),
        "",
        f"/* Kernels, in {n}_kernels.o (ABI: ARCHITECTURE.md). */",
        *(f"extern int32_t {k}(void *ctx, void **bufs, const int64_t *dims) AOTC_INTERNAL;"
          for k in kernels),
        "",
        *descriptor(program, program.triple),
        "",
        *table_lines,
        "",
        cpu_check.cpu_check_function(f"{n}_cpu_missing", program.triple, program.cpu_features),
        "",
        f"static const aotc_model {n}_program = {{",
        f"    &{n}_desc, {steps_expr}, {num_steps}, {refs_expr},",
        f"    {n.upper()}_WEIGHTS_SIZE, {n}_cpu_missing, {program.num_threads}, "
        f"{_computed_tables(program)[2]}",
        "};",
        "",
        _api(n),
        *([_dims_api(n)] if program.dims else []),
        *([_computed_api(n)] if _computed_tables(program)[0] else []),
    ]
    return "\n".join(lines)
