"""Pass `fold_constants`: every all-constant subgraph becomes initializers.

No size limit when only initializers are touched (BN/transposes/casts of weights); operators
that expand data keep `aotc.frontend.fold.EXPAND_LIMIT` (DESIGN Decision 5).
"""

from __future__ import annotations

import onnx_ir as ir

from aotc.frontend import fold


def fold_constants(model: ir.Model) -> ir.Model:
    fold.fold_constants(model, max_elements=None)
    return model
