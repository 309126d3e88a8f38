"""A fuzzing campaign: mutated sample models through `aotc optimize`, then make and run_model.

Case `i` of seed `s` is reproducible on its own: its mutation kind is KINDS[i % len(KINDS)],
its model and mutation come from `random.Random(f"{s}:{i}")`. Cases run on worker processes
(`worker.py`); a worker that goes silent past a phase's time limit is killed (a hang), one that
dies is a crash. Every case must end in exit 0 or 2; a case that compiles must build and run.
"""

from __future__ import annotations

import json
import os
import platform
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from mutations import KINDS, Case, mutate, with_value_info  # noqa: E402
from worker import VALGRIND_ERROR  # noqa: E402

SAMPLES = ("mlp", "resnet_tiny", "mobilenet_tiny", "transformer_tiny", "unet_tiny")
# Seconds a phase may take before the case counts as a hang.
TIME_LIMITS = {"inspect": 60.0, "compile": 120.0, "build": 180.0, "run": 60.0, "compare": 60.0}
# A quarter of the cases are compiled for cpu-avx2 and run under valgrind's memcheck, where
# valgrind and AVX2 are there.
VALGRIND = shutil.which("valgrind") is not None and platform.machine() in ("x86_64", "AMD64") \
    and "avx2" in Path("/proc/cpuinfo").read_text()

# A worker is replaced after this many cases (memory that grows in one process stays bounded).
CASES_PER_WORKER = 40

# Outcomes: the first three are fine; the others are failures of aotc's promise.
OK_OUTCOMES = ("refused", "ran", "too big to run")
FAILURES = ("internal error", "crash", "hang", "build failed", "run failed", "run crashed",
            "run hang")


@dataclass
class Outcome:
    case: int
    kind: str
    model: str
    detail: str
    outcome: str
    message: str = ""
    compare: str = ""  # onnxruntime's verdict on a case that ran: match, mismatch, refused
    seconds: float = 0.0
    memcheck: bool = False  # ran under valgrind's memcheck


@dataclass
class Corpus:
    models: dict[str, onnx.ModelProto] = field(default_factory=dict)

    @classmethod
    def samples(cls) -> Corpus:
        return cls({name: with_value_info(onnx.load(str(ROOT / "models" / f"{name}.onnx")))
                    for name in SAMPLES})

    @classmethod
    def node_tests(cls) -> Corpus:
        """The ONNX backend node tests whose operators aotc compiles: many operators and
        attribute forms that the sample models do not have."""
        import warnings

        from onnx.backend.test.case.node import collect_testcases

        from lowering.ops import OPS

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = collect_testcases()
        return cls({c.name: with_value_info(c.model) for c in cases
                    if all(n.domain in ("", "ai.onnx") and n.op_type in OPS
                           for n in c.model.graph.node)})

    @classmethod
    def named(cls, name: str) -> Corpus:
        return {"samples": cls.samples, "nodes": cls.node_tests}[name]()


def make_case(corpus: Corpus, seed: int, index: int) -> tuple[str, Case]:
    rng = random.Random(f"{seed}:{index}")
    name = rng.choice(sorted(corpus.models))
    kind = KINDS[index % len(KINDS)]
    return name, mutate(corpus.models[name], kind, rng)


def write_case(case: Case, folder: Path) -> Path:
    """The case's files in folder/model/ (its external data beside it, '../x' in folder)."""
    model_dir = folder / "model"
    model_dir.mkdir(parents=True)
    path = model_dir / "model.onnx"
    path.write_bytes(case.model_bytes())
    for name, data in case.extra.items():
        target = (model_dir / name)
        if data.startswith(b"->"):
            target.symlink_to(data[2:].decode())
        else:
            target.write_bytes(data)
    return path


def _cli_failed(result: dict) -> bool:
    text = result.get("stderr", "") + result.get("stdout", "")
    return "Traceback" in text or "internal error" in text or result.get("exit") not in (0, 2)


def classify(result: dict) -> tuple[str, str]:
    """(outcome, message) of a finished case."""
    inspected = result.get("inspect", {})
    if _cli_failed(inspected):
        return "internal error", "inspect: " + _short(inspected.get("stderr", "") +
                                                      inspected.get("stdout", ""))
    text = result.get("stderr", "") + result.get("stdout", "")
    first = next((line for line in result.get("stderr", "").splitlines() if line.strip()), "")
    code = result.get("exit")
    if "Traceback" in text or "internal error" in text or code not in (0, 2):
        return "internal error", _short(text)
    if code == 2:
        return ("refused", first[:300]) if first.startswith("error") or "Error" in text \
            else ("internal error", _short(text))
    if result.get("run") == "too big to run here":
        return "too big to run", ""
    if result.get("build") != "ok":
        return "build failed", _short(result.get("detail", result.get("build", "")))
    if result.get("run") != "ok":
        status = result.get("status", 0)
        outcome = "run crashed" if status < 0 or status == VALGRIND_ERROR else "run failed"
        return outcome, _short(result.get("detail", ""))
    return "ran", ""


def _short(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-6:])[:600]


class _Worker:
    def __init__(self, log: Path) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 (lives as long as the worker)
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, start_new_session=True)
        self.cases = 0
        self.job: tuple[int, str, Case, Path] | None = None
        self.phase = ""
        self.deadline = 0.0
        self.started = 0.0
        self.buffer = b""

    def send(self, index: int, name: str, case: Case, folder: Path, seed: int) -> None:
        path = write_case(case, folder)
        job = {"model": str(path), "bundle": str(folder / "bundle"), "seed": seed,
               "threads": 1 + index % 2, "valgrind": VALGRIND and index % 4 == 3}
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()
        self.job, self.cases, self.started = (index, name, case, folder), self.cases + 1, \
            time.monotonic()
        self.enter("start")

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.deadline = time.monotonic() + TIME_LIMITS.get(phase, 30.0)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()


def run_campaign(cases: range, seed: int = 0, jobs: int = 2, corpus: Corpus | None = None,
                 keep: Path | None = None,
                 progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Runs the cases on `jobs` workers; returns their outcomes in case order. Failing cases'
    files are copied into `keep` when given."""
    corpus = corpus or Corpus.samples()
    work = Path(tempfile.mkdtemp(prefix="aotc-fuzz-"))
    todo = list(reversed(cases))
    outcomes: dict[int, Outcome] = {}
    selector = selectors.DefaultSelector()
    workers: list[_Worker] = []

    def finish(w: _Worker, outcome: str, message: str, result: dict | None = None) -> None:
        assert w.job is not None
        index, name, case, folder = w.job
        o = Outcome(index, case.kind, name, case.detail, outcome, message,
                    (result or {}).get("compare", ""), time.monotonic() - w.started,
                    (result or {}).get("memcheck", False))
        if o.compare in ("mismatch", "onnxruntime off"):
            o.message = result.get("detail", "") if result else ""
        outcomes[index] = o
        if keep is not None and (outcome in FAILURES or o.compare == "mismatch"):
            shutil.copytree(folder, keep / f"case-{seed}-{index}", symlinks=True,
                            dirs_exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        w.job = None
        if progress:
            progress(o)

    def feed(w: _Worker | None = None) -> None:
        """Gives the next case to w (a new worker when None); nothing when none is left."""
        if not todo:
            return
        index = todo.pop()
        name, case = make_case(corpus, seed, index)
        (w or spawn()).send(index, name, case, work / f"case{index}", seed)

    def spawn() -> _Worker:
        w = _Worker(work / "workers.log")
        assert w.proc.stdout is not None
        selector.register(w.proc.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        return w

    def retire(w: _Worker, killed: bool) -> None:
        assert w.proc.stdout is not None
        selector.unregister(w.proc.stdout)
        workers.remove(w)
        w.kill() if killed else w.close()

    try:
        for _ in range(jobs):
            feed()
        while any(w.job for w in workers):
            for key, _ in selector.select(timeout=1.0):
                w = key.data
                chunk = os.read(key.fd, 65536)
                if not chunk:  # the worker died: a crash in its phase
                    phase = w.phase
                    code = w.proc.poll()
                    retire(w, killed=True)
                    if w.job is None:
                        pass
                    elif phase == "compare":  # onnxruntime's crash, not aotc's: it ran
                        finish(w, "ran", "", {"compare": "onnxruntime crashed"})
                    else:
                        finish(w, "run crashed" if phase == "run" else "crash",
                               f"worker died in {phase} (status {code})")
                    feed()
                    continue
                w.buffer += chunk
                while b"\n" in w.buffer:
                    line, w.buffer = w.buffer.split(b"\n", 1)
                    msg = json.loads(line)
                    if "phase" in msg:
                        w.enter(msg["phase"])
                    elif "result" in msg:
                        outcome, message = classify(msg["result"])
                        finish(w, outcome, message, msg["result"])
                        if w.cases >= CASES_PER_WORKER:
                            retire(w, killed=False)
                            feed()
                        else:
                            feed(w)
            now = time.monotonic()
            for w in list(workers):
                if w.job is not None and now > w.deadline:
                    phase = w.phase
                    retire(w, killed=True)
                    finish(w, "run hang" if phase == "run" else "hang",
                           f"no answer in {phase} after {TIME_LIMITS.get(phase, 30):.0f} s")
                    feed()
    finally:
        for w in list(workers):
            retire(w, killed=True)
        shutil.rmtree(work, ignore_errors=True)
    return [outcomes[i] for i in sorted(outcomes)]


def summary(outcomes: list[Outcome]) -> dict[str, Counter[str]]:
    """Outcome counts per mutation kind (and 'all')."""
    table: dict[str, Counter[str]] = {}
    for o in outcomes:
        for key in (o.kind, "all"):
            table.setdefault(key, Counter())[o.outcome] += 1
            if o.compare:
                table[key][f"onnxruntime {o.compare}"] += 1
    return table
