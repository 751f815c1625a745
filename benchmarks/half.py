"""float16 against float32 (issue 12 item 3): the same product in both types, on each device.

A device without half arithmetic computes float16 in float32 (loading and storing half), so a
float16 product should cost about what the float32 one does; the target is at most 1.3x on
such a device. Each shape's two programs are compiled first, then timed in interleaved
rounds (inputs resident on the device; one call = the call plus waiting for its output), and
the script prints each median and the ratio. Products: matmuls of square and odd sizes,
one with A transposed, and a batched one.

Run: `PYTHONPATH=. .venv/bin/python benchmarks/half.py [--device ID ...] [--rounds N]`.
Without `--device` it measures every device `tile.devices()` lists.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tile

NN = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
TN = "function (A[K, M], B[K, N]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[k, n]); }"
BATCHED = """function (A[G, M, K], B[G, K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]);
}"""
PRODUCTS = [  # name, source, shape of A, shape of B
    ("matmul 256", NN, (256, 256), (256, 256)),
    ("matmul 1024", NN, (1024, 1024), (1024, 1024)),
    ("matmul 1000x777x333", NN, (1000, 777), (777, 333)),
    ("A.T @ B 512", TN, (512, 512), (512, 512)),
    ("batched 8x128x256x128", BATCHED, (8, 128, 256), (8, 256, 128)),
]


def timed(call: object, repeats: int) -> float:
    """Median seconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(device: str, rounds: int) -> list[tuple[str, float, float]]:
    rows = []
    random = np.random.default_rng(0)
    for name, source, a_shape, b_shape in PRODUCTS:
        function = tile.Function(source)
        calls = {}
        for dtype in ("float32", "float16"):
            a = tile.Tensor.from_numpy(random.random(a_shape).astype(dtype), device=device)
            b = tile.Tensor.from_numpy(random.random(b_shape).astype(dtype), device=device)

            def call(
                a: tile.Tensor = a, b: tile.Tensor = b, function: tile.Function = function
            ) -> None:
                function(a, b, device=device)["C"].wait()

            call()  # compiled and warm
            calls[dtype] = call
        once = max(timed(calls["float32"], 1), 1e-4)
        repeats = max(3, min(50, int(0.2 / once)))
        medians: dict[str, list[float]] = {dtype: [] for dtype in calls}
        for _ in range(rounds):
            for dtype, call in calls.items():
                medians[dtype].append(timed(call, repeats))
        rows.append((name, min(medians["float32"]), min(medians["float16"])))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    devices = arguments.device or [device.id for device in tile.devices()]
    print(f"{'device':<12} {'product':<24} {'float32 ms':>11} {'float16 ms':>11} {'ratio':>6}")
    for device in devices:
        for name, f32, f16 in measure(device, arguments.rounds):
            times = f"{f32 * 1e3:>11.2f} {f16 * 1e3:>11.2f}"
            print(f"{device:<12} {name:<24} {times} {f16 / f32:>6.2f}")


if __name__ == "__main__":
    main()
