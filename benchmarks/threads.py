"""Do both cores work on a large contraction? Times matmul (default 1024, float32) on the
llvm_cpu device with 1 and with 2 compute threads, each in its own subprocess
(`TILE_CPU_THREADS`), and prints the median times and the speed-up of 2 threads over 1.

Run: `PYTHONPATH=. python benchmarks/threads.py [--size 1024] [--rounds 10] [--threads 1 2]`.
On a shared machine the speed-up is only as good as the idle cores: check the load it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"


def measure(size: int, rounds: int) -> dict[str, float]:
    """Median seconds per call on this process's device (threads from TILE_CPU_THREADS)."""
    import numpy as np

    import tile

    device = tile.device("llvm_cpu.0")
    random = np.random.default_rng(0)
    a = random.standard_normal((size, size), dtype=np.float32)
    b = random.standard_normal((size, size), dtype=np.float32)
    function = tile.Function(MATMUL)
    tensors = {"A": tile.Tensor.from_numpy(a, device), "B": tile.Tensor.from_numpy(b, device)}

    def call() -> object:
        out = function(device=device, **tensors)["C"]
        out.wait()
        return out

    got = call().to_numpy()  # type: ignore[attr-defined]
    want = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    for _ in range(3):  # warm-up: the pool's threads start, the allocator finds its pages
        call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "best": min(times), "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(measure(options.size, options.rounds)))
        return
    results = {}
    for threads in options.threads:
        environment = dict(os.environ, TILE_CPU_THREADS=str(threads))
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), environment.get("PYTHONPATH", "")])
        )
        command = [sys.executable, __file__, "--child", "--size", str(options.size)]
        command += ["--rounds", str(options.rounds)]
        output = subprocess.run(
            command, env=environment, check=True, capture_output=True, text=True
        ).stdout
        results[threads] = json.loads(output.strip().splitlines()[-1])
    flops = 2 * options.size**3
    print(f"matmul {options.size} float32 on llvm_cpu.0, load {os.getloadavg()}")
    print(f"{'threads':>7s} {'median ms':>10s} {'best ms':>9s} {'GFLOP/s':>8s} {'rel err':>8s}")
    for threads, result in results.items():
        print(
            f"{threads:7d} {result['median'] * 1e3:10.2f} {result['best'] * 1e3:9.2f} "
            f"{flops / result['median'] / 1e9:8.1f} {result['error']:8.1e}"
        )
    base = results[options.threads[0]]
    for threads in options.threads[1:]:
        speedup = base["median"] / results[threads]["median"]
        best = base["best"] / results[threads]["best"]
        print(
            f"speed-up {threads} threads over {options.threads[0]}: {speedup:.2f}x (median), "
            f"{best:.2f}x (best)"
        )


if __name__ == "__main__":
    main()
