"""The runtime sources and the `@KEY@` templates in runtime_c/, filled in for one bundle."""

from __future__ import annotations

import re
from pathlib import Path

from aotc import __version__
from aotc.package.program import Program
from aotc.package.weights import weights_source

RUNTIME_DIR = Path(__file__).resolve().parents[2] / "runtime_c"
# Copied verbatim into every bundle.
RUNTIME_FILES = ("aotc_api.h", "aotc_runtime.h", "aotc_runtime.c", "aotc_pool.c", "aotc_npy.h", "aotc_npy.c")

_KEY = re.compile(r"@([A-Z_]+)@")


def runtime_dir() -> Path:
    try:  # installed: runtime_c is a package next to aotc
        import runtime_c

        return Path(runtime_c.__file__).resolve().parent
    except ImportError:  # pragma: no cover
        return RUNTIME_DIR


def fill(template: str, values: dict[str, str]) -> str:
    """Replaces every @KEY@; a key without a value is an error (a template/code mismatch)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"template key @{m.group(1)}@ has no value")
        return values[m.group(1)]

    return _KEY.sub(sub, template)


def _read(name: str) -> str:
    return (runtime_dir() / name).read_text()


def runtime_sources() -> dict[str, bytes]:
    return {name: (runtime_dir() / name).read_bytes() for name in RUNTIME_FILES}


# The folder the bundle's README tells CMake to build in (`cmake -S . -B build`).
CMAKE_BUILD_DIR = "build"


def make_products(name: str) -> list[str]:
    """Every file the bundle's Makefile makes (what `make clean` removes)."""
    return [f"{name}.o", f"{name}_linked.o", "aotc_runtime.o", "aotc_pool.o",
            f"{name}_weights.o", "run_model.o", "aotc_npy.o", f"lib{name}.a", f"lib{name}.so",
            "run_model"]


def built_files(name: str) -> list[str]:
    """What building a bundle adds to its folder (with make or the README's CMake command)."""
    return [*make_products(name), CMAKE_BUILD_DIR]


def render_makefile(program: Program, weights_format: str) -> str:
    n = program.name
    deps = f"{n}_weights.S {n}_weights.bin" if weights_format == "incbin" else f"{n}_weights.c"
    return fill(_read("Makefile.in"), {"NAME": n, "WEIGHTS_DEPS": deps,
                                       "MAKE_PRODUCTS": " ".join(make_products(n))})


def render_cmake(program: Program, weights_format: str) -> str:
    n = program.name
    if weights_format == "incbin":
        props = (
            f"set_source_files_properties({n}_weights.S PROPERTIES\n"
            f'    COMPILE_OPTIONS "-Wa,-I${{CMAKE_CURRENT_SOURCE_DIR}}"\n'
            f'    OBJECT_DEPENDS "${{CMAKE_CURRENT_SOURCE_DIR}}/{n}_weights.bin")'
        )
        run_model = ("# run_model reads the weights from the bundle's folder (not from its own)\n"
                     "target_compile_definitions(run_model PRIVATE\n"
                     '    RUN_MODEL_WEIGHTS_DIR="${CMAKE_CURRENT_SOURCE_DIR}")')
        languages = "C ASM"
    else:
        props, run_model, languages = "", "", "C"
    return fill(
        _read("CMakeLists.txt.in"),
        {"NAME": n, "LANGUAGES": languages, "WEIGHTS_PROPERTIES": props,
         "RUN_MODEL_PROPERTIES": run_model,
         "WEIGHTS_SRC": weights_source(n, weights_format)},
    )


def render_run_model(program: Program, weights_format: str) -> str:
    """run_model.c: with the weights in a .bin (incbin), it reads that file at run time and so
    links no copy of them; with a C array it uses the linked-in weights."""
    linked = weights_format != "incbin"
    return fill(_read("run_model.c.in"), {
        "NAME": program.name, "NAME_UPPER": program.name.upper(),
        "WEIGHTS_FILE": "" if linked else f"{program.name}_weights.bin",
        "LINKED_WEIGHTS": "1" if linked else "0"})


def _example(program: Program) -> str:
    n, up = program.name, program.name.upper()
    ins = ", ".join(f"calloc(1, {up}_INPUT_{i}_SIZE)" for i in range(len(program.inputs)))
    outs = ", ".join(f"malloc({up}_OUTPUT_{i}_SIZE)" for i in range(len(program.outputs)))
    ins, outs = ins or "NULL", outs or "NULL"
    return "\n".join(
        [
            "#include <stdio.h>",
            "#include <stdlib.h>",
            f'#include "{n}.h"',
            "",
            "int main(void) {",
            f"    const void *inputs[{up}_NUM_INPUTS + 1] = {{{ins}}};  /* fill them */",
            f"    void *outputs[{up}_NUM_OUTPUTS + 1] = {{{outs}}};",
            f"    {n}_context *ctx = NULL;",
            f"    int rc = {n}_create(&ctx, 0);  /* 0: default thread count */",
            f"    if (rc == AOTC_OK) rc = {n}_run_context(ctx, inputs, outputs);",
            f'    if (rc != AOTC_OK) fprintf(stderr, "{n}: %s\\n", {n}_status_message(rc));',
            f"    {n}_destroy(ctx);",
            "    /* ... use outputs, then free the buffers ... */",
            "    return rc == AOTC_OK ? 0 : 1;",
            "}",
        ]
    )


def render_readme(program: Program) -> str:
    n = program.name
    rows = []
    for kind, tensors in (("input", program.inputs), ("output", program.outputs)):
        for i, t in enumerate(tensors):
            dims = "×".join(str(d) for d in t.shape) or "scalar"
            name = t.name.replace("|", "\\|")
            rows.append(f"| {kind} {i} | `{name}` | {t.dtype} | {dims} | {t.nbytes} |")
    run_args = " ".join(
        [*(f"{t.name}.npy" for t in program.inputs), *(f"OUT_{t.name}.npy" for t in program.outputs)]
    )
    return fill(
        _read("README.md.in"),
        {
            "NAME": n,
            "UPPER": n.upper(),
            "VERSION": __version__,
            "TRIPLE": program.triple,
            "CPU": program.cpu,
            "FEATURES": ", ".join(program.cpu_features) or "baseline only",
            "IO_TABLE": "\n".join(rows),
            "WORKSPACE": str(program.arena_size),
            "WEIGHTS_BYTES": str(len(program.weights)),
            "THREADS": (f"{program.num_threads} (fixed at compile time)" if program.num_threads
                        else "all online cores"),
            "EXAMPLE": _example(program),
            "RUN_ARGS": run_args,
        },
    )
