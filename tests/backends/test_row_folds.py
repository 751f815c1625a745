"""Rows folded together (`tile.lower.accumulators.fold_rows`, `tile.lower.tiles.folds_rows`):
on llvm_cpu a short reduction in lanes (under `ROW_FOLD_STEPS` vectors per element, each
element's lanes one vector) takes `lanes` elements of the last output dimension per
work-group; each element reduces into an accumulator of its own, and after the loops the
tile's accumulators fold together in rounds of shuffles, one vector holding every element's
result in order.

What must hold: the masks' rounds put element r's sum in lane r (a numpy model of the
shuffles); which kernels take the path (llvm_cpu's short rows; not long rows, too few rows,
float64 lanes wider than a vector, or devices without `row_folds`); and the answers, for
matvecs, row sums, maxima and minima, scaled rows, a fused epilogue, a 3-D reduction and
float16 rows, at row lengths around 16 and 32 and row counts at and past the tile's edge,
against float64 numpy through the reference interpreter (outputs poisoned, reads out of bounds
refused) and on every shipped device (`tests.fuzz.check`, outputs poisoned).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tile
from semtree.nodes import Shuffle, walk
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.accumulators import fold_masks
from tile.lower.generate import generate_program

MATVEC = "function (A[M, K], V[K]) -> (O) { O[m: M] = +(A[m, k] * V[k]); }"
ROW = "function (X[M, K]) -> (O) {{ O[m: M] = {agg}(X[m, k]); }}"
SCALED = "function (A[M, K], S[M]) -> (O) { O[m: M] = >(A[m, k] * S[m]); }"
EPILOGUE = "function (A[M, K], V[K], B[M]) -> (O) { C[m: M] = +(A[m, k] * V[k]); O = relu(C + B); }"
OUTER = "function (X[A, M, K], Y[K]) -> (O) { O[a, m: A, M] = <(X[a, m, k] + Y[k]); }"
LENGTHS = (16, 17, 20, 31, 32, 33, 47, 48, 63)
ROWS = (16, 17, 31, 33, 129, 250)


def model_fold(rows: np.ndarray) -> np.ndarray:
    """`fold_rows` on numpy: `rows` (lanes x lanes) paired round by round as (j, j + n / 2),
    each pair shuffled by the round's masks (lanes of `first`, then of `second`) and added."""
    lanes = rows.shape[1]
    vectors, block = list(rows), lanes
    while len(vectors) > 1:
        low, high = fold_masks(lanes, block)
        half = len(vectors) // 2
        vectors = [
            np.concatenate([a, b])[list(low)] + np.concatenate([a, b])[list(high)]
            for a, b in zip(vectors[:half], vectors[half:], strict=True)
        ]
        block //= 2
    return vectors[0]


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
def test_the_rounds_leave_each_element_in_its_lane(lanes: int) -> None:
    rows = np.random.default_rng(lanes).integers(-100, 100, (lanes, lanes)).astype(np.float64)
    assert np.array_equal(model_fold(rows), rows.sum(axis=1))
    # Each round adds lane l and l + block / 2 of an element, as the halving fold does.
    low, high = fold_masks(16, 16)
    assert low[:8] == tuple(range(8)) and high[:8] == tuple(range(8, 16))
    assert low[8:] == tuple(range(16, 24)) and high[8:] == tuple(range(24, 32))


def kernel_of(source: str, inputs: dict[str, np.ndarray], settings: object = LLVM_CPU) -> object:
    bound = tile.Function(source).bind(inputs)
    (kernel,) = generate_program(bound, settings).kernels  # type: ignore[arg-type]
    return kernel


def shuffles(kernel: object) -> int:
    return sum(isinstance(n, Shuffle) for n in walk(kernel.body))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("length", "lanes"), [(16, 8), (31, 8), (32, 16), (33, 16), (63, 16)])
def test_short_rows_fold_together_on_llvm_cpu(length: int, lanes: int) -> None:
    inputs = {"A": np.zeros((1000, length), np.float32), "V": np.zeros(length, np.float32)}
    kernel = kernel_of(MATVEC, inputs)
    assert kernel.tile == (lanes,)  # type: ignore[attr-defined]
    assert shuffles(kernel) == 2 * (lanes - 1)  # two per pair, lanes - 1 pairs


def test_other_reductions_fold_each_row_alone() -> None:
    def matvec(rows: int, length: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
        return {"A": np.zeros((rows, length), dtype), "V": np.zeros(length, dtype)}

    long_rows = kernel_of(MATVEC, matvec(1000, 64))  # 32 lanes: 2 vectors an element
    assert long_rows.tile == (1,) and shuffles(long_rows) == 0  # type: ignore[attr-defined]
    few = kernel_of(MATVEC, matvec(100, 33))  # 7 groups of 16 rows: under goal_groups
    assert few.tile == (1,) and shuffles(few) == 0  # type: ignore[attr-defined]
    wide = kernel_of(MATVEC, matvec(1000, 33, np.float64))  # 16 doubles: two vectors
    assert shuffles(wide) == 0
    off = kernel_of(MATVEC, matvec(1000, 33), replace(LLVM_CPU, row_folds=False))
    assert off.tile == (1,) and shuffles(off) == 0  # type: ignore[attr-defined]


def cases(rng: np.random.Generator, rows: tuple[int, ...], count: int) -> list[Case]:
    found = []
    for index in range(count):
        m, k = int(rng.choice(rows)), int(rng.choice(LENGTHS))
        kind = index % 6
        if kind == 0:
            found.append(Case("matvec", MATVEC, {"A": _data(rng, m, k), "V": _data(rng, k)}))
        elif kind == 1:
            agg = ("+", ">", "<")[index % 3]
            found.append(Case(f"row{agg}", ROW.format(agg=agg), {"X": _data(rng, m, k)}))
        elif kind == 2:
            found.append(Case("scaled", SCALED, {"A": _data(rng, m, k), "S": _data(rng, m)}))
        elif kind == 3:
            inputs = {"A": _data(rng, m, k), "V": _data(rng, k), "B": _data(rng, m)}
            found.append(Case("epilogue", EPILOGUE, inputs))
        elif kind == 4:
            found.append(Case("outer", OUTER, {"X": _data(rng, 2, m, k), "Y": _data(rng, k)}))
        else:
            x = _data(rng, m, k).astype(np.float16)
            found.append(Case("row+", ROW.format(agg="+"), {"X": x}))
    return found


def _data(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _reference(case: Case) -> np.ndarray:
    inputs = {name: value.astype(np.float64) for name, value in case.inputs.items()}
    if case.family == "matvec":
        return inputs["A"] @ inputs["V"]
    if case.family == "scaled":
        return np.max(inputs["A"] * inputs["S"][:, None], axis=1)
    if case.family == "epilogue":
        return np.maximum(inputs["A"] @ inputs["V"] + inputs["B"], 0)
    if case.family == "outer":
        return np.min(inputs["X"] + inputs["Y"], axis=2)
    reduce = {"row+": np.sum, "row>": np.max, "row<": np.min}[case.family]
    return reduce(inputs["X"], axis=1)


def _close(case: Case, got: np.ndarray) -> bool:
    want = _reference(case)
    half = any(value.dtype == np.float16 for value in case.inputs.values())
    tolerance = 2e-2 if half else 1e-5
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=tolerance, atol=tolerance))


@pytest.mark.parametrize("seed", range(2))
def test_folded_rows_match_numpy_in_the_interpreter(seed: int) -> None:
    wrong = []
    for case in cases(np.random.default_rng(seed), ROWS, 18):
        kernel = kernel_of(case.source, case.inputs)
        got = run_program(case.source, case.inputs, LLVM_CPU)["O"].astype(np.float64)
        if not _close(case, got):
            wrong.append((case.family, {k: v.shape for k, v in case.inputs.items()}))
        elif next(iter(case.inputs.values())).shape[-2] >= 129:
            assert shuffles(kernel), case  # enough rows: the path under test was taken
    assert not wrong, wrong


@pytest.mark.parametrize("device_id", SHIPPED)
def test_folded_rows_match_numpy_on_the_devices(device_id: str) -> None:
    device = shipped_devices()[device_id]
    wrong = []
    for case in cases(np.random.default_rng(7), (*ROWS, 1000, 4097, 100003), 36):
        outcome = check(case, device)
        got = np.asarray(tile.run(case.source, case.inputs, device=device)["O"], np.float64)
        if outcome.kind != "ok" or not _close(case, got):
            shapes = {k: v.shape for k, v in case.inputs.items()}
            wrong.append((case.family, shapes, outcome.kind, outcome.detail))
    assert not wrong, f"wrong on {device_id}: {wrong}"
