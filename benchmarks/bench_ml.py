"""Classical models converted by skl2onnx (ai.onnx.ml operators): aotc bundles against
onnxruntime, side by side in one process, interleaved (as bench_models.py times them).

Each model is trained on synthetic data, converted with a fixed batch (`--batch`), compiled
with `aotc optimize` at each thread count and timed with bench_models.bench_one (its outputs
checked against onnxruntime's first). The tree ensembles are what aotc walks level by level
with gathers (aotc/frontend/onnx_ml/trees.py); onnxruntime runs its own tree kernels.

    python benchmarks/bench_ml.py [--batch 1 64] [--threads 1] [--runs 50] [--markdown]

Needs scikit-learn and skl2onnx (`pip install scikit-learn skl2onnx`); LightGBM and XGBoost
models are added where those and onnxmltools are installed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from bench_models import bench_one  # noqa: E402
from table import print_rows  # noqa: E402
from timing import geomean, load_average, settle_by_name  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402

FEATURES = 20


def estimators() -> dict:
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {  # name: (estimator, classes; 0 = regression)
        "scaler_logistic": (make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
                            4),
        "forest_100x8": (RandomForestClassifier(100, max_depth=8, random_state=0), 3),
        "forest_reg_100x10": (RandomForestRegressor(100, max_depth=10, random_state=0), 0),
        "boosting_100x3": (GradientBoostingClassifier(n_estimators=100, random_state=0), 2),
        "boosting_reg_200x4": (GradientBoostingRegressor(n_estimators=200, max_depth=4,
                                                         random_state=0), 0),
        **_boosters(),
    }


def _boosters() -> dict:
    """LightGBM and XGBoost models (converted by onnxmltools) where those are installed."""
    out = {}
    try:
        import lightgbm
        import onnxmltools  # noqa: F401

        out["lightgbm_200x31"] = (lightgbm.LGBMClassifier(n_estimators=200, num_leaves=31,
                                                          verbose=-1), 3)
    except ImportError:
        pass
    try:
        import onnxmltools  # noqa: F401
        import xgboost

        out["xgboost_200x6"] = (xgboost.XGBRegressor(n_estimators=200, max_depth=6), 0)
    except ImportError:
        pass
    return out


def convert(name: str, batch: int, folder: Path) -> Path:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import make_classification, make_regression

    estimator, classes = estimators()[name]
    if classes:
        x, y = make_classification(2000, FEATURES, n_informative=10, n_classes=classes,
                                   random_state=0)
    else:
        x, y = make_regression(2000, FEATURES, noise=0.1, random_state=0)
    estimator.fit(x.astype(np.float32), y)
    if name.startswith(("lightgbm", "xgboost")):
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType as MLFloat

        types = [("X", MLFloat([batch, FEATURES]))]
        if name.startswith("lightgbm"):
            model = onnxmltools.convert_lightgbm(estimator, initial_types=types,
                                                 target_opset=15, zipmap=False)
        else:
            model = onnxmltools.convert_xgboost(estimator, initial_types=types, target_opset=15)
    else:
        options = {"zipmap": False} if classes else None
        model = to_onnx(estimator, initial_types=[("X", FloatTensorType([batch, FEATURES]))],
                        options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    for out in model.graph.output:  # (onnxmltools declares a classifier's labels as [1])
        out.type.tensor_type.shape.dim[0].dim_value = batch
    path = folder / f"{name}_b{batch}.onnx"
    onnx.save(model, str(path))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    names = args.models or list(estimators())
    print(f"load average before: {load_average()}")
    rows, ratios = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in names:
            for batch in args.batch:
                path = convert(name, batch, folder)
                for threads in args.threads:
                    bundle = folder / f"{path.stem}.t{threads}"
                    optimize_model(path, bundle, input_shapes=[], threads=threads)
                    build_bundle(bundle, target="shared")
                    t, check = bench_one(path, bundle, threads, args.runs, args.block,
                                         settle_by_name("quiesce"), True, _wall())
                    ratio = t["aotc"] / t["ort"]
                    ratios.append(ratio)
                    rows.append((name, batch, threads, f"{t['aotc'] * 1e6:.1f}",
                                 f"{t['ort'] * 1e6:.1f}", f"{ratio:.2f}", check))
    rows.append(("geometric mean", "", "", "", "", f"{geomean(ratios):.2f}", ""))
    print_rows(("model", "batch", "threads", "aotc us", "onnxruntime us", "aotc/ort", "check"),
               rows, args.markdown)


def _wall():
    import time

    return time.perf_counter


if __name__ == "__main__":
    main()
