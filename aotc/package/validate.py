"""Checks a Program before it is written: names, dtypes, tables within the limits of the runtime."""

from __future__ import annotations

from aotc.errors import AotcError
from aotc.package.c_text import C_IDENTIFIER
from aotc.package.control_table import flatten
from aotc.package.program import DTYPES, Program

MAX_ARGS = 64  # AOTC_MAX_ARGS in runtime_c/aotc_runtime.h
MAX_LOOP_DEPTH = 8  # AOTC_MAX_LOOP_DEPTH

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
    for i, row in enumerate(flatten(program.steps)):
        where = f"step {i} ({row.node})"
        if row.kind == "kernel" and not C_IDENTIFIER.match(row.kernel):
            raise ValueError(f"{where}: kernel symbol '{row.kernel}' is not a C identifier")
        if len(row.args) > MAX_ARGS:
            raise ValueError(f"{where}: {len(row.args)} arguments, the runtime allows {MAX_ARGS}")
        if row.kind in ("loop", "loop_end") and not 0 <= row.level < MAX_LOOP_DEPTH:
            raise ValueError(f"{where}: loops nested deeper than {MAX_LOOP_DEPTH}")
        for ref in row.args:
            if ref.storage not in limits:
                raise ValueError(f"{where}: unknown storage '{ref.storage}'")
            offsets = [ref.offset] if ref.odd_offset is None else [ref.offset, ref.odd_offset]
            if not all(0 <= o <= limits[ref.storage] for o in offsets):
                raise ValueError(f"{where}: {ref.storage} reference {ref.offset} out of range")
            if ref.loop >= MAX_LOOP_DEPTH or (ref.odd_offset is not None
                                              and ref.storage != "arena"):
                raise ValueError(f"{where}: {ref} cannot move that way")
