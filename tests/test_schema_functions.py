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
