"""Operators that ONNX itself defines as functions of other operators.

Many operators carry a definition in their schema as a function of simpler ones (the loss
operators NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, MeanVarianceNormalization,
Shrink, Softsign, Swish, GroupNormalization, ...); for some the body depends on the node's
attributes and input types (a context-dependent function). A node whose operator aotc does not
compile but whose schema gives such a body is replaced by that body: it becomes a call of a
model-local function (domain `EXPANDED_DOMAIN`, one per node), which `inline_functions` then
inlines like an exporter's functions, each inlined node keeping the opset version its body was
written for so that the opset normalisation converts it.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import defs

from aotc.errors import AotcError
from aotc.frontend.irutil import all_graphs
from lowering.ops import OPS

EXPANDED_DOMAIN = "aotc.schema_function"


# ONNX's own domains whose operators may carry such bodies: the standard one and the preview
# one (FlexAttention's body applies its score and probability graphs)
ONNX_DOMAINS = {"": "", "ai.onnx": "", "ai.onnx.preview": "ai.onnx.preview"}


def _schema(op_type: str, version: int, domain: str = "") -> defs.OpSchema | None:
    try:
        return defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return None


def _with_defaults(node: ir.Node, schema: defs.OpSchema) -> onnx.NodeProto:
    """The node as a NodeProto with every attribute the schema gives a default filled in (a
    function body refers to attributes by name, and an absent one would drop the reference)."""
    proto = ir.serde.serialize_node(node)
    present = {a.name for a in proto.attribute}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in present and default is not None and default.type != 0:
            copy = onnx.AttributeProto()
            copy.CopyFrom(default)
            copy.name = name
            proto.attribute.append(copy)
    return proto


def _body(node: ir.Node, proto: onnx.NodeProto, schema: defs.OpSchema,
          version: int) -> onnx.FunctionProto | None:
    """The schema's function for this node at the model's opset `version`, if it has one."""
    if schema.has_context_dependent_function:
        types = []
        for v in node.inputs:
            if v is None:  # an optional input left out: an empty type, as onnx expects
                types.append(onnx.TypeProto().SerializeToString())
                continue
            if v.type is None:
                return None  # (the body depends on types that are not known)
            tp = onnx.TypeProto()
            ir.serde.serialize_type_into(tp, v.type)
            if v.shape is not None:
                ir.serde.serialize_shape_into(tp, v.shape)
            types.append(tp.SerializeToString())
        body = schema.get_context_dependent_function(proto.SerializeToString(), types)
        return onnx.FunctionProto.FromString(body)
    if schema.has_function:
        versions = list(schema.function_opset_versions)
        if not versions:
            return None
        # the newest body written for this opset, else the oldest (a body added to the schema
        # later defines the same operator; its nodes keep their own opset version)
        older = [v for v in versions if v <= version]
        body = schema.get_function_with_opset_version(max(older) if older else min(versions))
        return body if isinstance(body, onnx.FunctionProto) else onnx.FunctionProto.FromString(body)
    return None


def _resolve_attributes(nodes, values: dict[str, onnx.AttributeProto]) -> None:
    """Replace every attribute of `nodes` (and of the nodes of their subgraphs) that refers to
    a function attribute (`ref_attr_name`) by the value in `values`; one the node leaves
    unset is dropped, as the reference means."""
    for n in nodes:
        kept = []
        for a in n.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name not in values:
                    continue
                value = onnx.AttributeProto()
                value.CopyFrom(values[a.ref_attr_name])
                value.name = a.name
                a = value
            for g in [a.g, *a.graphs]:
                _resolve_attributes(g.node, values)
            kept.append(a)
        del n.attribute[:]
        n.attribute.extend(kept)


def expand_schema_functions(model: ir.Model) -> bool:
    """Replace every node whose operator aotc lacks and whose schema defines it as a function by
    a call of that function (inline_functions inlines it); True if any was."""
    default = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if default is None:
        return False
    count = 0
    for graph in all_graphs(model.graph):
        for node in list(graph):
            domain = ONNX_DOMAINS.get(node.domain)
            if domain is None or (domain == "" and node.op_type in OPS):
                continue
            version = node.version if node.version is not None else \
                default if domain == "" else model.opset_imports.get(domain)
            if version is None:
                continue
            schema = _schema(node.op_type, version, domain)
            if schema is None or not (schema.has_function
                                      or schema.has_context_dependent_function):
                continue
            proto = _with_defaults(node, schema)
            try:
                body = _body(node, proto, schema, version)
            except Exception as e:  # onnx's builder of a context-dependent body
                raise AotcError(f"cannot expand {node.op_type} into its ONNX definition: {e}",
                                node=node.name, op=node.op_type) from None
            if body is None:
                continue
            name = f"{node.op_type}_{count}"
            function = onnx.FunctionProto()
            function.CopyFrom(body)
            function.domain, function.name = EXPANDED_DOMAIN, name
            # a body may declare optional outputs it computes only when the node asks for them
            produced = {o for n in function.node for o in n.output} | set(function.input)
            kept = [o for o in function.output[:len(node.outputs)] if o in produced]
            if len(kept) < len(node.outputs):
                continue
            del function.output[:]
            function.output.extend(kept)
            if not any(o.domain == "" for o in function.opset_import):
                function.opset_import.append(onnx.helper.make_opsetid("", default))
            # the function serves this node alone: its attributes are written into the body,
            # which onnx's inliner needs for graph attributes (a score_mod graph)
            _resolve_attributes(function.node, {a.name: a for a in proto.attribute})
            del function.attribute[:]
            del function.attribute_proto[:]
            count += 1
            fn = ir.serde.deserialize_function(function)
            model.functions[fn.identifier()] = fn
            node.domain, node.op_type, node.version = EXPANDED_DOMAIN, name, None
            node.attributes.clear()
    if count:
        model.opset_imports[EXPANDED_DOMAIN] = 1
    return count > 0
