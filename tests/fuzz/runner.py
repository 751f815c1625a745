"""Run many cases in worker processes, so that a crash is one recorded failure.

A worker (`python -m tests.fuzz.runner ...`) runs cases `start` to `stop - 1` of one stream
on one device and prints `start <index>` before each case and one JSON line after it. The
parent reads the lines; when a worker dies (a signal, an abort inside a driver or LLVM) the
case it had started is recorded as a crash with the exit status and the end of its stderr,
and a new worker goes on with the next case.

`target` names a device with an optional suffix: `opencl.0+gpu` runs opencl.0 with
`TILE_FORCE_GPU_SETTINGS=1` (the GPU-style kernels, tile.lower.gpu.generate);
`llvm_cpu.0+eager` runs llvm_cpu.0 with `TILE_CPU_SPLIT_US=0`, so that every launch of more
than one work-group is split across the threads and independent kernels run together.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Result:
    target: str
    index: int
    family: str
    kind: str  # ok, skip, mismatch, error, reference, crash
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind not in ("ok", "skip")

    def reproducer(self, seed: int) -> str:
        device, _, mode = self.target.partition("+")
        flag = " --gpu" if mode == "gpu" else ""
        setting = "TILE_CPU_SPLIT_US=0 " if mode == "eager" else ""
        return (
            f"{setting}python -m tests.fuzz --seed {seed} --case {self.index} --device "
            f"{device}{flag}"
        )


def environment(target: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("TILE_FORCE_GPU_SETTINGS", None)
    if target.endswith("+gpu"):
        env["TILE_FORCE_GPU_SETTINGS"] = "1"
    if target.endswith("+eager"):
        env["TILE_CPU_SPLIT_US"] = "0"
    return env


def run_cases(
    target: str, seed: int, indices: range, family: str | None = None, timeout: float = 120.0
) -> list[Result]:
    """Every case of `indices` on `target`, each in a worker process that survives as long
    as its cases do."""
    results: list[Result] = []
    next_index = indices.start
    while next_index < indices.stop:
        command = [
            sys.executable,
            "-m",
            "tests.fuzz.runner",
            "--target",
            target,
            "--seed",
            str(seed),
            "--start",
            str(next_index),
            "--stop",
            str(indices.stop),
        ]
        if family:
            command += ["--family", family]
        # stderr goes to a file: a worker that writes much there (warnings, driver logs)
        # while the parent reads stdout to its end would block on a full pipe for ever.
        with tempfile.TemporaryFile("w+") as errors:
            started, next_index, status, stderr = _run_worker(
                command, target, errors, results, next_index, timeout
            )
        if started is not None:  # the worker died inside this case
            tail = " | ".join(stderr.strip().splitlines()[-3:])
            results.append(Result(target, started, "?", "crash", f"exit status {status}: {tail}"))
            next_index = started + 1
        elif status != 0:
            tail = " | ".join(stderr.strip().splitlines()[-3:])
            results.append(
                Result(
                    target,
                    next_index,
                    "?",
                    "crash",
                    f"worker failed with status {status}: {tail}",
                )
            )
            next_index += 1
    return results


def worker(target: str, seed: int, start: int, stop: int, family: str | None) -> None:
    # Imported here: the parent process never loads a device.
    import tile

    warnings.simplefilter("ignore", tile.TileWarning)  # the fuzzer judges values only
    from tests.fuzz.check import check
    from tests.fuzz.programs import draw

    device = tile.device(target.partition("+")[0])
    for index in range(start, stop):
        print(f"start {index}", flush=True)
        case = draw(seed, index, family)
        outcome = check(case, device)
        record = {
            "index": index,
            "family": case.family,
            "kind": outcome.kind,
            "detail": outcome.detail[:2000],
        }
        print(json.dumps(record), flush=True)


def _run_worker(
    command: list[str],
    target: str,
    errors: IO[str],
    results: list[Result],
    next_index: int,
    timeout: float | None,
) -> tuple[int | None, int, int, str]:
    """Run one worker to its end: the case it died in (or None), the next case, its exit
    status and its stderr."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=errors, text=True, env=environment(target), cwd=REPO
    )
    started: int | None = None
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("start "):
            started = int(line.split()[1])
        elif line.startswith("{"):
            record = json.loads(line)
            results.append(Result(target, **record))
            next_index, started = record["index"] + 1, None
    try:
        process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
    errors.seek(0)
    return started, next_index, process.returncode, errors.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--family")
    args = parser.parse_args()
    worker(args.target, args.seed, args.start, args.stop, args.family)


if __name__ == "__main__":
    main()
