"""The two kinds of model `--emit ort` makes from the islands of a rewritten model:

- each island alone (`island_model`): its activations as graph inputs, its weights as
  initializers, its outputs as graph outputs: what aotc compiles into the island's program;
- the model onnxruntime runs (`model_with_islands`): every island replaced by one node of domain
  `ISLAND_DOMAIN` whose model-local function holds the island's nodes, so the model still runs
  (and still passes onnx.checker) where the library is not loaded.

Weights: the library carries each island's weights (packed for its kernels), so the model does
not carry them too. A weight only islands read becomes a Constant inside the island's function,
its bytes in the fallback data file beside the model (ONNX external data): onnxruntime reads
that file only to run a function, i.e. only without the library. A weight onnxruntime's own
nodes read as well stays an initializer, and the island's node takes it as an input after the
activations (a function cannot see the graph's initializers).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import numpy_helper

from aotc.ortlib.partition import Island

# The domain of the islands' nodes and of the library's custom ops.
ISLAND_DOMAIN = "ai.aotc.kernels"


def island_op(name: str, island: Island) -> str:
    """The operator name of an island's node: also the name of the library's custom op."""
    return f"{name}_island{island.index}"


def value_info(v: ir.Value) -> onnx.ValueInfoProto:
    return ir.serde.serialize_value(v)


def _weight_tensor(v: ir.Value) -> onnx.TensorProto:
    tensor = ir.serde.serialize_tensor(v.const_value)  # type: ignore[arg-type]
    tensor.name = v.name or ""
    return tensor


def _node_protos(model: onnx.ModelProto, island: Island) -> list[onnx.NodeProto]:
    names = [n.name for n in island.nodes]
    by_name = {n.name: n for n in model.graph.node}
    return [by_name[n] for n in names]


def island_model(proto: onnx.ModelProto, island: Island) -> ir.Model:
    """The island as a model of its own (`proto`: the partitioned model, serialized)."""
    nodes = _node_protos(proto, island)
    inner = [v for n in island.nodes for v in n.outputs if v not in island.outputs]
    graph = onnx.helper.make_graph(
        nodes, f"island{island.index}",
        [value_info(v) for v in island.inputs],
        [value_info(v) for v in island.outputs],
        [_weight_tensor(v) for v in island.weights],
        value_info=[value_info(v) for v in inner])
    sub = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import),
                                 ir_version=proto.ir_version)
    sub.functions.extend(proto.functions)
    return ir.serde.deserialize_model(sub)


# Weights smaller than this stay inside the model (onnx's own external-data threshold).
EXTERNAL_MIN_BYTES = 1024
EXTERNAL_ALIGN = 64
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                "uint64_data", "string_data")


def fallback_data_name(name: str) -> str:
    """The file beside NAME.onnx that holds the weights only the islands' functions read."""
    return f"{name}.fallback.data"


def at_opset(proto: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """`proto` declaring the default domain at `opset` (the model and its functions) where it
    is below the one declared and every node is valid there (onnx.checker), else `proto`.

    The frontend converts a model up to the canonical opset, whose newest versions of some
    operators the installed onnxruntime may not implement (QuantizeLinear 28 in 1.32); the
    model the user ran declared its own opset, and its nodes, converted up without a change of
    form, are valid there again."""
    low = onnx.ModelProto()
    low.CopyFrom(proto)
    changed = False
    for imports in [low.opset_import, *(f.opset_import for f in low.functions)]:
        for o in imports:
            if o.domain in ("", "ai.onnx") and o.version > opset:
                o.version, changed = opset, True
    if not changed:
        return proto
    try:
        onnx.checker.check_model(low)
    except onnx.checker.ValidationError:
        return proto
    return low


def model_with_islands(serialized: onnx.ModelProto, islands: list[Island],
                       name: str, opset: int | None = None) -> tuple[onnx.ModelProto, bytes]:
    """The partitioned model (`serialized`, left as it is) with each island replaced by its node
    and function, topologically sorted, and the contents of its fallback data file; declaring
    the original model's `opset` where its nodes allow (`at_opset`)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(serialized)
    members = {n.name for isl in islands for n in isl.nodes if n not in isl.kept}
    kept = [n for n in proto.graph.node if n.name not in members]
    functions = []
    for isl in islands:
        op = island_op(name, isl)
        ins = [v.name or "" for v in [*isl.inputs, *isl.shared_weights]]
        outs = [v.name or "" for v in isl.outputs]
        owned = [w for w in isl.weights if w not in isl.shared_weights]
        constants = [onnx.helper.make_node("Constant", [], [w.name or ""], value=_weight_tensor(w))
                     for w in owned]
        kept.append(onnx.helper.make_node(op, ins, outs, name=op, domain=ISLAND_DOMAIN))
        functions.append(onnx.helper.make_function(
            ISLAND_DOMAIN, op, ins, outs, constants + _node_protos(proto, isl),
            opset_imports=list(proto.opset_import)))
    del proto.graph.node[:]
    proto.graph.node.extend(kept)
    proto.functions.extend(functions)
    proto.opset_import.append(onnx.helper.make_opsetid(ISLAND_DOMAIN, 1))
    out = ir.serde.deserialize_model(proto)
    # the weights the islands took with them leave the graph (initializers, Constant nodes)
    ir.passes.common.RemoveUnusedNodesPass()(out)
    ir.passes.common.TopologicalSortPass()(out)
    result = ir.serde.serialize_model(out)
    if opset is not None:
        result = at_opset(result, opset)
    return result, _move_to_fallback_data(result, fallback_data_name(name))


def _move_to_fallback_data(proto: onnx.ModelProto, location: str) -> bytes:
    """Moves the large tensors of the islands' Constant nodes into one external-data blob (each
    weight once, however many islands read it) and returns the blob."""
    blob = bytearray()
    placed: dict[str, tuple[int, int]] = {}  # weight name -> offset, length
    for fn in proto.functions:
        if fn.domain != ISLAND_DOMAIN:
            continue
        for node in fn.node:
            if node.op_type != "Constant" or node.domain != "":
                continue
            tensor = node.attribute[0].t
            data = numpy_helper.to_array(tensor).tobytes()
            if len(data) < EXTERNAL_MIN_BYTES:
                continue
            key = node.output[0]
            if key not in placed:
                blob.extend(b"\0" * (-len(blob) % EXTERNAL_ALIGN))
                placed[key] = (len(blob), len(data))
                blob.extend(data)
            for f in _DATA_FIELDS:
                tensor.ClearField(f)
            offset, length = placed[key]
            del tensor.external_data[:]
            for k, v in (("location", location), ("offset", offset), ("length", length)):
                entry = tensor.external_data.add()
                entry.key, entry.value = k, str(v)
            tensor.data_location = onnx.TensorProto.EXTERNAL
    return bytes(blob)
