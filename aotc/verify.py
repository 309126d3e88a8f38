"""`aotc verify`: build a bundle, run it as its own process, compare with onnxruntime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from aotc.errors import AotcError
from aotc.inspect import load_checked

NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
             "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


@dataclass
class OutputReport:
    run: int
    output: str
    max_abs_error: float
    scale: float
    ok: bool


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """For integer inputs that index a table (Gather indices), the table's length on that axis."""
    inits = {i.name: i for i in model.graph.initializer}
    bounds: dict[str, int] = {}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[0] in inits:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            dims = inits[n.input[0]].dims
            bounds[n.input[1]] = int(dims[axis])
    return bounds


def random_inputs(specs: list[dict], model: onnx.ModelProto, rng: np.random.Generator
                  ) -> list[np.ndarray]:
    bounds = index_bounds(model)
    arrays = []
    for s in specs:
        dt = s["dtype"]
        shape = tuple(s["shape"])
        if dt in ("float32", "float64"):
            arrays.append(rng.standard_normal(shape).astype(NP_DTYPES[dt]))
        elif dt == "bool":
            arrays.append(rng.random(shape) < 0.5)
        else:
            high = bounds.get(s["name"], 10)
            arrays.append(rng.integers(0, high, size=shape).astype(NP_DTYPES[dt]))
    return arrays


def ort_run(model: onnx.ModelProto, names: list[str], arrays: list[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    if model.ir_version > 10:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, arrays, strict=True)))


def compare(got: np.ndarray, want: np.ndarray, tol: float) -> tuple[float, float, bool]:
    """(max abs error, scale, ok): ok when error ≤ tol·max(1, max|want|) and non-finites agree."""
    if got.shape != want.shape:
        return float("inf"), 0.0, False
    if want.dtype.kind in "biu":
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        err = float(diff.max()) if diff.size else 0.0
        return err, 1.0, err == 0
    finite = np.isfinite(want)
    same_nonfinite = bool(np.all(np.isfinite(got) == finite)) and bool(
        np.all((got == want) | finite | (np.isnan(got) & np.isnan(want))))
    if not finite.any():
        return 0.0, 1.0, same_nonfinite
    scale = max(1.0, float(np.abs(want[finite]).max()))
    err = float(np.abs(got[finite].astype(np.float64) - want[finite]).max())
    return err, scale, same_nonfinite and err <= tol * scale


def verify_bundle(
    model_path: Path, bundle: Path, *, input_shapes: list[str], runs: int = 2,
    tol: float = 1e-4, threads: int = 0, cc: str = "cc", runner: list[str] | None = None,
    seed: int = 0,
) -> list[OutputReport]:
    from aotc.package.build import build_bundle, run_model_process

    manifest_path = Path(bundle) / "aotc_bundle.json"
    if not manifest_path.is_file():
        raise AotcError("not an aotc bundle (no aotc_bundle.json)", file=str(bundle),
                        hint="create one with `aotc optimize MODEL -o FOLDER`")
    manifest = json.loads(manifest_path.read_text())
    model = load_checked(Path(model_path))
    init_names = {i.name for i in model.graph.initializer}
    model_inputs = [i.name for i in model.graph.input if i.name not in init_names]
    if model_inputs != [i["name"] for i in manifest["inputs"]]:
        raise AotcError(f"the bundle's inputs {[i['name'] for i in manifest['inputs']]} are not "
                        f"the model's {model_inputs}", file=str(bundle))
    if input_shapes:
        from aotc.frontend import parse_input_shapes

        for name, shape in parse_input_shapes(input_shapes).items():
            spec = next((i for i in manifest["inputs"] if i["name"] == name), None)
            if spec is None or tuple(spec["shape"]) != tuple(shape):
                raise AotcError(f"--input-shape {name}={','.join(map(str, shape))} does not "
                                "match the bundle", file=str(bundle))
    build_bundle(Path(bundle), cc=cc)
    rng = np.random.default_rng(seed)
    reports = []
    for run in range(runs):
        arrays = random_inputs(manifest["inputs"], model, rng)
        got = run_model_process(Path(bundle), arrays, threads=threads or None, runner=runner)
        want = ort_run(model, model_inputs, arrays)
        for spec, g, w in zip(manifest["outputs"], got, want, strict=True):
            err, scale, ok = compare(g, np.asarray(w), tol)
            reports.append(OutputReport(run, spec["name"], err, scale, ok))
    return reports
