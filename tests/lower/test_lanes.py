"""Reductions in lanes (`tile.lower.contract`): a float `+`, `>` or `<` reduction contiguous in
every operand keeps 64, 32, 16 or 8 partial results per element and folds them at the end.
Which contractions take the path, and that they compute what numpy does in float64 — through
the reference interpreter (outputs poisoned) and on llvm_cpu.0."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tile
from semtree.kernel import KernelKind
from tests.lower.harness import LLVM_CPU, SCALAR, run_program
from tile.lower.generate import generate_program

ROW_SUM = "function (X[M, K]) -> (O) { O[m: M] = +(X[m, k]); }"
ROW_MAX = "function (X[M, K]) -> (O) { O[m: M] = >(X[m, k]); }"
ROW_MIN = "function (X[M, K]) -> (O) { O[m: M] = <(X[m, k]); }"
MATVEC = "function (A[M, K], V[K]) -> (O) { O[m: M] = +(A[m, k] * V[k]); }"
SCALED = "function (A[M, K], S[M]) -> (O) { O[m: M] = +(A[m, k] * S[m]); }"
TOTAL = "function (X[N]) -> (O) { O[] = +(X[i]); }"
EPILOGUE = "function (X[M, K]) -> (O) { S[m: M] = +(X[m, k]); O = S / 2.0 + 1.0; }"
TWO_REDUCTIONS = "function (X[M, J, K]) -> (O) { O[m: M] = +(X[m, j, k]); }"
COLUMN_SUM = "function (X[K, M]) -> (O) { O[m: M] = +(X[k, m]); }"


def lanes_of(source: str, inputs: dict[str, np.ndarray], settings: object = LLVM_CPU) -> int:
    """The accumulator lanes of the program's contraction kernel (1 when it has none)."""
    kernel_list = generate_program(tile.Function(source).bind(inputs), settings)  # type: ignore[arg-type]
    (kernel,) = [k for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION]
    text = str(kernel.body)
    match = re.search(r"for \(int lane = 0; lane < (\d+);", text)
    return int(match.group(1)) if match else 1


def rand(*shape: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    ("k", "lanes"),
    [(4096, 64), (96, 32), (48, 16), (24, 8), (16, 8), (12, 1), (3001, 64), (127, 32), (17, 8)],
)
def test_lane_count_follows_the_reduction_length(k: int, lanes: int) -> None:
    assert lanes_of(ROW_SUM, {"X": rand(3, k)}) == lanes


def test_which_reductions_run_in_lanes() -> None:
    x = rand(4, 256)
    assert lanes_of(MATVEC, {"A": x, "V": rand(256)}) == 64
    assert lanes_of(SCALED, {"A": x, "S": rand(4)}) == 64  # an operand constant along k
    assert lanes_of(ROW_MAX, {"X": x}) == 64 and lanes_of(ROW_MIN, {"X": x}) == 64
    assert lanes_of(ROW_SUM, {"X": x}, SCALAR) == 64
    assert lanes_of(ROW_SUM, {"X": x.astype(np.int32)}) == 1  # integers vectorize anyway
    assert lanes_of(COLUMN_SUM, {"X": rand(256, 4)}) == 1  # k is not contiguous
    product = "function (X[M, K]) -> (O) { O[m: M] = *(X[m, k]); }"
    assert lanes_of(product, {"X": x}) == 1
    window = "function (X[N]) -> (O) { O[i: 64] = +(X[i + k]); }"  # i + k < N remains
    assert lanes_of(window, {"X": rand(1024)}) == 1


CASES = [
    (ROW_SUM, lambda x: x.sum(axis=1)),
    (ROW_MAX, lambda x: x.max(axis=1)),
    (ROW_MIN, lambda x: x.min(axis=1)),
    (EPILOGUE, lambda x: x.sum(axis=1) / 2 + 1),
]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(("source", "reference"), CASES, ids=["sum", "max", "min", "epilogue"])
@pytest.mark.parametrize("settings", [LLVM_CPU, SCALAR], ids=["llvm_cpu", "scalar"])
def test_reductions_in_lanes_match_numpy(
    source: str, reference: object, dtype: type, settings: object
) -> None:
    x = rand(5, 192, dtype=dtype)  # 192 = 3 x 64
    want = reference(x.astype(np.float64))  # type: ignore[operator]
    got = run_program(source, {"X": x}, settings)["O"]  # type: ignore[arg-type]
    tolerance = 2e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("k", [16, 17, 23, 63, 65, 127, 129, 257, 3001])
@pytest.mark.parametrize(("source", "reference"), CASES, ids=["sum", "max", "min", "epilogue"])
@pytest.mark.parametrize("settings", [LLVM_CPU, SCALAR], ids=["llvm_cpu", "scalar"])
def test_ragged_reduction_lengths_end_with_a_partial_step(
    source: str, reference: object, k: int, settings: object
) -> None:
    """A length that is no multiple of the lanes: the last step feeds only the lanes below
    the remainder (a lane past the end would read the next row, or past the buffer, which the
    reference interpreter refuses)."""
    x = rand(3, k, seed=k)
    x[1, -1] = 50.0  # the very last element decides the max of row 1
    x[2, -1] = -50.0  # and the min of row 2
    want = reference(x.astype(np.float64))  # type: ignore[operator]
    got = run_program(source, {"X": x}, settings)["O"]  # type: ignore[arg-type]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-4)


def test_operands_and_reduction_shapes_match_numpy() -> None:
    a, v, s = rand(6, 128), rand(128, seed=1), rand(6, seed=2)
    np.testing.assert_allclose(run_program(MATVEC, {"A": a, "V": v})["O"], a @ v, rtol=1e-5)
    got = run_program(SCALED, {"A": a, "S": s})["O"]
    np.testing.assert_allclose(got, (a * s[:, None]).sum(axis=1), rtol=1e-5, atol=1e-5)
    x3 = rand(3, 5, 64)
    got = run_program(TWO_REDUCTIONS, {"X": x3})["O"]
    np.testing.assert_allclose(got, x3.sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    x = rand(1024)
    np.testing.assert_allclose(run_program(TOTAL, {"X": x})["O"], x.sum(), rtol=1e-5, atol=1e-4)


def test_nan_and_infinities_reach_the_result() -> None:
    x = rand(4, 128)
    x[0, 77] = np.nan
    x[1, 3] = np.inf
    x[2, 100], x[2, 5] = np.inf, -np.inf
    got = run_program(ROW_SUM, {"X": x})["O"]
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]) and np.isfinite(got[3])
    assert run_program(ROW_MAX, {"X": x})["O"][1] == np.inf
    assert run_program(ROW_MIN, {"X": x})["O"][2] == -np.inf


@pytest.mark.parametrize(
    ("source", "shapes", "reference"),
    [
        (ROW_SUM, {"X": (33, 1024)}, lambda x: x.sum(axis=1)),
        (ROW_MAX, {"X": (7, 640)}, lambda x: x.max(axis=1)),
        (MATVEC, {"A": (300, 512), "V": (512,)}, lambda a, v: a @ v),
        (TOTAL, {"X": (1 << 20,)}, lambda x: x.sum()),
        (EPILOGUE, {"X": (9, 96)}, lambda x: x.sum(axis=1) / 2 + 1),
    ],
    ids=["sum", "max", "matvec", "total", "epilogue"],
)
def test_llvm_cpu_runs_reductions_in_lanes(source: str, shapes: dict, reference: object) -> None:
    inputs = {name: rand(*shape, seed=n) for n, (name, shape) in enumerate(shapes.items())}
    want = reference(*(x.astype(np.float64) for x in inputs.values()))  # type: ignore[operator]
    got = tile.run(source, inputs, device="llvm_cpu.0")["O"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
