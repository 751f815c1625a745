"""Dynamic against static batch sizes (issue 13 items 3 and 4): each workload of
../shared/bench/workloads.py that has a batch-like first axis, compiled once with that axis
symbolic (`tile.spec(("N", ...))`) and once for its fixed size, timed in interleaved rounds
on the same device (inputs resident on the device; one call = the call plus waiting for its
output). Prints each median and dynamic / static; the target is at most 1.15x on matmul,
conv and softmax. A second table times the dynamic function at batch sizes off the
workload's (block edges and primes) against static functions compiled for those sizes.
Two workloads of this file reduce over the batch (a batch norm and a weight gradient, which
run in stages: tile.lower.stages).

Run: `PYTHONPATH=. .venv/bin/python benchmarks/dynamic.py [--device ID ...] [--rounds N]`.
Without `--device` it measures every device `tile.devices()` lists.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from half import timed  # benchmarks/ is on sys.path when a script there runs

import tile

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(os.environ.get("TILE_SHARED", REPO.parent / "shared")) / "bench"
# workload -> the input whose first axis is the batch (several: they share it)
BATCHED = {
    "matmul_512": ("A",),
    "bmm_64x128": ("A", "X"),
    "conv3x3_8x28x128_same": ("I",),
    "softmax_256x1024": ("X",),
    "layernorm_1024x1024": ("X",),
    "maxpool2x2_112x64": ("I",),
    "batchnorm_1024x512": ("X",),
    "weight_gradient_1024x512x512": ("X", "D"),
}
OFF_SIZES = {"matmul_512": (100, 257, 1000), "softmax_256x1024": (33, 257, 1000)}


@dataclass(frozen=True)
class Local:
    """A workload of this file, shaped like those of workloads.py."""

    name: str
    tile: str
    inputs: dict[str, tuple[int, ...]]
    output: str

    def make_inputs(self) -> dict[str, np.ndarray]:
        random = np.random.default_rng(0)
        return {k: random.standard_normal(s).astype(np.float32) for k, s in self.inputs.items()}


REDUCING = (
    Local(
        "batchnorm_1024x512",
        "function (X[N, C]) -> (Y) { S[c: C] = +(X[n, c]); MU = S / N; D = X - MU;"
        " V[c: C] = +(D[n, c] * D[n, c]); Y = D / sqrt(V / N + 0.00001); }",
        {"X": (1024, 512)},
        "Y",
    ),
    Local(
        "weight_gradient_1024x512x512",
        "function (X[N, I], D[N, J]) -> (W) { W[i, j: I, J] = +(X[n, i] * D[n, j]); }",
        {"X": (1024, 512), "D": (1024, 512)},
        "W",
    ),
)


def interleaved(calls: dict[str, object], rounds: int) -> dict[str, float]:
    once = max(timed(next(iter(calls.values())), 1), 1e-4)
    repeats = max(3, min(50, int(0.2 / once)))
    medians: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            medians[name].append(timed(call, repeats))
    return {name: min(values) for name, values in medians.items()}


def caller(function: object, inputs: dict[str, tile.Tensor], output: str) -> object:
    def call() -> None:
        function(**inputs)[output].wait()  # type: ignore[operator]

    call()  # compiled and warm
    return call


def pair(
    workload: object, device: str, rows: int | None, dynamic: object | None
) -> tuple[object, object, object]:
    """The static and dynamic calls of `workload` (with `rows` rows of its batch)."""
    names = BATCHED[workload.name]  # type: ignore[attr-defined]
    arrays = workload.make_inputs()  # type: ignore[attr-defined]
    if rows is not None:
        random = np.random.default_rng(rows)
        for name in names:
            shape = (rows, *arrays[name].shape[1:])
            arrays[name] = random.standard_normal(shape).astype(np.float32)
    tensors = {name: tile.Tensor.from_numpy(value, device=device) for name, value in arrays.items()}
    function = tile.Function(workload.tile)  # type: ignore[attr-defined]
    static = function.compile(device=device, **arrays)
    if dynamic is None:
        specs: dict[str, object] = dict(arrays)
        for name in names:
            specs[name] = tile.spec(("N", *arrays[name].shape[1:]))
        dynamic = function.compile(device=device, **specs)
    output = workload.output  # type: ignore[attr-defined]
    return caller(static, tensors, output), caller(dynamic, tensors, output), dynamic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    import workloads  # type: ignore[import-not-found]

    chosen = [w for w in workloads.WORKLOADS if w.name in BATCHED] + list(REDUCING)
    devices = arguments.device or [device.id for device in tile.devices()]
    for device in devices:
        print(f"\n{device}: dynamic / static, interleaved medians")
        print(f"{'workload':28} {'rows':>5} {'static ms':>10} {'dynamic ms':>11} {'ratio':>6}")
        for workload in chosen:
            static, dynamic, compiled = pair(workload, device, None, None)
            times = interleaved({"static": static, "dynamic": dynamic}, arguments.rounds)
            rows = workload.inputs[BATCHED[workload.name][0]][0]
            show(workload.name, rows, times)
            for size in OFF_SIZES.get(workload.name, ()):
                static, dynamic, _ = pair(workload, device, size, compiled)
                show(workload.name, size, interleaved({"static": static, "dynamic": dynamic}, 3))


def show(name: str, rows: int, times: dict[str, float]) -> None:
    static, dynamic = times["static"], times["dynamic"]
    print(f"{name:28} {rows:5} {static * 1e3:10.3f} {dynamic * 1e3:11.3f} {dynamic / static:6.2f}")


if __name__ == "__main__":
    main()
