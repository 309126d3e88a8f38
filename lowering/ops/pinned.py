"""Parameters given as inputs whose meaning the node's shapes fix, checked at run time.

An operator's shape parameter (Reduce's axes, Reshape's shape, TopK's k, ...) given as a graph
input instead of a constant cannot be read at compile time, but the shapes around the node can:
the model declares, or inference gives, its input and output shapes. Where those shapes leave
the parameter one meaning, the operator is compiled for that meaning ("pinned"), and a check
runs before its kernel: a small kernel computes whether the run-time value means the same, and
the executor stops the run with AOTC_ERR_INPUT_VALUE when it does not (a `Check` item), so a
value the kernels were not compiled for is an error, never a wrong result. A value that means
the same need not be equal: axes may be negative, in another order, or name a size-1 axis where
that changes nothing. Where the shapes admit several meanings, or a shape follows a run-time
dimension, or the caller cannot run checks (`OpContext.checks` is None: a fused region's body),
the parameter must be a constant as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from lowering import te
from lowering.ops import OpContext

# A set of axes an axes parameter may name: per axis, whether it is named.
AxesPattern = tuple[bool, ...]

# The most meanings an operator builds and selects among at run time (each costs its work).
MAX_MEANINGS = 4


def run_time(ctx: OpContext, i: int, *, elementwise: bool = True) -> te.Tensor | None:
    """Input `i` when it is a run-time value whose meaning the node's static shapes may pin:
    present, not a constant, checks possible here, and no shape of the node follows a run-time
    dimension; with `elementwise` (the caller unrolls it with `elements`), also a short list of
    numbers. None otherwise (the caller then asks for a constant as before)."""
    if ctx.checks is None or not ctx.has_input(i) or ctx.consts[i] is not None:
        return None
    t = ctx.input(i)
    shapes = [u.shape for u in ctx.inputs if u is not None] + list(ctx.out_shapes)
    if any(isinstance(d, te.DynExtent) for s in shapes for d in s):
        return None
    if elementwise and (t.dtype == "bool" or t.size > 64):
        return None
    return t


def ambiguous(ctx: OpContext, i: int, what: str, meanings: str) -> Exception:
    """The error for a run-time parameter whose meaning the shapes do not fix."""
    return ctx.error(f"{what} must be a constant (known at compile time): it is given as an "
                     f"input, and the node's shapes fit {meanings}",
                     hint="make it an initializer or a Constant, or bind the inputs it is "
                     "computed from with --input-shape so that it folds")


def elements(t: te.Tensor) -> list[te.Expr]:
    """Each element of a small static tensor as a load, in row-major order."""
    return [t[tuple(te.const(int(k), "int64") for k in idx)] for idx in np.ndindex(*t.shape)]


def require(ctx: OpContext, ok: te.Expr, what: str) -> None:
    """Run-time check: `ok` (over the node's inputs) must hold, else the run stops."""
    assert ctx.checks is not None
    check = te.compute((), lambda: te.cast("bool", ok) if ok.dtype != "bool" else ok,
                       name="check")
    ctx.checks.append((check, f"{ctx.node} ({ctx.op_type}): {what}"))


def values(ctx: OpContext, i: int, expected: Sequence[int], what: str) -> np.ndarray:
    """Pin input `i` to `expected` (its elements in order): checked equal at run time."""
    t = ctx.input(i)
    loads = elements(t)
    if len(loads) != len(expected):
        raise ambiguous(ctx, i, what, f"{len(expected)} values, it holds {len(loads)}")
    require(ctx, equal_to(loads, expected), f"{what} must be {list(map(int, expected))}")
    return np.asarray(expected, dtype=np.int64).reshape(t.shape)


def equal_to(loads: Sequence[te.Expr], expected: Sequence[int]) -> te.Expr:
    """Whether the loaded values are `expected`, one by one."""
    return te.all_of([te.eq(v, te.const(int(e), v.dtype))
                      for v, e in zip(loads, expected, strict=True)])


def named_axes(ctx: OpContext, i: int, rank: int) -> list[te.Expr]:
    """Per axis 0..rank-1 of an axes input, whether some entry names it (as d or d - rank)."""
    loads = elements(ctx.input(i))
    return [te.any_of([axis_fits(a, d, rank) for a in loads]) for d in range(rank)]


def axes(ctx: OpContext, i: int, rank: int, patterns: Sequence[AxesPattern], what: str) -> None:
    """Check at run time that axes input `i` (over `rank` axes) names the axes of one of
    `patterns`, every entry in range and none named twice."""
    loads = elements(ctx.input(i))
    named = named_axes(ctx, i, rank)
    conds = [te.logical_and(te.ge(a, te.const(-rank, a.dtype)), te.lt(a, te.const(rank, a.dtype)))
             for a in loads]
    conds.append(te.eq(count_true(named), te.const(len(loads), "int64")))
    conds.append(_fit(named, patterns))
    require(ctx, te.all_of(conds), f"{what} must name {describe(patterns)}")


def axes_fit(ctx: OpContext, i: int, rank: int, patterns: Sequence[AxesPattern]) -> te.Expr:
    """Whether axes input `i` names the axes of one of `patterns` (entries assumed checked
    by `axes`)."""
    return _fit(named_axes(ctx, i, rank), patterns)


def _fit(named: list[te.Expr], patterns: Sequence[AxesPattern]) -> te.Expr:
    return te.any_of([te.all_of([n if want else te.unary("not", n)
                                 for n, want in zip(named, p, strict=True)])
                      for p in patterns])


def describe(patterns: Sequence[AxesPattern]) -> str:
    """The patterns for a message: "axes [1] or axes [2]"."""
    return " or ".join(f"axes {[d for d, w in enumerate(p) if w]}" for p in patterns)


def subsets_fitting(rank: int, count: int, fits: Callable[[tuple[int, ...]], bool]
                    ) -> list[tuple[int, ...]]:
    """The sets of `count` axes of `rank` for which `fits(set)` holds."""
    return [s for s in itertools.combinations(range(rank), count) if fits(s)]


def count_true(conds: Sequence[te.Expr]) -> te.Expr:
    """How many of the bool expressions hold (int64)."""
    out: te.Expr = te.Const(0, "int64")
    for c in conds:
        term = te.cast("int64", c)
        out = term if isinstance(out, te.Const) else out + term
    return out


def pick(values: Sequence[te.Expr], index: te.Expr) -> te.Expr:
    """values[index] for an index expression (a chain of selects over a short list)."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = te.select(te.eq(index, te.const(k, index.dtype)), values[k], out)
    return out


def by_meaning(fits: Sequence[te.Expr], outs: Sequence[te.Tensor], name: str) -> te.Tensor:
    """Where the shapes leave a parameter several meanings, each built (`outs`), the one whose
    condition over the run-time value holds (`fits`, in the same order), element by element;
    the last where none does (a check stops such a run). One output is returned as it is."""
    if len(outs) == 1:
        return outs[0]

    def chosen() -> te.Expr:
        index: te.Expr = te.const(len(fits) - 1, "int32")
        for k in range(len(fits) - 2, -1, -1):
            index = te.select(fits[k], te.const(k, "int32"), index)
        return index

    which = te.compute((), chosen, name=f"{name}_meaning")
    return te.compute(outs[0].shape, lambda *i: pick([o[i] for o in outs], which[()]),
                      name=f"{name}_by_value")


def axis_fits(value: te.Expr, axis: int, rank: int) -> te.Expr:
    """Whether an axis value loaded at run time names `axis` of `rank` (as d or d - rank)."""
    return te.logical_or(te.eq(value, te.const(axis, value.dtype)),
                         te.eq(value, te.const(axis - rank, value.dtype)))
