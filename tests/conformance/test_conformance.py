"""The ONNX backend node tests in-process (tests/conformance/runner.py): every case runs, on a
pool of one worker process per core, inside one test (faster than a test per case: the cases
are collected once and the pool keeps every core busy even without pytest-xdist). It fails
listing each case of expected_passes.txt that no longer passes (refused, wrong or crashed), and
each wrong result or crash among all the cases. A case that starts passing fails nothing:
`python -m tests.conformance.runner --update-expected` adds it to the list.

The GPU target (`--path opencl`, on PoCL where there is no GPU) is held to
expected_passes_opencl.txt the same way. Every case takes 2.5-5 minutes there (PoCL compiles
each case's program, about half a second each with a cold kernel cache), so the default run
takes a representative subset (two cases per operator, and the casts to and from float32 of
every element type: about 300 cases, 1.5-2.5 minutes); the whole list runs with AOTC_SLOW=1.

The in-process run of every case takes 4-7 minutes on two cores: it is a `slow` test, left out
of the default run and run by `pytest -m slow` (CI runs it after the default run)."""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner  # noqa: E402

from targets.gpu.opencl_device import opencl_available  # noqa: E402

needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")
# cases the GPU subset always takes: every element type's conversions (the renderer's loads,
# stores and casts of it), and an empty tensor (no launch)
OPENCL_ALWAYS = r"^test_cast_(FLOAT_to_\w+|\w+_to_FLOAT)$|^test_shape_start_greater_than_end$"


def check_path(path: str, names: list[str] | None = None) -> None:
    """Runs `names` (None: every case) on `path`; fails listing each case of the path's
    expected list among them that no longer passes (refused, wrong or crashed), and each wrong
    result or crash among the others."""
    cases = runner.collect()
    listing = runner.EXPECTED_FILES[path]
    expected = runner.read_expected(listing)
    assert len(expected) > 500, f"{listing.name} is missing or was emptied"
    vanished = [n for n in expected if n not in cases]
    if vanished:  # another onnx version: renamed or removed cases are not aotc's doing
        warnings.warn(f"{len(vanished)} expected passes are not node tests of onnx "
                      f"{runner.onnx.__version__}: {', '.join(vanished[:10])}", stacklevel=1)
    chosen = cases if names is None else {n: cases[n] for n in names if n in cases}
    results = runner.run_cases(chosen, path)
    problems = [f"expected to pass: {r.name}: {r.outcome}: {r.reason}"
                for r in runner.regressions(results, expected)]
    listed = set(expected)
    problems += [f"{r.outcome}: {r.name}: {r.reason}" for r in results.values()
                 if r.outcome in ("wrong", "crash") and r.name not in listed]
    assert not problems, f"{len(problems)} node test case(s) ({path}):\n" + "\n".join(problems)


@pytest.mark.slow
def test_node_tests_pass_as_expected() -> None:
    check_path("inprocess")


def test_runner_names_the_case_that_killed_or_stalled_its_worker(monkeypatch) -> None:
    cases = runner.collect("^test_(abs|neg|relu|sigmoid)$")

    def fragile(case, inputs, workdir):
        if case.name == "test_neg":
            os._exit(11)  # as a kernel that segfaults would take the worker down
        if case.name == "test_relu":
            time.sleep(60)
        return runner.RUNNERS["inprocess"](case, inputs, workdir)

    monkeypatch.setitem(runner.RUNNERS, "fragile", fragile)
    results = runner.run_cases(cases, "fragile", jobs=2, limit=5)
    assert {n: r.outcome for n, r in results.items()} == {
        "test_abs": "pass", "test_neg": "crash", "test_relu": "crash", "test_sigmoid": "pass"}
    assert "died" in results["test_neg"].reason
    assert "timed out" in results["test_relu"].reason


def test_compare_follows_onnx_backend_runner() -> None:
    f = np.array([1.0, np.nan, 3.0], np.float32)
    assert runner.compare([f], [f.copy()], 1e-3, 1e-7) == ""
    assert "output 0" in runner.compare([f + 0.01], [f], 1e-3, 1e-7)
    assert runner.compare([np.array([1.0, 2.0, 3.0], np.float32)], [f], 1e-3, 1e-7)  # NaN
    assert "dtype" in runner.compare([f.astype(np.float64)], [f], 1e-3, 1e-7)
    assert "shape" in runner.compare([f[:2]], [f], 1e-3, 1e-7)
    i = np.array([1, 2, 3], np.int64)
    assert "differ" in runner.compare([i + np.array([0, 0, 1])], [i], 1.0, 1.0)  # exact
    assert runner.compare([i], [i, i], 1e-3, 1e-7).startswith("1 outputs")
    assert runner.refusal_group("1 node(s) use operators aotc does not support (Mod)") == \
        "unsupported operator"
    assert runner.refusal_group("starts must be a constant (known at compile time)") == \
        "parameter given as a graph input"


def test_half_outputs_are_compared_at_their_own_precision() -> None:
    """A float16/bfloat16 output may differ from the reference by two units of the type (the
    reference rounds after every step, aotc once), not by more."""
    import ml_dtypes

    for dtype, eps in ((np.float16, 2.0**-10), (ml_dtypes.bfloat16, 2.0**-7)):
        want = np.array([0.5, 1.0, -2.0], dtype)
        one_unit = (want.astype(np.float32) * (1 + eps)).astype(dtype)
        four_units = (want.astype(np.float32) * (1 + 4 * eps)).astype(dtype)
        assert runner.compare([one_unit], [want], rtol=1e-3, atol=1e-7) == ""
        assert runner.compare([four_units], [want], rtol=1e-3, atol=1e-7) != ""


def opencl_subset(cases: dict[str, object], expected: list[str]) -> list[str]:
    """The default run's GPU cases: two expected passes per operator and OPENCL_ALWAYS's."""
    always = [n for n in expected if re.search(OPENCL_ALWAYS, n)]
    return sorted(set(runner.representative(expected, cases, 2)) | set(always))


@pytest.mark.opencl
@needs_opencl
def test_node_tests_pass_on_opencl_subset() -> None:
    cases = runner.collect()
    subset = opencl_subset(cases, runner.read_expected(runner.EXPECTED_FILES["opencl"]))
    assert len(subset) > 200
    check_path("opencl", subset)


@pytest.mark.opencl
@pytest.mark.slow
@needs_opencl
def test_node_tests_pass_on_opencl_all() -> None:
    if not os.environ.get("AOTC_SLOW"):
        pytest.skip("every node test on OpenCL takes long on PoCL: AOTC_SLOW=1 pytest -m slow")
    check_path("opencl")


def test_representative_cases_span_each_operator() -> None:
    cases = runner.collect("^test_(abs|acos|acosh|add|add_bcast|add_uint8)$")
    names = sorted(cases)
    assert runner.representative(names, cases, 2) == [
        "test_abs", "test_acos", "test_acosh", "test_add", "test_add_uint8"]
    assert runner.representative(names, cases, 3) == names
    assert runner.refusal_group("node 'n' (Scan): control flow does not compile for the "
                                "opencl target yet") == "not on this target yet"


def test_out_of_range_float_to_integer_casts_are_not_compared() -> None:
    """ONNX leaves a float cast to a fixed-point type undefined out of range, and the node
    tests' data there follows the installed ml_dtypes (0.7 writes 0 where 0.6 kept the low
    bits); in-range elements are still compared exactly."""
    import ml_dtypes
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.INT4, [6])])
    case = type("Case", (), {"model": helper.make_model(graph), "name": "cast_int4"})()
    x = np.array([-9.0, -8.4, 7.4, 7.6, 15.0, 3.0], np.float32)
    want = [np.array([0, -8, 7, 0, 0, 3], ml_dtypes.int4)]
    mask = runner.undefined_elements(case, [x], want)[0]
    assert mask.tolist() == [True, False, False, True, True, False]
    # an integer source wraps by the spec: every element is compared
    assert runner.undefined_elements(case, [x.astype(np.int32)], want) == [None]
