"""The two kinds of model `--emit ort` makes from the islands of a rewritten model:

- each island alone (`island_model`): its activations as graph inputs, its weights as
  initializers, its outputs as graph outputs: what aotc compiles into the island's program;
- the model onnxruntime runs (`model_with_islands`): every island replaced by one node of domain
  `ISLAND_DOMAIN` whose model-local function holds the island's nodes, so the model still runs
  (and still passes onnx.checker) where the library is not loaded. The node reads the island's
  activations first, then its weights (a function cannot see the graph's initializers).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from aotc.ortlib.partition import Island

# The domain of the islands' nodes and of the library's custom ops.
ISLAND_DOMAIN = "ai.aotc.kernels"


def island_op(name: str, island: Island) -> str:
    """The operator name of an island's node: also the name of the library's custom op."""
    return f"{name}_island{island.index}"


def _value_info(v: ir.Value) -> onnx.ValueInfoProto:
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
        [_value_info(v) for v in island.inputs],
        [_value_info(v) for v in island.outputs],
        [_weight_tensor(v) for v in island.weights],
        value_info=[_value_info(v) for v in inner])
    sub = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import),
                                 ir_version=proto.ir_version)
    sub.functions.extend(proto.functions)
    return ir.serde.deserialize_model(sub)


def model_with_islands(serialized: onnx.ModelProto, islands: list[Island],
                       name: str) -> onnx.ModelProto:
    """The partitioned model (`serialized`, left as it is) with each island replaced by its node
    and function, topologically sorted."""
    proto = onnx.ModelProto()
    proto.CopyFrom(serialized)
    members = {n.name for isl in islands for n in isl.nodes}
    kept = [n for n in proto.graph.node if n.name not in members]
    functions = []
    for isl in islands:
        op = island_op(name, isl)
        ins = [v.name or "" for v in [*isl.inputs, *isl.weights]]
        outs = [v.name or "" for v in isl.outputs]
        kept.append(onnx.helper.make_node(op, ins, outs, name=op, domain=ISLAND_DOMAIN))
        functions.append(onnx.helper.make_function(
            ISLAND_DOMAIN, op, ins, outs, _node_protos(proto, isl),
            opset_imports=list(proto.opset_import)))
    del proto.graph.node[:]
    proto.graph.node.extend(kept)
    proto.functions.extend(functions)
    proto.opset_import.append(onnx.helper.make_opsetid(ISLAND_DOMAIN, 1))
    out = ir.serde.deserialize_model(proto)
    ir.passes.common.TopologicalSortPass()(out)
    return ir.serde.serialize_model(out)
