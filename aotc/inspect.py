"""`aotc inspect`: what a model needs before it compiles (shapes, operators, dimensions)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx

from aotc.errors import AotcError

# Operators the frontend removes before lowering (so no kernel definition is needed).
FRONTEND_HANDLED = {"Constant", "If"}


@dataclass
class ModelDescription:
    opset: int
    ir_version: int
    producer: str
    num_nodes: int
    inputs: list[tuple[str, str, list[object]]]
    outputs: list[tuple[str, str, list[object]]]
    op_histogram: list[tuple[str, int]]
    unsupported_ops: set[str]
    unsupported: list[tuple[str, str]]
    unbound: list[tuple[str, int, str]]


def _dims(vi: onnx.ValueInfoProto) -> list[object]:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return ["?"]
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def _dtype(vi: onnx.ValueInfoProto) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name \
        if vi.type.tensor_type.elem_type else "?"


def load_checked(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise AotcError("no such file", file=str(path))
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:
        raise AotcError(f"not a valid ONNX model: {str(e).strip().splitlines()[0]}",
                        file=str(path)) from None
    return model


def describe_model(path: Path) -> ModelDescription:
    from lowering.ops import OPS

    model = load_checked(Path(path))
    g = model.graph
    inits = {i.name for i in g.initializer}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    hist: Counter[str] = Counter()
    unsupported: list[tuple[str, str]] = []
    # a call of a model-local function (e.g. an `ai.aotc` fused region) is inlined by the
    # frontend: it is supported when the nodes of its body are
    local = {(f.domain, f.name): f for f in model.functions}
    for n in g.node:
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        hist[op] += 1
        body = local.get((n.domain, n.op_type))
        if body is not None:
            bad = [b.op_type for b in body.node if b.domain not in ("", "ai.onnx")
                   or (b.op_type not in OPS and b.op_type not in FRONTEND_HANDLED)]
            if bad:
                unsupported.append((f"{n.name or '<unnamed>'} (body: {', '.join(bad)})", op))
        elif op not in OPS and op not in FRONTEND_HANDLED:
            unsupported.append((n.name or "<unnamed>", op))
    inputs = [(i.name, _dtype(i), _dims(i)) for i in g.input if i.name not in inits]
    unbound = [(name, axis, str(d)) for name, _, dims in inputs
               for axis, d in enumerate(dims) if not isinstance(d, int) or d <= 0]
    return ModelDescription(
        opset=opset, ir_version=model.ir_version, producer=model.producer_name,
        num_nodes=len(g.node), inputs=inputs,
        outputs=[(o.name, _dtype(o), _dims(o)) for o in g.output],
        op_histogram=hist.most_common(), unsupported_ops={op for _, op in unsupported},
        unsupported=unsupported, unbound=unbound,
    )
