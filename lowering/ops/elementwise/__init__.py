"""Element-wise ONNX operators: unary math, activations, arithmetic, comparisons, casts, copies.

Every operator here reads its inputs through `operands.py` (numpy broadcasting against the
inferred output shape, uniform constant inputs folded into the expression) and produces one
compute whose innermost axis is the contiguous one of the output.
"""
