"""What a fused epilogue costs: matmul + bias + relu against the bare matmul (issue 11: at
most 1.15x at 512 and at 1000x777x333).

For each shape, both functions are checked against float64 numpy, then timed in the same
interleaved rounds (`run.median_times`: one call and the wait for its output per round,
inputs resident on the device, the order shuffled round by round), with torch's
`relu(a @ b + bias)` alongside when torch is installed. The table gives the median times
and `fused / bare`.

Run: `PYTHONPATH=. .venv/bin/python benchmarks/epilogue.py [--device ID] [--rounds N]`.
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

if TYPE_CHECKING:
    from collections.abc import Callable

BARE = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
FUSED = """function (A[M, K], B[K, N], Bias[N]) -> (O) {
  C[m, n: M, N] = +(A[m, k] * B[k, n]);
  O = relu(C + Bias);
}"""
SHAPES = [(512, 512, 512), (1000, 777, 333), (256, 256, 256), (129, 1025, 127)]
LIMIT = 1.15  # the bound on fused / bare


def torch_call(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> Callable[[], None] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    ta, tb, tbias = (torch.from_numpy(x) for x in (a, b, bias))

    def call() -> None:
        with torch.inference_mode():
            torch.relu(ta @ tb + tbias)

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per shape")
    args = parser.parse_args()
    device = tile.device(args.device)
    bare, fused = tile.Function(BARE), tile.Function(FUSED)
    print(f"device {device.id}: {device.description}")
    print(f"{'M x K x N':>16s} {'bare ms':>9s} {'fused ms':>9s} {'fused/bare':>10s} ", end="")
    print(f"{'torch ms':>9s}")
    failures = 0
    for m, k, n in SHAPES:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        tensors = {"A": tile.Tensor.from_numpy(a, device), "B": tile.Tensor.from_numpy(b, device)}
        bias_tensor = tile.Tensor.from_numpy(bias, device)
        want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0.0)
        got = fused(device=device, Bias=bias_tensor, **tensors)["O"].to_numpy()
        scale = max(float(np.max(np.abs(want))), 1.0)
        plain = bare(device=device, **tensors)["C"].to_numpy().astype(np.float64)
        error = max(
            float(np.max(np.abs(got - want))) / scale,
            float(np.max(np.abs(np.maximum(plain + bias, 0.0) - want))) / scale,
        )
        if not error < 1e-4:
            print(f"{m}x{k}x{n}: WRONG (relative error {error:.1e})")
            failures += 1
            continue

        def bare_call(tensors: dict = tensors) -> None:
            bare(device=device, **tensors)["C"].wait()

        def fused_call(tensors: dict = tensors, bias_tensor: tile.Tensor = bias_tensor) -> None:
            fused(device=device, Bias=bias_tensor, **tensors)["O"].wait()

        calls = [bare_call, fused_call]
        peer = torch_call(a, b, bias)
        if peer is not None:
            calls.append(peer)
        bare_s, fused_s, *torch_s = median_times(calls, args.rounds, args.budget)
        ratio = fused_s / bare_s
        torch_text = f"{torch_s[0] * 1e3:9.3f}" if torch_s else f"{'-':>9s}"
        mark = "" if ratio <= LIMIT else f"  above {LIMIT}"
        print(
            f"{f'{m}x{k}x{n}':>16s} {bare_s * 1e3:9.3f} {fused_s * 1e3:9.3f} {ratio:10.2f} "
            f"{torch_text}{mark}",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
