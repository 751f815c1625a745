"""Cold and warm first calls in a new process: what tile's disk cache saves (issue 13).

For every workload of ../shared/bench/workloads.py on each device, two fresh processes run it
on one new, empty `TILE_CACHE_DIR`: the first compiles everything (cold), the second finds it
on disk (warm); an untimed child before them has Python's compiled modules written, as an
installed package has them. Each child opens the device and uploads the inputs first (not
timed: the same in both), then times getting the program,
`tile.Function(source).compile(...)` (parse, bind, generate and build, or load from disk),
then the first call and a steady call. The table gives the compile time cold and warm and
their ratio (the issue asks warm <= 10% of cold), and the first call's time, compile
included, cold and warm.

Run: `.venv/bin/python benchmarks/coldstart.py [--device ID ...] [--filter NAME]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("TILE_SHARED", REPO.parent / "shared")) / "bench"


def child(name: str, device_id: str) -> None:
    """Time one workload in this process (its output: one JSON line)."""
    sys.path.insert(0, str(BENCH))
    import numpy as np  # noqa: F401 (imported before the timing, like tile)
    import workloads  # type: ignore[import-not-found]

    import tile

    workload = next(w for w in workloads.WORKLOADS if w.name == name)
    device = tile.device(device_id)
    inputs = {
        key: tile.Tensor.from_numpy(value, device) for key, value in workload.make_inputs().items()
    }
    start = time.perf_counter()
    compiled = tile.Function(workload.tile, name=name).compile(**inputs, device=device)
    compile_seconds = time.perf_counter() - start
    compiled(**inputs)[workload.output].to_numpy()
    first = time.perf_counter() - start
    start = time.perf_counter()
    compiled(**inputs)[workload.output].to_numpy()
    steady = time.perf_counter() - start
    report = {"compile": compile_seconds, "first": first, "steady": steady}
    print(json.dumps({**report, "lark": "lark" in sys.modules}))


def measure(name: str, device: str, cache: Path) -> dict:
    environment = {**os.environ, "TILE_CACHE_DIR": str(cache)}
    # As installed: compiled modules kept (a first, untimed child writes them for both).
    environment.pop("TILE_CACHE", None)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, device],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", action="append", help="device ids (llvm_cpu.0, opencl.0)")
    parser.add_argument("--filter", default="", help="only workloads whose name contains this")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    sys.path.insert(0, str(BENCH))
    import workloads  # type: ignore[import-not-found]

    devices = args.device or ["llvm_cpu.0", "opencl.0"]
    header = f"{'workload':28} {'device':11} {'cold ms':>9} {'warm ms':>9} {'warm/cold':>9}"
    print(f"{header} {'first call cold':>16} {'warm':>8}  lark")
    ratios = []
    for workload in workloads.WORKLOADS:
        if args.filter not in workload.name:
            continue
        for device in devices:
            with tempfile.TemporaryDirectory(prefix="tile-coldstart-") as cache:
                measure(workload.name, device, Path(cache) / "first")  # imports compiled
                cold = measure(workload.name, device, Path(cache))
                warm = measure(workload.name, device, Path(cache))
            costs = [1000 * run["compile"] for run in (cold, warm)]
            ratio = costs[1] / costs[0]
            ratios.append(ratio)
            print(
                f"{workload.name:28} {device:11} {costs[0]:9.1f} {costs[1]:9.1f} {ratio:9.3f} "
                f"{1000 * cold['first']:16.1f} {1000 * warm['first']:8.1f}  "
                f"{'yes' if warm['lark'] else 'no'}"
            )
    print(f"worst warm/cold: {max(ratios):.3f}")


if __name__ == "__main__":
    main()
