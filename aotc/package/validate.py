"""Checks a Program before it is written: names, dtypes, tables within the limits of the runtime."""

from __future__ import annotations

from aotc.errors import AotcError
from aotc.package.c_text import C_IDENTIFIER
from aotc.package.program import DTYPES, Program

MAX_ARGS = 64  # AOTC_MAX_ARGS in runtime_c/aotc_runtime.h

_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while main".split()
)


def check_name(name: str) -> None:
    if not C_IDENTIFIER.match(name) or name in _C_KEYWORDS:
        raise AotcError(
            f"bundle name '{name}' is not a C identifier",
            hint="use letters, digits and '_', not starting with a digit (e.g. --name my_model)",
        )
    if name.lower().startswith("aotc"):
        raise AotcError(
            f"bundle name '{name}' starts with 'aotc', which the runtime's symbols use",
            hint="choose another --name",
        )


def check_program(program: Program) -> None:
    """Raises ValueError (AotcError for the user-chosen name) when the Program cannot be packaged."""
    check_name(program.name)
    for kind, tensors in (("input", program.inputs), ("output", program.outputs)):
        for t in tensors:
            if t.dtype not in DTYPES:
                raise ValueError(f"{kind} '{t.name}': unsupported dtype '{t.dtype}'")
            if any((not isinstance(d, int)) or d < 0 for d in t.shape):
                raise ValueError(f"{kind} '{t.name}': shape {t.shape} is not static")
    if program.arena_size < 0 or program.arena_size % 64:
        raise ValueError(f"arena size {program.arena_size} is not a multiple of 64")
    if program.num_threads < 0:
        raise ValueError(f"num_threads {program.num_threads} is negative")
    if not program.kernel_object:
        raise ValueError("the program has no kernel object")
    limits = {
        "arena": program.arena_size,
        "weight": len(program.weights),
        "input": len(program.inputs) - 1,
        "output": len(program.outputs) - 1,
    }
    for i, step in enumerate(program.steps):
        where = f"step {i} ({step.node})"
        if not C_IDENTIFIER.match(step.kernel):
            raise ValueError(f"{where}: kernel symbol '{step.kernel}' is not a C identifier")
        if len(step.args) > MAX_ARGS:
            raise ValueError(f"{where}: {len(step.args)} arguments, the runtime allows {MAX_ARGS}")
        for ref in step.args:
            if ref.storage not in limits:
                raise ValueError(f"{where}: unknown storage '{ref.storage}'")
            if not 0 <= ref.offset <= limits[ref.storage]:
                raise ValueError(f"{where}: {ref.storage} reference {ref.offset} out of range")
