"""Test-wide settings.

AOTC_TEST_HOST=cpu-avx2 (or another named target this machine runs) makes `host_target()`, and so
`--target cpu`, mean that target in the tests: an AVX-512 machine then runs the suite as an
AVX2-only host would. It is set before any test module imports the target module's names.
A machine file from `aotc calibrate` in the user's cache is ignored (AOTC_NO_MACHINE_FILE).
"""

from __future__ import annotations

import os

# the suite ignores a machine file `aotc calibrate` left in the user's cache (tests of it
# set their own cache folder)
os.environ.setdefault("AOTC_NO_MACHINE_FILE", "1")

if os.environ.get("AOTC_TEST_HOST"):
    from targets.cpu import target as _target

    _chosen = _target.NAMED_TARGETS[os.environ["AOTC_TEST_HOST"]]
    _target.host_target = lambda: _chosen  # type: ignore[assignment]


import pytest  # noqa: E402

from targets.cpu.target import NAMED_TARGETS, enabled_features, host_target  # noqa: E402


def runnable_targets() -> list[str]:
    """The targets whose code this machine runs and the tests that run code take: the host,
    and on an AVX-512 host `cpu-avx2` too (the code an AVX2-only machine would get)."""
    host = host_target()
    names = [host.name]
    if host.is_x86 and "avx512f" in enabled_features(host.features) and host.name != "cpu-avx2":
        names.append("cpu-avx2")
    return names


@pytest.fixture(params=runnable_targets())
def run_target(request):
    """A target this machine runs (the host, and on AVX-512 hosts cpu-avx2 as well)."""
    return host_target() if request.param == host_target().name else NAMED_TARGETS[request.param]


@pytest.fixture
def fitted_target():
    """The named target whose machine the cost models' documented choices were measured on (a
    Cascade Lake core, `cpu-avx512`): tests of those choices and of generated structure use it,
    so they hold on every host."""
    return NAMED_TARGETS["cpu-avx512"]
