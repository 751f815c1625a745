"""`make demo`: run a matmul, a 3x3 convolution and a softmax on the default device, check each
against numpy, print the times; then show how an error in a program is reported."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import tile

Reference = Callable[..., np.ndarray]


def _conv_same(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = image.shape[1:3]
    out = np.zeros((*image.shape[:3], kernel.shape[3]))
    for dy in range(3):
        for dx in range(3):
            window = padded[:, dy : dy + height, dx : dx + width, :]
            out += np.tensordot(window, kernel[dy, dx], axes=([3], [0]))
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


SHOWCASE: list[tuple[str, str, dict[str, tuple[int, ...]], Reference]] = [
    (
        "matrix multiplication",
        "function (A[M, K], B[K, N]) -> (C) {\n  C[m, n: M, N] = +(A[m, k] * B[k, n]);\n}",
        {"A": (256, 256), "B": (256, 256)},
        lambda a, b: a @ b,
    ),
    (
        "3x3 convolution, same padding",
        "function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {\n"
        "  O[n, y, x, co: N, H, W, CO] =\n"
        "      +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]);\n"
        "}",
        {"I": (1, 32, 32, 16), "K": (3, 3, 16, 16)},
        _conv_same,
    ),
    (
        "softmax over rows",
        "function (X[R, C]) -> (Y) {\n"
        "  M[r, 0: R, 1] = >(X[r, c]);\n"
        "  E = exp(X - M);\n"
        "  S[r, 0: R, 1] = +(E[r, c]);\n"
        "  Y = E / S;\n"
        "}",
        {"X": (64, 1000)},
        _softmax,
    ),
]

BROKEN = (
    "two mistakes: a broadcast that cannot work, a bitwise operator on floats",
    "function (A, B) -> (O, P) {\n  O = A + B;\n  P = A & 1;\n}",
    {"A": np.zeros((2, 3), np.float32), "B": np.zeros(2, np.float32)},
)


def _median_ms(call: Callable[[], object], repeat: int = 10) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main() -> None:
    device = tile.device()
    print(f"device: {device.id} ({device.description})\n")
    rng = np.random.default_rng(0)
    for title, source, shapes, reference in SHOWCASE:
        print(f"=== {title}\n{source}")
        arrays = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
        function = tile.Function(source)
        print(f"--- bound program\n{function.bind(arrays)}")
        tensors = {n: tile.Tensor.from_numpy(a, device) for n, a in arrays.items()}
        output = function.outputs[0]
        start = time.perf_counter()
        result = function(device=device, **tensors)[output].to_numpy()
        first = 1000 * (time.perf_counter() - start)
        expected = reference(*(a.astype(np.float64) for a in arrays.values()))
        error = float(np.max(np.abs(result - expected)))
        status = "matches numpy" if np.allclose(result, expected, rtol=1e-4, atol=1e-4) else "WRONG"
        ours = _median_ms(
            lambda f=function, t=tensors, o=output: f(device=device, **t)[o].to_numpy()
        )
        theirs = _median_ms(lambda r=reference, a=arrays: r(*a.values()))
        print(
            f"--- {status} (max abs error {error:.2e}); first call {first:.1f} ms "
            f"(compile + run), then {ours:.2f} ms per call; numpy {theirs:.2f} ms\n"
        )
    title, source, inputs = BROKEN
    print(f"=== {title}\n{source}\n")
    try:
        tile.Function(source).bind(inputs)
    except tile.TileError as err:
        print(err)


if __name__ == "__main__":
    main()
