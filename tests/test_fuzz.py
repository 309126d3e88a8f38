"""A few hundred fuzzed sample models (tests/fuzz/): each ends in exit 0 or 2, never an internal
error, a hang or a crash, and each that compiles builds and runs. The long campaign is
`python tests/fuzz/run.py --cases 10000` (figures in tests/fuzz/RESULTS.md). The few hundred
take two minutes: a `slow` test (`pytest -m slow`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))

from campaign import FAILURES, run_campaign, summary  # noqa: E402
from mutations import KINDS  # noqa: E402

CASES = 30 * len(KINDS)


@pytest.mark.slow
def test_fuzzed_sample_models_end_in_exit_0_or_2(tmp_path: Path) -> None:
    outcomes = run_campaign(range(CASES), seed=0, jobs=2, keep=tmp_path)
    assert len(outcomes) == CASES
    failures = [f"case {o.case} ({o.kind}, {o.model}: {o.detail}): {o.outcome}: {o.message}"
                for o in outcomes if o.outcome in FAILURES]
    assert not failures, "\n".join(failures)
    table = summary(outcomes)
    assert all(sum(table[kind].values()) >= 30 for kind in KINDS)
    assert table["all"]["ran"] > 0 and table["all"]["refused"] > 0
