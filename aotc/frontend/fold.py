"""aotc's wrapper around onnxscript's constant folder (the only place that imports it).

onnxscript skips inputs over 8,192 and outputs over 262,144 elements. aotc decides itself
(DESIGN Decision 5): folding that only touches initializers has no size limit, while a node
that expands data (ConstantOfShape, Expand, Tile, an outer product: more output elements than
input elements) is folded only up to EXPAND_LIMIT elements, so weights don't balloon.
The frontend folds with a small output limit (shape arithmetic and its small companions); the
`fold_constants` pass folds the rest. A node whose folding raises inside onnxscript (an operator
or attribute form its evaluators do not handle) is left as it is: the compiler then reports it
with its name, or compiles it.
"""

from __future__ import annotations

import functools
import math

import onnx_ir as ir
import onnx_ir.passes.common as common_passes

# Largest output of a data-expanding op that folding may materialise.
EXPAND_LIMIT = 1 << 20
# Largest output the frontend folds (shape arithmetic, masks, small tables).
SHAPE_FOLD_LIMIT = 1 << 16

# Kept as they are: quantisation nodes carry information the lowering wants.
_KEEP_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
_UNLIMITED = 1 << 62


def _output_elements(node: ir.Node) -> int | None:
    total = 0
    for out in node.outputs:
        if out.shape is None or not all(isinstance(d, int) for d in out.shape.dims):
            return None
        total += math.prod(out.shape.dims)
    return total


def _policy(max_elements: int | None):
    def should_fold(node: ir.Node) -> bool | None:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type in _KEEP_OPS:
            return False
        n = _output_elements(node)  # known here: the folder infers shapes first
        if n is None:
            return False
        if max_elements is not None:
            return n <= max_elements
        inputs = sum(v.const_value.size for v in node.inputs
                     if v is not None and v.const_value is not None)
        return n <= max(inputs, EXPAND_LIMIT)
    return should_fold


@functools.cache
def _folder_class() -> type:
    from onnxscript.optimizer._constant_folding import FoldConstantsPass  # slow import

    class SafeFoldConstantsPass(FoldConstantsPass):
        """onnxscript's folder, leaving a node unfolded when folding it raises."""

        def process_node(self, node: ir.Node, is_function: bool):  # type: ignore[override]
            try:
                return super().process_node(node, is_function)
            except Exception:  # an evaluator's error on this node: keep the node
                return None

    return SafeFoldConstantsPass


def fold_constants(model: ir.Model, *, max_elements: int | None = None) -> bool:
    """Fold all-constant nodes (and constant `If`s) into initializers, in place.

    `max_elements` bounds every folded output (the frontend's shape folding); None means
    no bound except EXPAND_LIMIT on nodes that expand data. Returns whether it changed.
    """
    folder = _folder_class()(
        shape_inference=True,
        input_size_limit=_UNLIMITED,
        output_size_limit=_UNLIMITED,
        should_fold=_policy(max_elements),
    )
    changed = folder(model).modified
    lifted = common_passes.LiftConstantsToInitializersPass(
        lift_all_constants=True, size_limit=0)(model).modified
    common_passes.RemoveUnusedNodesPass()(model)
    return changed or lifted
