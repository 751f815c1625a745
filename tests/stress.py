"""Exit stress test: many short processes use a device and exit; none may exit abnormally.

A process that used a device must exit cleanly however it leaves its work: with calls still
running, right after reading a result, with threads that made many calls, with an output
still to be converted on the host. An abnormal exit
is a non-zero return code, a signal (SIGABRT from "terminate called without an active
exception" when a driver thread is caught in a C++ call at interpreter exit, issue 10), or
a traceback, fatal error or "terminate called" on stderr.

    python -m tests.stress --processes 500 --device llvm_cpu.0 --device opencl.0

runs that many processes per device, a few at a time, cycling through the scenarios, and
prints one line per abnormal exit (scenario, device, return code or signal, stderr tail);
its exit status is 1 when there was one. Without `--device` it uses `llvm_cpu.0` and every
OpenCL device `tile.devices()` lists. `tests/test_stress.py` runs a short form.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import tile

REPO = Path(__file__).resolve().parents[1]
ABNORMAL_OUTPUT = ("terminate called", "Traceback", "Fatal Python error", "Exception ignored")
CHILD_TIMEOUT_SECONDS = 120.0

ADD = "function (A[N], B[N]) -> (C) { C = A + B; }"
MATMUL = """
function (A[M, K], B[K, N]) -> (C) {
  C[m, n: M, N] = +(A[m, k] * B[k, n]);
}"""


# ---- scenarios (run in the child processes) -------------------------------------------------


def _vectors(size: int) -> dict[str, object]:
    import numpy as np

    rng = np.random.default_rng(size)
    return {
        "A": rng.random(size, dtype=np.float32),
        "B": rng.random(size, dtype=np.float32),
    }


def threads(device: str) -> None:
    """Four threads each make many small calls, reading only some results, then exit."""
    import numpy as np

    import tile

    add = tile.Function(ADD)
    inputs = _vectors(256)

    def work(number: int) -> None:
        for call in range(40):
            out = add(device=device, **inputs)["C"]
            if call % 10 == number:
                np.asarray(out)

    workers = [threading.Thread(target=work, args=(number,)) for number in range(4)]
    for worker in workers:
        worker.start()
    # Not joined: the interpreter waits for them at exit, then shuts down.


def running(device: str) -> None:
    """Exit while a big call (and a queue of small ones after it) is still running."""
    import numpy as np

    import tile

    rng = np.random.default_rng(0)
    a = rng.random((512, 512), dtype=np.float32)
    matmul = tile.Function(MATMUL)
    out = matmul(device=device, A=a, B=a)["C"]
    for _ in range(3):
        out = matmul(device=device, A=out, B=a)["C"]


def read(device: str) -> None:
    """Exit right after reading an output on the host."""
    import numpy as np

    import tile

    out = tile.Function(ADD)(device=device, **_vectors(4096))["C"]
    np.asarray(out)


def convert(device: str) -> None:
    """Exit while a host job waits to store a running call's output in another dtype."""
    import numpy as np

    import tile

    a = np.random.default_rng(0).random((512, 512), dtype=np.float32)
    output = tile.Tensor(device, (512, 512), "float16")
    tile.Invoker(MATMUL, {"A": a, "B": a}, {"C": output}, device=device).invoke()


def single(device: str) -> None:
    """One call, not waited for."""
    import tile

    tile.Function(ADD)(device=device, **_vectors(1024))


SCENARIOS: dict[str, Callable[[str], None]] = {
    "threads": threads,
    "running": running,
    "read": read,
    "convert": convert,
    "single": single,
}


# ---- the parent ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    scenario: str
    device: str
    returncode: int | None  # None: killed after CHILD_TIMEOUT_SECONDS
    stderr: str

    @property
    def abnormal(self) -> bool:
        if self.returncode != 0:
            return True
        return any(text in self.stderr for text in ABNORMAL_OUTPUT)

    def describe(self) -> str:
        if self.returncode is None:
            status = f"timed out after {CHILD_TIMEOUT_SECONDS:.0f} s"
        elif self.returncode < 0:
            status = f"signal {signal.Signals(-self.returncode).name}"
        else:
            status = f"return code {self.returncode}"
        tail = " | ".join(line for line in self.stderr.strip().splitlines()[-3:])
        return f"FAIL {self.scenario} on {self.device}: {status}; stderr: {tail or '(empty)'}"


def run_child(scenario: str, device: str) -> Outcome:
    command = [sys.executable, "-m", "tests.stress", "--child", scenario, device]
    try:
        done = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr
        text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
        return Outcome(scenario, device, None, text)
    return Outcome(scenario, device, done.returncode, done.stderr)


def default_devices() -> list[str]:
    """`llvm_cpu.0` and every OpenCL device that loaded."""
    import tile

    listed: list[tile.Device] = tile.devices()
    return ["llvm_cpu.0"] + [item.id for item in listed if item.id.startswith("opencl.")]


def stress(
    devices: Sequence[str],
    processes: int,
    concurrency: int = 3,
    report: Callable[[str], None] = print,
) -> list[Outcome]:
    """Run `processes` children per device, `concurrency` at a time, cycling through the
    scenarios; report each abnormal exit as it happens and return every outcome."""
    names = list(SCENARIOS)
    jobs = [(names[n % len(names)], device) for n in range(processes) for device in devices]
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(concurrency) as pool:
        for outcome in pool.map(lambda job: run_child(*job), jobs):
            outcomes.append(outcome)
            if outcome.abnormal:
                report(outcome.describe())
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.stress", description=__doc__)
    parser.add_argument("--processes", type=int, default=100, help="processes per device")
    parser.add_argument("--device", action="append", help="a device id (repeatable)")
    parser.add_argument("--concurrency", type=int, default=3, help="processes at a time")
    parser.add_argument("--child", nargs=2, metavar=("SCENARIO", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        scenario, device = args.child
        SCENARIOS[scenario](device)
        return 0
    devices = args.device or default_devices()
    start = time.monotonic()
    outcomes = stress(devices, args.processes, args.concurrency)
    for device in devices:
        mine = [outcome for outcome in outcomes if outcome.device == device]
        failed = sum(outcome.abnormal for outcome in mine)
        print(f"{device}: {failed} of {len(mine)} processes exited abnormally")
    print(f"{len(outcomes)} processes in {time.monotonic() - start:.0f} s")
    return 1 if any(outcome.abnormal for outcome in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
