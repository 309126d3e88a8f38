"""The weights blob as bundle files: `.bin` + `.incbin` assembly (fast to build), or a C array."""

from __future__ import annotations

from aotc.package.c_text import banner

WEIGHTS_FORMATS = ("incbin", "c")


def weights_files(name: str, weights: bytes, fmt: str) -> dict[str, bytes]:
    """File name -> contents for the weights of model `name` in format `fmt`."""
    if fmt == "incbin":
        return {f"{name}_weights.bin": weights, f"{name}_weights.S": _assembly(name).encode()}
    if fmt == "c":
        return {f"{name}_weights.c": _c_array(name, weights).encode()}
    raise ValueError(f"unknown weights format '{fmt}' (choose one of {', '.join(WEIGHTS_FORMATS)})")


def weights_source(name: str, fmt: str) -> str:
    """The source file the build compiles for the weights."""
    return f"{name}_weights.S" if fmt == "incbin" else f"{name}_weights.c"


def _assembly(name: str) -> str:
    # '%' type prefixes and '//'-free syntax work in both x86-64 and AArch64 GNU as.
    return f"""\
{banner(f"the weights of '{name}', included from {name}_weights.bin")}
    .section .rodata
    .balign 64
    .globl {name}_weights
    .hidden {name}_weights
    .type {name}_weights, %object
{name}_weights:
    .incbin "{name}_weights.bin"
    .size {name}_weights, . - {name}_weights
    .section .note.GNU-stack,"",%progbits
"""


def _c_array(name: str, weights: bytes) -> str:
    data = weights if weights else b"\0"  # C has no empty arrays
    rows = []
    for i in range(0, len(data), 24):
        rows.append("    " + ",".join(str(b) for b in data[i : i + 24]) + ",")
    return "\n".join(
        [
            banner(f"the weights of '{name}' as a C array"),
            "#include <stddef.h>",
            "",
            "#if defined(__GNUC__)",
            "#define AOTC_WEIGHTS_ATTR __attribute__((aligned(64), visibility(\"hidden\")))",
            "#else",
            "#define AOTC_WEIGHTS_ATTR",
            "#endif",
            "",
            f"extern const unsigned char {name}_weights[{len(data)}] AOTC_WEIGHTS_ATTR;",
            f"const unsigned char {name}_weights[{len(data)}] AOTC_WEIGHTS_ATTR = {{",
            *rows,
            "};",
            "",
        ]
    )
