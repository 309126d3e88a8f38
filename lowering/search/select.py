"""Which schedule space a computation gets: a tensorized template when one matches, else the
default space. Decided from the computation's structure, never from operator names."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lowering import te
from lowering.gpu_recurrent import GpuRecurrentSpace
from lowering.machine import GpuMachine, Target
from lowering.recurrence import recurrence_of
from lowering.schedule import ScheduleError
from lowering.search.default_space import DefaultSpace
from lowering.search.gpu_space import GpuDefaultSpace
from lowering.search.space import ScheduleSpace
from lowering.templates.depthwise import DepthwiseTemplate
from lowering.templates.gemm import GemmTemplate
from lowering.templates.int_gemm import IntGemmTemplate
from lowering.templates.recurrent import RecurrentTemplate
from lowering.templates.rows import RowTemplate

# Template spaces, most specific first; each has `match(inputs, outputs, consts, target)`
# returning a space or None.
TEMPLATES: list = [RecurrentTemplate, GemmTemplate, IntGemmTemplate, DepthwiseTemplate, RowTemplate]


def space_for(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> ScheduleSpace:
    """The first template space that matches, else the default space. A computation over a
    run-time dimension (`te.DynExtent`) gets only templates whose nests stop at run-time
    sizes (`runs_to_dims`), else the default schedule without knobs (nothing to tune: its
    loops already run to the dimension)."""
    dynamic = any(isinstance(d, te.DynExtent) for t in [*inputs, *outputs] for d in t.shape)
    if isinstance(target.machine, GpuMachine):  # GPU templates come with their spaces
        rec = recurrence_of(list(outputs))
        if rec is not None:
            if dynamic:
                raise ScheduleError("a recurrence over a run-time dimension")
            return GpuRecurrentSpace(inputs, outputs, consts, target, rec)
        return GpuDefaultSpace(inputs, outputs, consts, target)
    for template in TEMPLATES:
        if dynamic and not getattr(template, "runs_to_dims", False):
            continue
        space = template.match(inputs, outputs, consts, target)
        if space is not None:
            return space
    space = DefaultSpace(inputs, outputs, consts, target)
    if dynamic:
        space.knobs = []
    return space
