"""LinearRegressor and LinearClassifier as a matrix product (aotc's GEMM template takes it).

The classifier follows onnxruntime's reading of the specification: with one row of
coefficients the label is the second class where the score is positive, and, when there are
two class labels, the scores become [1 - s, s] (under LOGISTIC, of the sigmoid of s; see
`scores.two_scores`); with several rows the label is the first class of the highest score and the scores are
transformed.
"""

from __future__ import annotations

import numpy as np

from aotc.frontend.onnx_ml.attrs import Attrs
from aotc.frontend.onnx_ml.body import Body
from aotc.frontend.onnx_ml.preprocessing import as_float
from aotc.frontend.onnx_ml.scores import apply_transform, transform_name, two_scores


def _rows_2d(b: Body, attrs: Attrs, x: str) -> str:
    """X as [N, F]: a 1-D input is one row."""
    shape = attrs.node.inputs[0].shape
    if shape is None:
        raise attrs.refuse("the rank of input X is not known")
    return b.op("Unsqueeze", x, b.ints(0)) if shape.rank() == 1 else x


def _scores(b: Body, attrs: Attrs, dtypes, rows: int) -> str:
    x = _rows_2d(b, attrs, as_float(b, b.inputs[0], dtypes[0]))
    coefficients = attrs.array("coefficients", np.float32)
    if not len(coefficients) or len(coefficients) % rows:
        raise attrs.refuse(f"{len(coefficients)} coefficients do not make {rows} rows")
    weights = coefficients.reshape(rows, -1).T.copy()  # [F, rows]
    intercepts = attrs.array("intercepts", np.float32)
    if not len(intercepts):
        intercepts = np.zeros(rows, np.float32)
    if len(intercepts) not in (1, rows):
        raise attrs.refuse(f"{len(intercepts)} intercepts for {rows} outputs")
    return b.op("Add", b.op("MatMul", x, b.const(weights)), b.const(intercepts))


def linear_regressor(b: Body, attrs: Attrs, dtypes) -> list[str]:
    if transform_name(attrs) != "NONE":
        raise attrs.refuse(f"post_transform {attrs.get('post_transform')} is not supported "
                           "for LinearRegressor (onnxruntime accepts NONE and PROBIT)")
    return [_scores(b, attrs, dtypes, int(attrs.get("targets", 1)))]


def linear_classifier(b: Body, attrs: Attrs, dtypes) -> list[str]:
    attrs.no_strings("classlabels_strings")
    labels = attrs.array("classlabels_ints", np.int64)
    transform = transform_name(attrs)
    classes = len(attrs.array("intercepts", np.float32))
    if classes == 0:
        raise attrs.refuse("LinearClassifier needs intercepts (their count is the class count)")
    scores = _scores(b, attrs, dtypes, classes)
    if classes == 1:
        pair = labels if len(labels) == 2 else np.array([0, 1], np.int64)
        positive = b.op("Greater", b.op("Squeeze", scores, b.ints(1)), b.const(0.0, "float32"))
        label = b.op("Where", positive, b.const(pair[1]), b.const(pair[0]))
        if len(labels) == 2:
            scores = two_scores(b, scores, False, transform)
        return [label, scores]
    if len(labels) != classes:
        raise attrs.refuse(f"{len(labels)} class labels for {classes} rows of coefficients")
    best = b.op("ArgMax", scores, axis=1, keepdims=0)
    return [b.op("Gather", b.const(labels), best), apply_transform(b, transform, scores)]
