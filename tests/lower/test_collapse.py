"""Neighbouring reduction loops, and output coordinates, merged into one (`tile.lower.collapse`):
which contractions merge, that the merged loop walks the same elements, and that the results
are numpy's in float64 on the reference interpreter and on both shipped devices (poisoned
outputs)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.collapse import merge_coordinates
from tile.lower.flatten import flatten

FULL_MAX = "function (A[I, J, K, L]) -> (O) { O[] = >(A[i, j, k, l]); }"
SPATIAL_SUM = "function (A[N, C, H, W]) -> (O) { O[n, c: N, C] = +(A[n, c, h, w]); }"
OUTER_AXES = "function (A[I, J, K]) -> (O) { O[j: J] = +(A[i, j, k]); }"
GUARDED = "function (A[I, J]) -> (O) { O[] = +(A[i, j]), i + j < 5; }"
MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
KEPT_INNER = "function (A[I, J, K, L]) -> (O) { O[j, k, l: J, K, L] = +(A[i, j, k, l]); }"
KEPT_APART = "function (A[I, J, K, L]) -> (O) { O[j, l: J, L] = >(A[i, j, k, l]); }"


def flat_of(source: str, shapes: dict[str, tuple[int, ...]]):
    x = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    bound = tile.Function(source).bind(x)
    (op,) = [op for op in bound.ops if op.contraction is not None]
    return flatten(op, bound.bindings)


def test_contiguous_reductions_become_one_loop() -> None:
    flat = flat_of(FULL_MAX, {"A": (3, 5, 4, 8)})
    assert flat.ranges == (3 * 5 * 4 * 8,)
    assert flat.operands[0].strides == (1,)
    flat = flat_of(SPATIAL_SUM, {"A": (2, 3, 7, 9)})
    assert flat.ranges == (2, 3, 63)
    assert flat.operands[0].strides == (189, 63, 1)


def test_what_is_not_merged() -> None:
    # i and k are not neighbours in memory (j lies between them).
    assert flat_of(OUTER_AXES, {"A": (3, 5, 4)}).ranges == (5, 3, 4)
    # A guard that reads i and j apart.
    assert len(flat_of(GUARDED, {"A": (4, 6)}).reductions) == 2
    # A product's reductions keep their loops (only one reduction here anyway).
    assert len(flat_of(MATMUL, {"A": (3, 4), "B": (4, 5)}).reductions) == 1


def test_contiguous_coordinates_become_one() -> None:
    """A sum over axis 0 keeping three contiguous axes: one coordinate of stride 1."""
    flat = merge_coordinates(flat_of(KEPT_INNER, {"A": (309, 97, 2, 2)}))
    assert (flat.outputs, flat.ranges) == (1, (97 * 2 * 2, 309))
    assert flat.output.strides == (1, 0) and flat.operands[0].strides == (1, 388)
    # Kept axes apart in memory, a product, a convolution's derived indices: no merge.
    apart = flat_of(KEPT_APART, {"A": (3, 5, 4, 6)})
    assert merge_coordinates(apart) is apart
    matmul = flat_of(MATMUL, {"A": (3, 4), "B": (4, 5)})
    assert merge_coordinates(matmul) is matmul
    conv = "function (I[X, C], K[KX, C]) -> (O) { O[x, c: X - 2, C] = +(I[x + k, c] * K[k, c]); }"
    assert merge_coordinates(flat_of(conv, {"I": (9, 4), "K": (3, 4)})).outputs == 2


CASES = {
    FULL_MAX: (lambda x: x["A"].max(), [(1, 1, 1, 1), (31, 13, 4, 8), (2, 3, 1, 65)]),
    SPATIAL_SUM: (
        lambda x: x["A"].astype(np.float64).sum((2, 3)),
        [(1, 1, 1, 1), (2, 3, 7, 9), (3, 2, 31, 33)],
    ),
    OUTER_AXES: (lambda x: x["A"].astype(np.float64).sum((0, 2)), [(3, 5, 4), (17, 1, 129)]),
    GUARDED: (
        lambda x: sum(
            x["A"][i, j].astype(np.float64)
            for i in range(x["A"].shape[0])
            for j in range(x["A"].shape[1])
            if i + j < 5
        ),
        [(4, 6), (1, 9)],
    ),
    KEPT_INNER: (
        lambda x: x["A"].astype(np.float64).sum(0),
        [(1, 1, 1, 1), (309, 97, 2, 2), (3, 5, 1, 7), (2, 1, 17, 3)],
    ),
    KEPT_APART: (lambda x: x["A"].max((0, 2)), [(3, 5, 4, 6), (1, 7, 1, 33)]),
}
IDS = ["full-max", "spatial-sum", "outer-axes", "guarded", "kept-inner", "kept-apart"]


def inputs(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {"A": np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("source", list(CASES), ids=IDS)
def test_merged_reductions_on_the_reference(source: str) -> None:
    reference, shapes = CASES[source]
    for shape in shapes:
        x = inputs(shape)
        got = run_program(source, x, LLVM_CPU)["O"]
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-4, err_msg=str(shape))


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("source", list(CASES), ids=IDS)
def test_merged_reductions_on_the_devices(
    device_id: str, source: str, devices: dict[str, tile.Device]
) -> None:
    _, shapes = CASES[source]
    large = [(301, 133, 4, 8)] if source is FULL_MAX else []  # split in parts and lanes
    for shape in shapes + large:
        outcome = check(Case("merged", source, inputs(shape)), devices[device_id])
        assert outcome.kind == "ok", (shape, outcome)
