"""The ai.onnx.ml operators that converters (skl2onnx, onnxmltools) write, as standard ONNX.

Each supported node becomes a call of a model-local function whose body computes it from
standard operators (domain `ML_DOMAIN`, one function per node, its tables written in as
constants), which `inline_functions` then inlines like an exporter's functions; after that the
rest of the compiler sees only operators it knows. A form aotc does not reproduce exactly
(string labels, PROBIT, double-precision trees, ...) is refused naming the node, rather than
computed differently from onnxruntime.

| module | operators |
|---|---|
| `preprocessing.py` | Scaler, Normalizer, Binarizer, ArrayFeatureExtractor, LabelEncoder, Imputer, OneHotEncoder, FeatureVectorizer |
| `linear.py` | LinearRegressor, LinearClassifier |
| `trees.py` | TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble |
| `svm.py` | SVMRegressor, SVMClassifier (without probabilities) |
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend.irutil import all_graphs
from aotc.frontend.onnx_ml import linear, preprocessing, svm, trees
from aotc.frontend.onnx_ml.attrs import Attrs
from aotc.frontend.onnx_ml.body import BODY_OPSET, Body
from aotc.frontend.opset import normalise_opset

ML_DOMAIN = "aotc.onnx_ml"

_Builder = Callable[[Body, Attrs, list], list[str]]
BUILDERS: dict[str, _Builder] = {
    "Scaler": preprocessing.scaler,
    "Normalizer": preprocessing.normalizer,
    "Binarizer": preprocessing.binarizer,
    "ArrayFeatureExtractor": preprocessing.array_feature_extractor,
    "LabelEncoder": preprocessing.label_encoder,
    "Imputer": preprocessing.imputer,
    "OneHotEncoder": preprocessing.one_hot_encoder,
    "FeatureVectorizer": preprocessing.feature_vectorizer,
    "LinearRegressor": linear.linear_regressor,
    "LinearClassifier": linear.linear_classifier,
    "TreeEnsembleRegressor": trees.tree_ensemble_regressor,
    "TreeEnsembleClassifier": trees.tree_ensemble_classifier,
    "TreeEnsemble": trees.tree_ensemble,
    "SVMRegressor": svm.svm_regressor,
    "SVMClassifier": svm.svm_classifier,
}


def expand_ml_operators(model: ir.Model) -> bool:
    """Replace every supported ai.onnx.ml node whose inputs' types and ranks are known by a
    call of a function of standard operators (inline_functions inlines it); True if any was."""
    if not any(n.domain == "ai.onnx.ml" and n.op_type in BUILDERS
               for g in all_graphs(model.graph) for n in g):
        return False
    default = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
    if default < BODY_OPSET:
        # The bodies' nodes are inferred at the model's opset before the frontend normalises
        # it (onnxmltools writes opset 8 beside ai.onnx.ml, where Shape has no start): the
        # model's own nodes are brought to the canonical opset first.
        normalise_opset(model)
    count = 0
    for graph in all_graphs(model.graph):
        for node in list(graph):
            if node.domain != "ai.onnx.ml" or node.op_type not in BUILDERS:
                continue
            if any(v is not None and (v.dtype is None or v.shape is None)
                   for v in node.inputs):
                continue  # (an input computed by a node not expanded yet: the next round)
            names = [f"x{i}" for i in range(len(node.inputs))]
            dtypes = [v.dtype if v is not None else None for v in node.inputs]
            body = Body(names)
            outputs = BUILDERS[node.op_type](body, Attrs(node), dtypes)
            wanted = len(node.outputs)
            if wanted > len(outputs):
                raise AotcError(f"{wanted} outputs asked for; it computes {len(outputs)}",
                                node=node.name, op=node.op_type)
            results = [body.rename(o, f"y{i}") for i, o in enumerate(outputs[:wanted])]
            name = f"{node.op_type}_{count}"
            fn = ir.serde.deserialize_function(body.function(ML_DOMAIN, name, results))
            model.functions[fn.identifier()] = fn
            node.domain, node.op_type, node.version = ML_DOMAIN, name, None
            node.attributes.clear()
            count += 1
    if count:
        model.opset_imports[ML_DOMAIN] = 1
    return count > 0
