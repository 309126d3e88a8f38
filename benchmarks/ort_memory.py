"""Memory of onnxruntime on a model against the same model through `aotc optimize --emit ort`:
the resident memory a session adds (created and run once, one intra-op thread), each case in a
fresh process, plus the sizes of the files.

    python benchmarks/ort_memory.py benchmarks/models/resnet50.onnx

Cases: the original model; the rewritten model with the library; the same with the fallback
data file moved away (onnxruntime must not need it when the library is loaded).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(model: Path, session_model: Path, library: Path | None) -> float:
    """RSS (MB) that creating and running one session adds in this process."""
    import onnxruntime as ort
    from model_zoo import random_inputs

    feed = random_inputs(model, seed=0)
    before = _rss_mb()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if library is not None:
        so.register_custom_ops_library(str(library))
    sess = ort.InferenceSession(str(session_model), so, providers=["CPUExecutionProvider"])
    sess.run(None, feed)
    return _rss_mb() - before


def _child(model: Path, session_model: Path, library: Path | None) -> float:
    cmd = [sys.executable, __file__, str(model), "--child", str(session_model),
           str(library) if library else "-"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["rss_mb"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        session_model, library = args.child
        rss = measure(args.model, Path(session_model), None if library == "-" else Path(library))
        print(json.dumps({"rss_mb": rss}))
        return
    from aotc.driver import emit_ort

    with tempfile.TemporaryDirectory(prefix="aotc_ort_memory_") as tmp:
        result = emit_ort(args.model, Path(tmp) / "out", input_shapes=[], name="m")
        fallback = result.model_path.parent / "m.fallback.data"
        rows = [("onnxruntime, original", _child(args.model, args.model, None)),
                ("onnxruntime + library",
                 _child(args.model, result.model_path, result.library_path))]
        if fallback.exists():
            fallback.rename(Path(tmp) / "moved.data")
            rows.append(("onnxruntime + library, no fallback file",
                         _child(args.model, result.model_path, result.library_path)))
            (Path(tmp) / "moved.data").rename(fallback)
        print("| case | RSS added, MB |\n|---|---|")
        for name, mb in rows:
            print(f"| {name} | {mb:.1f} |")
        print("\n| file | MB |\n|---|---|")
        files = [args.model, result.model_path, result.library_path, fallback]
        for f in files:
            if f.exists():
                print(f"| {f.name} | {f.stat().st_size / 1e6:.2f} |")


if __name__ == "__main__":
    main()
