"""Operators ONNX defines as functions of other operators (aotc/frontend/schema_functions.py):
expanded into their definition and compiled, each checked against onnxruntime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from program_runner import check_node, load_graph  # noqa: E402

RNG = np.random.default_rng(11)
LOGITS = RNG.standard_normal((4, 6)).astype(np.float32)
TARGET = np.array([1, 0, 5, 3], np.int64)
WEIGHT = RNG.random(6).astype(np.float32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_negative_log_likelihood_loss(reduction):
    check_node("NegativeLogLikelihoodLoss", [LOGITS, TARGET], reduction=reduction)
    check_node("NegativeLogLikelihoodLoss", [LOGITS, TARGET, WEIGHT], consts=(2,),
               reduction=reduction, ignore_index=0)


def test_negative_log_likelihood_loss_over_a_spatial_axis():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    t = RNG.integers(0, 3, (2, 5)).astype(np.int64)
    check_node("NegativeLogLikelihoodLoss", [x, t])


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_softmax_cross_entropy_loss_expands_twice(reduction):
    """Its definition calls NegativeLogLikelihoodLoss, itself a function: expanded in turn."""
    check_node("SoftmaxCrossEntropyLoss", [LOGITS, TARGET], reduction=reduction)
    check_node("SoftmaxCrossEntropyLoss", [LOGITS, TARGET, WEIGHT], consts=(2,), n_out=2,
               reduction=reduction, ignore_index=5)


def test_mean_variance_normalization_and_element_wise_definitions():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    check_node("MeanVarianceNormalization", [x], axes=[0, 2, 3])
    check_node("Shrink", [LOGITS], lambd=0.5, bias=0.1)
    check_node("Shrink", [LOGITS], opset=13, lambd=0.3)  # defined by a body written for 18
    check_node("Softsign", [LOGITS])


def test_the_expanded_nodes_are_gone():
    from onnx import TensorProto, helper

    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                      helper.make_tensor_value_info("t", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    ops = {n.op_type for n in load_graph(model, passes=False).graph}
    assert not ops & {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}
    assert "GatherElements" in ops or "Gather" in ops


def test_a_preview_operator_with_a_graph_attribute_is_expanded():
    """FlexAttention (domain ai.onnx.preview) is defined by a body that applies its score_mod
    graph; that graph is written into the body, since onnx's inliner takes no graph
    attributes. Here a soft cap, tanh(s / 4) * 4, checked against numpy."""
    from onnx import TensorProto, helper
    from program_runner import compile_onnx, run_program

    cap = 4.0
    scores = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["B", "H", "L", "S"])
    capped = helper.make_tensor_value_info("s_out", TensorProto.FLOAT, ["B", "H", "L", "S"])
    soft_cap = helper.make_graph(
        [helper.make_node("Div", ["s", "cap"], ["sq"]), helper.make_node("Tanh", ["sq"], ["st"]),
         helper.make_node("Mul", ["st", "cap"], ["s_out"])],
        "soft_cap", [scores], [capped], [helper.make_tensor("cap", TensorProto.FLOAT, [], [cap])])
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                            score_mod=soft_cap, scale=2.0)
    shapes = {"q": (1, 2, 5, 8), "k": (1, 2, 6, 8), "v": (1, 2, 6, 3)}
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                      for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid("ai.onnx.preview", 1)])
    q, k, v = (RNG.standard_normal(s).astype(np.float32) for s in shapes.values())
    s = np.tanh(np.einsum("bhle,bhse->bhls", q, k) * 2.0 / cap) * cap
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bhls,bhsv->bhlv", p / p.sum(-1, keepdims=True), v)
    got = run_program(compile_onnx(model), [q, k, v])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
