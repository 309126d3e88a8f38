"""Pass `fold_batchnorm`: BatchNormalization after Conv / ConvTranspose / Gemm → new weights.

Applies when the producer's weights (and bias) and all BN parameters are initializers and the
producer's output feeds only the BN. BN(y) = (y - mean) * s + beta with s = scale/sqrt(var+eps)
is folded per output channel into the weights (times s) and the bias ((b - mean) * s + beta).
A standalone BN, or one in training mode, stays.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from aotc.frontend.irutil import bypass, const_array, get_attr, new_initializer, set_input

_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm"})


def _bn_params(bn: ir.Node) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(s, mean, beta) in float64, or None when BN can't be folded."""
    if len(bn.inputs) != 5 or len(bn.outputs) != 1 or get_attr(bn, "training_mode", 0):
        return None
    scale, beta, mean, var = (const_array(v) for v in bn.inputs[1:])
    if any(a is None for a in (scale, beta, mean, var)):
        return None
    eps = get_attr(bn, "epsilon", 1e-5)
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return s, mean.astype(np.float64), beta.astype(np.float64)


def _scaled_weight(producer: ir.Node, w: np.ndarray, s: np.ndarray) -> np.ndarray | None:
    op = producer.op_type
    w64 = w.astype(np.float64)
    if op == "Conv":
        if w.shape[0] != s.size:
            return None
        return w64 * s.reshape((-1,) + (1,) * (w.ndim - 1))
    if op == "ConvTranspose":
        group = get_attr(producer, "group", 1)
        c_in, c_out_g = w.shape[0], w.shape[1]
        if c_out_g * group != s.size or c_in % group:
            return None
        grouped = w64.reshape((group, c_in // group, c_out_g) + w.shape[2:])
        factors = s.reshape((group, 1, c_out_g) + (1,) * (w.ndim - 2))
        return (grouped * factors).reshape(w.shape)
    # Gemm: Y[:, n] depends on column n of op(B).
    trans_b = get_attr(producer, "transB", 0)
    n = w.shape[0] if trans_b else w.shape[1]
    if w.ndim != 2 or n != s.size:
        return None
    return w64 * (s[:, None] if trans_b else s[None, :])


def _new_bias(producer: ir.Node, s: np.ndarray, mean: np.ndarray,
              beta: np.ndarray) -> np.ndarray | None:
    index = 2
    b_value = producer.inputs[index] if len(producer.inputs) > index else None
    b = const_array(b_value) if b_value is not None else np.zeros(1)
    if b is None:
        return None
    b = b.astype(np.float64)
    if producer.op_type == "Gemm":
        b = b * get_attr(producer, "beta", 1.0)
        if b.ndim > 2:
            return None
    return b * s + (beta - mean * s)


def _try_fold(bn: ir.Node) -> bool:
    y = bn.inputs[0]
    producer = y.producer() if y is not None else None
    if (producer is None or producer.domain != "" or producer.op_type not in _PRODUCERS
            or producer.graph is not bn.graph or len(y.uses()) != 1 or y.is_graph_output()):
        return False
    if producer.op_type == "Gemm" and (y.shape is None or len(y.shape) != 2):
        return False
    params = _bn_params(bn)
    w = const_array(producer.inputs[1])
    if params is None or w is None or not np.issubdtype(w.dtype, np.floating):
        return False
    s, mean, beta = params
    new_w = _scaled_weight(producer, w, s)
    new_b = _new_bias(producer, s, mean, beta)
    if new_w is None or new_b is None:
        return False
    graph = bn.graph
    old = [v for v in producer.inputs[1:] if v is not None]
    base = producer.name or producer.outputs[0].name
    set_input(producer, 1, new_initializer(graph, new_w.astype(w.dtype), f"{base}_bn_weight"))
    set_input(producer, 2, new_initializer(graph, new_b.astype(w.dtype), f"{base}_bn_bias"))
    if producer.op_type == "Gemm":
        producer.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
    bypass(bn.outputs[0], y)
    graph.remove(bn, safe=True)
    for v in old:
        if v.is_initializer() and not v.uses() and not v.is_graph_output():
            graph.initializers.pop(v.name)
    return True


def fold_batchnorm(model: ir.Model) -> ir.Model:
    for graph in model.graphs():
        for node in list(graph):
            if node.op_type == "BatchNormalization" and node.domain == "":
                _try_fold(node)
    return model
