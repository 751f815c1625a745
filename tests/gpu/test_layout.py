"""The integer decisions of the GPU kernels (`tile.lower.gpu.layout`): footprint axes and tilings.

The property that makes staging correct: for every index tuple of the box, the local position
the compute loop reads holds the element the staging loop copied there, i.e. the global offset
of the staged position equals the access's offset at the tuple.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tile
from semtree.types import DType
from tests.gpu.settings import POCL_GPU, SMALL_GPU, TYPICAL_GPU
from tile.lower.accumulators import accumulator_dtype
from tile.lower.flatten import flatten
from tile.lower.gpu.layout import Axis, Staging, choose_tiling, layout

if TYPE_CHECKING:
    from tile.lower.flat import FlatContraction


def _flat(source: str, **shapes: tuple[int, ...]) -> FlatContraction:
    inputs = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    bound = tile.Function(source).bind(inputs)
    (op,) = [op for op in bound.ops if op.contraction is not None]
    return flatten(op, bound.bindings)


MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
CONV = """function (I[N, L, CI], F[K, CI, CO]) -> (O) {
    O[n, x, co: N, L - K + 1, CO] = +(I[n, x + k, ci] * F[k, ci, co]);
}"""
SUM_ALL = "function (A[M, N]) -> (S) { S[] = +(A[m, n]); }"


def test_a_convolution_window_shares_one_axis() -> None:
    # I[n, x + k, ci] with ci: 4 and x, k on the middle dimension (stride 4): all of the
    # footprint is one contiguous range of 40 elements, not 8 * 3 * 4 = 96.
    assert layout((40, 4, 0, 4, 1), (1, 8, 1, 3, 4)) == (Axis(1, ((4, 1), (1, 4), (3, 4)), 0, 40),)
    # With only part of the channels in the chunk, the window shares an axis of its own.
    axes = layout((320, 32, 0, 32, 1), (1, 8, 1, 3, 4))
    assert axes == (Axis(1, ((4, 1),), 0, 4), Axis(32, ((1, 1), (3, 1)), 0, 10))


def test_strided_and_negative_strides() -> None:
    # 2*x + k (a stride-2 convolution) and o - 2*x (a transposed one).
    assert layout((2, 1), (4, 3)) == (Axis(1, ((1, 1), (0, 2)), 0, 9),)
    assert layout((1, -2), (8, 4)) == (Axis(1, ((0, 1), (1, -2)), -6, 14),)


def test_unrelated_variables_get_their_own_axes() -> None:
    # A[m, k] of a matmul whose chunk is smaller than the row: m does not join k's axis.
    assert layout((64, 1), (4, 8)) == (Axis(1, ((1, 1),), 0, 8), Axis(64, ((0, 1),), 0, 4))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-6, 6), st.integers(1, 4)), min_size=1, max_size=4).filter(
        lambda pairs: math.prod(e for _, e in pairs) <= 256
    )
)
def test_staged_positions_hold_the_accessed_elements(pairs: list[tuple[int, int]]) -> None:
    strides = [s for s, _ in pairs]
    extents = [e for _, e in pairs]
    axes = layout(strides, extents)
    staging = Staging(0, axes, 4)
    used = sorted(v for axis in axes for v, _ in axis.terms)
    assert used == [v for v, (s, e) in enumerate(pairs) if s and e > 1]
    assert staging.size <= math.prod(extents)
    for axis in axes:
        for v, coefficient in axis.terms:
            assert axis.unit * coefficient == strides[v]

    def staged_offset(position: int) -> int:
        total = 0
        for axis, stride in zip(axes, staging.strides, strict=True):
            total += axis.unit * (axis.low + position // stride % axis.extent)
        return total

    for point in itertools.product(*(range(e) for e in extents)):
        position = sum(
            stride * (sum(c * point[v] for v, c in axis.terms) - axis.low)
            for axis, stride in zip(axes, staging.strides, strict=True)
        )
        assert 0 <= position < staging.size
        assert staged_offset(position) == sum(s * i for s, i in zip(strides, point, strict=True))


def test_matmul_tiling_stages_both_operands() -> None:
    flat = _flat(MATMUL, A=(64, 48), B=(48, 64))
    tiling = choose_tiling(flat, TYPICAL_GPU, DType.FLOAT32)
    assert tiling is not None
    assert tiling.threads == 256 and tiling.splits == 1
    assert {s.operand for s in tiling.staged} == {0, 1}
    assert tiling.local_bytes <= TYPICAL_GPU.max_mem
    assert tiling.chunks[0] > 1


def test_small_output_splits_the_reduction() -> None:
    flat = _flat(SUM_ALL, A=(30, 50))
    tiling = choose_tiling(flat, POCL_GPU, DType.FLOAT32)
    assert tiling is not None
    assert tiling.tiles == () and tiling.lanes == 1 and tiling.splits == 256
    assert tiling.merge_bytes == 256 * 4


def test_local_memory_budget_is_respected() -> None:
    flat = _flat(CONV, I=(2, 40, 16), F=(5, 16, 24))
    for hardware in (SMALL_GPU, TYPICAL_GPU, POCL_GPU):
        tiling = choose_tiling(flat, hardware, accumulator_dtype(flat.dtype))
        assert tiling is not None
        assert tiling.local_bytes <= hardware.max_mem
    tight = replace(SMALL_GPU, max_mem=24)  # one operand's footprint: 16 bytes
    tiling = choose_tiling(flat, tight, DType.FLOAT32)
    assert tiling is not None and len(tiling.staged) == 1
    assert tiling.local_bytes <= 24


def test_no_tiling_when_the_merge_does_not_fit() -> None:
    flat = _flat(SUM_ALL, A=(30, 50))
    assert choose_tiling(flat, replace(TYPICAL_GPU, max_mem=512), DType.FLOAT32) is None


def test_work_groups_are_a_power_of_two() -> None:
    flat = _flat(MATMUL, A=(64, 48), B=(48, 64))
    tiling = choose_tiling(flat, replace(TYPICAL_GPU, threads=48), DType.FLOAT32)
    assert tiling is not None and tiling.threads == 32
    assert tiling.lanes * tiling.per_item == tiling.elements
