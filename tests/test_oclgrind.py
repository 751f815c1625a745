"""`make oclgrind` judges Oclgrind's stderr (tests/oclgrind.py): every report fails the run,
except pyopencl's probe for an NVIDIA-only device query."""

from __future__ import annotations

from tests.oclgrind import VENDOR_PROBE, diagnostics

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
