"""A function body under construction: standard ONNX nodes that compute one ai.onnx.ml node.

Each expansion writes its nodes through `Body`, which names every intermediate value uniquely
within the body and turns numpy arrays into `Constant` nodes, so a builder reads as the
computation it writes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: the default-domain opset the bodies are written for (the frontend converts them up)
BODY_OPSET = 21


class Body:
    """Nodes of one function body; `op` appends a node and returns its output's name."""

    def __init__(self, inputs: list[str]) -> None:
        self.inputs = inputs
        self.nodes: list[onnx.NodeProto] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def op(self, op_type: str, *inputs: str, **attributes) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
        return out

    def const(self, value: np.ndarray | float | int | bool, dtype=None) -> str:
        array = np.asarray(value, dtype=dtype)
        out = self._name("const")
        self.nodes.append(helper.make_node("Constant", [], [out],
                                           value=numpy_helper.from_array(array, out)))
        return out

    def ints(self, *values: int) -> str:
        """A 1-D int64 constant (axes, shapes, starts)."""
        return self.const(np.array(values, dtype=np.int64))

    def rename(self, value: str, name: str) -> str:
        """Make `value` available under `name` (a body output's fixed name)."""
        self.nodes.append(helper.make_node("Identity", [value], [name]))
        return name

    def function(self, domain: str, name: str, outputs: list[str]) -> onnx.FunctionProto:
        return helper.make_function(domain, name, self.inputs, outputs, self.nodes,
                                    [helper.make_opsetid("", BODY_OPSET)])
