"""The fuzzing campaign from the command line; writes tests/fuzz/RESULTS.md.

    python tests/fuzz/run.py --cases 10000            # the long campaign (hours on 2 cores)
    python tests/fuzz/run.py --cases 300 --no-write   # what CI runs (tests/test_fuzz.py)
    python tests/fuzz/run.py --replay 1234 --out case/ # case 1234's files, to reproduce it

Cases are reproducible by (seed, index). Failing cases are kept under --keep (default
tests/fuzz/failures/, not committed) with their model files.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from campaign import (  # noqa: E402
    FAILURES,
    OK_OUTCOMES,
    Corpus,
    Outcome,
    make_case,
    run_campaign,
    summary,
    write_case,
)
from mutations import KINDS  # noqa: E402

COLUMNS = (*OK_OUTCOMES, *FAILURES)
# What stands above this line in the results file is written by hand and kept.
MARKER = "<!-- campaign figures below: written by tests/fuzz/run.py -->"


def _cpu() -> str:
    """The CPU's name and its widest x86 vector extension (as /proc/cpuinfo tells them)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")), platform.machine())
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith("flags")), []))
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    return f"{name} ({isa})" if isa else name


def _gist(message: str) -> str:
    """A refusal's message without the case's path, digits folded: for counting alike ones."""
    text = message.removeprefix("error: ").split("model.onnx", 1)[-1].lstrip(": ")
    return re.sub(r"\d+", "N", text)[:90]


def report(outcomes: list[Outcome], seed: int, corpus: str, seconds: float) -> str:
    table = summary(outcomes)
    failures = [o for o in outcomes if o.outcome in FAILURES]
    mismatches = [o for o in outcomes if o.compare == "mismatch"]
    ort_off = [o for o in outcomes if o.compare == "onnxruntime off"]
    lines = [
        f"## Campaign: the {corpus} corpus",
        "",
        f"{len(outcomes)} cases of the {corpus} corpus (seed {seed}, cases "
        f"{outcomes[0].case}..{outcomes[-1].case}) on "
        f"{datetime.date.today()}, {_cpu()}, {seconds / 60:.0f} min with 2 workers. Written by "
        "`python tests/fuzz/run.py`; each case is one mutation of a model "
        "(`tests/fuzz/mutations.py`) through `aotc optimize`, then `make` and `run_model` when it "
        "compiles, and onnxruntime on the same inputs when it accepts the mutated model.",
        "",
        "Every case must end in *refused* (exit 2, one message) or *ran*; the other columns are "
        "failures. *too big to run* compiled, but its tensors exceed what the campaign runs "
        "(256 MiB). The onnxruntime columns compare outputs where onnxruntime (without its graph "
        "rewrites, as `aotc verify`) ran the model: *overflow* differs only where one side "
        "overflowed (inf, or NaN from inf - inf) and the other holds a finite value beyond 1e30 "
        "(mutated weights near the float range, combined in another order); *onnxruntime off*: "
        "aotc gives what onnx's reference evaluator gives and onnxruntime does not.",
        "",
        "| kind | cases | " + " | ".join(COLUMNS) + " | onnxruntime match | overflow | "
        "onnxruntime off | mismatch |",
        "|---" * (len(COLUMNS) + 6) + "|",
    ]
    for kind in (*KINDS, "all"):
        c = table.get(kind, Counter())
        total = sum(c[col] for col in COLUMNS)
        lines.append(f"| {kind} | {total} | " + " | ".join(str(c[col]) for col in COLUMNS)
                     + f" | {c['onnxruntime match']} | {c['onnxruntime overflow']} | "
                       f"{c['onnxruntime onnxruntime off']} | {c['onnxruntime mismatch']} |")
    memchecked = sum(o.memcheck for o in outcomes)
    lines += ["", f"{memchecked} of the cases that ran were compiled for cpu-avx2 and run under "
              "valgrind's memcheck (an error there is a *run crashed*)."]
    lines += ["", f"### Failures ({len(failures)})", ""]
    lines += [f"- case {o.case} ({o.kind}, {o.model}: {o.detail}): **{o.outcome}** {o.message}"
              for o in failures[:100]] or ["None."]
    lines += ["", f"### Wrong results against onnxruntime ({len(mismatches)})", ""]
    lines += [f"- case {o.case} ({o.kind}, {o.model}: {o.detail}): {o.message}"
              for o in mismatches[:100]] or ["None."]
    lines += ["", f"### Where onnxruntime, not aotc, differs from onnx's reference ({len(ort_off)})",
              ""]
    lines += [f"- case {o.case} ({o.kind}, {o.model}: {o.detail}): {o.message}"
              for o in ort_off[:50]] or ["None."]
    refusals = Counter(_gist(o.message) for o in outcomes if o.outcome == "refused")
    lines += ["", "### Most common refusals", ""]
    lines += [f"- {n} x {msg}" for msg, n in refusals.most_common(15)]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--first", type=int, default=0, help="index of the first case")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--corpus", choices=("samples", "nodes"), default="samples",
                    help="models to mutate: the sample models, or the ONNX backend node tests "
                         "aotc compiles")
    ap.add_argument("--keep", type=Path, default=HERE / "failures")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--no-write", action="store_true", help="print the summary only")
    ap.add_argument("--append", action="store_true",
                    help="add this campaign's section to the results file instead of replacing it")
    ap.add_argument("--replay", type=int, help="write the files of case N into --out")
    ap.add_argument("--out", type=Path, default=Path("fuzz-case"))
    args = ap.parse_args()

    if args.replay is not None:
        name, case = make_case(Corpus.named(args.corpus), args.seed, args.replay)
        path = write_case(case, args.out)
        print(f"case {args.replay}: {case.kind} of {name}: {case.detail}\n  {path}")
        return 0
    args.keep.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = Counter()

    def progress(o: Outcome) -> None:
        done[o.outcome] += 1
        n = sum(done.values())
        if o.outcome in FAILURES:
            print(f"case {o.case} {o.kind} {o.model}: {o.outcome}: {o.detail} :: {o.message}",
                  flush=True)
        if n % 100 == 0:
            print(f"{n}/{args.cases} {dict(done)} {time.monotonic() - start:.0f} s", flush=True)

    outcomes = run_campaign(range(args.first, args.first + args.cases), seed=args.seed,
                            jobs=args.jobs, corpus=Corpus.named(args.corpus), keep=args.keep,
                            progress=progress)
    text = report(outcomes, args.seed, args.corpus, time.monotonic() - start)
    if not args.no_write:
        old = args.results.read_text() if args.results.exists() else ""
        if args.append:
            text = old + "\n" + text
        elif MARKER in old:  # the hand-written part above the marker stays
            text = old[:old.index(MARKER) + len(MARKER)] + "\n\n" + text
        args.results.write_text(text)
    print(text)
    return 1 if any(o.outcome in FAILURES for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
