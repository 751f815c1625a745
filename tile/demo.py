"""`make demo`: parse, check and bind a few showcase Tile functions and print every stage,
then show how an error in a program is reported. (Devices arrive with the back ends.)"""

from __future__ import annotations

import numpy as np

import tile

SHOWCASE = [
    (
        "matrix multiplication",
        "function (A[M, K], B[K, N]) -> (C) {\n  C[m, n: M, N] = +(A[m, k] * B[k, n]);\n}",
        {"A": np.zeros((64, 32), np.float32), "B": np.zeros((32, 16), np.float32)},
    ),
    (
        "3x3 convolution, same padding",
        "function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {\n"
        "  O[n, y, x, co: N, H, W, CO] =\n"
        "      +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]);\n"
        "}",
        {"I": np.zeros((1, 8, 8, 3), np.float32), "K": np.zeros((3, 3, 3, 4), np.float32)},
    ),
    (
        "softmax over rows",
        "function (X[R, C]) -> (Y) {\n"
        "  M[r, 0: R, 1] = >(X[r, c]);\n"
        "  E = exp(X - M);\n"
        "  S[r, 0: R, 1] = +(E[r, c]);\n"
        "  Y = E / S;\n"
        "}",
        {"X": np.zeros((4, 10), np.float16)},
    ),
]

BROKEN = (
    "two mistakes: a broadcast that cannot work, a bitwise operator on floats",
    "function (A, B) -> (O, P) {\n  O = A + B;\n  P = A & 1;\n}",
    {"A": np.zeros((2, 3), np.float32), "B": np.zeros(2, np.float32)},
)


def main() -> None:
    for title, source, inputs in SHOWCASE:
        print(f"=== {title}\n{source}\n")
        bound = tile.Function(source).bind(inputs)
        print(f"--- bound program\n{bound}\n")
        for name, (shape, dtype) in bound.outputs.items():
            print(f"output {name}: shape {shape}, dtype {dtype}")
        print()
    title, source, inputs = BROKEN
    print(f"=== {title}\n{source}\n")
    try:
        tile.Function(source).bind(inputs)
    except tile.TileError as err:
        print(err)


if __name__ == "__main__":
    main()
