"""What a model file declares, checked before any library reads it: element types that ONNX
defines, names that are text, and sizes that fit.

onnx.checker lets an element type of 99 through and protobuf keeps a name that is not UTF-8 as
bytes; onnx_ir then fails deep inside with no name of the value. A declared input of 2^31
elements, or a Slice given 2^31 axes to slice, kept onnx's shape inference busy for minutes.
Here each is named, before any inference runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from aotc.errors import AotcError
from aotc.frontend.shapes import MAX_TENSOR_BYTES
from aotc.frontend.tensor_data import element_size, model_tensors

_DAMAGED = "the model file is damaged or was written wrongly"


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and, recursively, the subgraphs of its nodes' attributes."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for g in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _graphs(g)


def _graph_value_infos(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    for g in _graphs(graph):
        yield from (*g.input, *g.output, *g.value_info)


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in _graphs(graph):
        yield from g.node


def _inner_type(t: onnx.TypeProto) -> onnx.TypeProto:
    """The type inside any sequences and optionals around it."""
    while t.WhichOneof("value") in ("sequence_type", "optional_type"):
        t = t.sequence_type.elem_type if t.HasField("sequence_type") else \
            t.optional_type.elem_type
    return t


def check_element_types(proto: onnx.ModelProto, path: Path) -> None:
    """Every declared element type is one ONNX defines."""
    known = set(onnx.TensorProto.DataType.values())
    for vi in _graph_value_infos(proto.graph):
        t = _inner_type(vi.type)
        if t.HasField("tensor_type") and t.tensor_type.elem_type not in known:
            raise AotcError(f"value '{vi.name}' has element type {t.tensor_type.elem_type}, "
                            "which ONNX does not define", file=str(path), hint=_DAMAGED)
    for tensor in model_tensors(proto):
        if tensor.data_type not in known:
            raise AotcError(f"tensor '{tensor.name}' has element type {tensor.data_type}, "
                            "which ONNX does not define", file=str(path), hint=_DAMAGED)


def check_map_types(proto: onnx.ModelProto, path: Path) -> None:
    """No value is a map or holds maps (ZipMap's outputs): aotc's values are tensors, and a
    model that declares one cannot even be read into its IR."""
    producer = {o: n for n in _nodes(proto.graph) for o in n.output}
    for vi in _graph_value_infos(proto.graph):
        t = _inner_type(vi.type)
        if t.HasField("map_type"):
            node = producer.get(vi.name)
            hint = ("convert the model without ZipMap (skl2onnx: options={id(model): "
                    "{'zipmap': False}}) to get the probabilities as a tensor"
                    if node is not None and node.op_type == "ZipMap" else None)
            raise AotcError(f"value '{vi.name}' is a map or a sequence of maps; aotc compiles "
                            "models whose values are tensors", file=str(path),
                            node=node.name if node is not None else None,
                            op=node.op_type if node is not None else None, hint=hint)


def _fields(msg: Message) -> Iterator[tuple[FieldDescriptor, object]]:
    if isinstance(msg, onnx.TensorProto):  # never copy a tensor's data: its text is its name
        yield msg.DESCRIPTOR.fields_by_name["name"], msg.name
        yield from ((msg.DESCRIPTOR.fields_by_name["external_data"], e)
                    for e in msg.external_data)
        return
    for field, value in msg.ListFields():
        if field.is_repeated:
            yield from ((field, v) for v in value)  # type: ignore[attr-defined]
        else:
            yield field, value


def check_text(proto: onnx.ModelProto, path: Path) -> None:
    """Every string field (names, domains, op types, metadata) holds UTF-8 text."""
    todo: list[Message] = [proto]
    while todo:
        msg = todo.pop()
        for field, value in _fields(msg):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                todo.append(value)  # type: ignore[arg-type]
            elif field.type == FieldDescriptor.TYPE_STRING and not isinstance(value, str):
                shown = bytes(value).decode("utf-8", "replace")  # type: ignore[arg-type]
                raise AotcError(f"the {type(msg).__name__.removesuffix('Proto')}'s "
                                f"{field.name} '{shown}' is not UTF-8 text", file=str(path),
                                hint=_DAMAGED)


# Inputs that hold one value per axis (or two, for pads): a shape, axes, starts, repeats...
_PER_AXIS_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3),
    "Resize": (1, 2, 3), "Upsample": (1,), "ConstantOfShape": (0,), "Squeeze": (1,),
    "Unsqueeze": (1,), "Split": (1,), "CenterCropPad": (1, 2), "ReduceSum": (1,),
    "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,),
}
# More values than any tensor has axes (two per axis, for pads) is a damaged declaration.
_MAX_PER_AXIS_VALUES = 2 * 64


def _declared_dims(vi: onnx.ValueInfoProto) -> list[int] | None:
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return None if None in dims else dims  # type: ignore[return-value]


def check_declared_sizes(proto: onnx.ModelProto, path: Path) -> None:
    """Declared inputs, outputs and intermediate values fit in MAX_TENSOR_BYTES, and an input
    that holds a value per axis holds at most _MAX_PER_AXIS_VALUES."""
    declared: dict[str, list[int]] = {}
    for vi in _graph_value_infos(proto.graph):
        dims = _declared_dims(vi)
        if dims is None:
            continue
        declared[vi.name] = dims
        nbytes = math.prod(dims) * (element_size(vi.type.tensor_type.elem_type) or 1)
        if nbytes > MAX_TENSOR_BYTES:
            raise AotcError(f"value '{vi.name}' is declared {dims}: {nbytes / 2**30:.3g} GiB, "
                            f"more than the {MAX_TENSOR_BYTES >> 30} GiB aotc compiles in one "
                            "tensor", file=str(path),
                            hint="check the model's declared shapes and --input-shape values")
    declared.update({t.name: list(t.dims) for g in _graphs(proto.graph) for t in g.initializer})
    for node in _nodes(proto.graph):
        for i in _PER_AXIS_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ():
            dims = declared.get(node.input[i]) if i < len(node.input) else None
            if dims and math.prod(dims) > _MAX_PER_AXIS_VALUES:
                raise AotcError(f"input {i} '{node.input[i]}' holds a value per axis, but is "
                                f"declared with {math.prod(dims)} values", file=str(path),
                                node=node.name, op=node.op_type, hint=_DAMAGED)


def check_initializer_inputs(proto: onnx.ModelProto, path: Path) -> None:
    """A graph input that an initializer of the same name gives a default is declared with
    the initializer's shape: aotc compiles the initializer, so another declared shape would
    describe a different model."""
    for g in _graphs(proto.graph):
        inits = {t.name: list(t.dims) for t in g.initializer}
        for vi in g.input:
            dims = _declared_dims(vi)
            if vi.name in inits and dims is not None and dims != inits[vi.name]:
                raise AotcError(f"input '{vi.name}' is declared {dims}, but its initializer is "
                                f"{inits[vi.name]}", file=str(path), hint=_DAMAGED)


def check_variadic_inputs(proto: onnx.ModelProto, path: Path) -> None:
    """No input of a variadic list (Concat's, Sum's, ...) is left empty: the checker refuses
    an empty required input but not a variadic one, and shape inference then skips the node,
    so its output's declared shape was taken on trust."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        return
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    for node in _nodes(proto.graph):
        if node.domain not in ("", "ai.onnx") or "" not in node.input:
            continue
        try:
            formal = onnx.defs.get_schema(node.op_type, opset, "").inputs
        except onnx.defs.SchemaError:
            continue  # an unknown operator: reported as such later
        for i, name in enumerate(node.input):
            param = formal[min(i, len(formal) - 1)] if formal else None
            if name == "" and param is not None and param.option == variadic:
                raise AotcError(f"input {i} of {node.op_type} is empty, and its inputs "
                                f"'{param.name}' cannot be omitted", file=str(path),
                                node=node.name, op=node.op_type, hint=_DAMAGED)
