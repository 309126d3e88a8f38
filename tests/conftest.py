"""Test-wide settings.

AOTC_TEST_HOST=cpu-avx2 (or another named target this machine runs) makes `host_target()`, and so
`--target cpu`, mean that target in the tests: an AVX-512 machine then runs the suite as an
AVX2-only host would. It is set before any test module imports the target module's names.
"""

from __future__ import annotations

import os

if os.environ.get("AOTC_TEST_HOST"):
    from targets.cpu import target as _target

    _chosen = _target.NAMED_TARGETS[os.environ["AOTC_TEST_HOST"]]
    _target.host_target = lambda: _chosen  # type: ignore[assignment]
