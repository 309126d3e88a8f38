"""ai.onnx.ml operators (aotc/frontend/onnx_ml/): expanded into standard ONNX, compiled, and
compared with onnxruntime; hand-built nodes first (every mode and form), then models that
skl2onnx converts from scikit-learn (skipped where those are not installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
from program_runner import check_model, compile_onnx  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(5)
ML = "ai.onnx.ml"


def ml_model(op: str, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]],
             ml_opset: int = 3, shapes=None, **attrs) -> onnx.ModelProto:
    """A one-node model; its outputs' shapes are `shapes` or the ones onnxruntime computes
    (onnx's shape inference does not know every ai.onnx.ml form, and the checker wants
    shapes)."""
    node = helper.make_node(op, list(inputs), [name for name, _ in outputs], domain=ML, **attrs)

    def build(shapes) -> onnx.ModelProto:
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in inputs.items()],
            [helper.make_tensor_value_info(n, t, s) for (n, t), s in zip(outputs, shapes,
                                                                          strict=True)])
        return helper.make_model(graph, ir_version=10, opset_imports=[
            helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)])

    if shapes is not None:
        return build(shapes)
    import onnxruntime as ort

    untyped = build([None] * len(outputs))
    session = ort.InferenceSession(untyped.SerializeToString(), providers=["CPUExecutionProvider"])
    return build([r.shape for r in session.run(None, dict(inputs))])


def check(op, inputs, outputs, ml_opset=3, tol=1e-5, **attrs):
    model = ml_model(op, inputs, outputs, ml_opset, **attrs)
    check_model(model, list(inputs.values()), tol=tol)


FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
X = RNG.standard_normal((6, 4)).astype(np.float32)


def test_scaler_normalizer_binarizer():
    check("Scaler", {"x": X}, [("y", FLOAT)], offset=[0.5, -1.0, 0.0, 2.0],
          scale=[2.0, 0.5, 1.0, -1.0])
    check("Scaler", {"x": RNG.integers(-5, 5, (3, 4))}, [("y", FLOAT)], offset=[1.0],
          scale=[0.25])
    for norm in ("MAX", "L1", "L2"):
        check("Normalizer", {"x": X}, [("y", FLOAT)], norm=norm)
    check("Binarizer", {"x": X}, [("y", FLOAT)], threshold=0.3)


def test_array_feature_extractor_and_imputer():
    picks = np.array([3, 0, 3], np.int64)
    check("ArrayFeatureExtractor", {"x": X, "i": picks}, [("y", FLOAT)])
    check("ArrayFeatureExtractor", {"x": X[0], "i": picks}, [("y", FLOAT)])  # [1, k]
    holes = X.copy()
    holes[1, 2] = holes[4, 0] = np.nan
    check("Imputer", {"x": holes}, [("y", FLOAT)], imputed_value_floats=[9.0, 8.0, 7.0, 6.0],
          replaced_value_float=float("nan"))
    ints = RNG.integers(0, 3, (5, 2)).astype(np.int64)
    check("Imputer", {"x": ints}, [("y", INT64)], imputed_value_int64s=[-7],
          replaced_value_int64=1)


def test_one_hot_encoder_and_feature_vectorizer():
    ids = np.array([[3, 7, 1], [7, 100, 3]], np.int64)
    check("OneHotEncoder", {"x": ids}, [("y", FLOAT)], cats_int64s=[1, 3, 7, 3])  # 3 repeated
    check("OneHotEncoder", {"x": np.array([0.7, 2.2, -1.5, 2.9], np.float32)}, [("y", FLOAT)],
          cats_int64s=[0, 2, -1])  # floats truncated toward zero
    a, c = X[:, :3].copy(), RNG.standard_normal(5).astype(np.float32)
    b = RNG.standard_normal((6, 2)).astype(np.float32)
    check("FeatureVectorizer", {"a": a, "b": b}, [("y", FLOAT)],
          inputdimensions=[5, 1])  # a padded to 5, b cut to 1
    check("FeatureVectorizer", {"i": ids[:1].repeat(6, 0)}, [("y", FLOAT)],
          inputdimensions=[3])
    check("FeatureVectorizer", {"c": c}, [("y", FLOAT)], inputdimensions=[5])


def test_label_encoder_numeric_forms():
    ids = np.array([[3, 7, 1], [7, 100, 3]], np.int64)
    check("LabelEncoder", {"x": ids}, [("y", INT64)], ml_opset=2, keys_int64s=[1, 3, 7],
          values_int64s=[10, 30, 70], default_int64=-5)
    check("LabelEncoder", {"x": ids}, [("y", FLOAT)], ml_opset=2, keys_int64s=[1, 3, 7],
          values_floats=[0.5, 1.5, 2.5], default_float=-1.0)
    check("LabelEncoder", {"x": np.array([0.5, 2.0, 3.0], np.float32)}, [("y", INT64)],
          ml_opset=2, keys_floats=[2.0, 0.5], values_int64s=[4, 8])
    check("LabelEncoder", {"x": ids}, [("y", INT64)], ml_opset=4,
          keys_tensor=onnx.numpy_helper.from_array(np.array([1, 7], np.int64)),
          values_tensor=onnx.numpy_helper.from_array(np.array([11, 77], np.int64)),
          default_tensor=onnx.numpy_helper.from_array(np.array([0], np.int64)))


def test_linear_regressor_and_classifier():
    coef = RNG.standard_normal(12).astype(np.float32).tolist()
    check("LinearRegressor", {"x": X}, [("y", FLOAT)], coefficients=coef[:8],
          intercepts=[0.5, -0.5], targets=2)
    for transform in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        check("LinearClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
              coefficients=coef, intercepts=[0.1, 0.0, -0.2], classlabels_ints=[4, 5, 6],
              post_transform=transform)
    # one row of coefficients and two labels: [1 - s, s] as onnxruntime writes it
    for transform in ("NONE", "LOGISTIC", "SOFTMAX"):
        check("LinearClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
              coefficients=coef[:4], intercepts=[0.3], classlabels_ints=[2, 9],
              post_transform=transform)


def random_forest(trees: int, depth: int, features: int, outputs: int, modes, rng):
    """Legacy TreeEnsemble* attributes for full random trees of `depth` (node ids in
    pre-order), every interior node's mode drawn from `modes`, and the thresholds used."""
    a: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        "w_treeids", "w_nodeids", "w_ids", "w_weights")}
    for t in range(trees):
        counter = [0]

        def grow(level, t=t, counter=counter):
            me = counter[0]
            counter[0] += 1
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(me)
            at = len(a["nodes_modes"])
            if level == depth or (level > 1 and rng.random() < 0.2):
                a["nodes_featureids"].append(0)
                a["nodes_values"].append(0.0)
                a["nodes_modes"].append("LEAF")
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                a["nodes_missing_value_tracks_true"].append(0)
                for k in range(outputs):
                    a["w_treeids"].append(t)
                    a["w_nodeids"].append(me)
                    a["w_ids"].append(k)
                    a["w_weights"].append(float(rng.standard_normal()))
                return me
            a["nodes_featureids"].append(int(rng.integers(features)))
            a["nodes_values"].append(float(np.float32(rng.standard_normal())))
            a["nodes_modes"].append(str(rng.choice(modes)))
            a["nodes_truenodeids"].append(-1)
            a["nodes_falsenodeids"].append(-1)
            a["nodes_missing_value_tracks_true"].append(int(rng.integers(2)))
            a["nodes_truenodeids"][at] = grow(level + 1)
            a["nodes_falsenodeids"][at] = grow(level + 1)
            return me

        grow(0)
    return a


def forest_inputs(a, rows: int, features: int, rng) -> np.ndarray:
    """Rows drawn from the thresholds themselves (so equality branches are taken), normal
    values and NaNs."""
    x = rng.standard_normal((rows, features)).astype(np.float32)
    thresholds = np.array(a["nodes_values"], np.float32)
    mask = rng.random(x.shape)
    x[mask < 0.3] = rng.choice(thresholds, int((mask < 0.3).sum()))
    x[mask > 0.9] = np.nan
    return x


def regressor_attrs(a, prefix="target"):
    out = {k: v for k, v in a.items() if k.startswith("nodes_")}
    for k in ("treeids", "nodeids", "ids", "weights"):
        out[f"{prefix}_{k}"] = a[f"w_{k}"]
    return out


ALL_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_ensemble_regressor_every_mode_and_nan(aggregate):
    rng = np.random.default_rng(17)
    a = random_forest(5, 4, 3, 2, ALL_MODES, rng)
    x = forest_inputs(a, 40, 3, rng)
    check("TreeEnsembleRegressor", {"x": x}, [("y", FLOAT)], n_targets=2,
          aggregate_function=aggregate, base_values=[0.5, -1.0], **regressor_attrs(a))


def test_tree_ensemble_regressor_one_target_leq():
    rng = np.random.default_rng(3)
    a = random_forest(12, 6, 5, 1, ["BRANCH_LEQ"], rng)
    check("TreeEnsembleRegressor", {"x": forest_inputs(a, 9, 5, rng)}, [("y", FLOAT)],
          n_targets=1, base_values=[0.25], **regressor_attrs(a))


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_tree_ensemble_classifier_multiclass(transform):
    rng = np.random.default_rng(8)
    a = random_forest(4, 4, 3, 3, ["BRANCH_LEQ", "BRANCH_LT"], rng)
    check("TreeEnsembleClassifier", {"x": forest_inputs(a, 30, 3, rng)},
          [("label", INT64), ("scores", FLOAT)], classlabels_int64s=[10, 20, 30],
          post_transform=transform, **regressor_attrs(a, "class"))


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("base", [[], [0.2], [0.1, 0.2]])
def test_tree_ensemble_classifier_two_classes_one_score(transform, base):
    """One scored class (boosting's binary form): onnxruntime's binary case."""
    rng = np.random.default_rng(21)
    a = random_forest(3, 3, 3, 1, ["BRANCH_LEQ"], rng)
    attrs = regressor_attrs(a, "class")
    if base:
        attrs["base_values"] = base
    check("TreeEnsembleClassifier", {"x": forest_inputs(a, 30, 3, rng)},
          [("label", INT64), ("scores", FLOAT)], classlabels_int64s=[0, 1],
          post_transform=transform, **attrs)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_tree_ensemble_classifier_two_classes_one_positive_score(transform):
    """One scored class with positive weights: [1 - s, s], the label from s > 0.5."""
    rng = np.random.default_rng(22)
    a = random_forest(3, 3, 3, 1, ["BRANCH_LEQ"], rng)
    a["w_weights"] = [abs(w) * 0.3 for w in a["w_weights"]]
    a["w_ids"] = [1] * len(a["w_ids"])
    check("TreeEnsembleClassifier", {"x": forest_inputs(a, 30, 3, rng)},
          [("label", INT64), ("scores", FLOAT)], classlabels_int64s=[3, 8],
          post_transform=transform, **regressor_attrs(a, "class"))


def test_tree_ensemble_classifier_two_classes_both_scored():
    """Both classes at every leaf (a random forest's form), positive weights."""
    rng = np.random.default_rng(4)
    a = random_forest(3, 3, 3, 2, ["BRANCH_LEQ"], rng)
    a["w_weights"] = [abs(w) for w in a["w_weights"]]
    check("TreeEnsembleClassifier", {"x": forest_inputs(a, 30, 3, rng)},
          [("label", INT64), ("scores", FLOAT)], classlabels_int64s=[0, 1],
          **regressor_attrs(a, "class"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_opset5(dtype):
    """TreeEnsemble (ai.onnx.ml 5): leaves numbered apart, integer enums, set membership,
    computed in the input's float type."""
    tensor = onnx.numpy_helper.from_array
    # tree 0: x0 <= 0.5 ? leaf 0 : (x1 < 0 ? leaf 1 : leaf 2)
    # tree 1: x2 in {1, 3} ? leaf 3 : leaf 4
    attrs = dict(
        nodes_featureids=[0, 1, 2], nodes_splits=tensor(np.array([0.5, 0.0, 0.0], dtype)),
        nodes_modes=tensor(np.array([0, 1, 6], np.uint8)),
        nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0], tree_roots=[0, 2],
        membership_values=tensor(np.array([1.0, 3.0, np.nan], dtype)),
        leaf_targetids=[0, 1, 0, 1, 0],
        leaf_weights=tensor(np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype)),
        n_targets=2, aggregate_function=1, post_transform=0)
    x = np.array([[0.4, 1, 1], [0.6, -1, 0], [0.6, 1, 3], [np.nan, 0, 2]], dtype)
    check("TreeEnsemble", {"x": x}, [("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))],
          ml_opset=5, **attrs)


KERNELS = [("LINEAR", [0.0, 0.0, 0.0]), ("POLY", [0.5, 1.0, 3.0]), ("RBF", [0.3, 0.0, 0.0]),
           ("SIGMOID", [0.2, 0.1, 0.0])]


@pytest.mark.parametrize("kernel,params", KERNELS)
def test_svm_classifier_one_against_one(kernel, params):
    rng = np.random.default_rng(12)
    per_class = [2, 3, 1]
    vectors = rng.standard_normal((6, 4)).astype(np.float32)
    common = dict(kernel_type=kernel, kernel_params=params, support_vectors=vectors.ravel(),
                  vectors_per_class=per_class)
    check("SVMClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
          coefficients=rng.standard_normal(12).astype(np.float32), rho=[0.1, -0.2, 0.3],
          classlabels_ints=[5, 6, 7], **common)
    check("SVMClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
          coefficients=rng.standard_normal(6).astype(np.float32), rho=[0.1],
          classlabels_ints=[0, 1], post_transform="LOGISTIC",
          **{**common, "vectors_per_class": [4, 2]})
    check("SVMClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
          coefficients=rng.standard_normal(6).astype(np.float32), rho=[0.1],
          classlabels_ints=[0, 1], **{**common, "vectors_per_class": [4, 2]})


@pytest.mark.parametrize("kernel,params", KERNELS)
def test_svm_regressor(kernel, params):
    rng = np.random.default_rng(13)
    vectors = rng.standard_normal((5, 4)).astype(np.float32)
    for one_class in (0, 1):
        check("SVMRegressor", {"x": X}, [("y", FLOAT)], kernel_type=kernel,
              kernel_params=params, support_vectors=vectors.ravel(), n_supports=5,
              coefficients=rng.standard_normal(5).astype(np.float32), rho=[0.25],
              one_class=one_class)


def test_svm_linear_modes():
    rng = np.random.default_rng(14)
    check("SVMRegressor", {"x": X}, [("y", FLOAT)], kernel_params=[0.0, 0.0, 0.0],
          coefficients=rng.standard_normal(4).astype(np.float32), rho=[0.5])
    for coefficients in (rng.standard_normal(8), np.abs(rng.standard_normal(8)) * 0.3):
        check("SVMClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
              kernel_params=[0.0, 0.0, 0.0], coefficients=coefficients.astype(np.float32),
              rho=[0.1], classlabels_ints=[3, 4])


def test_refusals_name_the_node():
    model = ml_model("LinearClassifier", {"x": X}, [("label", INT64), ("scores", FLOAT)],
                     coefficients=[1.0] * 8, intercepts=[0.0, 0.0], classlabels_ints=[0, 1],
                     post_transform="PROBIT")
    with pytest.raises(AotcError, match="PROBIT") as info:
        compile_onnx(model)
    assert info.value.op == "LinearClassifier"
    model = ml_model("LinearClassifier", {"x": X}, [("label", TensorProto.STRING),
                                                     ("scores", FLOAT)],
                     shapes=[[6], [6, 2]], coefficients=[1.0] * 8, intercepts=[0.0, 0.0],
                     classlabels_strings=["a", "b"])
    with pytest.raises(AotcError, match="string labels"):
        compile_onnx(model)


# ------------------------------------------------------------------------------------------
# scikit-learn models through skl2onnx
# ------------------------------------------------------------------------------------------


def _sklearn_models():
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, Normalizer, StandardScaler
    from sklearn.svm import SVC, SVR, OneClassSVM
    from sklearn.tree import DecisionTreeRegressor

    return {
        "scaler_logistic_3": (lambda: make_pipeline(StandardScaler(),
                                                    LogisticRegression(max_iter=300)), 3),
        "logistic_2": (lambda: LogisticRegression(max_iter=300), 2),
        "minmax_linear": (lambda: make_pipeline(MinMaxScaler(), LinearRegression()), 0),
        "normalizer_linear": (lambda: make_pipeline(Normalizer(), LinearRegression()), 0),
        "forest_3": (lambda: RandomForestClassifier(8, max_depth=6, random_state=0), 3),
        "forest_2": (lambda: RandomForestClassifier(8, max_depth=5, random_state=0), 2),
        "boosting_2": (lambda: GradientBoostingClassifier(n_estimators=15, random_state=0), 2),
        "boosting_3": (lambda: GradientBoostingClassifier(n_estimators=10, random_state=0), 3),
        "forest_regressor": (lambda: RandomForestRegressor(8, max_depth=7, random_state=0), 0),
        "boosting_regressor": (lambda: GradientBoostingRegressor(n_estimators=20,
                                                                 random_state=0), 0),
        "tree_regressor": (lambda: DecisionTreeRegressor(max_depth=8, random_state=0), 0),
        "svc_3": (lambda: make_pipeline(StandardScaler(), SVC()), 3),
        "svc_2_poly": (lambda: SVC(kernel="poly", degree=2), 2),
        "svr": (lambda: make_pipeline(StandardScaler(), SVR()), 0),
        "one_class_svm": (lambda: OneClassSVM(gamma=0.1), 0),
    }


SKLEARN_CASES = ["scaler_logistic_3", "logistic_2", "minmax_linear", "normalizer_linear",
                 "forest_3", "forest_2", "boosting_2", "boosting_3",
                 "forest_regressor", "boosting_regressor", "tree_regressor", "svc_3",
                 "svc_2_poly", "svr", "one_class_svm"]


@pytest.mark.parametrize("name", SKLEARN_CASES)
def test_sklearn_model_matches_onnxruntime(name):
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.datasets import make_classification, make_regression

    make, classes = _sklearn_models()[name]
    if classes:
        x, y = make_classification(300, 8, n_informative=5, n_classes=classes, random_state=1)
    else:
        x, y = make_regression(300, 8, random_state=1)
    x = x.astype(np.float32)
    estimator = make().fit(x, y)
    options = {"zipmap": False} if classes else None
    model = skl2onnx.to_onnx(estimator, x[:1], options=options,
                             target_opset={"": 17, ML: 3})
    rows = x[:12].copy()
    check_model(model, [rows], tol=1e-4, input_shapes={model.graph.input[0].name: rows.shape})


def test_an_ml_operator_aotc_lacks_is_reported_as_unsupported():
    from aotc.errors import UnsupportedOperators

    ids = np.array([[1, 2]], np.int64)
    model = ml_model("CategoryMapper", {"x": ids}, [("y", TensorProto.STRING)],
                     shapes=[[1, 2]], cats_int64s=[1, 2], cats_strings=["a", "b"])
    with pytest.raises(UnsupportedOperators, match="ai.onnx.ml::CategoryMapper"):
        compile_onnx(model)


def test_a_forest_compiled_for_a_batch_range_runs_every_batch(tmp_path):
    """`--input-shape x=1..64,3`: one program for every batch up to the bound."""
    from program_runner import assert_close, ort_outputs, run_program

    from aotc.driver import compile_file

    rng = np.random.default_rng(9)
    a = random_forest(6, 5, 3, 3, ["BRANCH_LEQ"], rng)
    x = forest_inputs(a, 64, 3, rng)
    model = ml_model("TreeEnsembleClassifier", {"x": x}, [("label", INT64), ("scores", FLOAT)],
                     classlabels_int64s=[0, 1, 2], post_transform="SOFTMAX",
                     **regressor_attrs(a, "class"))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    for out in model.graph.output:
        out.type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "forest.onnx"
    onnx.save(model, path)
    program, _ = compile_file(path, input_shapes=["x=1..64,3"])
    for n in (1, 5, 64):
        got = run_program(program, [x[:n]], n)
        for g, w in zip(got, ort_outputs(model, [x[:n]]), strict=True):
            assert_close(g, w, 1e-5)


def test_a_zipmap_output_is_refused_with_the_converter_option_to_use():
    probs = helper.make_tensor_value_info("p", FLOAT, [1, 3])
    seq_map = helper.make_value_info("m", helper.make_sequence_type_proto(
        helper.make_map_type_proto(INT64, helper.make_tensor_type_proto(FLOAT, []))))
    node = helper.make_node("ZipMap", ["p"], ["m"], domain=ML, classlabels_int64s=[0, 1, 2])
    graph = helper.make_graph([node], "g", [probs], [seq_map])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(ML, 1)])
    with pytest.raises(AotcError, match="sequence of maps") as info:
        compile_onnx(model)
    assert info.value.op == "ZipMap" and "zipmap" in info.value.hint


BOOSTERS = ["lightgbm_3", "lightgbm_2", "lightgbm_regressor", "xgboost_3", "xgboost_2",
            "xgboost_regressor"]


@pytest.mark.parametrize("name", BOOSTERS)
def test_boosted_trees_from_onnxmltools_match_onnxruntime(name):
    """LightGBM and XGBoost models as onnxmltools converts them (opset 8-9 beside ai.onnx.ml,
    labels declared [1] whatever the batch), with missing values in the rows."""
    onnxmltools = pytest.importorskip("onnxmltools")
    library = pytest.importorskip(name.split("_")[0])
    from onnxmltools.convert.common.data_types import FloatTensorType
    from sklearn.datasets import make_classification, make_regression

    kind = name.split("_")[1]
    if kind == "regressor":
        x, y = make_regression(400, 8, random_state=2)
    else:
        x, y = make_classification(400, 8, n_informative=5, n_classes=int(kind),
                                   random_state=2)
    x = x.astype(np.float32)
    types = [("X", FloatTensorType([None, 8]))]
    if name.startswith("lightgbm"):
        make = library.LGBMRegressor if kind == "regressor" else library.LGBMClassifier
        estimator = make(n_estimators=15, verbose=-1).fit(x, y)
        options = {} if kind == "regressor" else {"zipmap": False}
        model = onnxmltools.convert_lightgbm(estimator, initial_types=types, target_opset=15,
                                             **options)
    else:
        make = library.XGBRegressor if kind == "regressor" else library.XGBClassifier
        estimator = make(n_estimators=15, max_depth=4).fit(x, y)
        model = onnxmltools.convert_xgboost(estimator, initial_types=types, target_opset=15)
    rows = x[:16].copy()
    rows[::4, 2] = np.nan
    check_model(model, [rows], tol=1e-4, input_shapes={"X": rows.shape})


def test_a_column_transformer_pipeline_matches_onnxruntime():
    """One-hot encoded integer columns beside scaled ones (ArrayFeatureExtractor, Cast,
    OneHotEncoder, Concat), then a logistic regression; and a binning pipeline."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import KBinsDiscretizer, OneHotEncoder, StandardScaler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6)).astype(np.float32)
    x[:, 0], x[:, 1] = rng.integers(0, 4, 300), rng.integers(0, 3, 300)
    y = (x[:, 2] + x[:, 0] > 1).astype(int)
    columns = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                                 ("sc", StandardScaler(), [2, 3, 4, 5])])
    for steps in ([("ct", columns)], [("bins", KBinsDiscretizer(4, encode="onehot-dense"))]):
        final = LogisticRegression()
        pipeline = Pipeline([*steps, ("lr", final)]).fit(x, y)
        model = skl2onnx.to_onnx(pipeline, x[:1], options={id(final): {"zipmap": False}},
                                 target_opset={"": 17, ML: 3})
        rows = x[:8].copy()
        rows[0, 0] = 9  # a category not seen in training: all zeros
        check_model(model, [rows], tol=1e-4,
                    input_shapes={model.graph.input[0].name: rows.shape})


def test_inspect_counts_the_rewritten_ml_operators_as_supported(tmp_path):
    from aotc.inspect import describe_model

    model = ml_model("Scaler", {"x": X}, [("y", FLOAT)], offset=[0.5], scale=[2.0])
    onnx.save(model, tmp_path / "scaler.onnx")
    assert describe_model(tmp_path / "scaler.onnx").unsupported == []
    ids = np.array([[1, 2]], np.int64)
    model = ml_model("CategoryMapper", {"x": ids}, [("y", TensorProto.STRING)],
                     shapes=[[1, 2]], cats_int64s=[1, 2], cats_strings=["a", "b"])
    onnx.save(model, tmp_path / "mapper.onnx")
    assert describe_model(tmp_path / "mapper.onnx").unsupported_ops == {
        "ai.onnx.ml::CategoryMapper"}


def test_a_forest_deeper_than_the_walk_unrolls_is_refused_with_a_hint():
    from aotc.frontend.onnx_ml.trees import MAX_DEPTH

    depth = MAX_DEPTH + 1  # a chain: each test's false branch is a leaf
    inner, count = list(range(0, 2 * depth, 2)), 2 * depth + 1
    modes = ["LEAF"] * count
    true_ids, false_ids = [0] * count, [0] * count
    for n in inner:
        modes[n], true_ids[n], false_ids[n] = "BRANCH_LEQ", n + 2, n + 1
    leaves = [n for n in range(count) if modes[n] == "LEAF"]
    model = ml_model("TreeEnsembleRegressor", {"x": X}, [("y", FLOAT)], shapes=[[6, 1]],
                     n_targets=1, nodes_treeids=[0] * count, nodes_nodeids=list(range(count)),
                     nodes_featureids=[0] * count, nodes_values=[0.0] * count,
                     nodes_modes=modes, nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids,
                     target_treeids=[0] * len(leaves), target_nodeids=leaves,
                     target_ids=[0] * len(leaves), target_weights=[1.0] * len(leaves))
    with pytest.raises(AotcError, match=f"deeper than {MAX_DEPTH}") as info:
        compile_onnx(model)
    assert "maximum depth" in info.value.hint
