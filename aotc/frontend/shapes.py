"""Shape and dtype inference (onnx's, with data propagation) and the all-static check."""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
import onnx_ir as ir

from aotc.errors import AotcError, UnsupportedOperators
from aotc.frontend import irutil
from lowering.ops import OPS
from lowering.ops.elementwise.binary import BINARY
from lowering.ops.elementwise.unary import UNARY

# operators compiled with their bodies rather than by a kernel (aotc/control_flow.py)
_CONTROL = {"If", "Loop", "Scan", "Constant"}

# Initializers kept in the model handed to onnx's inference: small ones, and integer tensors
# that may be shapes (data propagation needs their values). Others become typed inputs.
_KEEP_BYTES = 1024
_KEEP_INT_ELEMS = 4096
_INT_TYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})

# The largest tensor aotc compiles: an attribute or a dimension that makes a tensor larger is a
# mistake (a pad of 2^31, a dim of -1 read as huge), and compiling it would only give a bundle
# whose workspace no machine it runs on can allocate.
MAX_TENSOR_BYTES = 1 << 32

# Operators whose output shape depends on input data, not only on input shapes.
DATA_DEPENDENT_OPS = frozenset({
    "NonZero", "NonMaxSuppression", "Unique", "Compress", "TopK", "Loop", "If", "Scan",
    "StringSplit", "RegexFullMatch", "OneHot", "Range", "ConstantOfShape", "Expand",
    "Reshape", "Tile", "Resize", "Slice", "Pad", "Upsample", "CenterCropPad",
})


def _keep(value: ir.Value) -> bool:
    t = value.const_value
    if t is None:
        return False
    return t.nbytes <= _KEEP_BYTES or (t.dtype in _INT_TYPES and t.size <= _KEEP_INT_ELEMS)


def _inference_proto(model: ir.Model) -> onnx.ModelProto:
    """Serialize `model` with large initializers turned into typed graph inputs."""
    graph = model.graph
    n_inputs = len(graph.inputs)
    moved = [v for v in graph.initializers.values() if not _keep(v)]
    for v in moved:
        if v.const_value is not None:
            v.shape = v.shape or ir.Shape(v.const_value.shape)
            v.dtype = v.dtype or v.const_value.dtype
        graph.initializers.pop(v.name)
        graph.inputs.append(v)
    try:
        return ir.serde.serialize_model(model)
    finally:
        while len(graph.inputs) > n_inputs:
            graph.inputs.pop()  # (slice deletion would not reset the values' input flag)
        for v in moved:
            graph.initializers.add(v)


def _merge_shape(old: ir.Shape | None, new: ir.Shape | None) -> ir.Shape | None:
    if new is None:
        return old
    if old is None or len(old) != len(new):
        return new
    dims = []
    for a, b in zip(old.dims, new.dims, strict=True):
        if isinstance(b, int):
            dims.append(b)
        elif isinstance(a, int) or b.value is None:
            dims.append(a)
        else:
            dims.append(b)
    return ir.Shape(dims)


# onnx's message when a declared shape (graph output, value_info) contradicts inference
_STALE = "Inferred shape and existing shape differ"


def _forget_declared_shapes(model: ir.Model) -> bool:
    """Drop the shape of every value that is neither a graph input nor a constant: what the
    file declared, and what earlier rounds derived from it (a reader's declared shape is
    carried back to its operands); True if any was dropped."""
    dropped = False
    for graph in irutil.all_graphs(model.graph):
        inputs = {id(v) for v in graph.inputs}
        for v in [*graph.outputs, *(o for n in graph for o in n.outputs)]:
            if id(v) not in inputs and v.const_value is None and v.shape is not None:
                v.shape = None
                dropped = True
    return dropped


def infer_shapes(model: ir.Model, *, strict: bool = True) -> None:
    """Run onnx shape inference (data propagation on) and merge results into `model`.

    With `strict`, an inconsistency (a bad --input-shape, a broken model) is an AotcError;
    without it, inference is best effort.
    """
    proto = _inference_proto(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(
            proto, check_type=strict, strict_mode=strict, data_prop=True)
    except Exception as e:  # InferenceError / ValidationError from the C++ side
        if not strict:
            return
        if _STALE in str(e) and _forget_declared_shapes(model):
            # a declared shape the inputs contradict (onnxmltools declares a classifier's
            # labels as [1] whatever the batch): onnxruntime ignores it, so aotc infers anew
            infer_shapes(model, strict=strict)
            return
        raise AotcError(
            f"shape inference failed: {str(e).strip()}",
            hint="check the --input-shape values against what the model expects",
        ) from None
    inferred_model = ir.serde.deserialize_model(inferred)
    for graph, inferred_graph in zip(model.graphs(), inferred_model.graphs(), strict=False):
        found = ir.convenience.create_value_mapping(inferred_graph)
        for name, value in ir.convenience.create_value_mapping(graph).items():
            other = found.get(name)
            if other is None:
                continue
            if value.type is None and other.type is not None:
                value.type = other.type
            if value.type is not None:  # (a shape without a type cannot be written back)
                value.shape = _merge_shape(value.shape, other.shape)
    _loop_carried_shapes(model)
    _compress_shapes(model)
    _shapes_from_readers(model)
    if _type_loop_bodies(model) | _bind_generated_dims(model):
        infer_shapes(model, strict=strict)


# The names onnx's inference gives the dimensions it cannot compute ("unk__0", ...): unlike a
# model's own symbolic dimensions (its inputs' "batch"), they name nothing the user binds.
_GENERATED_DIM = re.compile(r"unk__\d+")


def _bind_generated_dims(model: ir.Model) -> bool:
    """A dimension inference named but could not compute (`Range` of a run-time length: unk__0)
    takes the static size that an element-wise reader's output has on that axis where
    broadcasting cannot account for the difference (the other operand has 1, nothing or the
    same dimension there), and every value holding it gets the size: a window function's body
    computes Range(0, size) and declares its output [10]. True when some dimension was bound
    (inference then runs again)."""
    bound: dict[str, int] = {}
    graphs = list(irutil.all_graphs(model.graph))
    for graph in graphs:
        for node in reversed(list(graph)):
            if node.domain != "" or not node.inputs or node.outputs[0].shape is None:
                continue
            out = node.outputs[0].shape.dims
            for x, other in _elementwise_operands(node):
                if x.shape is None:
                    continue
                for k in range(1, min(len(x.shape), len(out)) + 1):
                    name = _generated(x.shape.dims[-k])
                    if name is None or name in bound or not isinstance(out[-k], int):
                        continue
                    if other is not None:
                        if other.shape is None:
                            continue
                        theirs = other.shape.dims[-k] if k <= len(other.shape) else 1
                        if theirs != 1 and _generated(theirs) != name:
                            continue
                    bound[name] = out[-k]
    if not bound:
        return False
    for graph in graphs:
        values = [*graph.inputs, *graph.outputs, *(v for n in graph for v in n.outputs)]
        for v in values:
            if v.shape is not None and any(_generated(d) in bound for d in v.shape.dims):
                v.shape = ir.Shape([bound.get(_generated(d) or "", d) for d in v.shape.dims])
    return True


def _generated(dim: object) -> str | None:
    """The name of a dimension onnx's inference generated, else None."""
    if isinstance(dim, ir.SymbolicDim) and dim.value is not None and \
            _GENERATED_DIM.fullmatch(dim.value):
        return dim.value
    return None


def _elementwise_operands(node: ir.Node) -> list[tuple[ir.Value, ir.Value | None]]:
    """Each input of an element-wise node whose shape its output follows, with the operand it
    broadcasts against (None for a one-input function)."""
    if node.op_type in _SAME_SHAPE and node.inputs[0] is not None:
        return [(node.inputs[0], None)]
    if node.op_type in BINARY and len(node.inputs) == 2 and None not in node.inputs:
        a, b = node.inputs
        return [(a, b), (b, a)]  # type: ignore[list-item]
    return []


def _type_loop_bodies(model: ir.Model) -> bool:
    """A Loop body's carried input declared without a shape (the function expansions of Range and
    others write them so) takes its start value's type and shape; whether it keeps that shape
    is then what the body's inference says (`_loop_carried_shapes`), so the assumption never
    stands unchecked: if the body gives back the shape it was given, every iteration does.
    True when some input was typed (inference then runs again)."""
    changed = False
    for graph in irutil.all_graphs(model.graph):
        for node in graph:
            if node.op_type != "Loop" or node.domain != "" or "body" not in node.attributes:
                continue
            body = node.attributes["body"].as_graph()
            for start, inside in zip(node.inputs[2:], body.inputs[2:], strict=False):
                if start is None or not is_static(start) or is_static(inside):
                    continue
                if inside.type is not None and inside.type != start.type:
                    continue
                inside.type, inside.shape = start.type, start.shape
                changed = True
    return changed


# Operators whose output has their first input's shape, whatever their attributes: the
# element-wise functions of one argument, and these.
_SAME_SHAPE = frozenset(UNARY) | {"Softsign", "Cast", "CastLike", "Identity", "IsNaN", "IsInf"}


def _shapes_from_readers(model: ir.Model) -> None:
    """A value whose shape inference left unknown takes the static shape of what an
    element-wise reader of it gives (`Log(ReduceSum(x, axes))` with axes given at run time
    and the Log's output declared), or a broadcasting one whose other operand is a scalar
    (`Range(...) * 2π`, as the window functions' bodies compute): backwards through chains of
    such readers."""
    for graph in irutil.all_graphs(model.graph):
        for node in reversed(list(graph)):
            if node.domain != "" or not node.inputs:
                continue
            dims = irutil.static_dims(node.outputs[0].shape)
            if dims is None:
                continue
            for x in _same_shape_operands(node, len(dims)):
                if x.type is not None and irutil.static_dims(x.shape) is None and (
                        x.shape is None or len(x.shape) == len(dims)):
                    x.shape = ir.Shape(dims)


def _same_shape_operands(node: ir.Node, rank: int) -> list[ir.Value]:
    """The inputs of `node` whose shape must be its output's (of `rank` axes): an element-wise
    operand that broadcasts against nothing, a scalar, or ones of the output's rank."""
    out = []
    for x, other in _elementwise_operands(node):
        other_dims = None if other is None else irutil.static_dims(other.shape)
        if other is None or other_dims == () or (
                other_dims is not None and len(other_dims) == rank and
                all(d == 1 for d in other_dims)):
            out.append(x)
    return out


def _loop_carried_shapes(model: ir.Model) -> None:
    """A Loop's carried value keeps its static shape when the body gives it back in that shape
    (onnx's inference leaves such outputs without a shape, as a carried value may change its
    shape from one iteration to the next in general)."""
    for graph in irutil.all_graphs(model.graph):
        for node in graph:
            if node.op_type != "Loop" or node.domain != "" or "body" not in node.attributes:
                continue
            body = node.attributes["body"].as_graph()
            for k, out in enumerate(node.outputs[:len(node.inputs) - 2]):
                start, back = node.inputs[2 + k], body.outputs[1 + k]
                if start is None or out.shape is not None:
                    continue
                dims = irutil.static_dims(start.shape)
                if dims is not None and dims == irutil.static_dims(back.shape) \
                        and start.dtype == back.dtype:
                    out.shape = ir.Shape(dims)
                    out.dtype = start.dtype


def _compress_shapes(model: ir.Model) -> None:
    """Compress with a constant condition keeps as many slices as the condition has true
    values (onnx's inference leaves that axis unknown, as a condition may be data)."""
    for graph in irutil.all_graphs(model.graph):
        for node in graph:
            if node.op_type != "Compress" or node.domain != "" or len(node.inputs) < 2:
                continue
            x, cond, out = node.inputs[0], node.inputs[1], node.outputs[0]
            dims = irutil.static_dims(x.shape) if x is not None else None
            if dims is None or cond is None or cond.const_value is None or \
                    irutil.static_dims(out.shape) is not None:
                continue
            kept = int(np.count_nonzero(cond.const_value.numpy()))
            attr = node.attributes.get("axis")
            axis = None if attr is None else attr.as_int()
            if axis is None:
                out.shape = ir.Shape([kept])
            elif -len(dims) <= axis < len(dims):
                shape = list(dims)
                shape[axis] = kept
                out.shape = ir.Shape(shape)


def forget_negative_dims(model: ir.Model) -> None:
    """A dimension written as a negative number (-1: Paddle's and some converters' way of saying
    "not known") becomes an unknown one, in inputs, outputs and value_info alike: onnxruntime
    reads it so, and onnx's shape inference would otherwise clash with it (inferred 1 vs
    existing -1). An input with one then needs --input-shape like any dynamic input."""
    for graph in irutil.all_graphs(model.graph):
        values = [*graph.inputs, *graph.outputs, *(v for n in graph for v in n.outputs)]
        for v in values:
            if v.shape is not None and any(isinstance(d, int) and d < 0 for d in v.shape.dims):
                v.shape = ir.Shape([None if isinstance(d, int) and d < 0 else d
                                    for d in v.shape.dims])


def is_static(value: ir.Value) -> bool:
    return value.dtype is not None and irutil.static_dims(value.shape) is not None


def check_static(model: ir.Model) -> None:
    """Every value has a dtype and a static shape of at most MAX_TENSOR_BYTES; else an
    AotcError naming the culprit node."""
    for graph in irutil.all_graphs(model.graph):
        for value in graph.inputs:
            if not is_static(value):
                raise AotcError(f"the shape of input '{value.name}' is not static ({value.shape})")
            check_size(value, f"input '{value.name}'")
        for node in graph:
            _check_node_outputs(node)
            for out in node.outputs:
                if is_static(out):
                    check_size(out, f"output '{out.name}'", node)
            if node.op_type == "Reshape" and node.domain == "":
                _check_reshape(node)


def check_size(value: ir.Value, what: str, node: ir.Node | None = None) -> None:
    """AotcError when the static value would have a negative dimension or more than
    MAX_TENSOR_BYTES."""
    dims = irutil.static_dims(value.shape) or ()
    if any(d < 0 for d in dims):
        raise AotcError(
            f"{what} would have the shape {list(dims)}, with a negative dimension",
            node=node.name if node else None, op=node.op_type if node else None,
            hint="check the node's attributes (a kernel larger than its padded input?) and "
                 "the --input-shape values")
    if value.dtype in (None, ir.DataType.STRING, ir.DataType.UNDEFINED):
        return  # (no fixed size; strings are refused later, by the operators that meet them)
    nbytes = math.prod(dims) * value.dtype.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise AotcError(
            f"{what} would be {value.dtype}{list(dims)}: {nbytes / 2**30:.3g} GiB, more than "
            f"the {MAX_TENSOR_BYTES >> 30} GiB aotc compiles in one tensor",
            node=node.name if node else None, op=node.op_type if node else None,
            hint="check the node's attributes and the --input-shape values")


def _check_reshape(node: ir.Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    if x is not None and math.prod(x.shape.dims) != math.prod(y.shape.dims):
        raise AotcError(f"cannot reshape {x.shape} to {y.shape}: element counts differ",
                        node=node.name, op=node.op_type,
                        hint="check the --input-shape values against what the model expects")


def _check_node_outputs(node: ir.Node) -> None:
    for out in node.outputs:
        if not out.name and not out.uses() and not out.is_graph_output():
            continue  # an omitted optional output
        if out.type is not None and not isinstance(out.type, ir.TensorType):
            raise AotcError(f"output '{out.name}' is a {out.type}, aotc handles tensors only",
                            node=node.name, op=node.op_type)
        if is_static(out):
            continue
        known_inputs = all(v is None or is_static(v) for v in node.inputs)
        if not known_inputs:
            continue  # the culprit is an earlier node (graphs are topologically sorted)
        if node.op_type in DATA_DEPENDENT_OPS:
            raise AotcError(
                f"the shape of output '{out.name}' depends on the input data ({out.shape})",
                node=node.name, op=node.op_type,
                hint="aotc needs static shapes; bound data-dependent outputs are not "
                     "supported yet",
            )
        if node.domain not in ("", "ai.onnx") or not (node.op_type in OPS
                                                         or node.op_type in _CONTROL):
            # (onnx infers no shapes for an operator it does not know either)
            op = node.op_type if node.domain in ("", "ai.onnx") else \
                f"{node.domain}::{node.op_type}"
            raise UnsupportedOperators(None, [(node.name or "<unnamed>", op)])
        raise AotcError(
            f"cannot infer the dtype and shape of output '{out.name}' "
            f"(dtype {out.dtype}, shape {out.shape})",
            node=node.name, op=node.op_type,
        )
