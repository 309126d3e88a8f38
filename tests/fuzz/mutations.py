"""Mutations of a valid ONNX model: each kind breaks one thing a user's model can have wrong.

A mutation takes the model (a protobuf, mutated in place) and a seeded `random.Random`, and
returns a one-line description of what it changed; the model's files are written by `Case`.
Kinds that need files beside the model (external data) add them to `Case.extra`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto, helper

INTS = [0, 1, 2, 3, -1, -2, 7, 1000, 2**31 - 1, -(2**31), 2**62]
FLOATS = [0.0, -1.0, 1e-30, 1e30, math.nan, math.inf, -math.inf, 0.5]
DIMS = [0, 1, 2, 3, 2**31, -1]
STRINGS = ["", "garbage", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "constant", "reflect",
           "edge", "nearest", "linear", "cubic", "half_pixel", "asymmetric", "floor", "round_prefer_ceil",
           "tanh", "none", "max", "avg"]
DTYPES = [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32,
          TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL, TensorProto.STRING,
          TensorProto.BFLOAT16, TensorProto.COMPLEX64, TensorProto.UNDEFINED, 99]
OP_TYPES = ["Relu", "Softmax", "Conv", "MatMul", "Add", "Identity", "Transpose", "Loop",
            "Reshape", "NotAnOperator", "LSTM", "Flatten", "Concat", "Gemm", "MaxPool"]
OPSETS = [1, 6, 7, 11, 13, 18, 99, 0, -1]


@dataclass
class Case:
    """A mutated model: the model's protobuf, files beside it, and what was changed."""

    kind: str
    model: onnx.ModelProto | None
    detail: str
    raw: bytes | None = None  # the model file's bytes, when the mutation works on bytes
    extra: dict[str, bytes] = field(default_factory=dict)  # file (relative to model) -> bytes

    def model_bytes(self) -> bytes:
        assert self.model is not None or self.raw is not None
        return self.raw if self.raw is not None else self.model.SerializeToString()


Mutation = Callable[[onnx.ModelProto, random.Random, Case], str]
MUTATIONS: dict[str, Mutation] = {}


def _mutation(kind: str) -> Callable[[Mutation], Mutation]:
    def register(fn: Mutation) -> Mutation:
        MUTATIONS[kind] = fn
        return fn
    return register


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return list(model.graph.node)


def _typed_values(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [v for v in (*g.input, *g.output, *g.value_info) if v.type.HasField("tensor_type")]


def _some_initializer(model: onnx.ModelProto, rng: random.Random) -> onnx.TensorProto | None:
    """An initializer stored as raw bytes; when the model has none (a node test), one of its
    graph inputs of static numeric type becomes one, filled with random values."""
    inits = [t for t in model.graph.initializer if t.raw_data]
    if inits:
        return rng.choice(inits)
    names = {t.name for t in model.graph.initializer}
    for v in model.graph.input:
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if v.name in names or None in dims or t.elem_type in (TensorProto.STRING, 0):
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        array = np.random.default_rng(rng.randrange(2**32)).standard_normal(dims).astype(dtype)
        tensor = onnx.numpy_helper.from_array(array, v.name)
        model.graph.initializer.append(tensor)
        model.graph.input.remove(v)
        return tensor
    return None


@_mutation("bytes")
def _bytes(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    data = bytearray(model.SerializeToString())
    how = rng.choice(["flip", "flip", "truncate", "insert", "zero"])
    if how == "truncate":
        n = rng.randrange(len(data))
        case.raw = bytes(data[:n])
        return f"truncated to {n} of {len(data)} bytes"
    if how == "insert":
        at = rng.randrange(len(data))
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        case.raw = bytes(data)
        return f"inserted bytes at {at}"
    count = rng.randint(1, 8)
    spots = [rng.randrange(len(data)) for _ in range(count)]
    for at in spots:
        data[at] = 0 if how == "zero" else data[at] ^ (1 << rng.randrange(8))
    case.raw = bytes(data)
    return f"{how} {count} byte(s) at {spots}"


def _mutate_attribute(attr: onnx.AttributeProto, rng: random.Random) -> str:
    if attr.type == onnx.AttributeProto.INT:
        attr.i = rng.choice(INTS)
        return f"{attr.name}={attr.i}"
    if attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice(FLOATS)
        return f"{attr.name}={attr.f}"
    if attr.type == onnx.AttributeProto.INTS:
        values = list(attr.ints)
        how = rng.choice(["one", "all", "shorter", "longer"])
        if how == "one" and values:
            values[rng.randrange(len(values))] = rng.choice(INTS)
        elif how == "all":
            values = [rng.choice(INTS)] * max(1, len(values))
        elif how == "shorter":
            values = values[:-1]
        else:
            values = values + [rng.choice(INTS)]
        del attr.ints[:]
        attr.ints.extend(values)
        return f"{attr.name}={values}"
    if attr.type == onnx.AttributeProto.FLOATS:
        values = [rng.choice(FLOATS) for _ in range(max(1, len(attr.floats)))]
        del attr.floats[:]
        attr.floats.extend(values)
        return f"{attr.name}={values}"
    if attr.type == onnx.AttributeProto.STRING:
        attr.s = rng.choice(STRINGS).encode()
        return f"{attr.name}={attr.s!r}"
    if attr.type == onnx.AttributeProto.TENSOR:
        return f"{attr.name}: " + _mutate_tensor(attr.t, rng)
    attr.type = onnx.AttributeProto.INT  # a graph/other attribute given as an int
    attr.i = 1
    return f"{attr.name} made an int"


@_mutation("attribute")
def _attribute(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    nodes = [n for n in _nodes(model) if n.attribute]
    node = rng.choice(nodes or _nodes(model))
    how = rng.choice(["value", "value", "value", "remove", "add"]) if node.attribute else "add"
    if how == "value":
        return f"node {node.name} ({node.op_type}): " + _mutate_attribute(
            rng.choice(node.attribute), rng)
    if how == "remove":
        attr = rng.choice(node.attribute)
        node.attribute.remove(attr)
        return f"node {node.name} ({node.op_type}): removed {attr.name}"
    name = rng.choice(["axis", "perm", "pads", "kernel_shape", "group", "alpha", "mode",
                       "not_an_attribute"])
    value = rng.choice([rng.choice(INTS), [rng.choice(INTS)] * 2, rng.choice(FLOATS), "x"])
    node.attribute.append(helper.make_attribute(name, value))
    return f"node {node.name} ({node.op_type}): added {name}={value}"


@_mutation("dim")
def _dim(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    where = rng.choice(["input", "input", "initializer", "value_info", "output"])
    if where == "initializer" and model.graph.initializer:
        t = rng.choice(model.graph.initializer)
        if t.dims:
            k = rng.randrange(len(t.dims))
            t.dims[k] = rng.choice(DIMS)
            return f"initializer {t.name} dim {k} = {t.dims[k]}"
    values = {"input": model.graph.input, "output": model.graph.output,
              "value_info": model.graph.value_info}[where if where != "initializer" else "input"]
    values = [v for v in values if v.type.tensor_type.HasField("shape")
              and v.type.tensor_type.shape.dim]
    if not values:
        values = [v for v in _typed_values(model) if v.type.tensor_type.shape.dim]
    if not values:
        return "no dimension to change"
    v = rng.choice(values)
    dims = v.type.tensor_type.shape.dim
    k = rng.randrange(len(dims))
    choice = rng.choice([*DIMS, "N", "drop"])
    if choice == "drop":
        del dims[k]
        return f"{where} {v.name}: dropped dim {k}"
    if isinstance(choice, str):
        dims[k].dim_param = choice
        return f"{where} {v.name} dim {k} = '{choice}'"
    dims[k].dim_value = choice
    return f"{where} {v.name} dim {k} = {choice}"


def _mutate_tensor(t: onnx.TensorProto, rng: random.Random) -> str:
    how = rng.choice(["dtype", "dims", "data"])
    if how == "dtype":
        t.data_type = rng.choice(DTYPES)
        return f"tensor {t.name} data_type = {t.data_type}"
    if how == "dims" and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice(DIMS)
        return f"tensor {t.name} dims = {list(t.dims)}"
    if t.raw_data:
        data = bytearray(t.raw_data)
        for _ in range(4):
            data[rng.randrange(len(data))] = 0xFF  # NaNs and huge integers
        t.raw_data = bytes(data)
        return f"tensor {t.name} raw bytes set to 0xff"
    t.dims.append(2)
    return f"tensor {t.name} dims = {list(t.dims)}"


@_mutation("dtype")
def _dtype(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    where = rng.choice(["value", "value", "initializer", "cast"])
    if where == "initializer" and model.graph.initializer:
        t = rng.choice(model.graph.initializer)
        t.data_type = rng.choice(DTYPES)
        return f"initializer {t.name} data_type = {t.data_type}"
    if where == "cast":
        node = rng.choice(_nodes(model))
        x = node.input[0] if node.input else None
        if x:
            cast = helper.make_node("Cast", [x], [x + "_cast"], name="fuzz_cast",
                                    to=rng.choice(DTYPES[:-2]))
            node.input[0] = x + "_cast"
            model.graph.node.insert(list(model.graph.node).index(node), cast)
            return f"Cast of {x} to {cast.attribute[0].i} before {node.name}"
    values = _typed_values(model)
    if not values:
        return "no typed value"
    v = rng.choice(values)
    v.type.tensor_type.elem_type = rng.choice(DTYPES)
    return f"value {v.name} elem_type = {v.type.tensor_type.elem_type}"


@_mutation("dangling")
def _dangling(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    node = rng.choice([n for n in _nodes(model) if n.input])
    k = rng.randrange(len(node.input))
    how = rng.choice(["missing", "empty", "output"])
    if how == "output":
        model.graph.output[0].name = "not_produced_anywhere"
        return "graph output renamed to a value no node produces"
    node.input[k] = "" if how == "empty" else "does_not_exist"
    return f"node {node.name} input {k} = {node.input[k]!r}"


@_mutation("cycle")
def _cycle(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    nodes = [n for n in _nodes(model) if n.input and n.output]
    i = rng.randrange(len(nodes))
    j = rng.randrange(i, len(nodes))
    node, later = nodes[i], nodes[j]
    k = rng.randrange(len(node.input))
    node.input[k] = later.output[0]
    return f"node {node.name} input {k} = output of {'itself' if i == j else later.name}"


@_mutation("duplicate")
def _duplicate(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    g = model.graph
    how = rng.choice(["output", "initializer", "input", "node_name"])
    nodes = [n for n in g.node if n.output]
    if how == "output" and len(nodes) > 1:
        a, b = rng.sample(nodes, 2)
        a.output[0] = b.output[0]
        return f"node {a.name} writes {b.output[0]} as {b.name} does"
    if how == "initializer" and len(g.initializer) > 1:
        a, b = rng.sample(list(g.initializer), 2)
        a.name = b.name
        return f"two initializers named {b.name}"
    if how == "input" and g.initializer:
        t = rng.choice(g.initializer)
        g.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, [1]))
        return f"input {t.name} shadows an initializer of another shape"
    a, b = rng.sample(nodes, 2) if len(nodes) > 1 else (nodes[0], nodes[0])
    a.name = b.name
    return f"two nodes named {b.name}"


@_mutation("truncated")
def _truncated(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    inits = [t for t in model.graph.initializer if t.raw_data or t.float_data or t.int64_data]
    t = rng.choice(inits) if inits else _some_initializer(model, rng)
    if t is None:
        return "no initializer to truncate"
    if t.raw_data:
        n = rng.randrange(len(t.raw_data))
        t.raw_data = t.raw_data[:n]
        return f"initializer {t.name} raw_data cut to {n} bytes"
    if not (t.float_data or t.int64_data):
        return f"initializer {t.name} has no data to cut"
    field_ = t.float_data if t.float_data else t.int64_data
    del field_[rng.randrange(len(field_)):]
    return f"initializer {t.name} data cut to {len(field_)} values"


@_mutation("external")
def _external(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    """Moves an initializer's bytes to a file: one whose location escapes the folder, is
    missing, short, or lies about offset and length."""
    t = _some_initializer(model, rng)
    if t is None:
        return "no initializer to move"
    data = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    how = rng.choice(["escape", "absolute", "link", "missing", "short", "offset", "length",
                      "valid"])
    location, blob = "weights.bin", data
    info = {}
    if how == "escape":
        location = "../secret.bin"
        case.extra["../secret.bin"] = data
    elif how == "absolute":
        location = "/etc/hostname"
    elif how == "link":
        location = "link.bin"
        case.extra["link.bin"] = b"->../secret.bin"  # made a symbolic link by the runner
        case.extra["../secret.bin"] = data
    elif how == "missing":
        location = "nowhere.bin"
    elif how == "short":
        blob = data[: len(data) // 2]
    elif how == "offset":
        info["offset"] = str(rng.choice([len(data), 2**40, -8]))
    elif how == "length":
        info["length"] = str(rng.choice([len(data) - 4, len(data) * 2, 0]))
    if location == "weights.bin":
        case.extra["weights.bin"] = blob
    for key, value in {"location": location, **info}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return f"initializer {t.name} in external data ({how}: {location} {info or ''})"


@_mutation("opset")
def _opset(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    how = rng.choice(["version", "version", "domain", "ir_version"])
    if how == "ir_version":
        model.ir_version = rng.choice([0, 1, 3, 99])
        return f"ir_version = {model.ir_version}"
    if how == "domain":
        node = rng.choice(_nodes(model))
        node.domain = rng.choice(["com.example", "ai.aotc", "ai.onnx.ml", "com.microsoft"])
        return f"node {node.name} domain = {node.domain}"
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = rng.choice(OPSETS)
            return f"default opset = {o.version}"
    return "no default opset"


@_mutation("op_type")
def _op_type(model: onnx.ModelProto, rng: random.Random, case: Case) -> str:
    node = rng.choice(_nodes(model))
    old, node.op_type = node.op_type, rng.choice(OP_TYPES)
    return f"node {node.name}: {old} -> {node.op_type}"


KINDS = tuple(MUTATIONS)


def with_value_info(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with onnx's inferred value_info (as exporters write it), for dim mutations."""
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:  # the sample models infer; keep the model as it is otherwise
        return model


def mutate(model: onnx.ModelProto, kind: str, rng: random.Random) -> Case:
    """One mutation of `kind` applied to a copy of `model`."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    case = Case(kind, copy, "")
    case.detail = MUTATIONS[kind](copy, rng, case)
    return case


