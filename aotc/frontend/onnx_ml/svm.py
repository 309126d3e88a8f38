"""SVMRegressor and SVMClassifier: kernel values against the support vectors, then products.

The kernel matrix [N, V] is a matrix product (LINEAR, POLY, SIGMOID) or the squared
distances to every support vector summed directly (RBF, as onnxruntime computes it, without
the cancellation of |x|^2 - 2 x.v + |v|^2). The classifier's one-against-one decisions are a
second product with a [V, pairs] matrix holding, for the pair (i, j), the coefficients of
class i's vectors against j and of j's against i; its votes are products of the decisions'
signs with the pairs' class indicators, exact in float. Followed as onnxruntime computes them:
each pair has its bias in `rho`, the label is the first class with the most votes, and two classes write their one decision s as [-s, s] (post_transform NONE)
or [1 - s, s] (`scores.two_scores`). Refused: the probability form (`prob_a`, which onnxruntime turns into
probabilities by an iterative pairwise coupling).
"""

from __future__ import annotations

import numpy as np

from aotc.frontend.onnx_ml.attrs import Attrs
from aotc.frontend.onnx_ml.body import Body
from aotc.frontend.onnx_ml.linear import _rows_2d
from aotc.frontend.onnx_ml.preprocessing import as_float
from aotc.frontend.onnx_ml.scores import apply_transform, transform_name, two_scores


def _kernel_params(attrs: Attrs) -> tuple[str, float, float, float]:
    kind = attrs.get("kernel_type", "LINEAR")
    if kind not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
        raise attrs.refuse(f"kernel_type {kind} is not supported")
    params = attrs.array("kernel_params", np.float32)  # gamma, coef0, degree
    gamma, coef0, degree = (list(params) + [0.0, 0.0, 0.0])[:3] if len(params) else (0, 0, 0)
    return kind, float(gamma), float(coef0), float(degree)


def _kernels(b: Body, attrs: Attrs, x: str, vectors: np.ndarray) -> str:
    """K(x, v) for every row of x [N, F] and every vector [V, F]: [N, V]."""
    kind, gamma, coef0, degree = _kernel_params(attrs)
    if kind == "RBF":
        diff = b.op("Sub", b.op("Unsqueeze", x, b.ints(1)), b.const(vectors))  # [N, V, F]
        distance = b.op("ReduceSumSquare", diff, b.ints(2), keepdims=0)
        return b.op("Exp", b.op("Mul", distance, b.const(np.float32(-gamma))))
    dot = b.op("MatMul", x, b.const(vectors.T.copy()))
    if kind == "LINEAR":
        return dot
    scaled = b.op("Add", b.op("Mul", dot, b.const(np.float32(gamma))),
                  b.const(np.float32(coef0)))
    if kind == "SIGMOID":
        return b.op("Tanh", scaled)
    return b.op("Pow", scaled, b.const(np.float32(degree)))


def _features(b: Body, attrs: Attrs, dtypes) -> str:
    return _rows_2d(b, attrs, as_float(b, b.inputs[0], dtypes[0]))


def svm_regressor(b: Body, attrs: Attrs, dtypes) -> list[str]:
    if transform_name(attrs) != "NONE":
        raise attrs.refuse("post_transform other than NONE is not supported for SVMRegressor")
    x = _features(b, attrs, dtypes)
    coefficients = attrs.array("coefficients", np.float32)
    rho = attrs.array("rho", np.float32, (0.0,))
    supports = int(attrs.get("n_supports", 0))
    if supports > 0:
        vectors = attrs.array("support_vectors", np.float32).reshape(supports, -1)
        score = b.op("MatMul", _kernels(b, attrs, x, vectors),
                     b.const(coefficients[:supports].reshape(-1, 1)))
    else:  # linear mode: the coefficients are the one weight vector
        score = b.op("MatMul", x, b.const(coefficients.reshape(-1, 1)))
    score = b.op("Add", score, b.const(np.float32(rho[0])))
    if int(attrs.get("one_class", 0)):
        positive = b.op("Greater", score, b.const(np.float32(0.0)))
        score = b.op("Where", positive, b.const(np.float32(1.0)), b.const(np.float32(-1.0)))
    return [score]


def svm_classifier(b: Body, attrs: Attrs, dtypes) -> list[str]:
    attrs.no_strings("classlabels_strings")
    if len(attrs.array("prob_a", np.float32)):
        raise attrs.refuse("SVMClassifier with probabilities (prob_a, prob_b) is not "
                           "supported", hint="convert the model without probability=True")
    labels = attrs.array("classlabels_ints", np.int64)
    classes = len(labels)
    if classes < 2:
        raise attrs.refuse("SVMClassifier needs two or more integer class labels")
    transform = transform_name(attrs)
    x = _features(b, attrs, dtypes)
    coefficients = attrs.array("coefficients", np.float32)
    rho = attrs.array("rho", np.float32, (0.0,))
    per_class = attrs.array("vectors_per_class", np.int64)
    count = int(per_class.sum()) if len(per_class) else 0
    if count == 0:
        return _linear_mode(b, attrs, x, coefficients, rho, labels, transform)
    if len(per_class) != classes or len(coefficients) != (classes - 1) * count:
        raise attrs.refuse("vectors_per_class and coefficients do not match the classes")
    vectors = attrs.array("support_vectors", np.float32).reshape(count, -1)
    coef = coefficients.reshape(classes - 1, count)
    start = np.concatenate([[0], np.cumsum(per_class)[:-1]])
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    weights = np.zeros((count, len(pairs)), np.float32)
    wins, losses = (np.zeros((len(pairs), classes), np.float32) for _ in range(2))
    bias = np.zeros(len(pairs), np.float32)
    for p, (i, j) in enumerate(pairs):
        si, sj = slice(start[i], start[i] + per_class[i]), slice(start[j], start[j] + per_class[j])
        weights[si, p] = coef[j - 1, si]
        weights[sj, p] = coef[i, sj]
        bias[p] = rho[p] if p < len(rho) else 0.0
        wins[p, i] = losses[p, j] = 1.0
    decisions = b.op("Add", b.op("MatMul", _kernels(b, attrs, x, vectors), b.const(weights)),
                     b.const(bias))  # [N, pairs]
    won = b.op("Cast", b.op("Greater", decisions, b.const(np.float32(0.0))), to=1)
    lost = b.op("Sub", b.const(np.float32(1.0)), won)
    votes = b.op("Add", b.op("MatMul", won, b.const(wins)), b.op("MatMul", lost, b.const(losses)))
    label = b.op("Gather", b.const(labels), b.op("ArgMax", votes, axis=1, keepdims=0))
    if len(pairs) > 1:
        return [label, apply_transform(b, transform, decisions)]
    return [label, two_scores(b, decisions, transform == "NONE", transform)]


def _linear_mode(b: Body, attrs: Attrs, x: str, coefficients: np.ndarray, rho: np.ndarray,
                 labels: np.ndarray, transform: str) -> list[str]:
    """No support vectors: a linear score per class (liblinear's form)."""
    classes = len(labels)
    if len(coefficients) % classes:
        raise attrs.refuse(f"{len(coefficients)} coefficients for {classes} classes")
    weights = coefficients.reshape(classes, -1).T.copy()
    scores = b.op("Add", b.op("MatMul", x, b.const(weights)), b.const(np.float32(rho[0])))
    best = b.op("ArgMax", scores, axis=1, keepdims=0)
    label = b.op("Gather", b.const(labels), best)
    if classes == 2 and len(rho) == 1:
        top = b.op("ReduceMax", scores, b.ints(1), keepdims=0)
        all_positive = bool((coefficients >= 0).all())
        cut, strict = (0.5, False) if all_positive else (0.0, True)
        second = b.op("Greater" if strict else "GreaterOrEqual", top, b.const(np.float32(cut)))
        label = b.op("Where", second, b.const(labels[1]), label)
    return [label, apply_transform(b, transform, scores)]
