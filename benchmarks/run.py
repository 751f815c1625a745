"""Benchmark the workloads of ../shared/bench/workloads.py on a tile device.

For each workload: check our result against the float64 reference, then time our call
(inputs resident on the device; one call = `fn(**inputs)` plus `Tensor.wait()` on the output, as
../shared/bench/README.md times every engine) interleaved with the natural numpy expression,
and print both medians and the speed ratio `numpy time / our time` (> 1: faster than numpy).
The `plaidml` column is PlaidML 0.7.0's ratio to numpy on the machine of that README. Where
PyTorch is importable (it is not a dependency: `pip install torch` into the venv), its
natural expression is timed in the same rounds and `torch` gives `torch time / our time`;
where tinygrad is importable, `tinygrad` gives tinygrad's time / our time, tinygrad on the
device's own OpenCL driver (Intel's CPU runtime for a device on it), else on PoCL
(benchmarks/tinygrad_peer.py). The last line holds the geomeans of those ratios.

With `--also ID`, the same function on a second tile device is timed in the same rounds too
(issue 12 asks OpenCL for a geomean within 2x of llvm_cpu.0 in one run): its column is that
device's time / our time.

Run: `.venv/bin/python benchmarks/run.py [--device ID] [--also ID] [--filter NAME]
[--rounds N]`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

# Process settings of the peer baseline: idle BLAS workers must not steal our cores.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
from tinygrad_peer import driver_of, tinygrad_call  # benchmarks/: the script's own directory

import tile

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("TILE_SHARED", REPO.parent / "shared")) / "bench"


def plaidml_ratios() -> dict[str, float]:
    """numpy time / PlaidML llvm time per workload, read from the baseline README."""
    ratios = {}
    readme = (BENCH / "README.md").read_text()
    section = readme.split("## Time per call", 1)[-1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 6 or not re.match(r"[A-Za-z_0-9]+$", cells[0]):
            continue
        numbers = [re.match(r"([\d,.]+)", c) for c in (cells[3], cells[5])]
        if all(numbers):
            plaidml, numpy_ms = (float(m.group(1).replace(",", "")) for m in numbers)  # type: ignore[union-attr]
            ratios[cells[0]] = numpy_ms / plaidml
    return ratios


def torch_call(workload: object, arrays: dict[str, np.ndarray]) -> object | None:
    """A call of the workload's torch expression on inputs prepared once, or None."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    prep = workload.torch_prep  # type: ignore[attr-defined]
    inputs = {n: prep.get(n, lambda t: t)(torch.from_numpy(a)) for n, a in arrays.items()}

    def call() -> None:
        with torch.inference_mode():
            workload.torch_fn(**inputs)  # type: ignore[attr-defined]

    return call


def median_times(calls: list, rounds: int, budget: float) -> list[float]:
    """Interleaved rounds: one call of each engine per round, in an order shuffled round by
    round (the same shuffles every run), so that each engine follows each other one about
    equally often; median seconds each. The first call after another engine ran is slow for
    every engine (on a 2-core VM, a matmul 256 after 10 ms of idle cores: numpy 0.23 -> 0.57
    ms, torch 0.30 -> 0.79, ours 0.42 -> 1.11; Intel Xeon), and a fixed order (or a rotated
    one, which keeps who follows whom) gave that cost to the same engines every round."""
    samples: list[list[float]] = [[] for _ in calls]
    order = list(range(len(calls)))
    shuffle = random.Random(len(calls)).shuffle
    deadline = time.perf_counter() + budget
    for _ in range(rounds):
        shuffle(order)
        for index in order:
            start = time.perf_counter()
            calls[index]()
            samples[index].append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return [statistics.median(s) for s in samples]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--filter", default="")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per workload")
    parser.add_argument("--no-tinygrad", dest="tinygrad", action="store_false")
    parser.add_argument(
        "--also", default=None, help="another tile device, timed in the same rounds"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    import workloads  # type: ignore[import-not-found]

    device = tile.device(args.device)
    also = tile.device(args.also) if args.also else None
    peers = plaidml_ratios()
    print(f"device {device.id}: {device.description}")
    also_title = f" {also.id:>11s}" if also else ""
    header = (
        f"{'workload':24s} {'ours ms':>9s} {'numpy ms':>9s} {'ratio':>7s} {'plaidml':>8s} "
        f"{'torch':>7s} {'tinygrad':>8s}{also_title}  check"
    )
    print(header)
    print("-" * len(header))
    failures = 0
    geomeans: dict[str, list[float]] = {"torch": [], "tinygrad": [], "also": []}
    for workload in workloads.WORKLOADS:
        if args.filter not in workload.name:
            continue
        arrays = workload.make_inputs()
        function = tile.Function(workload.tile)
        tensors = {n: tile.Tensor.from_numpy(a, device) for n, a in arrays.items()}

        def ours(function=function, tensors=tensors, name=workload.output):
            function(device=device, **tensors)[name].wait()

        def numpy_call(workload=workload, arrays=arrays):
            workload.numpy_fn(**arrays)

        expected = workload.expected(arrays)
        scale = max(float(np.max(np.abs(expected))), 1.0)

        def checked(
            on, inputs, function=function, expected=expected, scale=scale, name=workload.output
        ):
            """(right, relative error) of the workload's result on device `on`."""
            got = function(device=on, **inputs)[name].to_numpy()
            error = float(np.max(np.abs(got.astype(np.float64) - expected))) / scale
            return got.shape == expected.shape and error < 1e-3, error

        ok, error = checked(device, tensors)
        failures += not ok
        calls = [ours, numpy_call]
        torch_fn = torch_call(workload, arrays)
        expression = getattr(workload, "tinygrad_fn", None) if args.tinygrad else None
        tinygrad_fn = tinygrad_call(expression, arrays, driver_of(device))
        also_fn = None
        if also is not None:
            there = {n: tile.Tensor.from_numpy(a, also) for n, a in arrays.items()}

            def also_fn(function=function, tensors=there, name=workload.output):
                function(device=also, **tensors)[name].wait()

            right, wrong = checked(also, there)
            if not right:
                failures += 1
                print(f"{workload.name}: WRONG on {also.id} (rel err {wrong:.1e})")
        peer_calls = {"torch": torch_fn, "tinygrad": tinygrad_fn, "also": also_fn}
        calls += [c for c in peer_calls.values() if c is not None]
        ours_s, numpy_s, *peer_s = median_times(calls, args.rounds, args.budget)
        ratio = numpy_s / ours_s
        texts = {}
        for (name, call), width in zip(peer_calls.items(), (7, 8, 11), strict=True):
            if call is None:
                texts[name] = f"{'-':>{width}s}"
                continue
            geomeans[name].append(peer_s.pop(0) / ours_s)
            texts[name] = f"{geomeans[name][-1]:{width}.2f}"
        peer = peers.get(workload.name)
        peer_text = f"{peer:8.2f}" if peer else f"{'-':>8s}"
        check = f"ok ({error:.1e})" if ok else f"WRONG (rel err {error:.1e})"
        print(
            f"{workload.name:24s} {ours_s * 1e3:9.3f} {numpy_s * 1e3:9.3f} {ratio:7.2f} "
            f"{peer_text} {texts['torch']} {texts['tinygrad']}"
            f"{' ' + texts['also'] if also else ''}  {check}",
            flush=True,
        )
    print(
        "ratio = numpy time / our time (> 1 is faster than numpy); plaidml = the same for "
        "PlaidML 0.7.0 llvm_cpu from the baseline README; torch = torch time / our time "
        "(> 1 is faster than PyTorch), tinygrad the same for tinygrad (on "
        f"{driver_of(device)}), measured in the same rounds"
        + (f"; {also.id} = its time / our time, in the same rounds" if also else "")
    )
    for name, ratios in geomeans.items():
        if ratios:
            mean = float(np.exp(np.mean(np.log(ratios))))
            who = also.id if name == "also" and also else name
            print(f"geomean {who} time / our time over {len(ratios)} workloads: {mean:.2f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
