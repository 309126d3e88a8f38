"""Checks a Program before it is written: names, dtypes, tables within the limits of the runtime."""

from __future__ import annotations

from aotc.errors import AotcError
from aotc.package.c_text import C_IDENTIFIER
from aotc.package.control_table import flatten
from aotc.package.program import DTYPES, Program, Step

MAX_ARGS = 64  # AOTC_MAX_ARGS in runtime_c/aotc_runtime.h
MAX_LOOP_DEPTH = 8  # AOTC_MAX_LOOP_DEPTH
MAX_GRID = 2**31 - 1  # blocks of a launch (CUDA's grid x), threads of a block

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
            if t.computed_axis >= 0 and (kind == "input" or t.computed_axis >= len(t.shape) or
                                         not 0 <= t.length_offset <= program.arena_size - 8):
                raise ValueError(f"{kind} '{t.name}': computed length on axis "
                                 f"{t.computed_axis} at arena offset {t.length_offset}")
    if program.arena_size < 0 or program.arena_size % 64:
        raise ValueError(f"arena size {program.arena_size} is not a multiple of 64")
    if program.num_threads < 0:
        raise ValueError(f"num_threads {program.num_threads} is negative")
    if program.gpu is not None:
        _check_gpu(program)
    elif not program.kernel_object:
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


def _check_gpu(program: Program) -> None:
    """A GPU program: kernel steps alone (no loops or branches), each kernel with its launches,
    entry points named as C identifiers, grids the APIs take, PTX for CUDA."""
    gpu = program.gpu
    assert gpu is not None
    if gpu.dialect not in ("opencl", "cuda"):
        raise ValueError(f"unknown GPU dialect '{gpu.dialect}'")
    if gpu.dialect == "cuda" and not program.kernel_object:
        raise ValueError("a CUDA program without its PTX")
    if b"\0" in (program.kernel_object + gpu.source.encode()):
        raise ValueError("the kernels' code holds a NUL byte")
    for i, step in enumerate(program.steps):
        if not isinstance(step, Step):
            raise ValueError(f"step {i}: a GPU program has kernel steps only")
        if step.kernel not in gpu.launches:
            raise ValueError(f"step {i} ({step.node}): kernel {step.kernel} has no launches")
        if any(r.moves for r in step.args):
            raise ValueError(f"step {i} ({step.node}): a reference moves with a loop")
        for launch in gpu.launches[step.kernel]:
            if not C_IDENTIFIER.match(launch.function):
                raise ValueError(f"entry point '{launch.function}' is not a C identifier")
            if not (0 <= launch.blocks <= MAX_GRID and 0 < launch.threads <= MAX_GRID):
                raise ValueError(f"{launch.function}: a grid of {launch.blocks} blocks of "
                                 f"{launch.threads} threads")
