"""A Program's items (kernel steps, loops, branches, checks) as the C executor's flat step table.

A loop is its LOOP row, its body, its LOOP_END row and the steps of its odd exit; a branch is
its IF row, the then branch, a JUMP row past the else branch, and the else branch; a check is
one CHECK row. Row indices are what the rows' `target`s name (aotc_runtime.h, enum
aotc_step_kind).
"""

from __future__ import annotations

from dataclasses import dataclass

from aotc.package.program import Branch, BufferRef, Check, Item, Loop, Step

STEP_ENUM = {
    "kernel": "AOTC_STEP_KERNEL",
    "loop": "AOTC_STEP_LOOP",
    "loop_end": "AOTC_STEP_LOOP_END",
    "if": "AOTC_STEP_IF",
    "jump": "AOTC_STEP_JUMP",
    "check": "AOTC_STEP_CHECK",
}


@dataclass
class Row:
    kind: str  # a key of STEP_ENUM
    args: tuple[BufferRef, ...]
    node: str
    kernel: str = ""
    level: int = 0
    target: int = 0
    count: int = 0


def flatten(items: list[Item]) -> list[Row]:
    rows: list[Row] = []
    _emit(items, rows)
    return rows


def _emit(items: list[Item], rows: list[Row]) -> None:
    for item in items:
        if isinstance(item, Step):
            rows.append(Row("kernel", item.args, item.node, item.kernel))
        elif isinstance(item, Check):
            rows.append(Row("check", (item.cond,), item.node))
        elif isinstance(item, Loop):
            start = len(rows)
            head = Row("loop", (item.cond_in,) if item.cond_in else (), item.node,
                       level=item.depth, count=item.trip_count)
            rows.append(head)
            _emit(item.body, rows)
            head.target = len(rows)
            rows.append(Row("loop_end", (item.cond_out,) if item.cond_out else (), item.node,
                            level=item.depth, target=start, count=len(item.on_odd_exit)))
            _emit(list(item.on_odd_exit), rows)
        else:
            assert isinstance(item, Branch)
            head = Row("if", (item.cond,), item.node)
            rows.append(head)
            _emit(item.then, rows)
            jump = Row("jump", (), item.node)
            rows.append(jump)
            head.target = len(rows)
            _emit(item.otherwise, rows)
            jump.target = len(rows)
