"""Dimensions known only at run time (`--input-shape x=1,1..512`): the ranges, which value axes
follow the dimension, and what cannot take it yet.

A model with a run-time dimension is compiled at its bound (DESIGN decision 9): every value is
laid out and planned for the bound, and loops over the dimension run to its run-time value,
which kernels read from their `dims` argument. Which axes follow the dimension is found by
running the frontend and the passes at two lengths, the bound and one less, and comparing the
two graphs value by value: an axis that is the bound in one and one less in the other follows
the dimension; shape arithmetic folded into constants is judged by the same comparison (a
constant that differs must be a prefix of itself at the bound, as a position-id range, or a
shape that only a Reshape/Expand/ConstantOfShape/Range reads). Operators whose result would
depend on the dimension's value in another way (a LayerNorm over it, a Concat along it) are
refused by name until they learn it; a mean over it divides by the run-time count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend.bind import parse_input_shapes
from aotc.package.program import RunTimeDim

_HINT = "compile with a fixed length instead (--input-shape name=d0,d1,...)"
# Operators that compute each element of their output from elements at the same place of the
# run-time axis (or reduce over it exactly), whatever their attributes.
_FOLLOWING = frozenset({
    "MatMul", "Gemm", "Softmax", "LogSoftmax", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
    "Flatten", "Identity", "Cast", "CastLike", "Expand", "Where", "Dropout", "ReduceSum",
    "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
    "ReduceMean", "ReduceLogSum", "ReduceLogSumExp", "ConstantOfShape", "Range", "ArgMax", "ArgMin",
})
# Inputs through which a shape computed from the dimension may reach a node (folded at the bound).
_SHAPE_INPUTS = {("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Range", 1)}


@dataclass
class DynamicShapes:
    """The run-time dimension and, per value name, the axes that follow it."""

    dims: list[RunTimeDim]
    axes: dict[str, tuple[int, ...]]


def parse_input_ranges(specs: list[str]) -> tuple[dict[str, tuple[int, ...]],
                                                  dict[tuple[str, int], tuple[int, int]]]:
    """`--input-shape` values whose dimensions may be ranges `lo..hi`: the shapes at the bound
    and {(input, axis): (lo, hi)} for each range (a range of one length is that length)."""
    fixed: list[str] = []
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    for spec in specs:
        name, sep, dims_text = spec.rpartition("=")
        parts = []
        for axis, part in enumerate(dims_text.split(",")):
            if ".." in part:
                lo_text, _, hi_text = part.partition("..")
                try:
                    lo, hi = int(lo_text), int(hi_text)
                except ValueError:
                    raise AotcError(f"bad --input-shape '{spec}': a range is lo..hi with "
                                    "integers", hint="e.g. --input-shape input_ids=1,1..512"
                                    ) from None
                if not 1 <= lo <= hi:
                    raise AotcError(f"bad --input-shape '{spec}': a range needs 1 <= lo <= hi")
                if lo < hi:
                    ranges[(name, axis)] = (lo, hi)
                part = str(hi)
            parts.append(part)
        fixed.append(f"{name}{sep}{','.join(parts)}")
    return parse_input_shapes(fixed), ranges


def run_time_dim(ranges: dict[tuple[str, int], tuple[int, int]]) -> RunTimeDim:
    """The one run-time dimension the ranges give (several inputs may share it)."""
    bounds = set(ranges.values())
    if len(bounds) != 1:
        raise AotcError("the ranges of --input-shape differ: "
                        + ", ".join(f"{n} axis {a}: {lo}..{hi}"
                                    for (n, a), (lo, hi) in ranges.items()),
                        hint="aotc compiles one run-time dimension per model for now; give "
                             "every input axis that follows it the same range")
    (name, axis), (lo, hi) = next(iter(ranges.items()))
    return RunTimeDim(f"{name}[{axis}]", lo, hi)


def at_length(shapes: dict[str, tuple[int, ...]],
              ranges: dict[tuple[str, int], tuple[int, int]], n: int
              ) -> dict[str, tuple[int, ...]]:
    """The input shapes with every ranged axis set to n."""
    out = dict(shapes)
    for name, axis in ranges:
        dims = list(out[name])
        dims[axis] = n
        out[name] = tuple(dims)
    return out


def _shape(v: ir.Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.shape) if v.shape is not None else ()


def _nodes(node: ir.Node | None) -> tuple[str | None, str | None]:
    return (None, None) if node is None else (node.name, node.op_type)


def _value_pairs(at_hi: ir.Model, at_lo: ir.Model) -> Iterator[tuple[ir.Value, ir.Value]]:
    """The two graphs' values, paired (graph inputs, node outputs; every node must match)."""
    a, b = list(at_hi.graph), list(at_lo.graph)
    for x, y in zip(a, b, strict=False):
        if x.op_type != y.op_type or len(x.outputs) != len(y.outputs):
            raise AotcError(f"the graph differs between lengths (node '{x.name}' ({x.op_type}) "
                            f"against '{y.name}' ({y.op_type})): shape arithmetic changes it",
                            node=x.name, op=x.op_type, hint=_HINT)
    if len(a) != len(b):
        raise AotcError(f"the graph has {len(a)} nodes at the bound and {len(b)} one shorter: "
                        "shape arithmetic changes it", hint=_HINT)
    yield from zip(at_hi.graph.inputs, at_lo.graph.inputs, strict=True)
    lo_inits = at_lo.graph.initializers
    yield from ((v, lo_inits[n]) for n, v in at_hi.graph.initializers.items() if n in lo_inits)
    for x, y in zip(a, b, strict=True):
        yield from zip(x.outputs, y.outputs, strict=True)


def value_axes(va: ir.Value, vb: ir.Value, dim: RunTimeDim) -> tuple[int, ...]:
    """The axes of a value (`va` at the bound, `vb` one shorter) that follow the dimension; an
    AotcError naming its producer when it changes otherwise."""
    sa, sb = _shape(va), _shape(vb)
    name, op = _nodes(va.producer())
    if len(sa) != len(sb):
        raise AotcError(f"value '{va.name}' changes rank with the run-time dimension",
                        node=name, op=op, hint=_HINT)
    found = []
    for i, (x, y) in enumerate(zip(sa, sb, strict=True)):
        if x == y:
            continue
        if (x, y) != (dim.hi, dim.hi - 1):
            raise AotcError(
                f"value '{va.name}' has dimension {x} at length {dim.hi} and {y} at "
                f"{dim.hi - 1}: aotc runs only dimensions equal to the run-time one "
                "(not products or sums of it) for now", node=name, op=op, hint=_HINT)
        found.append(i)
    return tuple(found)


def follow_axes(at_hi: ir.Model, at_lo: ir.Model, dim: RunTimeDim) -> dict[str, tuple[int, ...]]:
    """Per value name, the axes that follow the dimension (the same graph at hi and hi - 1)."""
    axes: dict[str, tuple[int, ...]] = {}
    for va, vb in _value_pairs(at_hi, at_lo):
        found = value_axes(va, vb, dim)
        if found:
            axes[va.name] = found
    return axes


def constant_refusals(at_hi: ir.Model, at_lo: ir.Model) -> Iterator[tuple[ir.Node, str]]:
    """Folded shape arithmetic that a node cannot read: a constant that differs between the
    lengths must be a prefix of itself at the bound (computed over the dimension) or a shape
    only shape inputs read; (node, why) for each node that reads one otherwise."""
    lo_inits = at_lo.graph.initializers
    for name, va in at_hi.graph.initializers.items():
        vb = lo_inits.get(name)
        if vb is None or va.const_value is None or vb.const_value is None:
            continue
        a, b = va.const_value.numpy(), vb.const_value.numpy()
        if a.shape == b.shape and np.array_equal(a, b):
            continue
        if a.ndim == b.ndim and a.shape != b.shape and all(
                x >= y for x, y in zip(a.shape, b.shape, strict=True)):
            if np.array_equal(a[tuple(slice(0, n) for n in b.shape)], b):
                continue  # the same values over the run-time length (a range, a mask)
        for use in va.uses():
            node = use.node
            if (node.op_type, use.idx) not in _SHAPE_INPUTS:
                yield node, (f"constant '{name}' (shape arithmetic folded at the bound) holds "
                             f"the run-time dimension's value, which node '{node.name}' "
                             f"({node.op_type}) reads as data")


def check_constants(at_hi: ir.Model, at_lo: ir.Model) -> None:
    """Every constant that differs between the lengths is read as `constant_refusals` allows."""
    for node, why in constant_refusals(at_hi, at_lo):
        raise AotcError(why, node=node.name, op=node.op_type, hint=_HINT)


def _attr_int(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else int(a.value)


def _normal_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _gather_reason(node: ir.Node, axes: dict[str, tuple[int, ...]], axis: int, data_axis: int,
                   dim: RunTimeDim) -> str | None:
    """A gather along the run-time axis: safe when its indices are constants that, at every
    length, address only positions inside it (0 <= index <= the index's own position along
    the run-time axis, as an arange; below the shortest length where they do not follow it)."""
    ind = node.inputs[1]
    why = ("gathering along the run-time axis needs constant indices that stay inside it at "
           "every length (an arange)")
    if ind is None or ind.const_value is None:
        return why
    idx = ind.const_value.numpy().astype(np.int64)
    follow = list(axes.get(ind.name, ()))
    if axis == -1:  # GatherND: the component that addresses the data's run-time axis
        if data_axis >= idx.shape[-1]:
            return None
        idx = idx[..., data_axis]
        follow = [a for a in follow if a < idx.ndim]
    if idx.size == 0:
        return None
    if (idx < 0).any():
        return why
    if not follow:
        return None if int(idx.max()) < dim.lo else why
    limit = np.full(idx.shape, np.iinfo(np.int64).max)
    for a in follow:
        pos = np.arange(idx.shape[a]).reshape([-1 if k == a else 1 for k in range(idx.ndim)])
        limit = np.minimum(limit, pos)
    return None if (idx <= limit).all() else why


def _refuse_reason(node: ir.Node, axes: dict[str, tuple[int, ...]],
                   dim: RunTimeDim) -> str | None:
    """Why `node` cannot take the run-time dimension on the axes it has there, or None."""
    from aotc.passes.fusion_regions import ELEMENTWISE_OPS

    op = node.op_type
    first = node.inputs[0] if node.inputs else None
    in_axes = axes.get(first.name, ()) if first is not None else ()
    rank = len(first.shape) if first is not None and first.shape is not None else 0
    if node.domain not in ("", "ai.onnx"):
        return "operators of other domains do not take it yet"
    if op in ELEMENTWISE_OPS or op in _FOLLOWING:
        return None
    if op in ("LayerNormalization", "SkipLayerNormalization"):
        axis = _normal_axis(_attr_int(node, "axis", -1), rank)
        return ("normalising over the run-time axis is not supported yet"
                if any(a >= axis for a in in_axes) else None)
    if op in ("Gather", "GatherElements", "GatherND"):
        if op == "GatherND":
            if _attr_int(node, "batch_dims", 0) or not in_axes:
                return None if not in_axes else "batch_dims is not supported with it yet"
            axis = -1
        else:
            axis = _normal_axis(_attr_int(node, "axis", 0), rank)
            if axis not in in_axes:
                return None
        return _gather_reason(node, axes, axis, in_axes[0], dim)
    if op == "Concat":
        axis = _normal_axis(_attr_int(node, "axis", 0), rank)
        along = any(axis in axes.get(v.name, ()) for v in node.inputs if v is not None)
        return "concatenating along the run-time axis is not supported yet" if along else None
    if op == "Slice":
        out_axes = axes.get(node.outputs[0].name, ())
        if in_axes != out_axes:
            return "slicing along the run-time axis is supported only from its start to its end"
        starts = node.inputs[1]
        sliced = node.inputs[3] if len(node.inputs) > 3 else None
        steps = node.inputs[4] if len(node.inputs) > 4 else None
        if starts is None or starts.const_value is None or (
                sliced is not None and sliced.const_value is None) or (
                steps is not None and steps.const_value is None):
            return "slice parameters must be constants"
        which = (list(range(len(starts.const_value.numpy().ravel()))) if sliced is None
                 else [_normal_axis(int(a), rank) for a in sliced.const_value.numpy().ravel()])
        st = starts.const_value.numpy().ravel()
        sp = steps.const_value.numpy().ravel() if steps is not None else np.ones(len(st), int)
        for k, a in enumerate(which):
            if a in in_axes and (int(st[k]) != 0 or int(sp[k]) != 1):
                return ("slicing along the run-time axis is supported only from its start to "
                        "its end")
        return None
    return "this operator does not take a run-time dimension yet"


def node_refusals(at_hi: ir.Model, axes: dict[str, tuple[int, ...]],
                  dim: RunTimeDim) -> Iterator[tuple[ir.Node, str]]:
    """(node, why) for every node that touches a value following the dimension and cannot run
    it."""
    for node in at_hi.graph:
        touched = [v for v in (*node.inputs, *node.outputs) if v is not None and v.name in axes]
        if not touched:
            continue
        reason = _refuse_reason(node, axes, dim)
        if reason is not None:
            yield node, f"cannot take the run-time dimension: {reason}"


def check_nodes(at_hi: ir.Model, axes: dict[str, tuple[int, ...]], dim: RunTimeDim) -> None:
    """Every node that touches a value following the dimension can run it (one error per model,
    naming the first node that cannot)."""
    for node, why in node_refusals(at_hi, axes, dim):
        raise AotcError(why, node=node.name, op=node.op_type, hint=_HINT)
