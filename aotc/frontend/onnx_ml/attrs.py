"""Reading an ai.onnx.ml node's attributes as numpy arrays and Python values."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from aotc.errors import AotcError


class Attrs:
    """The attributes of one node; a missing one gives the default asked for."""

    def __init__(self, node: ir.Node) -> None:
        self.node = node

    def has(self, name: str) -> bool:
        return name in self.node.attributes

    def get(self, name: str, default=None):
        attr = self.node.attributes.get(name)
        if attr is None:
            return default
        value = attr.value
        if isinstance(value, ir.TensorProtocol):
            return value.numpy()
        if isinstance(value, tuple | list):
            return list(value)
        return value

    def array(self, name: str, dtype, default=()) -> np.ndarray:
        """A list attribute, or its `NAME_as_tensor` form (ai.onnx.ml opset 3), as an array."""
        value = self.get(name)
        if value is None:
            value = self.get(f"{name}_as_tensor")
        if value is None:
            value = default
        return np.asarray(value, dtype=dtype).reshape(-1)

    def refuse(self, what: str, hint: str | None = None) -> AotcError:
        return AotcError(what, node=self.node.name, op=self.node.op_type, hint=hint)

    def no_strings(self, *names: str) -> None:
        """String labels and keys are refused: aotc's tensors are numbers."""
        for name in names:
            if self.get(name):
                raise self.refuse(f"attribute '{name}': string labels are not supported "
                                  "(aotc compiles numeric tensors)",
                                  hint="export the model with integer class labels")
