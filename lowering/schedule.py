"""Schedules as data: primitives recorded in a trace and applied to one stage's loops.

A stage starts with one loop per axis of its compute (spatial, then reduce). Primitives replace
loops by new ones and record how every earlier loop variable is computed from the new ones, so
the lowering can rewrite the compute body without the compute ever mentioning tiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowering import te
from lowering.loop_ir import LOOP_KINDS


class ScheduleError(Exception):
    """A primitive's precondition failed; the message says which and why."""


class Loop:
    def __init__(self, name: str, extent: int, origin: str) -> None:
        self.var = te.Var(name)
        self.extent = extent
        self.origin = origin  # "spatial" | "reduce"
        self.kind = "serial"
        # set by a non-divisible split: the real extent is min(factor, bound - outer*factor),
        # with `outer` an expression of enclosing loop variables
        self.tail: tuple[te.Expr, int, int] | None = None

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"{self.name}<{self.extent}>"


# Primitive records: small frozen values that print themselves; a schedule is a list of them.
@dataclass(frozen=True)
class Split:
    loop: str
    factor: int


@dataclass(frozen=True)
class Fuse:
    outer: str
    inner: str


@dataclass(frozen=True)
class Reorder:
    order: tuple[str, ...]


@dataclass(frozen=True)
class Annotate:
    loop: str
    kind: str


class StageSchedule:
    """The loops of one compute stage and the trace of primitives that made them."""

    def __init__(self, tensor: te.Tensor) -> None:
        op = tensor.op
        if op is None:
            raise ScheduleError(f"{tensor.name} is a placeholder; it has no loops")
        self.tensor = tensor
        axes = list(op.axes) + list(op.reduce_axes)
        self.leaves: list[Loop] = []
        self.value: dict[te.Var, te.Expr] = {}
        for ax in axes:
            loop = Loop(ax.var.name, ax.extent, ax.kind)
            self.leaves.append(loop)
            self.value[ax.var] = loop.var
        self.trace: list[object] = []

    # lookup -------------------------------------------------------------------------------
    def loop(self, name: str) -> Loop:
        for lp in self.leaves:
            if lp.name == name:
                return lp
        raise ScheduleError(f"no loop named {name} in {[lp.name for lp in self.leaves]}")

    def _rebind(self, old: te.Var, expr: te.Expr) -> None:
        for k, v in self.value.items():
            self.value[k] = te.substitute(v, {old: expr})
        for lp in self.leaves:
            if lp.tail is not None:
                outer, f, bound = lp.tail
                lp.tail = (te.substitute(outer, {old: expr}), f, bound)

    # primitives ---------------------------------------------------------------------------
    def split(self, loop: Loop, factor: int) -> tuple[Loop, Loop]:
        if loop not in self.leaves:
            raise ScheduleError(f"split: {loop.name} is not a current loop")
        if factor < 1:
            raise ScheduleError(f"split: factor {factor} < 1")
        if loop.tail is not None:
            raise ScheduleError(f"split: {loop.name} already has a partial extent")
        outer = Loop(loop.name + "o", math.ceil(loop.extent / factor), loop.origin)
        inner = Loop(loop.name + "i", min(factor, loop.extent), loop.origin)
        if loop.extent % factor and factor < loop.extent:
            inner.tail = (outer.var, factor, loop.extent)
        pos = self.leaves.index(loop)
        self.leaves[pos : pos + 1] = [outer, inner]
        self._rebind(loop.var, outer.var * factor + inner.var)
        self.trace.append(Split(loop.name, factor))
        return outer, inner

    def fuse(self, outer: Loop, inner: Loop) -> Loop:
        pos = self.leaves.index(outer)
        if pos + 1 >= len(self.leaves) or self.leaves[pos + 1] is not inner:
            raise ScheduleError(f"fuse: {inner.name} does not directly follow {outer.name}")
        if outer.tail or inner.tail:
            raise ScheduleError("fuse: cannot fuse a loop with a partial extent")
        for lp in self.leaves:
            if lp.tail is not None and any(v in (outer.var, inner.var) for v in _vars_of(lp.tail[0])):
                if self.leaves.index(lp) < pos:
                    raise ScheduleError(f"fuse: {lp.name} depends on the fused loops")
        if outer.origin != inner.origin:
            raise ScheduleError("fuse: cannot fuse a spatial loop with a reduce loop")
        fused = Loop(outer.name + inner.name, outer.extent * inner.extent, outer.origin)
        self.leaves[pos : pos + 2] = [fused]
        self._rebind(outer.var, fused.var // inner.extent)
        self._rebind(inner.var, fused.var % inner.extent)
        self.trace.append(Fuse(outer.name, inner.name))
        return fused

    def reorder(self, *loops: Loop) -> None:
        """Put `loops` in the given order, in the positions they occupy now."""
        positions = sorted(self.leaves.index(lp) for lp in loops)
        for pos, lp in zip(positions, loops, strict=True):
            self.leaves[pos] = lp
        self.trace.append(Reorder(tuple(lp.name for lp in loops)))

    def annotate(self, loop: Loop, kind: str) -> None:
        if kind not in LOOP_KINDS:
            raise ScheduleError(f"unknown loop kind {kind}")
        if kind == "parallel" and loop.origin == "reduce":
            raise ScheduleError(f"parallel: {loop.name} is a reduction loop")
        loop.kind = kind
        self.trace.append(Annotate(loop.name, kind))

    def parallel(self, loop: Loop) -> None:
        self.annotate(loop, "parallel")

    def vectorize(self, loop: Loop) -> None:
        self.annotate(loop, "vectorize")

    def unroll(self, loop: Loop) -> None:
        self.annotate(loop, "unroll")

    def check(self) -> None:
        """Loop-structure invariants the lowering relies on."""
        for pos, lp in enumerate(self.leaves):
            if lp.kind == "parallel" and pos != 0:
                raise ScheduleError(f"parallel loop {lp.name} must be the outermost loop")
            if lp.tail is not None:
                enclosing = {id(x.var) for x in self.leaves[:pos]}
                for v in _vars_of(lp.tail[0]):
                    if id(v) not in enclosing:
                        raise ScheduleError(
                            f"partial loop {lp.name} must stay inside loop {v.name}"
                        )

    def describe(self) -> str:
        return "; ".join(repr(p) for p in self.trace)


def _vars_of(e: te.Expr) -> list[te.Var]:
    if isinstance(e, te.Var):
        return [e]
    return [v for c in te.children(e) for v in _vars_of(c)]
