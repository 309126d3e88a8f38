"""Outputs whose length the data decides (NonZero, Unique, Compress by a run-time condition,
NonMaxSuppression, an If whose branches differ in length along one axis).

Such an output has no shape before the model runs: onnx's inference leaves one axis unknown.
Where the model does not declare it, the frontend gives the output its bound (the most the
data can make it: NonZero's [rank, numel], Unique's numel, Compress's axis length) and marks
the axis (`computed_axis`). The kernel writes the output dense at the length it finds, a
prefix of the buffer laid out for the bound, and stores that length where the executor reports
it to the caller (the bundle's `NAME_output_shape`). Only a graph output can be bounded so: a
node reading it would need its shape when compiled, so a reader is refused, naming the node.
An output whose shape the model declares is compiled at that shape, with a run-time check that
the data gives it (lowering/ops/run_length.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend import irutil

# ir.Value.meta key: the axis whose length the run computes
COMPUTED_AXIS = "aotc.computed_axis"

# per output: its bound shape and the axis the run computes (None: the shape is exact)
Bounds = list[tuple[tuple[int, ...], int | None]]


def computed_axis(value: ir.Value) -> int | None:
    """The axis of `value` whose length the run computes (None: its shape is static)."""
    axis = value.meta.get(COMPUTED_AXIS)
    return None if axis is None else int(axis)


def _axis(node: ir.Node, rank: int) -> int | None:
    attr = node.attributes.get("axis")
    if attr is None:
        return None
    axis = attr.as_int()
    if not -rank <= axis < rank:
        raise AotcError(f"axis {axis} is out of range for a rank-{rank} input",
                        node=node.name, op=node.op_type)
    return axis % rank


def _nonzero(node: ir.Node, dims: list[tuple[int, ...] | None]) -> Bounds | None:
    x = dims[0]
    # (a scalar: one row, as onnxruntime gives it; onnx's inference says none)
    return None if x is None else [((max(len(x), 1), math.prod(x)), 1)]


def _unique(node: ir.Node, dims: list[tuple[int, ...] | None]) -> Bounds | None:
    x = dims[0]
    if x is None:
        return None
    axis = _axis(node, len(x))
    n = math.prod(x) if axis is None else x[axis]
    y = (n,) if axis is None else x
    return [(y, 0 if axis is None else axis), ((n,), 0),
            ((math.prod(x) if axis is None else n,), None), ((n,), 0)]


def _compress(node: ir.Node, dims: list[tuple[int, ...] | None]) -> Bounds | None:
    x = dims[0]
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if x is None or cond is None or cond.const_value is not None or len(dims) < 2 or \
            dims[1] is None:
        return None  # (a constant condition's count is inference's: shapes._compress_shapes)
    axis = _axis(node, len(x))
    n = math.prod(x) if axis is None else x[axis]
    kept = min(n, math.prod(dims[1]))
    if axis is None:
        return [((kept,), 0)]
    return [(tuple(kept if a == axis else d for a, d in enumerate(x)), axis)]


def _nms(node: ir.Node, dims: list[tuple[int, ...] | None]) -> Bounds | None:
    if len(dims) < 2 or dims[1] is None or len(dims[1]) != 3:
        return None
    batches, classes, boxes = dims[1]
    per_class = boxes
    limit = node.inputs[2] if len(node.inputs) > 2 else None
    if limit is None:
        per_class = 0  # (absent: no boxes)
    elif limit.const_value is not None:
        per_class = max(0, min(boxes, int(limit.const_value.numpy().reshape(-1)[0])))
    return [((batches * classes * per_class, 3), 0)]


def _if(node: ir.Node, dims: list[tuple[int, ...] | None]) -> Bounds | None:
    """An If whose branches give an output of shapes that differ along one axis: the larger
    is its bound, the branch the run takes its length (control_flow._If)."""
    branches = [node.attributes[k].as_graph() for k in ("then_branch", "else_branch")
                if k in node.attributes]
    if len(branches) != 2 or len(branches[0].outputs) != len(branches[1].outputs):
        return None
    bounds: Bounds = []
    for a, b in zip(branches[0].outputs, branches[1].outputs, strict=True):
        sa, sb = irutil.static_dims(a.shape), irutil.static_dims(b.shape)
        if sa is None or sb is None or len(sa) != len(sb):
            return None
        differ = [i for i, (x, y) in enumerate(zip(sa, sb, strict=True)) if x != y]
        if len(differ) > 1:
            return None
        bounds.append((tuple(max(x, y) for x, y in zip(sa, sb, strict=True)),
                       differ[0] if differ else None))
    return bounds


BOUNDS: dict[str, Callable[[ir.Node, list[tuple[int, ...] | None]], Bounds | None]] = {
    "NonZero": _nonzero,
    "Unique": _unique,
    "Compress": _compress,
    "NonMaxSuppression": _nms,
    "If": _if,
}


def bound_computed_outputs(model: ir.Model) -> bool:
    """Give each output whose length the data decides, and whose shape the model leaves
    open, its bound and mark the axis; True when anything changed. An AotcError names a node
    that reads such an output."""
    changed = False
    for node in model.graph:
        rule = BOUNDS.get(node.op_type) if node.domain == "" else None
        if rule is None:
            continue
        open_outputs = [o for o in node.outputs
                        if o is not None and irutil.static_dims(o.shape) is None]
        if not open_outputs:
            continue
        bounds = rule(node, [irutil.static_dims(v.shape) if v is not None else None
                             for v in node.inputs])
        if bounds is None:
            continue
        for out, (shape, axis) in zip(node.outputs, bounds, strict=False):
            if out is None or out not in open_outputs:
                continue
            if axis is not None and 0 < shape[axis]:
                readers = [use.node for use in out.uses()]
                if readers:
                    reader = readers[0]
                    raise AotcError(
                        f"node '{reader.name}' ({reader.op_type}) reads '{out.name}', whose "
                        f"length depends on the input data (at most {shape[axis]} on axis "
                        f"{axis})", node=node.name, op=node.op_type,
                        hint="aotc compiles such an output as a graph output only; declare "
                             "its shape in the model if the length is known")
                out.meta[COMPUTED_AXIS] = axis
            out.shape = ir.Shape(list(shape))
            changed = True
    return changed
