"""Variants of the public workloads against PyTorch in one interleaved run (issue 11's
held-back workloads: odd sizes, other layouts, strides, other axes).

The public workloads of ../shared/bench/workloads.py have round sizes and one layout each;
the held-back ones are "of the same kinds". This script times such variants: a transposed
matvec, one over short rows (33), a column vector, batched and transposed products at odd
sizes, strided, dilated and single-channel convolutions, depthwise convolutions over odd
channel counts and 5x5 windows, overlapping pools, softmax along either axis and over short
rows, layernorm with short rows, elementwise and total reductions one past a round size,
reductions over the first and middle axes (a column max 3001 wide) and over short or odd
last ones, a product 65 wide (5 vectors), permutations of rank 3, and PyTorch's own layout:
NCHW convolutions (padded, strided, with a fused bias and relu), a depthwise one and a
padded max pool. Every variant is checked against float64 first (numpy, or torch in float64
where torch defines the operation), then timed with torch (inputs resident on the device;
one call and the wait for its output, as `benchmarks/run.py` times). The table gives `ours /
torch` (below 1 is faster); the geomean and the worst close the report.

Run: `.venv/bin/python benchmarks/variants.py [--device ID] [--filter TEXT]` (needs torch:
`.venv/bin/pip install torch==2.13.0`).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
from run import median_times  # benchmarks/run.py: the same interleaved rounds

import tile

if TYPE_CHECKING:
    from collections.abc import Callable

try:
    import torch
    import torch.nn.functional as tf
except ImportError:  # not a dependency
    torch = None

RNG = np.random.default_rng(5)


@dataclass
class Variant:
    name: str
    source: str
    inputs: dict[str, np.ndarray]
    reference: Callable[..., np.ndarray]  # float64, from `inputs` in their order
    peer: Callable[..., object]  # torch, on tensors of `inputs` in their order (NHWC as NCHW)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def wide(array: np.ndarray) -> object:
    return torch.from_numpy(array).double()


def nchw(image: object) -> object:
    """An NHWC tensor as torch's NCHW view of it (channels-last memory)."""
    return image.permute(0, 3, 1, 2)


def conv(n: int, h: int, w: int, ci: int, co: int, k: int, s: int, d: int, same: bool) -> Variant:
    """NHWC x HWIO; `same`: TensorFlow's padding (output ceil(size / s), low side first)."""
    span = (k - 1) * d + 1
    if same:
        oh, ow = -(-h // s), -(-w // s)
        extra_h, extra_w = max(0, (oh - 1) * s + span - h), max(0, (ow - 1) * s + span - w)
    else:
        oh, ow, extra_h, extra_w = (h - span) // s + 1, (w - span) // s + 1, 0, 0
    pad = (extra_w // 2, extra_w - extra_w // 2, extra_h // 2, extra_h - extra_h // 2)
    source = (
        f"function (I[N, H, W, CI], F[KH, KW, CI, CO]) -> (O) {{ O[n, y, x, co: N, {oh}, {ow}, "
        f"CO] = +(I[n, {s} * y + {d} * i - {pad[2]}, {s} * x + {d} * j - {pad[0]}, ci] * "
        f"F[i, j, ci, co]); }}"
    )

    def peer(image: object, kernel: object) -> object:
        hwio = kernel.permute(3, 2, 0, 1)
        return tf.conv2d(tf.pad(nchw(image), pad), hwio, stride=s, dilation=d)

    def reference(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        return peer(wide(image), wide(kernel)).permute(0, 2, 3, 1).numpy()

    name = f"conv {n}x{h}x{w}x{ci}->{co} k{k} s{s} d{d} {'same' if same else 'valid'}"
    return Variant(
        name, source, {"I": normal(n, h, w, ci), "F": normal(k, k, ci, co)}, reference, peer
    )


def depthwise(n: int, h: int, w: int, c: int, k: int, s: int) -> Variant:
    p = (k - 1) // 2
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    source = (
        f"function (I[N, H, W, C], K[KH, KW, C]) -> (O) {{ O[n, y, x, c: N, {oh}, {ow}, C] = "
        f"+(I[n, {s} * y + i - {p}, {s} * x + j - {p}, c] * K[i, j, c]); }}"
    )

    def peer(image: object, kernel: object) -> object:
        oihw = kernel.permute(2, 0, 1).unsqueeze(1)
        return tf.conv2d(nchw(image), oihw, stride=s, padding=p, groups=kernel.shape[2])

    def reference(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        return peer(wide(image), wide(kernel)).permute(0, 2, 3, 1).numpy()

    name = f"depthwise {n}x{h}x{w}x{c} k{k} s{s}"
    return Variant(name, source, {"I": normal(n, h, w, c), "K": normal(k, k, c)}, reference, peer)


def maxpool(n: int, h: int, w: int, c: int, k: int, s: int) -> Variant:
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    source = (
        f"function (I[N, H, W, C]) -> (O) {{ O[n, y, x, c: N, {oh}, {ow}, C] = "
        f">(I[n, {s} * y + i, {s} * x + j, c]), i < {k}, j < {k}; }}"
    )

    def peer(image: object) -> object:
        return tf.max_pool2d(nchw(image), k, s)

    def reference(image: np.ndarray) -> np.ndarray:
        return peer(wide(image)).permute(0, 2, 3, 1).numpy()

    return Variant(
        f"maxpool {n}x{h}x{w}x{c} k{k} s{s}", source, {"I": normal(n, h, w, c)}, reference, peer
    )


SOFTMAX_ROWS = (
    "function (X[M, N]) -> (O) { MX[m, 0: M, 1] = >(X[m, n]); E = exp(X - MX); "
    "S[m, 0: M, 1] = +(E[m, n]); O = E / S; }"
)
SOFTMAX_COLUMNS = (
    "function (X[M, N]) -> (O) { MX[0, n: 1, N] = >(X[m, n]); E = exp(X - MX); "
    "S[0, n: 1, N] = +(E[m, n]); O = E / S; }"
)
LAYERNORM = (
    "function (X[M, N]) -> (O) { S[m, 0: M, 1] = +(X[m, n]); Mean = S / N; D = X - Mean; "
    "SS[m, 0: M, 1] = +(D[m, n] * D[m, n]); Var = SS / N; O = D / sqrt(Var + 0.00001); }"
)
GELU = (
    "function (X[N]) -> (O) { O = 0.5 * X * (1.0 + tanh(0.79788456 * (X + 0.044715 * X * X * X)));"
    " }"
)
MATVEC_T = "function (A[M, N], X[M]) -> (Y) { Y[n: N] = +(A[m, n] * X[m]); }"
MATVEC = "function (A[M, N], X[N]) -> (Y) { Y[m: M] = +(A[m, n] * X[n]); }"
COLUMN = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
BMM = (
    "function (A[G, M, K], B[G, K, N]) -> (C) { C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]); }"
)
BMM_NT = (
    "function (A[G, M, K], B[G, N, K]) -> (C) { C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, n, k]); }"
)
TT = "function (A[K, M], B[N, K]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[n, k]); }"


def rowwise(name: str, source: str, x: np.ndarray, fn: Callable[[object], object]) -> Variant:
    """A variant whose torch expression `fn`, run in float64, is also its reference."""
    return Variant(name, source, {"X": x}, lambda value: fn(wide(value)).numpy(), fn)


def channels_first(n: int, c: int, size: int, co: int, k: int, s: int, bias: bool) -> Variant:
    """A same-padded convolution in NCHW x OIHW (PyTorch's layout); `bias`: + bias, relu."""
    p, out = (k - 1) // 2, (size + 2 * ((k - 1) // 2) - k) // s + 1
    header = "I[N, C, H, W], K[CO, C, KH, KW]" + (", B[CO, U, V]" if bias else "")
    source = (
        f"function ({header}) -> (O) {{ Y[n, co, y, x: N, CO, {out}, {out}] = "
        f"+(I[n, c, {s} * y + i - {p}, {s} * x + j - {p}] * K[co, c, i, j]); "
        f"O = {'relu(Y + B)' if bias else 'Y'}; }}"
    )

    def peer(image: object, kernel: object, *shift: object) -> object:
        result = tf.conv2d(image, kernel, stride=s, padding=p)
        return torch.relu(result + shift[0]) if bias else result

    inputs = {"I": normal(n, c, size, size), "K": normal(co, c, k, k)}
    if bias:
        inputs["B"] = normal(co, 1, 1)
    name = f"conv NCHW {n}x{c}x{size}x{size}->{co} k{k} s{s}{' +bias relu' if bias else ''}"
    return Variant(name, source, inputs, lambda *x: peer(*map(wide, x)).numpy(), peer)


def variants() -> list[Variant]:
    square, vector = normal(4096, 4096), normal(4096)
    big, column = normal(125, 847), normal(847, 1)
    return [
        Variant(
            "matvec A.T @ x 4096",
            MATVEC_T,
            {"A": square, "X": vector},
            lambda a, x: a.T.astype(float) @ x,
            lambda a, x: a.T @ x,
        ),
        Variant(
            "matvec 4097x3001",
            MATVEC,
            {"A": normal(4097, 3001), "X": normal(3001)},
            lambda a, x: a.astype(float) @ x,
            lambda a, x: a @ x,
        ),
        Variant(
            "matvec short rows 100003x33",
            MATVEC,
            {"A": normal(100003, 33), "X": normal(33)},
            lambda a, x: a.astype(float) @ x,
            lambda a, x: a @ x,
        ),
        Variant(
            "matmul column 125x847x1",
            COLUMN,
            {"A": big, "B": column},
            lambda a, b: a.astype(float) @ b,
            lambda a, b: a @ b,
        ),
        Variant(
            "matmul A.T @ B.T 16x1149x81",
            TT,
            {"A": normal(1149, 16), "B": normal(81, 1149)},
            lambda a, b: a.T.astype(float) @ b.T,
            lambda a, b: a.T @ b.T,
        ),
        Variant(
            "bmm 7x129x257x65",
            BMM,
            {"A": normal(7, 129, 257), "B": normal(7, 257, 65)},
            lambda a, b: a.astype(float) @ b,
            lambda a, b: a @ b,
        ),
        Variant(
            "matmul 513x300x65",
            BMM,
            {"A": normal(1, 513, 300), "B": normal(1, 300, 65)},
            lambda a, b: a.astype(float) @ b,
            lambda a, b: a @ b,
        ),
        Variant(
            "bmm NT 16x128x64x128",
            BMM_NT,
            {"A": normal(16, 128, 64), "B": normal(16, 128, 64)},
            lambda a, b: a.astype(float) @ b.transpose(0, 2, 1),
            lambda a, b: a @ b.transpose(1, 2),
        ),
        conv(1, 56, 56, 64, 128, 3, 2, 1, True),
        conv(2, 33, 35, 32, 48, 5, 1, 1, True),
        conv(4, 28, 28, 96, 64, 1, 2, 1, False),
        conv(1, 57, 57, 32, 32, 3, 1, 2, False),
        conv(1, 56, 56, 64, 1, 3, 1, 1, True),
        depthwise(1, 112, 112, 32, 3, 2),
        depthwise(1, 57, 57, 97, 5, 1),
        depthwise(4, 28, 28, 144, 3, 1),
        maxpool(1, 112, 112, 64, 3, 2),
        maxpool(2, 111, 111, 33, 2, 2),
        channels_first(8, 64, 56, 64, 3, 1, False),
        channels_first(4, 128, 28, 256, 3, 2, False),
        channels_first(8, 64, 56, 64, 3, 1, True),
        Variant(
            "depthwise NCHW 1x32x112x112 k3",
            "function (I[N, C, H, W], K[C, KH, KW]) -> (O) { O[n, c, y, x: N, C, 112, 112] = "
            "+(I[n, c, y + i - 1, x + j - 1] * K[c, i, j]); }",
            {"I": normal(1, 32, 112, 112), "K": normal(32, 3, 3)},
            lambda i, k: tf.conv2d(wide(i), wide(k).unsqueeze(1), padding=1, groups=32).numpy(),
            lambda i, k: tf.conv2d(i, k.unsqueeze(1), padding=1, groups=32),
        ),
        rowwise(
            "maxpool NCHW 1x64x112x112 k3 s2 pad 1",
            "function (X[N, C, H, W]) -> (O) { O[n, c, y, x: N, C, 56, 56] = "
            ">(X[n, c, 2 * y + i - 1, 2 * x + j - 1]), i < 3, j < 3; }",
            normal(1, 64, 112, 112),
            lambda x: tf.max_pool2d(x, 3, 2, 1),
        ),
        rowwise(
            "softmax 1000x1001", SOFTMAX_ROWS, normal(1000, 1001), lambda x: torch.softmax(x, 1)
        ),
        rowwise(
            "softmax over columns 1024x256",
            SOFTMAX_COLUMNS,
            normal(1024, 256),
            lambda x: torch.softmax(x, 0),
        ),
        rowwise("softmax 4096x33", SOFTMAX_ROWS, normal(4096, 33), lambda x: torch.softmax(x, 1)),
        rowwise(
            "layernorm 8192x64",
            LAYERNORM,
            normal(8192, 64),
            lambda x: tf.layer_norm(x, (64,), eps=1e-5),
        ),
        rowwise(
            "gelu 16M+3", GELU, normal(16 * 2**20 + 3), lambda x: tf.gelu(x, approximate="tanh")
        ),
        rowwise(
            "sum over axis 0 4096x4096",
            "function (X[M, N]) -> (O) { O[n: N] = +(X[m, n]); }",
            square,
            lambda x: x.sum(0),
        ),
        rowwise(
            "sum over axes 0, 1, 2 14x70x27x102",
            "function (X[A, B, C, D]) -> (O) { O[d: D] = +(X[a, b, c, d]); }",
            normal(14, 70, 27, 102),
            lambda x: x.sum((0, 1, 2)),
        ),
        rowwise(
            "max over axis 0 200000x17",
            "function (X[M, N]) -> (O) { O[n: N] = >(X[m, n]); }",
            normal(200000, 17),
            lambda x: x.amax(0),
        ),
        rowwise(
            "max over axis 0 4096x3001",
            "function (X[M, N]) -> (O) { O[n: N] = >(X[m, n]); }",
            normal(4096, 3001),
            lambda x: x.amax(0),
        ),
        rowwise(
            "sum over axis 1 256x1000x64",
            "function (X[A, B, C]) -> (O) { O[a, c: A, C] = +(X[a, b, c]); }",
            normal(256, 1000, 64),
            lambda x: x.sum(1),
        ),
        rowwise(
            "sum over 19 57x39x90x19",
            "function (X[A, B, C, D]) -> (O) { O[a, b, c: A, B, C] = +(X[a, b, c, d]); }",
            normal(57, 39, 90, 19),
            lambda x: x.sum(3),
        ),
        rowwise(
            "max over 419 686x13x419",
            "function (X[A, B, C]) -> (O) { O[a, b: A, B] = >(X[a, b, c]); }",
            normal(686, 13, 419),
            lambda x: x.amax(2),
        ),
        rowwise(
            "sum over 40 50000x40",
            "function (X[A, B]) -> (O) { O[a: A] = +(X[a, b]); }",
            normal(50000, 40),
            lambda x: x.sum(1),
        ),
        rowwise(
            "sum 64M+1",
            "function (X[N]) -> (O) { O[] = +(X[i]); }",
            normal(64 * 2**20 + 1),
            lambda x: x.sum(),
        ),
        rowwise(
            "permute (0, 2, 1) 64x300x257",
            "function (X[A, B, C]) -> (O) { O[a, c, b: A, C, B] = =(X[a, b, c]); }",
            normal(64, 300, 257),
            lambda x: x.permute(0, 2, 1).contiguous(),
        ),
        rowwise(
            "permute (2, 0, 1) 3x1000x777",
            "function (X[A, B, C]) -> (O) { O[c, a, b: C, A, B] = =(X[a, b, c]); }",
            normal(3, 1000, 777),
            lambda x: x.permute(2, 0, 1).contiguous(),
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--filter", default="")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per variant")
    args = parser.parse_args()
    if torch is None:
        print("variants.py compares with torch: `.venv/bin/pip install torch==2.13.0`")
        return 2
    torch.set_num_threads(os.cpu_count() or 1)
    device = tile.device(args.device)
    print(f"device {device.id}: {device.description}; torch {torch.__version__}")
    ratios: list[tuple[float, str]] = []
    failures = 0
    for variant in variants():
        if args.filter not in variant.name:
            continue
        function = tile.Function(variant.source)
        output = function.outputs[0]
        tensors = {k: tile.Tensor.from_numpy(v, device) for k, v in variant.inputs.items()}
        got = function(device=device, **tensors)[output].to_numpy().astype(np.float64)
        want = np.asarray(variant.reference(*variant.inputs.values()), np.float64)
        scale = max(1.0, float(np.max(np.abs(want), initial=0)))
        error = float(np.max(np.abs(got - want), initial=0)) / scale
        ok = got.shape == want.shape and error < 1e-3
        failures += not ok
        prepared = {k: torch.from_numpy(v) for k, v in variant.inputs.items()}

        def ours(function=function, tensors=tensors, output=output) -> None:
            function(device=device, **tensors)[output].wait()

        def peer(variant=variant, prepared=prepared) -> None:
            with torch.inference_mode():
                variant.peer(*prepared.values())

        ours_s, torch_s = median_times([ours, peer], args.rounds, args.budget)
        ratios.append((ours_s / torch_s, variant.name))
        check = f"ok ({error:.0e})" if ok else f"WRONG (rel err {error:.1e})"
        print(
            f"{variant.name:36s} {ours_s * 1e3:9.3f} ms  torch {torch_s * 1e3:9.3f}  "
            f"{ours_s / torch_s:5.2f}  {check}",
            flush=True,
        )
    if ratios:
        geomean = math.exp(statistics.fmean(math.log(r) for r, _ in ratios))
        worst, name = max(ratios)
        print(f"ours / torch: geomean {geomean:.2f}, worst {worst:.2f} ({name})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
