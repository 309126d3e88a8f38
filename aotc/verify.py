"""`aotc verify`: build a bundle, run it as its own process, compare with onnxruntime."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import onnx

from aotc.errors import AotcError
from aotc.inspect import load_checked, value_type
from aotc.package.program import DTYPES

if TYPE_CHECKING:
    import onnxruntime as ort

NP_DTYPES = {name: np.dtype(form) for name, (_, form) in DTYPES.items()}


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
        if dt in ("float32", "float64", "float16", "bfloat16"):
            arrays.append(rng.standard_normal(shape).astype(NP_DTYPES[dt]))
        elif dt == "bool":
            arrays.append(rng.random(shape) < 0.5)
        else:
            high = bounds.get(s["name"], 10)
            arrays.append(rng.integers(0, high, size=shape).astype(NP_DTYPES[dt]))
    return arrays


def ort_session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    """An onnxruntime session on the CPU without onnxruntime's graph rewrites: the reference
    is the model as written (onnxruntime 1.32's fused LayerNormalization, for one, ignores
    axis != -1)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if isinstance(model, onnx.ModelProto):
        if model.ir_version > 10:
            model = onnx.ModelProto.FromString(model.SerializeToString())
            model.ir_version = 10
        model = model.SerializeToString()  # type: ignore[assignment]
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                providers=["CPUExecutionProvider"])


def ort_run(model: onnx.ModelProto, names: list[str], arrays: list[np.ndarray],
            file: str | None = None) -> list[np.ndarray]:
    """The model's outputs from onnxruntime; an error of onnxruntime's is an AotcError."""
    try:
        return ort_session(model).run(None, dict(zip(names, arrays, strict=True)))
    except Exception as e:  # onnxruntime's Fail, InvalidArgument, ...
        raise AotcError(f"onnxruntime cannot run the model: {str(e).strip()}", file=file,
                        hint="aotc verify compares with onnxruntime, which must accept the "
                             "model") from None


HALF_EPS = {onnx.TensorProto.FLOAT16: float(ml_dtypes.finfo(np.float16).eps),
            onnx.TensorProto.BFLOAT16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)}


def half_tolerance(model: onnx.ModelProto) -> float:
    """8 units of the last place of the coarsest float16/bfloat16 the graph computes in (its
    inputs, outputs, annotated values, weights, casts), 0 if none: outputs computed from such
    values, float32 ones too, differ from onnxruntime's as the values do (sums of products
    added in another order round differently)."""
    g = model.graph
    types = {v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
    types |= {t.data_type for t in g.initializer}
    types |= {a.i for n in g.node for a in n.attribute if n.op_type == "Cast" and a.name == "to"}
    return max((8 * HALF_EPS[t] for t in types if t in HALF_EPS), default=0.0)


def matrix_unit_tolerance(manifest: dict) -> float:
    """8 units of the last place of the narrowest type a GPU bundle's matrix instructions
    round float32 operands to (tf32 under `--allow-tf32`: 10 mantissa bits, float16's), 0 if
    none does: its float32 products differ from onnxruntime's as those roundings make them."""
    from lowering.intrinsics import mma_roundings

    rounded = mma_roundings(manifest.get("mma") or ())
    return 8 * HALF_EPS[onnx.TensorProto.FLOAT16] if "tf32" in rounded else 0.0


def compare(got: np.ndarray, want: np.ndarray, tol: float) -> tuple[float, float, bool]:
    """(max abs error, scale, ok): ok when error ≤ tol·max(1, max|want|) and non-finites agree;
    for float16/bfloat16 outputs tol is at least 8 units of the type's last place (sums of
    products, added in another order than onnxruntime's, round differently)."""
    if got.shape != want.shape:
        return float("inf"), 0.0, False
    if want.itemsize == 2 and want.dtype.kind not in "iu":
        tol = max(tol, 8 * float(ml_dtypes.finfo(want.dtype).eps))
        got, want = got.astype(np.float32), want.astype(np.float32)
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


def check_model_matches(model: onnx.ModelProto, manifest: dict, bundle: str) -> list[str]:
    """The model's input names, in order; AotcError when its inputs or outputs (names, dtypes,
    ranks, fixed dimensions) are not the bundle's."""
    inits = {i.name for i in model.graph.initializer}
    for kind, values in (("inputs", [i for i in model.graph.input if i.name not in inits]),
                         ("outputs", list(model.graph.output))):
        have = [(v.name, *value_type(v)) for v in values]
        want = manifest[kind]
        names = [n for n, _, _ in have]
        if names != [t["name"] for t in want]:
            raise AotcError(f"the bundle's {kind} {[t['name'] for t in want]} are not the "
                            f"model's {names}", file=bundle, hint=_MISMATCH)
        for (name, dtype, dims), t in zip(have, want, strict=True):
            fixed_differ = dims is not None and (len(dims) != len(t["shape"]) or any(
                isinstance(d, int) and d > 0 and d != b
                for d, b in zip(dims, t["shape"], strict=True)))
            if dtype != t["dtype"] or fixed_differ:
                shown = "[?]" if dims is None else dims
                raise AotcError(f"{kind[:-1]} '{name}' is {dtype}{shown} in the model but "
                                f"{t['dtype']}{t['shape']} in the bundle", file=bundle,
                                hint=_MISMATCH)
    return [i.name for i in model.graph.input if i.name not in inits]


_MISMATCH = "verify the bundle against the model it was compiled from"


def check_host_runs(manifest: dict, bundle: str) -> None:
    """AotcError when this machine cannot run the bundle's kernels (another architecture, or
    instruction sets this CPU lacks), which run_model would refuse."""
    import platform

    from aotc.package.cpu_check import is_aarch64, is_x86, normalize
    from targets.cpu.target import enabled_features, host_target

    triple = manifest.get("triple", "")
    host = host_target()
    same_arch = (is_x86(triple) and is_x86(host.triple)) or (
        is_aarch64(triple) and is_aarch64(host.triple))
    if not same_arch:
        raise AotcError(f"the bundle is compiled for {triple}, this machine is "
                        f"{platform.machine()}", file=bundle,
                        hint="pass --cc and --runner for that target (e.g. --cc "
                             "aarch64-linux-gnu-gcc --runner 'qemu-aarch64 -L "
                             "/usr/aarch64-linux-gnu'), or compile with --target cpu")
    on = enabled_features(host.features)
    missing = [f for f in normalize(manifest.get("cpu_features", [])) if f not in on]
    if missing:
        raise AotcError(f"the bundle's kernels use {', '.join(missing)}, which this CPU "
                        f"({host.cpu}) lacks", file=bundle,
                        hint="compile it with --target cpu for this machine, or verify it "
                             "on a machine that has them")


def _build_hint(manifest: dict, cc: str) -> str:
    api = manifest.get("gpu", {}).get("api")
    if api == "opencl":
        return ("an OpenCL bundle needs the OpenCL headers and ICD loader (apt-get install "
                "ocl-icd-opencl-dev)")
    if api == "cuda":
        return ("a CUDA bundle needs cuda.h and libcuda.so (the CUDA toolkit: CUDA_PATH, "
                "default /usr/local/cuda)")
    return (f"check that '{cc}' compiles for the bundle's target ({manifest.get('triple')}); "
            "--cc picks another compiler")


def verify_bundle(
    model_path: Path, bundle: Path, *, input_shapes: list[str], runs: int = 2,
    tol: float = 1e-4, threads: int = 0, cc: str = "cc", runner: list[str] | None = None,
    seed: int = 0, length: int | None = None,
) -> list[OutputReport]:
    """`length`: the run-time dimension's value to run a bundle that has one at (default its
    maximum)."""
    from aotc.package.build import BuildError, RunModelError, build_bundle, run_model_process
    from aotc.package.output_folder import read_manifest

    where = str(bundle)
    if runs < 1:
        raise AotcError(f"--runs must be at least 1, got {runs}")
    manifest = read_manifest(Path(bundle))
    if manifest is None or manifest.get("kind", "c") != "c":
        raise AotcError("not an aotc C bundle (no aotc_bundle.json of kind c)", file=where,
                        hint="create one with `aotc optimize MODEL -o FOLDER`")
    model = load_checked(Path(model_path), with_data=True)
    model_inputs = check_model_matches(model, manifest, where)
    dims = manifest.get("dims") or []
    if length is not None:
        if not dims:
            raise AotcError("--length: the bundle has no run-time dimension", file=where)
        if not dims[0]["min"] <= length <= dims[0]["max"]:
            raise AotcError(f"--length {length} is outside the bundle's run-time dimension "
                            f"({dims[0]['min']} to {dims[0]['max']})", file=where)
    if input_shapes:
        from aotc.frontend.dynamic import parse_input_ranges

        for name, shape in parse_input_ranges(input_shapes)[0].items():
            spec = next((i for i in manifest["inputs"] if i["name"] == name), None)
            if spec is None or tuple(spec["shape"]) != tuple(shape):
                raise AotcError(f"--input-shape {name}={','.join(map(str, shape))} does not "
                                "match the bundle", file=where)
    if runner:
        if shutil.which(runner[0]) is None:
            raise AotcError(f"--runner: no program '{runner[0]}' found", hint="install it, or "
                            "give its full path")
    elif "gpu" not in manifest:  # a GPU bundle's host code is portable C; its device is run_model's
        check_host_runs(manifest, where)
    try:
        build_bundle(Path(bundle), cc=cc)
    except (BuildError, OSError) as e:
        tail = "\n".join(str(e).strip().splitlines()[-12:])
        raise AotcError(f"building the bundle failed:\n{tail}", file=where,
                        hint=_build_hint(manifest, cc)) from None
    rng = np.random.default_rng(seed)
    reports = []
    tol = max(tol, half_tolerance(model), matrix_unit_tolerance(manifest))
    specs = manifest["inputs"]
    if length is not None:
        specs = [{**s, "shape": [length if i in s.get("dim_axes", ()) else d
                                 for i, d in enumerate(s["shape"])]} for s in specs]
    for run in range(runs):
        arrays = random_inputs(specs, model, rng)
        try:
            got = run_model_process(Path(bundle), arrays, threads=threads or None, runner=runner)
        except RunModelError as e:
            if e.returncode < 0 or e.returncode > 2:  # a signal: the generated code crashed
                raise
            raise AotcError(f"run_model failed:\n{e.output.strip()}", file=where) from None
        want = ort_run(model, model_inputs, arrays, file=str(model_path))
        for spec, g, w in zip(manifest["outputs"], got, want, strict=True):
            err, scale, ok = compare(g, np.asarray(w), tol)
            reports.append(OutputReport(run, spec["name"], err, scale, ok))
    return reports
