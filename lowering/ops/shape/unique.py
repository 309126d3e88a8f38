"""Unique: the distinct values (or, with `axis`, the distinct slices along it) of the input,
sorted or in order of first occurrence, with each one's first index, each element's place in
the output (inverse_indices) and how often each occurs.

How many there are is the data's: outputs Y, indices and counts are compiled at their declared
lengths or at the frontend's bound (run_length.py). Everything is counting over pairs of
slices: a slice is a first occurrence when no earlier one equals it, its place in the output
is how many first occurrences sort before it (sorted) or come before its own first occurrence,
and output k is the first occurrence whose place is k. That is quadratic in the number of
slices, as an operator whose inputs are small masks and index lists can afford; along an
axis the pairwise comparisons are stored (its length squared), so a longer axis is refused.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, unflatten
from lowering.ops.run_length import dense, output_length

# the most pairs of slices along an axis whose comparisons a kernel stores
MAX_PAIRS = 1 << 22


@register_op("Unique")
def unique(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    axis_attr = ctx.attr("axis")
    axis = None if axis_attr is None else axis_of(ctx, int(axis_attr), len(x.shape))
    slices = _Slices(ctx, x, axis)
    n = slices.count
    bounds = [ctx.out_shapes[k][0 if k else slices.out_axis]
              for k in (0, 1, 3) if k < len(ctx.out_shapes)]
    bound = max(bounds + [1])
    earlier = te.compute((n,), slices.earlier_equal, name="unique_earlier")
    first = te.compute((n,), lambda i: te.cast("int64", te.eq(earlier[i], 0)),
                       name="unique_first")
    r = te.reduce_axis(n, "f")
    count = te.compute((), lambda: te.reduce_sum(first[r.var], [r]), name="unique_count")[()]
    place = slices.places(first, bool(ctx.attr("sorted", 1)))

    def source(k: te.Expr) -> te.Expr:  # the first occurrence that is output k
        j = te.reduce_axis(n, "s")
        return te.reduce_sum(te.select(te.all_of([te.ne(first[j.var], 0),
                                                   te.eq(place[j.var], k)]),
                                       j.var, te.const(0, "int64")), [j])

    src = te.compute((bound,), source, name="unique_source")
    outs: list[te.Tensor] = []
    y_shape = ctx.out_shapes[0]
    length = output_length(ctx, 0, slices.out_axis, count)
    outs.append(dense(y_shape, slices.out_axis, length, x.dtype,
                      lambda *o: slices.element_of(src, o), "unique_values"))
    if len(ctx.out_shapes) > 1:
        length = output_length(ctx, 1, 0, count)
        outs.append(dense(ctx.out_shapes[1], 0, length, "int64", lambda k: src[k],
                          "unique_indices"))
    if len(ctx.out_shapes) > 2:
        if tuple(ctx.out_shapes[2]) != (n,):
            raise ctx.error(f"inverse_indices has the shape {list(ctx.out_shapes[2])}, not "
                            f"[{n}]")
        outs.append(te.compute((n,), lambda i: place[i], name="unique_inverse"))
    if len(ctx.out_shapes) > 3:
        length = output_length(ctx, 3, 0, count)
        occurrences = te.compute((n,), slices.occurrences, name="unique_occurrences")
        outs.append(dense(ctx.out_shapes[3], 0, length, "int64",
                          lambda k: occurrences[src[k]], "unique_counts"))
    return outs


class _Slices:
    """The input as `count` slices to compare: its elements without an axis, else its slices
    along `axis` (their elements in row-major order, compared lexicographically as numpy's
    unique does)."""

    def __init__(self, ctx: OpContext, x: te.Tensor, axis: int | None) -> None:
        self.x, self.axis = x, axis
        self.out_axis = 0 if axis is None else axis
        if axis is None:
            self.count, self.size = math.prod(x.shape), 1
            self.same = self.differs_at = None
            return
        self.count = x.shape[axis]
        self.size = math.prod(x.shape) // max(self.count, 1)
        if self.count * self.count > MAX_PAIRS:
            raise ctx.error(f"Unique along an axis of {self.count} slices: aotc compares at "
                            f"most {MAX_PAIRS} pairs of slices")
        n, size = self.count, self.size

        def first_difference(i: te.Expr, j: te.Expr) -> te.Expr:
            m = te.reduce_axis(size, "m")
            return te.reduce("min", te.select(te.ne(self.at(i, m.var), self.at(j, m.var)),
                                              m.var, te.const(size, "int64")), [m])

        # the first element where slices i and j differ (size: equal)
        self.differs_at = te.compute((n, n), first_difference, name="unique_differs_at")
        self.same = te.compute((n, n), lambda i, j: te.eq(self.differs_at[i, j], size),
                               name="unique_same")

    def at(self, i: te.Expr, m: te.Expr) -> te.Expr:
        """Element m of slice i."""
        x = self.x
        if self.axis is None:
            return x[unflatten(i, x.shape)]
        rest = x.shape[:self.axis] + x.shape[self.axis + 1:]
        idx = list(unflatten(m, rest))
        idx.insert(self.axis, i)
        return x[tuple(idx)]

    def equal(self, i: te.Expr, j: te.Expr) -> te.Expr:
        if self.same is None:
            return te.eq(self.at(i, 0), self.at(j, 0))
        return self.same[i, j]

    def less(self, j: te.Expr, i: te.Expr) -> te.Expr:
        """Slice j sorts before slice i."""
        if self.differs_at is None:
            return te.lt(self.at(j, 0), self.at(i, 0))
        d = te.minimum(self.differs_at[j, i], te.const(self.size - 1, "int64"))
        return te.all_of([te.lt(self.differs_at[j, i], self.size),
                          te.lt(self.at(j, d), self.at(i, d))])

    def earlier_equal(self, i: te.Expr) -> te.Expr:
        """How many slices before slice i equal it."""
        j = te.reduce_axis(self.count, "e")
        return te.reduce_sum(te.cast("int64", te.all_of([te.lt(j.var, i),
                                                          self.equal(i, j.var)])), [j])

    def occurrences(self, i: te.Expr) -> te.Expr:
        j = te.reduce_axis(self.count, "c")
        return te.reduce_sum(te.cast("int64", self.equal(i, j.var)), [j])

    def places(self, first: te.Tensor, sort: bool) -> te.Tensor:
        """Each slice's place in the output: how many first occurrences sort before it, or
        come before its own first occurrence."""
        n = self.count
        if sort:
            def before(i: te.Expr) -> te.Expr:
                j = te.reduce_axis(n, "p")
                return te.reduce_sum(te.cast("int64", te.all_of([
                    te.ne(first[j.var], 0), self.less(j.var, i)])), [j])
            return te.compute((n,), before, name="unique_place")

        def own_first(i: te.Expr) -> te.Expr:
            j = te.reduce_axis(n, "o")
            return te.reduce("min", te.select(self.equal(i, j.var), j.var,
                                              te.const(n, "int64")), [j])

        origin = te.compute((n,), own_first, name="unique_origin")

        def before_origin(i: te.Expr) -> te.Expr:
            j = te.reduce_axis(n, "p")
            return te.reduce_sum(te.cast("int64", te.all_of([
                te.ne(first[j.var], 0), te.lt(j.var, origin[i])])), [j])
        return te.compute((n,), before_origin, name="unique_place")

    def element_of(self, src: te.Tensor, o: tuple[te.Expr, ...]) -> te.Expr:
        """The output Y's element at index `o` (its place k on the output axis is slice
        src[k])."""
        if self.axis is None:
            return self.at(src[o[0]], 0)
        idx = list(o)
        idx[self.axis] = src[o[self.axis]]
        return self.x[tuple(idx)]
