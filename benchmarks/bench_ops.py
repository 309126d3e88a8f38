"""Single operators: aotc against onnxruntime and numpy, GFLOP/s (GB/s for memory-bound ops) and
% of the machine's measured FMA peak (peak.py).

Each case is a one-node ONNX model (weights as initializers, activations as inputs) compiled by
aotc into a shared-library bundle and called through ctypes (`NAME_run_context`), run by
onnxruntime (ORT_ENABLE_ALL, same intra-op thread count, IO binding with preallocated outputs) and,
where numpy has the operation, by numpy (its OpenBLAS set to the same thread count). The engines
take turns in blocks (timing.interleave); each figure is a median. aotc's output is checked
against onnxruntime's before timing.

Cases: square GEMM 256..2048; BERT-base (sequence 128) projections and attention batched matmuls;
every distinct convolution of ResNet-50 and MobileNetV2 at 224x224 (conv_layers.py; MobileNetV2's
depthwise ones are named `mv2.dw*`); softmax and layer normalisation over [128, 768] and
[12, 128, 128]; `overhead.add` (a 16-element Add: each engine's per-call floor).

    python benchmarks/bench_ops.py [--threads 1 2] [--runs 30] [--filter gemm r50] [--quick]
                                   [--markdown] [--target cpu-avx2] [--pages huge]

`--target cpu-avx2` compiles aotc's side for AVX2 (256-bit vectors, 16 registers) and runs it
on this machine: the AVX2 code's speed, % of peak against the 256-bit FMA peak (onnxruntime
still runs its own, widest kernels). `--pages huge` gives both engines inputs and outputs in
transparent huge pages, as a layer's activations are inside a network compiled by aotc. Each
bundle is flushed to disk before it is timed (timing.flush_files). Each thread count gets a
bundle compiled for it (`aotc optimize --threads N`, onnxruntime's session the same intra-op
count); `--bundle-threads host` compiles one for all cores and runs it at every count.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from conv_layers import MOBILENETV2_CONVS, RESNET50_CONVS, ConvLayer  # noqa: E402
from peak import cached_peak  # noqa: E402
from table import print_rows  # noqa: E402
from timing import (  # noqa: E402
    CLOCKS,
    Engine,
    aotc_engine,
    flush_files,
    geomean,
    huge_pages_empty,
    in_huge_pages,
    interleave,
    load_average,
    median,
    ort_engine,
    ort_session,
    set_blas_threads,
)

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402
from aotc.package.loaded import LoadedBundle  # noqa: E402

F32 = TensorProto.FLOAT


@dataclass
class Case:
    name: str
    group: str
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    flops: int = 0  # compute-bound: reported in GFLOP/s and % of peak
    bytes: int = 0  # memory-bound: reported in GB/s (bytes read + written once)
    numpy: Engine | None = None  # the same operation in numpy, on the same arrays
    count: int = 1  # occurrences in its network (convolutions)
    rows: list[tuple] = field(default_factory=list)


def _model(node: onnx.NodeProto, inputs: dict[str, tuple[int, ...]],
           output: tuple[int, ...], inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], node.op_type.lower(),
        [helper.make_tensor_value_info(n, F32, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], F32, output)],
        [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def matmul_case(name: str, group: str, a: tuple[int, ...], b: tuple[int, ...],
                b_is_weight: bool, rng: np.random.Generator) -> Case:
    """MatMul(A, B); B an initializer (a layer's weight) or a second input (attention)."""
    m, k, n = a[-2], a[-1], b[-1]
    batch = int(np.prod(a[:-2], dtype=np.int64))
    out = (*a[:-2], m, n)
    x, w = _rand(rng, *a), _rand(rng, *b, scale=k ** -0.5)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    if b_is_weight:
        model = _model(node, {"a": a}, out, {"b": w})
        inputs = [x]
    else:
        model = _model(node, {"a": a, "b": b}, out)
        inputs = [x, w]
    res = np.empty(out, np.float32)
    return Case(name, group, model, inputs, flops=2 * batch * m * k * n,
                numpy=lambda: np.matmul(x, w, out=res))


def conv_case(net: str, layer: ConvLayer, rng: np.random.Generator) -> Case:
    cin, cout, k, s, hw, g = layer.cin, layer.cout, layer.k, layer.stride, layer.hw, layer.groups
    out = (1, cout, layer.out_hw, layer.out_hw)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s],
                            pads=[k // 2] * 4, group=g)
    inits = {"w": _rand(rng, cout, cin // g, k, k, scale=(cin // g * k * k) ** -0.5),
             "b": _rand(rng, cout, scale=0.1)}
    model = _model(node, {"x": (1, cin, hw, hw)}, out, inits)
    group = "dw" if g == cin > 1 else net
    return Case(layer.name(net), group, model, [_rand(rng, 1, cin, hw, hw)], flops=layer.flops,
                count=layer.count)


def softmax_case(shape: tuple[int, ...], rng: np.random.Generator) -> Case:
    x = _rand(rng, *shape)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)

    def np_softmax() -> object:
        e = np.exp(x - x.max(-1, keepdims=True))
        return np.divide(e, e.sum(-1, keepdims=True), out=e)

    return Case("softmax." + "x".join(map(str, shape)), "softmax", _model(node, {"x": shape}, shape),
                [x], bytes=2 * x.nbytes, numpy=np_softmax)


def layernorm_case(shape: tuple[int, ...], rng: np.random.Generator) -> Case:
    x, d = _rand(rng, *shape), shape[-1]
    g, b = _rand(rng, d), _rand(rng, d)
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)

    def np_layernorm() -> object:
        c = x - x.mean(-1, keepdims=True)
        c /= np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
        c *= g
        c += b
        return c

    return Case("layernorm." + "x".join(map(str, shape)), "layernorm",
                _model(node, {"x": shape}, shape, {"g": g, "b": b}), [x], bytes=2 * x.nbytes,
                numpy=np_layernorm)


def overhead_case(rng: np.random.Generator) -> Case:
    x, c = _rand(rng, 16), _rand(rng, 16)
    node = helper.make_node("Add", ["x", "c"], ["y"])
    return Case("overhead.add", "overhead", _model(node, {"x": (16,)}, (16,), {"c": c}), [x],
                bytes=2 * x.nbytes, numpy=lambda: np.add(x, c))


BERT = {"bert.qkv_proj.128x768x768": ((128, 768), (768, 768), True),
        "bert.ffn_up.128x768x3072": ((128, 768), (768, 3072), True),
        "bert.ffn_down.128x3072x768": ((128, 3072), (3072, 768), True),
        "bert.attn_qk.12x128x64x128": ((12, 128, 64), (12, 64, 128), False),
        "bert.attn_av.12x128x128x64": ((12, 128, 128), (12, 128, 64), False)}


def all_cases(quick: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    if quick:
        return [matmul_case("gemm.128", "gemm", (128, 128), (128, 128), True, rng),
                conv_case("mv2", MOBILENETV2_CONVS[-2], rng),
                softmax_case((12, 128, 128), rng)]
    cases = [overhead_case(rng)]
    cases += [matmul_case(f"gemm.{n}", "gemm", (n, n), (n, n), True, rng)
              for n in (256, 512, 1024, 2048)]
    cases += [matmul_case(name, "bert", a, b, w, rng) for name, (a, b, w) in BERT.items()]
    cases += [conv_case("r50", layer, rng) for layer in RESNET50_CONVS]
    cases += [conv_case("mv2", layer, rng) for layer in MOBILENETV2_CONVS]
    for shape in ((128, 768), (12, 128, 128)):
        cases += [softmax_case(shape, rng), layernorm_case(shape, rng)]
    return cases


def compile_case(case: Case, work: Path, target: str = "cpu", threads: int = 0) -> Path:
    """The case's bundle, its schedules chosen for `threads` (0: all cores)."""
    folder = work / case.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(case.model, str(path))
    bundle = folder / f"bundle.t{threads}"
    optimize_model(path, bundle, input_shapes=[], name="op", target=target, threads=threads)
    build_bundle(bundle, target="shared")
    return bundle


def _rate(case: Case, seconds: float) -> float:
    """GFLOP/s or GB/s."""
    return (case.flops or case.bytes) / seconds / 1e9


def _max_rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def target_peak(threads: int, target: str) -> float:
    """The FMA peak (GFLOP/s) at the vector width `target`'s code uses: the machine's
    widest for the host, 256 bits for `cpu-avx2` (the same FMA loop on 8 lanes)."""
    return cached_peak(threads, 8 if target == "cpu-avx2" else None).gflops


def time_case(case: Case, bundle_dir: Path, threads: int, runs: int,
              clock: Callable[[], float], target: str = "cpu", pages: str = "4k") -> None:
    """Appends one row per thread count to case.rows. `pages` "huge": both engines' inputs
    and outputs in transparent huge pages (timing.huge_pages_empty), as a layer's
    activations are inside a network compiled by aotc."""
    set_blas_threads(threads)
    sess = ort_session(case.model, threads)
    allocate = huge_pages_empty if pages == "huge" else None
    inputs = [in_huge_pages(x) for x in case.inputs] if allocate else case.inputs
    ort_call, ort_outs = ort_engine(sess, inputs, allocate)
    with LoadedBundle(bundle_dir) as bundle:
        bundle.create(threads)
        aotc_call, aotc_outs = aotc_engine(bundle, inputs, allocate)
        aotc_call()
        ort_call()
        err = _max_rel_error(aotc_outs[0], ort_outs[0])
        engines = {"aotc": aotc_call, "ort": ort_call}
        if case.numpy is not None:
            engines["numpy"] = case.numpy
        t = {name: median(s) for name, s in interleave(engines, runs, clock=clock).items()}
    a, o, n = t["aotc"], t["ort"], t.get("numpy")
    peak = target_peak(threads, target) if case.flops else None

    def pct(seconds: float) -> str:
        return f"{100 * _rate(case, seconds) / peak:.0f}" if peak else ""

    case.rows.append((
        case.name, threads, "GFLOP/s" if case.flops else "GB/s",
        f"{a * 1e3:.4f}", f"{o * 1e3:.4f}", f"{n * 1e3:.4f}" if n else "",
        f"{_rate(case, a):.1f}", f"{_rate(case, o):.1f}", f"{_rate(case, n):.1f}" if n else "",
        pct(a), pct(o), f"{a / o:.2f}", "ok" if err < 1e-3 else f"WRONG {err:.1e}"))


HEAD = ("case", "threads", "unit", "aotc ms", "ort ms", "numpy ms", "aotc rate", "ort rate",
        "numpy rate", "aotc % peak", "ort % peak", "aotc/ort time", "check")


def summary(cases: list[Case], threads: int) -> list[tuple]:
    """Per group: geomean of aotc/ort time, layers where aotc is at least as fast, and (networks)
    the count-weighted total time of all their convolutions."""
    out = []
    groups = dict.fromkeys(c.group for c in cases if c.group != "overhead")
    for group in groups:
        rows = [(c, r) for c in cases if c.group == group for r in c.rows if r[1] == threads]
        if not rows:
            continue
        ratios = [float(r[HEAD.index("aotc/ort time")]) for _, r in rows]
        faster = sum(x <= 1.0 for x in ratios)
        total_a = sum(c.count * float(r[HEAD.index("aotc ms")]) for c, r in rows)
        total_o = sum(c.count * float(r[HEAD.index("ort ms")]) for c, r in rows)
        out.append((group, threads, len(rows), f"{faster}/{len(rows)}",
                    f"{geomean(ratios):.2f}", f"{1 / geomean(ratios):.2f}",
                    f"{total_a:.3f}", f"{total_o:.3f}"))
    return out


SUMMARY_HEAD = ("group", "threads", "cases", "aotc <= ort", "geomean aotc/ort time",
                "geomean speed-up", "aotc total ms (x count)", "ort total ms (x count)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=30, help="timed runs per engine (median)")
    ap.add_argument("--filter", nargs="+", default=[], help="keep cases whose name contains one")
    ap.add_argument("--quick", action="store_true", help="three small cases (the smoke test)")
    ap.add_argument("--clock", choices=list(CLOCKS), default="wall",
                    help="thread: CPU time of the calling thread (1 thread only; shared machines)")
    ap.add_argument("--target", choices=("cpu", "cpu-avx2"), default="cpu",
                    help="aotc's code: for this machine, or AVX2 code (run here; %% of peak "
                         "then against the 256-bit FMA peak)")
    ap.add_argument("--pages", choices=("4k", "huge"), default="4k",
                    help="memory of the cases' inputs and outputs (both engines): ordinary "
                         "pages, or transparent huge pages like aotc's workspace in a network")
    ap.add_argument("--bundle-threads", choices=("per-run", "host"), default="per-run",
                    help="per-run: a bundle compiled for each --threads count; host: one "
                         "bundle compiled for all cores")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    load_before = load_average()
    cases = [c for c in all_cases(args.quick)
             if not args.filter or any(f in c.name for f in args.filter)]
    threads = [t if t > 0 else os.cpu_count() or 1 for t in args.threads]
    if args.clock == "thread" and threads != [1]:
        ap.error("--clock thread needs --threads 1 (worker threads' time would be left out)")
    with tempfile.TemporaryDirectory(prefix="aotc_bench_ops_") as tmp:
        for case in cases:
            host = None if args.bundle_threads == "per-run" else \
                compile_case(case, Path(tmp), args.target)
            for t in threads:
                bundle = host or compile_case(case, Path(tmp), args.target, t)
                flush_files()
                time_case(case, bundle, t, args.runs, CLOCKS[args.clock], args.target,
                          args.pages)
    print(f"load average before: {load_before}, after: {load_average()}; clock: {args.clock}; "
          f"pages: {args.pages}")
    rows = [r for t in threads for c in cases for r in c.rows if r[1] == t]
    print_rows(HEAD, rows, args.markdown)
    print()
    print_rows(SUMMARY_HEAD, [r for t in threads for r in summary(cases, t)], args.markdown)
    print()
    print_rows(("threads", "target", "FMA peak GFLOP/s"),
               [(t, args.target, f"{target_peak(t, args.target):.1f}") for t in threads],
               args.markdown)


if __name__ == "__main__":
    main()
