"""The frontend: read an ONNX file into a checked, canonical, fully static `onnx_ir.Model`.

`load_model(path, input_shapes)` does everything: load (external data included), onnx.checker,
drop initializers listed as inputs, inline local functions, normalise the default domain to
CANONICAL_OPSET, bind symbolic input dimensions, infer every value's shape and dtype, fold
shape arithmetic (and constant `If`s) into initializers. `read_model(path)` stops before the
binding, for `aotc inspect` (with `unbound_dims`).
"""

from __future__ import annotations

from aotc.frontend.bind import parse_input_shapes, unbound_dims
from aotc.frontend.load import load_model, read_model
from aotc.frontend.opset import CANONICAL_OPSET

__all__ = ["CANONICAL_OPSET", "load_model", "parse_input_shapes", "read_model", "unbound_dims"]
