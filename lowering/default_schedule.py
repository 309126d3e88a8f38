"""The schedule every stage gets without tuning: parallel outer loop, vectorised inner loop.

Choices come from the stage's static structure (spatial/reduce loops and their lengths) and the
target description (vector lanes), never from operator names:
- element-wise stages: outer loops fused into one parallel loop, innermost loop vectorised;
- reductions: reduce loops placed just outside the innermost spatial loop when that loop is long
  enough to vectorise (the GEMM i-k-j order, the convolution n-k-oh-[c,r,s]-ow order), the
  vectorised loop blocked so that its slice of the output stays in cache across the reduction.

`StageChoices` overrides these rules one decision at a time; the schedule space
(`lowering.search.default_space`) turns each decision into a knob. Every choice gives a valid
schedule of the same computation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowering import te
from lowering.schedule import Loop, StageSchedule

# Below this many inner-loop iterations in total a parallel loop costs more than it saves.
PARALLEL_MIN_WORK = 1 << 17
# Width of the output slice a reduction keeps hot while it runs over the reduce loops.
REDUCTION_BLOCK = 256
# A lone element-wise loop longer than this is split so that the parallel loop has chunks.
ELEMENTWISE_SPLIT = 4096
# Reduce loops this short or shorter count as "short" (candidates for unrolling).
SHORT_LOOP = 16

NO_VEC = -1  # `StageChoices.vec`: vectorise no loop
# Rows shorter than this many vectors are short: LLVM unrolls such a constant loop fully and
# then vectorises the loop around it with gathers and scatters. An element-wise stage over
# short rows that every access walks contiguously (NCHW planes of 28x28) is vectorised over its
# last two axes as one loop (a bias and ReLU over 128x28x28: 0.087 ms, 0.009 as one loop); the
# code generator keeps short vector loops that ask for an interleave count loops.
SHORT_ROW_VECTORS = 4


@dataclass(frozen=True)
class StageChoices:
    """One stage's schedule decisions; None means "the rule above decides"."""

    # the spatial loop that is vectorised (moved innermost), counted from the innermost
    # spatial loop (0); NO_VEC for none
    vec: int | None = None
    # reductions: block of the vectorised loop (0 = no block; no effect when not shorter)
    block: int | None = None
    # element-wise stages: split of the vectorised loop (0 = none; no effect when not shorter)
    split: int | None = None
    # how many outer spatial loops longer than 1 are fused into the outermost (parallel) loop
    fuse: int | None = None
    # unroll the short reduce loops innermost in the reduce nest
    unroll: bool = True


@dataclass(frozen=True)
class StageShape:
    """The static structure of a stage that the schedule decisions depend on."""

    spatial: tuple[int, ...]  # spatial loop extents, outermost first
    reduce: tuple[int, ...]  # reduce loop extents, outermost first

    @staticmethod
    def of(tensor: te.Tensor) -> StageShape:
        op = tensor.op
        assert op is not None
        return StageShape(tuple(ax.extent for ax in op.axes),
                          tuple(ax.extent for ax in op.reduce_axes))

    def auto_vec(self, vector_lanes: int) -> int:
        if self.spatial and (self.spatial[-1] >= vector_lanes or not self.reduce):
            return 0
        return NO_VEC

    def auto_split(self) -> int:
        return ELEMENTWISE_SPLIT if len(self.spatial) == 1 else 0

    def short_reduce(self) -> int:
        """How many innermost reduce loops are short enough to unroll."""
        n = 0
        for e in reversed(self.reduce):
            if not 2 <= e <= SHORT_LOOP:
                break
            n += 1
        return n


def default_schedule(tensor: te.Tensor, vector_lanes: int,
                     choices: StageChoices | None = None) -> StageSchedule:
    c = choices or StageChoices()
    s = StageSchedule(tensor)
    shape = StageShape.of(tensor)
    spatial = [lp for lp in s.leaves if lp.origin == "spatial"]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    work = math.prod(lp.extent for lp in s.leaves)

    vec_pos = shape.auto_vec(vector_lanes) if c.vec is None else c.vec
    vec: Loop | None = None
    if 0 <= vec_pos < len(spatial):
        vec = spatial.pop(len(spatial) - 1 - vec_pos)
    if vec is not None:
        if reduce:
            factor = REDUCTION_BLOCK if c.block is None else c.block
        else:
            factor = shape.auto_split() if c.split is None else c.split
        if 0 < factor < vec.extent:
            outer_part, vec = s.split(vec, factor)
            spatial.append(outer_part)

    order = spatial + reduce + ([vec] if vec is not None else [])
    s.reorder(*order)
    if (vec is not None and vec_pos == 0 and not reduce and spatial
            and all(lp.bound is None and lp.tail is None and isinstance(lp.extent, int)
                    for lp in (spatial[-1], vec))
            and vec.extent < SHORT_ROW_VECTORS * vector_lanes and _rows_contiguous(tensor)):
        vec = s.fuse(spatial.pop(), vec)
        s.pragma(vec, "keep_loop")

    # fuse the outer loops up to the `fuse`-th one longer than 1 (length-1 loops are free)
    long_loops = [i for i, lp in enumerate(spatial) if lp.extent > 1]
    n_fused = len(spatial)
    if c.fuse is not None and 0 < c.fuse < len(long_loops):
        n_fused = long_loops[c.fuse - 1] + 1
    # a loop that runs to a run-time dimension is not fused (nor are those inside it)
    bounded = next((i for i, lp in enumerate(spatial) if lp.bound is not None), None)
    if bounded is not None:
        n_fused = min(n_fused, max(bounded, 1))
    outer: Loop | None = spatial[0] if spatial else None
    for lp in spatial[1:n_fused]:
        assert outer is not None
        outer = s.fuse(outer, lp)
    if outer is not None and outer.extent >= 2 and work >= PARALLEL_MIN_WORK:
        s.parallel(outer)
    if vec is not None and vec.extent > 1:
        s.vectorize(vec)
    if c.unroll:
        for lp in reduce[len(reduce) - shape.short_reduce():]:
            s.unroll(lp)
    return s


def _rows_contiguous(tensor: te.Tensor) -> bool:
    """Whether every load of the stage that reads its last two axes reads them as its own
    last two indices over dimensions of the same extents (so that the rows of the two axes lie
    end to end in memory, in the output as in each input)."""
    op = tensor.op
    assert op is not None
    if len(op.axes) < 2:
        return False
    row, col = op.axes[-2], op.axes[-1]
    for ld in te.loads_in(te.expand_inline(op.body)):
        idx, shape = ld.indices, ld.tensor.shape
        if not any(te.mentions(i, ax.var) for i in idx for ax in (row, col)):
            continue
        if len(idx) < 2 or idx[-2] is not row.var or idx[-1] is not col.var \
                or (shape[-2], shape[-1]) != (row.extent, col.extent) \
                or any(te.mentions(i, ax.var) for i in idx[:-2] for ax in (row, col)):
            return False
    return True
