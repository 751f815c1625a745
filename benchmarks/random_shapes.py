"""Random shapes against numpy and PyTorch in one interleaved run (issue 11 item 7).

The public workloads have round sizes; this draws the shapes a model would meet instead:

- matmul: M, N, K log-uniform in 1..1500, each operand stored row-major or transposed, and a
  batch of 1..8 (with smaller matrices) a quarter of the time;
- reductions: `+` or `>` over a random set of axes of a rank 2-4 tensor of up to 4M
  elements;
- convolutions (NHWC, HWIO): batch 1..8, image 5..64, 1..96 channels in and out, kernels
  1..5, stride 1..3, dilation 1..2, valid or same padding.

Every case is checked against float64 numpy first (a wrong answer fails the run), then
timed in interleaved rounds: ours (inputs resident on the device, one call and the wait for
its output), the natural numpy expression and, where PyTorch is importable, torch's; where
tinygrad is importable, tinygrad's too, on the device's OpenCL driver where that is Intel's
CPU runtime, else on PoCL (benchmarks/tinygrad_peer.py,
issue 12's yardstick; `--no-tinygrad` leaves it out). The table gives `ours / torch` (and
`ours / numpy`, `ours / tinygrad`) per case: below 1 is faster. The geometric means and the
worst cases close the report.

Run: `.venv/bin/python benchmarks/random_shapes.py [--device ID] [--cases N] [--seed S]`.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import dataclass, replace

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from typing import TYPE_CHECKING

import numpy as np
from run import median_times  # benchmarks/run.py: the same interleaved rounds
from tinygrad_peer import driver_of, tinygrad_call

import tile

if TYPE_CHECKING:
    from collections.abc import Callable

try:
    import torch
except ImportError:  # not a dependency: `pip install torch` into the venv to compare
    torch = None


@dataclass
class Case:
    name: str
    source: str
    inputs: dict[str, np.ndarray]
    reference: Callable[..., np.ndarray]  # float64
    numpy_fn: Callable[..., object]
    torch_fn: Callable[..., object] | None  # on torch tensors made from `inputs`
    tinygrad_fn: Callable[..., object] | None = None  # on tinygrad tensors of `inputs`


def log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def matmul_case(rng: np.random.Generator) -> Case:
    batched = rng.random() < 0.25
    top = 300 if batched else 1500
    m, n, k = (log_uniform(rng, 1, top) for _ in range(3))
    batch = int(rng.integers(1, 9)) if batched else 0
    ta, tb = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    g = "g, " if batch else ""
    gs = "G, " if batch else ""
    a_dims, a_idx = ("K, M", "k, m") if ta else ("M, K", "m, k")
    b_dims, b_idx = ("N, K", "n, k") if tb else ("K, N", "k, n")
    source = (
        f"function (A[{gs}{a_dims}], B[{gs}{b_dims}]) -> (C) "
        f"{{ C[{g}m, n: {gs}M, N] = +(A[{g}{a_idx}] * B[{g}{b_idx}]); }}"
    )
    lead = (batch,) if batch else ()
    a = rng.standard_normal((*lead, *((k, m) if ta else (m, k)))).astype(np.float32)
    b = rng.standard_normal((*lead, *((n, k) if tb else (k, n)))).astype(np.float32)

    def oriented(x: np.ndarray, transposed: bool) -> np.ndarray:
        return np.swapaxes(x, -1, -2) if transposed else x

    def numpy_fn(A: np.ndarray, B: np.ndarray) -> object:  # noqa: N803 (Tile's names)
        return np.matmul(oriented(A, ta), oriented(B, tb))

    def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:  # noqa: N803
        return np.matmul(oriented(A.astype(np.float64), ta), oriented(B.astype(np.float64), tb))

    def torch_fn(A: object, B: object) -> object:  # noqa: N803
        return torch.matmul(A.transpose(-1, -2) if ta else A, B.transpose(-1, -2) if tb else B)

    def tinygrad_fn(A: object, B: object) -> object:  # noqa: N803
        return (A.transpose(-1, -2) if ta else A) @ (B.transpose(-1, -2) if tb else B)

    layout = f"{'T' if ta else 'N'}{'T' if tb else 'N'}"
    name = f"matmul {f'{batch}x' if batch else ''}{m}x{k}x{n} {layout}"
    return Case(name, source, {"A": a, "B": b}, reference, numpy_fn, torch_fn, tinygrad_fn)


def reduction_case(rng: np.random.Generator) -> Case:
    rank = int(rng.integers(2, 5))
    dims = [log_uniform(rng, 1, 2048) for _ in range(rank)]
    while math.prod(dims) > 4_000_000:  # at most 16 MB of float32
        largest = dims.index(max(dims))
        dims[largest] = (dims[largest] + 1) // 2
    count = int(rng.integers(1, rank + 1))
    axes = sorted(int(a) for a in rng.choice(rank, size=count, replace=False))
    op = "+" if rng.random() < 0.6 else ">"
    names = "abcd"[:rank]
    kept = [names[a] for a in range(rank) if a not in axes]
    sizes = [f"D{a}" for a in range(rank) if a not in axes]
    out = f"O[{', '.join(kept)}: {', '.join(sizes)}]" if kept else "O[]"
    source = (
        f"function (X[{', '.join(f'D{a}' for a in range(rank))}]) -> (O) "
        f"{{ {out} = {op}(X[{', '.join(names)}]); }}"
    )
    x = rng.standard_normal(dims).astype(np.float32)
    axis = tuple(axes)
    np_op = np.sum if op == "+" else np.max

    def numpy_fn(X: np.ndarray) -> object:  # noqa: N803
        return np_op(X, axis=axis)

    def reference(X: np.ndarray) -> np.ndarray:  # noqa: N803
        return np.asarray(np_op(X.astype(np.float64), axis=axis))

    def torch_fn(X: object) -> object:  # noqa: N803
        return X.sum(dim=axis) if op == "+" else X.amax(dim=axis)

    def tinygrad_fn(X: object) -> object:  # noqa: N803
        return X.sum(axis=axis) if op == "+" else X.max(axis=axis)

    name = f"{'sum' if op == '+' else 'max'} {'x'.join(map(str, dims))} axes {axes}"
    return Case(name, source, {"X": x}, reference, numpy_fn, torch_fn, tinygrad_fn)


def conv_case(rng: np.random.Generator) -> Case:
    n, h, w = int(rng.integers(1, 9)), log_uniform(rng, 5, 64), log_uniform(rng, 5, 64)
    ci, co = log_uniform(rng, 1, 96), log_uniform(rng, 1, 96)
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    stride, dilation = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    same = bool(rng.random() < 0.5)
    eh, ew = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
    if not same and (eh > h or ew > w):
        same = True
    ph, pw = ((eh - 1) // 2, (ew - 1) // 2) if same else (0, 0)
    oh = (h + 2 * ph - eh) // stride + 1 if not same else -(-h // stride)
    ow = (w + 2 * pw - ew) // stride + 1 if not same else -(-w // stride)
    if same:  # TensorFlow-style same: output ceil(size / stride), padding split low-first
        ph = max(0, ((oh - 1) * stride + eh - h)) // 2
        pw = max(0, ((ow - 1) * stride + ew - w)) // 2
    source = (
        "function (I[N, H, W, CI], F[KH, KW, CI, CO]) -> (O) { "
        f"O[n, y, x, co: N, {oh}, {ow}, CO] = +(I[n, {stride} * y + {dilation} * i - {ph}, "
        f"{stride} * x + {dilation} * j - {pw}, ci] * F[i, j, ci, co]); }}"
    )
    image = rng.standard_normal((n, h, w, ci)).astype(np.float32)
    kernel = rng.standard_normal((kh, kw, ci, co)).astype(np.float32)
    need_h, need_w = (oh - 1) * stride + eh, (ow - 1) * stride + ew

    def windows(image_: np.ndarray) -> np.ndarray:
        padded = np.zeros((n, max(need_h, h + ph), max(need_w, w + pw), ci), image_.dtype)
        padded[:, ph : ph + h, pw : pw + w] = image_
        rows = np.arange(oh)[:, None] * stride + np.arange(kh)[None, :] * dilation
        cols = np.arange(ow)[:, None] * stride + np.arange(kw)[None, :] * dilation
        return padded[:, rows[:, :, None, None], cols[None, None, :, :]]  # n, oh, kh, ow, kw, ci

    def numpy_fn(I: np.ndarray, F: np.ndarray) -> object:  # noqa: N803, E741
        return np.einsum("nakbli,klic->nabc", windows(I), F, optimize=True)

    def reference(I: np.ndarray, F: np.ndarray) -> np.ndarray:  # noqa: N803, E741
        return np.einsum("nakbli,klic->nabc", windows(I.astype(np.float64)), F.astype(np.float64))

    def torch_fn(I: object, F: object) -> object:  # noqa: N803, E741
        x = I.permute(0, 3, 1, 2)
        x = torch.nn.functional.pad(x, (pw, max(0, need_w - w - pw), ph, max(0, need_h - h - ph)))
        return torch.nn.functional.conv2d(
            x, F.permute(3, 2, 0, 1), stride=stride, dilation=dilation
        ).permute(0, 2, 3, 1)

    def tinygrad_fn(I: object, F: object) -> object:  # noqa: N803, E741
        padding = ((0, 0), (0, 0), (ph, max(0, need_h - h - ph)), (pw, max(0, need_w - w - pw)))
        x = I.permute(0, 3, 1, 2).pad(padding)
        y = x.conv2d(F.permute(3, 2, 0, 1), stride=stride, dilation=dilation)
        return y.permute(0, 2, 3, 1)

    pad = "same" if same else "valid"
    name = f"conv {n}x{h}x{w}x{ci}->{co} k{kh}x{kw} s{stride} d{dilation} {pad}"
    case = Case(name, source, {"I": image, "F": kernel}, reference, numpy_fn, torch_fn)
    return replace(case, tinygrad_fn=tinygrad_fn)


FAMILIES = {"matmul": matmul_case, "reduce": reduction_case, "conv": conv_case}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--cases", type=int, default=10, help="cases per family (10)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--family", choices=sorted(FAMILIES), action="append")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budget", type=float, default=5.0, help="seconds per case")
    parser.add_argument("--no-tinygrad", dest="tinygrad", action="store_false")
    args = parser.parse_args()
    device = tile.device(args.device)
    if torch is not None:
        torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(args.seed)
    print(f"device {device.id}: {device.description}; torch {getattr(torch, '__version__', '-')}")
    print(f"{'case':48s} {'ours ms':>9s} {'/numpy':>7s} {'/torch':>7s} {'/tinygrad':>9s}  check")
    torch_ratios: list[tuple[float, str]] = []
    tinygrad_ratios: list[tuple[float, str]] = []
    numpy_ratios: list[float] = []
    failures = 0
    for family in args.family or list(FAMILIES):
        for _ in range(args.cases):
            case = FAMILIES[family](rng)
            function = tile.Function(case.source)
            tensors = {k: tile.Tensor.from_numpy(v, device) for k, v in case.inputs.items()}
            output = function.outputs[0]
            result = function(device=device, **tensors)[output].to_numpy().astype(np.float64)
            want = case.reference(**case.inputs)
            error = float(np.max(np.abs(result - want), initial=0)) / max(
                1.0, float(np.max(np.abs(want), initial=0))
            )
            ok = result.shape == want.shape and error < 1e-3
            failures += not ok

            def ours(function=function, tensors=tensors, output=output) -> None:
                function(device=device, **tensors)[output].wait()

            calls = [ours, lambda case=case: case.numpy_fn(**case.inputs)]
            if torch is not None and case.torch_fn is not None:
                prepared = {k: torch.from_numpy(v) for k, v in case.inputs.items()}

                def torch_call(case=case, prepared=prepared) -> None:
                    with torch.inference_mode():
                        case.torch_fn(**prepared)

                calls.append(torch_call)
            expression = case.tinygrad_fn if args.tinygrad else None
            tinygrad_fn = tinygrad_call(expression, case.inputs, driver_of(device))
            calls += [tinygrad_fn] if tinygrad_fn is not None else []
            ours_s, numpy_s, *peer_s = median_times(calls, args.rounds, args.budget)
            numpy_ratios.append(ours_s / numpy_s)
            texts = {"torch": "-", "tinygrad": "-"}
            if len(calls) > 2 + (tinygrad_fn is not None):
                torch_ratios.append((ours_s / peer_s[0], case.name))
                texts["torch"] = f"{ours_s / peer_s[0]:.2f}"
            if tinygrad_fn is not None:
                tinygrad_ratios.append((ours_s / peer_s[-1], case.name))
                texts["tinygrad"] = f"{ours_s / peer_s[-1]:.2f}"
            check = f"ok ({error:.0e})" if ok else f"WRONG (rel err {error:.1e})"
            print(
                f"{case.name:48s} {ours_s * 1e3:9.3f} {ours_s / numpy_s:7.2f} "
                f"{texts['torch']:>7s} {texts['tinygrad']:>9s}  {check}",
                flush=True,
            )
    geomean = math.exp(statistics.fmean(math.log(r) for r in numpy_ratios))
    print(f"ours / numpy: geomean {geomean:.2f}")
    tinygrad = f"tinygrad on {driver_of(device)}"
    for peer, ratios in (("torch", torch_ratios), (tinygrad, tinygrad_ratios)):
        if ratios:
            geomean = math.exp(statistics.fmean(math.log(r) for r, _ in ratios))
            worst, name = max(ratios)
            print(f"ours / {peer}: geomean {geomean:.2f}, worst {worst:.2f} ({name})")
    print("times are medians of interleaved rounds; below 1 is faster than the peer")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
