"""How well the GEMM cost model ranks schedules on this machine: Spearman's rank correlation
between the model's seconds and the measured seconds, per layer and target.

For each layer (GEMM 512/1024/2048 with constant B, and ResNet-50 and MobileNetV2
convolutions), the distinct configurations of its space are ranked by the cost model; the
model's best `--top` and `--random` others are measured one kernel at a time (median of
`--samples`). Reported per layer: rho over the measured set, and the regret: the measured
time of the model's first choice over the best measured one (1.00 = the model's pick is the
fastest measured).

    python benchmarks/rank_check.py [--targets cpu cpu-avx2] [--machine FILE] [--markdown]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from conv_layers import MOBILENETV2_CONVS, RESNET50_CONVS, ConvLayer  # noqa: E402
from table import print_rows  # noqa: E402

from lowering import te  # noqa: E402
from lowering.ops import OPS, OpContext  # noqa: E402
from lowering.ops.linalg.product import matrix_product  # noqa: E402
from lowering.templates.gemm import GemmSpace, GemmTemplate  # noqa: E402
from targets.cpu.calibrate import load_machine_file  # noqa: E402
from targets.cpu.measure import Measurer  # noqa: E402
from targets.cpu.target import get_target  # noqa: E402


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho (ties get their mean rank)."""
    def ranks(v: list[float]) -> np.ndarray:
        a = np.asarray(v)
        order = a.argsort(kind="stable")
        r = np.empty(len(a))
        r[order] = np.arange(len(a))
        for val in np.unique(a):
            r[a == val] = r[a == val].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def gemm_space(size: int, target) -> GemmSpace:
    a = te.placeholder((size, size), "float32", "a")
    b = te.placeholder((size, size), "float32", "b")
    c = matrix_product(a, b)
    bw = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    return GemmTemplate.match([a, b], [c], [None, bw], target)


def conv_space(layer: ConvLayer, target) -> GemmSpace | None:
    x = te.placeholder((1, layer.cin, layer.hw, layer.hw), "float32", "x")
    w = te.placeholder((layer.cout, layer.cin // layer.groups, layer.k, layer.k), "float32", "w")
    b = te.placeholder((layer.cout,), "float32", "b")
    wv = np.random.default_rng(0).standard_normal(w.shape).astype(np.float32)
    pad = layer.k // 2
    ctx = OpContext(node="conv", op_type="Conv",
                    attrs={"pads": [pad] * 4, "strides": [layer.stride] * 2,
                           "group": layer.groups},
                    inputs=[x, w, b], consts=[None, wv, None],
                    out_shapes=[(1, layer.cout, layer.out_hw, layer.out_hw)],
                    out_dtypes=["float32"])
    return GemmTemplate.match([x, w, b], OPS["Conv"](ctx), [None, wv, None], target)


def layers(quick: bool) -> list[tuple[str, object]]:
    sizes = (512, 1024) if quick else (512, 1024, 2048)
    convs = [(f"resnet50.{c.cin}x{c.cout}.k{c.k}s{c.stride}.{c.hw}", c)
             for c in RESNET50_CONVS[:: 4 if quick else 2]]
    convs += [(f"mobilenetv2.{c.cin}x{c.cout}.k{c.k}s{c.stride}.{c.hw}", c)
              for c in MOBILENETV2_CONVS if c.groups == 1][:: 6 if quick else 3]
    return [(f"gemm.{n}", n) for n in sizes] + convs


def check(space: GemmSpace, top: int, random: int, samples: int) -> tuple[float, float, int]:
    seen: dict[tuple, tuple[float, dict]] = {}
    for vals in itertools.product(*[k.options for k in space.knobs]):
        cfg = space.canonical(dict(zip([k.name for k in space.knobs], vals, strict=True)))
        seen.setdefault(tuple(sorted(cfg.items())), (space.cost(cfg), cfg))
    ranked = sorted(seen.values(), key=lambda x: x[0])
    rng = np.random.default_rng(0)
    rest = ranked[top:]
    extra = [rest[i] for i in sorted(rng.choice(len(rest), min(random, len(rest)),
                                                replace=False))] if rest else []
    chosen = ranked[:top] + extra
    measured = Measurer(space, samples=samples).measure([c for _, c in chosen])
    secs = [m.seconds for m in measured]
    rho = spearman([c for c, _ in chosen], secs)
    return rho, secs[0] / min(secs), len(chosen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="+", default=["cpu", "cpu-avx2"])
    ap.add_argument("--machine", type=Path, help="a machine file for the host target")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--random", type=int, default=8)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    for tname in args.targets:
        target = get_target(tname)
        if args.machine and tname == "cpu":
            target = target.with_machine(load_machine_file(args.machine))
        rhos, regrets = [], []
        for name, what in layers(args.quick):
            space = gemm_space(what, target) if isinstance(what, int) else \
                conv_space(what, target)
            if space is None:
                continue
            rho, regret, n = check(space, args.top, args.random, args.samples)
            rhos.append(rho)
            regrets.append(regret)
            rows.append((tname, name, n, f"{rho:.2f}", f"{regret:.2f}"))
            print(*rows[-1], flush=True, file=sys.stderr)
        rows.append((tname, "median / geomean", "", f"{np.nanmedian(rhos):.2f}",
                     f"{np.exp(np.mean(np.log(regrets))):.2f}"))
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print_rows(("target", "layer", "configs", "Spearman rho", "regret"), rows, args.markdown)


if __name__ == "__main__":
    main()
