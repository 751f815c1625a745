"""Tile-size policy (`tile.lower.tiles`) as the generator applies it: transpositions get square
tiles, contiguous reductions one element per work-group; the kernels stay correct on ragged
shapes whose tiles stick out of the output (reference interpreter, outputs poisoned)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.kernel import KernelKind
from tests.lower.harness import LLVM_CPU, SCALAR, run_program
from tile.lower.generate import generate_program
from tile.lower.tiles import TRANSPOSE_TILE, choose_tiles

TRANSPOSE = "function (I[M, N]) -> (O) { O[n, m: N, M] = =(I[m, n]); }"
PERMUTE = "function (I[A, B, C]) -> (O) { O[c, a, b: C, A, B] = =(I[a, b, c]); }"


def tiles_of(source: str, inputs: dict[str, np.ndarray]) -> tuple[int, ...]:
    kernel_list = generate_program(tile.Function(source).bind(inputs), LLVM_CPU)
    (kernel,) = [k for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION]
    return kernel.tile


def test_policy() -> None:
    t = TRANSPOSE_TILE
    assert choose_tiles((64, 64), LLVM_CPU, reduction_points=1, accumulator_bytes=4) == (1, 64)
    transposed = choose_tiles(
        (64, 64), LLVM_CPU, reduction_points=1, accumulator_bytes=4, crosswise=0
    )
    assert transposed == (t, t)
    small = choose_tiles((3, 64), LLVM_CPU, reduction_points=1, accumulator_bytes=4, crosswise=0)
    assert small == (3, t)
    scalar = choose_tiles((64, 64), SCALAR, reduction_points=1, accumulator_bytes=4, crosswise=0)
    assert scalar == (1, 1)
    lanes = choose_tiles((64, 64), LLVM_CPU, reduction_points=256, accumulator_bytes=4, lanes=64)
    assert lanes == (1, 1)


def test_transpositions_get_square_tiles() -> None:
    t = TRANSPOSE_TILE
    assert tiles_of(TRANSPOSE, {"I": np.zeros((40, 24), np.float32)}) == (t, t)
    assert tiles_of(PERMUTE, {"I": np.zeros((4, 5, 40), np.float32)}) == (t, 1, 5)
    copy = "function (I[M, N]) -> (O) { O[m, n: M, N] = =(I[m, n]); }"
    assert tiles_of(copy, {"I": np.zeros((40, 24), np.float32)}) != (t, t)


@pytest.mark.parametrize("shape", [(37, 21), (8, 8), (1, 100), (100, 1)])
def test_ragged_transposes(shape: tuple[int, int]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(run_program(TRANSPOSE, {"I": x})["O"], x.T)
    np.testing.assert_array_equal(tile.run(TRANSPOSE, {"I": x})["O"], x.T)


def test_ragged_permutation() -> None:
    x = np.arange(3 * 7 * 19, dtype=np.int16).reshape(3, 7, 19)
    np.testing.assert_array_equal(run_program(PERMUTE, {"I": x})["O"], x.transpose(2, 0, 1))
    np.testing.assert_array_equal(tile.run(PERMUTE, {"I": x})["O"], x.transpose(2, 0, 1))
