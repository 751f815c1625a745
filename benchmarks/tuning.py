"""What the measured search of tiles gains (`TILE_TUNE=1`, tile/runtime/tune.py).

For fixed odd matmul shapes and random cases of benchmarks/random_shapes.py (matmuls with M,
N, K in 1..1500 and random layouts, reductions over random axes, convolutions with random
sizes, strides and dilations), each case is compiled twice on one
device: with the cost model's tiles, and with tuning on (a fresh search: the memory is in a
temporary cache directory unless `--keep` names one). Both are checked against float64
numpy, then timed in interleaved rounds with torch (if installed): one call and the wait for
its output, inputs resident on the device. The table gives the search's time, the tile it
chose, `tuned / untuned` and `tuned / torch` (below 1 is faster); the geometric means and
the worst case close the report.

Run: `PYTHONPATH=. .venv/bin/python benchmarks/tuning.py [--device ID] [--cases N]`.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
from random_shapes import Case, conv_case, matmul_case, reduction_case, torch
from run import median_times  # benchmarks/run.py: the same interleaved rounds

import tile
from tile.lower.generate import generate_program
from tile.lower.tuning import Tuning
from tile.runtime import tune

FIXED = [(1000, 777, 333), (9, 823, 50), (333, 1000, 777), (127, 129, 1025), (2047, 63, 65)]


def fixed_case(m: int, k: int, n: int, rng: np.random.Generator) -> Case:
    source = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return Case(
        f"matmul {m}x{k}x{n} NN",
        source,
        {"A": a, "B": b},
        lambda A, B: A.astype(np.float64) @ B,  # noqa: N803 (Tile's names)
        lambda A, B: A @ B,  # noqa: N803
        lambda A, B: torch.matmul(A, B),  # noqa: N803
    )


def chosen_tile(case: Case, device: tile.Device) -> str:
    tuning = Tuning()
    bound = tile.Function(case.source).bind(case.inputs)
    generate_program(bound, device.runtime.device.settings, tuning=tuning)
    tiles = []
    for site in tuning.sites.values():
        chosen = tune.recall(device.runtime, site.key)
        mark = "" if chosen == site.candidates[0] else "*"
        tiles.append("x".join(map(str, chosen)) + mark if chosen else "-")
    return ",".join(tiles) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--cases", type=int, default=6, help="random cases per family (6)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budget", type=float, default=4.0, help="seconds of timing per case")
    parser.add_argument("--keep", default=None, help="a cache directory to search into")
    args = parser.parse_args()
    os.environ["TILE_CACHE_DIR"] = args.keep or tempfile.mkdtemp(prefix="tile-tuning-")
    os.environ.pop("TILE_TUNE", None)
    device = tile.device(args.device)
    if torch is not None:
        torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(args.seed)
    cases = [fixed_case(m, k, n, rng) for m, k, n in FIXED]
    for family in (matmul_case, reduction_case, conv_case):
        cases += [family(rng) for _ in range(args.cases)]
    print(f"device {device.id}: {device.description}; torch {getattr(torch, '__version__', '-')}")
    head = f"{'case':48s} {'search s':>8s} {'tile':>12s} {'tuned ms':>9s} {'/untuned':>8s}"
    print(f"{head} {'/torch':>7s} {'untuned/torch':>13s}")
    gains: list[tuple[float, str]] = []
    versus_torch: list[tuple[float, str]] = []
    failures = 0
    for case in cases:
        tensors = {k: tile.Tensor.from_numpy(v, device) for k, v in case.inputs.items()}
        plain = tile.Function(case.source)
        tuned = tile.Function(case.source + " ")  # another source hash: its own program
        output = plain.outputs[0]
        os.environ["TILE_TUNE"] = "1"
        start = time.perf_counter()
        tuned(device=device, **tensors)[output].wait()
        search = time.perf_counter() - start
        os.environ.pop("TILE_TUNE")
        want = case.reference(**case.inputs)
        for function in (plain, tuned):
            got = function(device=device, **tensors)[output].to_numpy().astype(np.float64)
            error = float(np.max(np.abs(got - want), initial=0)) / max(1.0, np.abs(want).max())
            failures += not error < 1e-3

        def run(function: tile.Function, tensors: dict = tensors, output: str = output) -> None:
            function(device=device, **tensors)[output].wait()

        calls = [lambda tuned=tuned: run(tuned), lambda plain=plain: run(plain)]
        if torch is not None:
            prepared = {k: torch.from_numpy(v) for k, v in case.inputs.items()}

            def torch_call(case: Case = case, prepared: dict = prepared) -> None:
                with torch.inference_mode():
                    case.torch_fn(**prepared)

            calls.append(torch_call)
        tuned_s, plain_s, *torch_s = median_times(calls, args.rounds, args.budget)
        gains.append((tuned_s / plain_s, case.name))
        texts = ["-", "-"]
        if torch_s:
            versus_torch.append((tuned_s / torch_s[0], case.name))
            texts = [f"{tuned_s / torch_s[0]:.2f}", f"{plain_s / torch_s[0]:.2f}"]
        print(
            f"{case.name:48s} {search:8.2f} {chosen_tile(case, device):>12s} {tuned_s * 1e3:9.3f} "
            f"{tuned_s / plain_s:8.2f} {texts[0]:>7s} {texts[1]:>13s}",
            flush=True,
        )
    for label, ratios in (("tuned / untuned", gains), ("tuned / torch", versus_torch)):
        if ratios:
            geomean = math.exp(statistics.fmean(math.log(r) for r, _ in ratios))
            worst, name = max(ratios)
            print(f"{label}: geomean {geomean:.2f}, worst {worst:.2f} ({name})")
    print("tile: * where the search moved off the cost model's tile; times are medians")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
