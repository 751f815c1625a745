"""Independent kernels of one function run together on llvm_cpu (issue 11 item 5): each
function's time with its groups run together, against the same compiled kernels launched
one by one (the groups of the second copy taken apart before its first call), in the same
interleaved rounds (`run.median_times`), with torch doing the same work when installed.

Every copy is first checked against float64 numpy. `together / apart` below 1 is the gain;
functions whose kernels each fill the threads (two matmuls 768) should show about 1.

Run: `PYTHONPATH=. .venv/bin/python benchmarks/together.py [--rounds N] [--budget S]`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
from run import median_times  # benchmarks/run.py: the same interleaved rounds

import tile
from tile.runtime.execute import launch_order

if TYPE_CHECKING:
    from collections.abc import Callable

REDUCTIONS = """function (X[N]) -> (S, M, L) {
  S[] = +(X[i]); M[] = >(X[i]); L[] = <(X[i]);
}"""
ROWS = """function (A[R, C], B[R, C]) -> (P, Q) {
  P[r: R] = >(A[r, c]); Q[r: R] = +(B[r, c]);
}"""
MATMULS = """function (A[M, K], B[K, N], D[K, N]) -> (C, E) {
  C[m, n: M, N] = +(A[m, k] * B[k, n]); E[m, n: M, N] = +(A[m, k] * D[k, n]);
}"""


def workloads(random: np.random.Generator) -> list[tuple[str, str, dict[str, np.ndarray]]]:
    def normal(*shape: int) -> np.ndarray:
        return random.standard_normal(shape, dtype=np.float32)

    square = normal(768, 768)
    integers = random.integers(-1000, 1000, 2_000_003, dtype=np.int32)
    return [
        # Integer reductions do not run in lanes, so they do not split: one work-group each.
        ("sum, max, min of 2e6 int32", REDUCTIONS, {"X": integers}),
        ("sum, max, min of 2e6", REDUCTIONS, {"X": normal(2_000_003)}),
        ("sum, max, min of 2e5", REDUCTIONS, {"X": normal(200_003)}),
        ("row max, row sum 3x100003", ROWS, {"A": normal(3, 100_003), "B": normal(3, 100_003)}),
        ("two matmuls 768", MATMULS, {"A": square, "B": normal(768, 768), "D": square.T.copy()}),
    ]


def reference(source: str, inputs: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, float]]:
    """Each output in float64, with the scale of its error: the sum of the magnitudes that
    a float32 result adds up (rounding grows with it)."""
    wide = {name: array.astype(np.float64) for name, array in inputs.items()}
    if source is REDUCTIONS:
        x = wide["X"]
        return {"S": (x.sum(), np.abs(x).sum()), "M": (x.max(), 1.0), "L": (x.min(), 1.0)}
    if source is ROWS:
        a, b = wide["A"], wide["B"]
        return {"P": (a.max(axis=1), 1.0), "Q": (b.sum(axis=1), np.abs(b).sum(axis=1).max())}
    a = wide["A"]
    scale = float((np.abs(a) @ np.abs(wide["B"])).max())
    return {"C": (a @ wide["B"], scale), "E": (a @ wide["D"], scale)}


def torch_call(source: str, inputs: dict[str, np.ndarray]) -> Callable[[], None] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    t = {name: torch.from_numpy(array) for name, array in inputs.items()}

    def call() -> None:
        with torch.inference_mode():
            if source is REDUCTIONS:
                (t["X"].sum(), t["X"].max(), t["X"].min())
            elif source is ROWS:
                (t["A"].amax(dim=1), t["B"].sum(dim=1))
            else:
                (t["A"] @ t["B"], t["A"] @ t["D"])

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="llvm_cpu.0")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--budget", type=float, default=8.0, help="seconds per workload")
    parser.add_argument("--no-torch", action="store_true", help="leave torch out")
    args = parser.parse_args()
    device = tile.device(args.device)
    executor = device.runtime.executor
    print(f"device {device.id}: {device.description}")
    print(f"{'workload':>28s} {'groups':>7s} {'together':>9s} {'apart':>9s} {'ratio':>6s} ", end="")
    print(f"{'torch':>9s}   (median ms)")
    failures = 0
    for label, source, arrays in workloads(np.random.default_rng(0)):
        specs = [tile.spec(array.shape, array.dtype) for array in arrays.values()]
        together = tile.Function(source).compile(*specs, device=device)
        device.clear_cache()  # so that the second copy is a program of its own
        apart = tile.Function(source).compile(*specs, device=device)
        # Taken apart before the first call: every later call launches step by step.
        apart.program.order = tuple((step,) for step in apart.program.schedule.steps)
        grouped = sum(len(group) > 1 for group in launch_order(together.program, executor))
        tensors = [tile.Tensor.from_numpy(array, device) for array in arrays.values()]
        want = reference(source, arrays)
        for compiled in (together, apart):
            outputs = compiled(*tensors)
            for name, (value, scale) in want.items():
                error = float(np.max(np.abs(outputs[name].numpy() - value))) / scale
                if not error < 1e-5:
                    print(f"{label}: {name} WRONG (relative error {error:.1e})")
                    failures += 1

        def run(compiled: object = together, tensors: list = tensors) -> None:
            for tensor in compiled(*tensors).values():  # type: ignore[operator]
                tensor.wait()

        def run_apart(compiled: object = apart, tensors: list = tensors) -> None:
            for tensor in compiled(*tensors).values():  # type: ignore[operator]
                tensor.wait()

        calls = [run, run_apart]
        peer = None if args.no_torch else torch_call(source, arrays)
        if peer is not None:
            calls.append(peer)
        together_s, apart_s, *torch_s = median_times(calls, args.rounds, args.budget)
        torch_text = f"{torch_s[0] * 1e3:9.3f}" if torch_s else f"{'-':>9s}"
        print(
            f"{label:>28s} {grouped:7d} {together_s * 1e3:9.3f} {apart_s * 1e3:9.3f} "
            f"{together_s / apart_s:6.2f} {torch_text}",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
