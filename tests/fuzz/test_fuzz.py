"""The quick pass of the differential fuzzer (`make test`); `make fuzz` runs the long one.

Every shipped target runs the same `QUICK` cases of one fixed stream (so a failure here is
reproducible, never flaky) plus the regression cases: draws that once failed, kept after
their fix. A failure message lists every failing case with its one-line reproducer.
"""

from __future__ import annotations

import pytest

from tests.fuzz.__main__ import DEFAULT_SEED
from tests.fuzz.programs import FAMILIES, draw
from tests.fuzz.runner import run_cases
from tests.shipped import OPENCL, require_opencl

QUICK = 200
# OPENCL: opencl.0 or TILE_TEST_OPENCL; llvm_cpu.0+eager: every split and group taken.
TARGETS = ("llvm_cpu.0", "llvm_cpu.0+eager", OPENCL, f"{OPENCL}+gpu")

# (seed, index, family) of draws that found a bug, and what it was.
REGRESSIONS: tuple[tuple[int, int, str | None], ...] = (
    # OpenCL C refused a scalar shifted by a vector (a broadcast operand of a widened
    # elementwise kernel: `A << B` with A of one column), on every OpenCL CPU driver.
    (1132, 109, None),
    (1132, 1740, None),
)


@pytest.mark.parametrize("target", TARGETS)
def test_quick_pass(target: str) -> None:
    if target.startswith("opencl"):
        require_opencl()
    results = run_cases(target, DEFAULT_SEED, range(QUICK))
    for seed, index, family in REGRESSIONS:
        results += run_cases(target, seed, range(index, index + 1), family)
    assert len(results) == QUICK + len(REGRESSIONS)
    failed = [r for r in results if r.failed]
    lines = [
        f"{r.index} ({r.family}) {r.kind}: {r.detail}\n  {r.reproducer(DEFAULT_SEED)}"
        for r in failed
    ]
    assert not failed, f"{len(failed)} of {len(results)} cases failed:\n" + "\n".join(lines)
    skipped = sum(r.kind == "skip" for r in results)
    assert skipped < len(results) // 10, f"{skipped} cases were outside what the fuzzer judges"


def test_draws_are_reproducible_and_cover_every_family() -> None:
    first = [draw(DEFAULT_SEED, i) for i in range(QUICK)]
    again = [draw(DEFAULT_SEED, i) for i in range(QUICK)]
    assert [c.source for c in first] == [c.source for c in again]
    for one, other in zip(first, again, strict=True):
        assert one.inputs.keys() == other.inputs.keys()
        assert all((one.inputs[n] == other.inputs[n]).all() for n in one.inputs)
    assert {c.family for c in first} == set(FAMILIES)
