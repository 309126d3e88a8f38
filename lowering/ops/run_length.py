"""Outputs whose length the data decides: where the k-th true value lies, and the output
written dense at the length the kernel finds.

An operator like NonZero or Unique knows its output's length only when it runs. Its output is
compiled at a static shape along that axis: the model's declared length, or the bound the
frontend gave an undeclared one (aotc/frontend/computed_lengths.py). `output_length` takes
the length the kernel computes: for a bounded output it becomes an int64 the executor reports
(`OpContext.lengths`, the compiler's length slot); for a declared one, a run-time check that
the data gives that length (pinned.py's checks), so a declared shape the data contradicts
stops the run instead of giving a wrong result. `dense` lays a bounded output out as a dense
tensor of the run's length at the start of its buffer (entries past it are 0), which is what
a caller reads back at the shape `NAME_output_shape` reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from lowering import te
from lowering.loop_ir import BufLoad, For, Seq, Stmt, Store
from lowering.nest import nest_stage
from lowering.ops import OpContext, pinned
from lowering.ops.common import unflatten


def output_length(ctx: OpContext, out: int, axis: int, length: te.Expr) -> te.Expr:
    """Output `out` has `length` (an int64 expression over the node's inputs) entries along
    `axis`: reported to the caller when the output is bounded, else checked equal to the
    declared length. Returns the length to lay the output out by (the declared constant
    where there is one)."""
    if ctx.computed_axes and ctx.computed_axes[out] == axis:
        ctx.lengths[out] = te.compute((), lambda: length, name="run_length")
        return length
    declared = ctx.out_shapes[out][axis]
    if ctx.checks is None:
        raise ctx.error("the output's length depends on the input data, which this target "
                        "cannot check when it runs", hint="compile for a CPU target")
    pinned.require(ctx, te.eq(length, te.const(declared, "int64")),
                   f"the data must give output {out} {declared} entries on axis {axis} (its "
                   "declared shape)")
    return te.const(declared, "int64")


def running_count(flags: te.Tensor, name: str) -> te.Tensor:
    """The inclusive running sum of the 1-D int64 `flags`, in one serial pass (a hand-written
    nest, lowering/nest.py): n additions, where the blocked te scan CumSum uses takes
    n sqrt(n) (22 M for NonMaxSuppression's 80 classes x 1000 boxes). Integers, so the order
    of the additions does not matter. Only targets that check computed lengths get here, and
    those run hand-written nests (the CPU's)."""
    n = flags.shape[0]
    if n == 0:
        return te.compute((0,), lambda i: te.const(0, "int64"), name=f"{name}_count")

    def write(out, buffer_of, scratch) -> Stmt:
        f = buffer_of(flags)
        i = te.Var(f"{name}_i")
        zero = te.const(0, "int64")
        return Seq([Store(out, zero, BufLoad(f, zero)),
                    For(i, te.const(n - 1, "int64"), "serial",
                        Store(out, i + 1, BufLoad(out, i) + BufLoad(f, i + 1)))])

    return nest_stage((n,), "int64", f"{name}_count", [flags], write)


def true_positions(flags: te.Tensor, bound: int, name: str) -> tuple[te.Tensor, te.Expr]:
    """The flat positions of the first `bound` nonzero values of the 1-D int64 `flags` (0 or
    1 each), and how many there are (an int64 expression). The k-th position is the number of
    positions whose running count is at most k, found by a binary search over the running
    count, one stage per halving: log2(n) loads per position. Past the last true value it is
    n - 1 (clamped, so that a gather through it reads in bounds)."""
    n = flags.shape[0]
    total = running_count(flags, name)
    count = total[te.const(n - 1, "int64")]
    lo = te.compute((bound,), lambda k: te.const(0, "int64"), name=f"{name}_search")
    step = 1 << max(0, (n - 1).bit_length())
    while step >= 1:
        prev, s = lo, step

        def advance(k: te.Expr, prev: te.Tensor = prev, s: int = s) -> te.Expr:
            ahead = prev[k] + s  # the search's next candidate: positions [0, ahead) all <= k?
            fits = te.le(ahead, te.const(n, "int64"))
            probe = total[te.minimum(ahead, te.const(n, "int64")) - 1]
            return te.select(te.all_of([fits, te.le(probe, k)]), ahead, prev[k])

        lo = te.compute((bound,), advance, name=f"{name}_search")
        step //= 2
    at = te.compute((bound,), lambda k: te.minimum(lo[k], te.const(n - 1, "int64")),
                    name=f"{name}_positions")
    return at, count


def dense(shape: Sequence[int], axis: int, length: te.Expr, dtype: str,
          value: Callable[..., te.Expr], name: str) -> te.Tensor:
    """A tensor laid out for `shape` whose first elements are the dense tensor of `shape`
    with `length` entries on `axis` (`value(*index)` at each index of it), and 0 after."""
    run = [te.const(d, "int64") for d in shape]
    run[axis] = te.maximum(length, te.const(1, "int64"))  # (a length of 0 writes nothing)
    size = math.prod(d for a, d in enumerate(shape) if a != axis) * length

    def body(*i: te.Expr) -> te.Expr:
        flat: te.Expr = te.const(0, "int64")
        for k, d in zip(i, shape, strict=True):
            flat = flat * d + k
        return te.select(te.lt(flat, size), value(*unflatten(flat, run)), te.Const(0, dtype))

    return te.compute(tuple(shape), body, name=name, dtype=dtype)
