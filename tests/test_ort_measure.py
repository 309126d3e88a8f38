"""`aotc optimize --emit ort --measure-islands`: each island is timed on this machine with the
library and without it, and the islands slower with it are left to onnxruntime.

Which island is faster depends on the machine, so the tests that check the choice replace the
measured times after the real measurement has run (it also checks each island's outputs
against onnxruntime's); what is then left to onnxruntime, what the library holds and what the
model computes are checked for real.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from test_ort_library import _ops_run, _session, lstm_in_the_middle  # noqa: E402

from aotc.driver import emit_ort  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.ortlib import measure  # noqa: E402


def _slow_first_island(monkeypatch: pytest.MonkeyPatch) -> list[list[measure.IslandTiming]]:
    """Makes the first island measure twice onnxruntime's time and the others half of it;
    returns the real timings."""
    real = measure.time_islands
    seen: list[list[measure.IslandTiming]] = []

    def fake(*args, **kwargs):
        timings = real(*args, **kwargs)
        seen.append(timings)
        first = timings[0]
        return [first._replace(library_s=2 * first.onnxruntime_s + 1e-3),
                *(t._replace(library_s=t.onnxruntime_s / 2) for t in timings[1:])]

    monkeypatch.setattr(measure, "time_islands", fake)
    return seen


def test_an_island_slower_with_the_library_is_left_to_onnxruntime(tmp_path, monkeypatch):
    original = lstm_in_the_middle(tmp_path / "m.onnx", "contrib")  # two islands around it
    seen = _slow_first_island(monkeypatch)
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m",
                      measure_islands=True)
    assert len(seen) == 1 and [t.op for t in seen[0]] == ["m_island0", "m_island1"]
    assert all(t.library_s > 0 and t.onnxruntime_s > 0 for t in seen[0])
    assert [t.pays for t in result.timings] == [False, True]
    # the first island's nodes run on onnxruntime now, with the reason; the second is compiled
    assert [op for op, _ in result.islands] == ["m_island1"]
    left = {node: why for node, _, why in result.left_out}
    assert "contrib" in left and len(left) > 1
    assert all("faster on this machine" in why for node, why in left.items() if node != "contrib")
    onnx.checker.check_model(str(result.model_path))
    model = onnx.load(str(result.model_path), load_external_data=False)
    assert [n.op_type for n in model.graph.node if n.domain == "ai.aotc.kernels"] == ["m_island1"]
    feed = random_inputs(original, None, seed=1)
    want = _session(original, None).run(None, feed)
    with_lib = _session(result.model_path, result.library_path, profile=True)
    for sess in (with_lib, _session(result.model_path, None)):
        for w, g in zip(want, sess.run(None, feed), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert "m_island1" in _ops_run(with_lib)


def test_every_island_left_to_onnxruntime_leaves_a_library_without_custom_ops(tmp_path,
                                                                               monkeypatch):
    original = SAMPLE_MODELS["mlp"]
    _slow_first_island(monkeypatch)
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m",
                      measure_islands=True)
    assert result.islands == [] and len(result.timings) == 1 and not result.timings[0].pays
    assert result.library_path.is_file()
    model = onnx.load(str(result.model_path))
    assert not [n for n in model.graph.node if n.domain == "ai.aotc.kernels"]
    assert not (result.model_path.parent / "m.fallback.data").exists()
    feed = random_inputs(original, None, seed=1)
    want = _session(original, None).run(None, feed)
    got = _session(result.model_path, result.library_path).run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_measured_islands_that_pay_stay_compiled(tmp_path, monkeypatch):
    """Without the replaced times the real medians decide; the island is kept exactly when it
    measured at least as fast (whatever this machine says), and its timing is reported."""
    result = emit_ort(SAMPLE_MODELS["resnet_tiny"], tmp_path / "out", input_shapes=[],
                      name="m", measure_islands=True)
    (timing,) = result.timings
    assert timing.op == "m_island0" and timing.library_s > 0 and timing.onnxruntime_s > 0
    assert bool(result.islands) == timing.pays


def test_an_island_whose_outputs_differ_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda got, want, tol: (1.0, 1.0, False))
    with pytest.raises(AotcError, match="differs from onnxruntime's"):
        emit_ort(SAMPLE_MODELS["mlp"], tmp_path / "out", input_shapes=[], name="m",
                 measure_islands=True)
    assert not (tmp_path / "out").exists()


def test_cli_measure_islands(tmp_path):
    def aotc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "aotc", "optimize", *args],
                              capture_output=True, text=True)

    model = str(SAMPLE_MODELS["mlp"])
    proc = aotc(model, "-o", str(tmp_path / "a"), "--emit", "ort", "--measure-islands")
    assert proc.returncode == 0, proc.stderr
    assert "timed on this machine" in proc.stdout and "model_island0" in proc.stdout
    proc = aotc(model, "-o", str(tmp_path / "b"), "--measure-islands")
    assert proc.returncode == 2 and "--emit ort" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "b").exists()
