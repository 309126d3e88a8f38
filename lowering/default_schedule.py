"""The schedule every stage gets without tuning: parallel outer loop, vectorised inner loop.

Choices come from the stage's static structure (spatial/reduce loops and their lengths) and the
target description (vector lanes), never from operator names:
- element-wise stages: outer loops fused into one parallel loop, innermost loop vectorised;
- reductions: reduce loops placed just outside the innermost spatial loop when that loop is long
  enough to vectorise (the GEMM i-k-j order, the convolution n-k-oh-[c,r,s]-ow order), the
  vectorised loop blocked so that its slice of the output stays in cache across the reduction.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.schedule import Loop, StageSchedule

# Below this many inner-loop iterations in total a parallel loop costs more than it saves.
PARALLEL_MIN_WORK = 1 << 15
# Width of the output slice a reduction keeps hot while it runs over the reduce loops.
REDUCTION_BLOCK = 256


def default_schedule(tensor: te.Tensor, vector_lanes: int) -> StageSchedule:
    s = StageSchedule(tensor)
    spatial = [lp for lp in s.leaves if lp.origin == "spatial"]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    work = math.prod(lp.extent for lp in s.leaves)

    vec: Loop | None = None
    if spatial and (spatial[-1].extent >= vector_lanes or not reduce):
        vec = spatial.pop()
    if vec is not None and reduce and vec.extent > REDUCTION_BLOCK:
        outer_part, vec = s.split(vec, REDUCTION_BLOCK)
        spatial.append(outer_part)
    elif vec is not None and not reduce and not spatial and vec.extent > 4096:
        outer_part, vec = s.split(vec, 4096)
        spatial.append(outer_part)

    order = spatial + reduce + ([vec] if vec is not None else [])
    s.reorder(*order)

    outer: Loop | None = spatial[0] if spatial else None
    for lp in spatial[1:]:
        assert outer is not None
        outer = s.fuse(outer, lp)
    if outer is not None and outer.extent >= 2 and work >= PARALLEL_MIN_WORK:
        s.parallel(outer)
    if vec is not None and vec.extent > 1:
        s.vectorize(vec)
    return s
