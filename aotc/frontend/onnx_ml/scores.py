"""The score transforms ai.onnx.ml classifiers and regressors end with (`post_transform`).

Written as onnxruntime computes them, since its outputs are what a converted model was checked
against: LOGISTIC is the sigmoid, SOFTMAX the row softmax, SOFTMAX_ZERO a softmax that leaves
(near-)zero scores at zero and excludes them from the sum. PROBIT is refused: onnxruntime
evaluates it with an approximate inverse error function whose results a faithful erfinv would
not reproduce.
"""

from __future__ import annotations

from aotc.frontend.onnx_ml.attrs import Attrs
from aotc.frontend.onnx_ml.body import Body

TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")
# onnxruntime's threshold below which SOFTMAX_ZERO treats a score as zero
_ZERO = 1e-7


def transform_name(attrs: Attrs, key: str = "post_transform") -> str:
    """The node's transform; an integer form (TreeEnsemble, ai.onnx.ml opset 5) is mapped."""
    value = attrs.get(key, "NONE")
    if isinstance(value, int):
        names = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
        value = names[value] if 0 <= value < len(names) else str(value)
    if isinstance(value, bytes):
        value = value.decode()
    if value not in TRANSFORMS:
        raise attrs.refuse(f"post_transform {value} is not supported",
                           hint="PROBIT is refused: onnxruntime's approximate erfinv is not "
                                "reproduced")
    return value


def apply_transform(b: Body, name: str, scores: str) -> str:
    """`scores` [N, K] (K >= 2) after the transform `name`."""
    if name == "LOGISTIC":
        return b.op("Sigmoid", scores)
    if name == "SOFTMAX":
        return b.op("Softmax", scores, axis=-1)
    if name == "SOFTMAX_ZERO":
        axis = b.ints(-1)
        top = b.op("ReduceMax", scores, axis, keepdims=1)
        nonzero = b.op("Greater", b.op("Abs", scores), b.const(_ZERO, "float32"))
        exps = b.op("Exp", b.op("Sub", scores, top))
        zeros = b.op("Mul", scores, b.op("Exp", b.op("Neg", top)))
        values = b.op("Where", nonzero, exps, zeros)
        kept = b.op("Where", nonzero, exps, b.const(0.0, "float32"))
        return b.op("Div", values, b.op("ReduceSum", kept, axis, keepdims=1))
    return scores


def two_scores(b: Body, score: str, negated: bool, transform: str) -> str:
    """One score column s [N, 1] written as two class scores [N, 2], as onnxruntime does for a
    two-class model that computes one: [-s, s] when `negated` (its "mixed weights" case), else
    [1 - s, s]; under LOGISTIC the sigmoid of s takes s's place (and of -s, of -s's)."""
    if transform == "LOGISTIC":
        positive = b.op("Sigmoid", score)
        first = b.op("Sigmoid", b.op("Neg", score)) if negated else \
            b.op("Sub", b.const(1.0, "float32"), positive)
        return b.op("Concat", first, positive, axis=1)
    first = b.op("Neg", score) if negated else b.op("Sub", b.const(1.0, "float32"), score)
    return b.op("Concat", first, score, axis=1)
