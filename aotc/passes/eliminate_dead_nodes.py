"""Pass `eliminate_dead_nodes`: drop nodes and initializers no graph output depends on."""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common_passes


def eliminate_dead_nodes(model: ir.Model) -> ir.Model:
    common_passes.RemoveUnusedNodesPass()(model)
    common_passes.RemoveUnusedFunctionsPass()(model)
    return model
