"""`make oclgrind` judges Oclgrind's stderr (tests/oclgrind.py): every report fails the run,
except pyopencl's probe for an NVIDIA-only device query and tile's own warnings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests import oclgrind
from tests.oclgrind import CRASH, VENDOR_PROBE, diagnostics

if TYPE_CHECKING:
    import pytest

PROBE = ["", VENDOR_PROBE[0], *(f"\t{line}" for line in VENDOR_PROBE[1:]), ""]
RACE = [
    "Write-write data race at local memory address 0x1000000000000",
    "\tKernel: k",
    "\t",
    "\tFirst entity:  Global(1,0,0) Local(1,0,0) Group(0,0,0)",
]


def test_reports_are_kept_and_the_vendor_probe_is_not() -> None:
    assert diagnostics(PROBE + PROBE) == []
    assert diagnostics(["", ""]) == []
    kept = diagnostics([*PROBE, *RACE, *PROBE])
    assert kept[0] == RACE[0] and "\tFirst entity:  Global(1,0,0) Local(1,0,0) Group(0,0,0)" in kept
    assert not [line for line in kept if "clGetDeviceInfo" in line]
    other_api_error = [VENDOR_PROBE[0], "\tFunction: clSetKernelArg", "\tError:    CL_INVALID"]
    assert diagnostics(other_api_error)


def test_a_crashed_case_runs_again_alone_and_fails_only_if_it_fails_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    again = {"a": ("PASS a", {}), "b": (f"FAIL b: {CRASH} (exit status -11)", {"b": ["trace"]})}
    monkeypatch.setattr(
        oclgrind, "run_suite", lambda _s, _u, case: ({case: again[case][0]}, again[case][1])
    )
    results = {"a": f"FAIL a: {CRASH} (exit status -11)", "b": f"FAIL b: {CRASH}", "c": "PASS c"}
    reports = {"a": ["Fatal Python error: Segmentation fault"], "b": ["trace"]}
    oclgrind.rerun_crashes(Path("shared"), "spec/cases", results, reports)
    assert results["a"] == "PASS a" and "a" not in reports
    assert results["b"].startswith("FAIL b") and reports["b"] == ["trace"]


def test_tile_warnings_are_not_reports() -> None:
    warning = [
        "/shared/conformance/run.py:110: TileWarning: warning[W-PREC] 2:9: '^' mixed with '|'",
        " 2 |   O = A ^ B | C & D;",
        "   |         ^",
        "  out = tile.run(case['source'], inputs, device=device)",
    ]
    assert diagnostics([*warning, ""]) == []
    assert diagnostics([*warning, "", *RACE]) == diagnostics(RACE) != []  # a report is kept
