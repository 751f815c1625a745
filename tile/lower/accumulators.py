"""Accumulators of the CPU contraction kernels: their type, whether their start value may
stand for an element without contributions, and reductions in lanes (design 8.7).

Lanes: a float `+`, `>` or `<` reduction whose innermost reduction variable `k` is contiguous
(stride 1 or 0) in every operand keeps `lanes` partial results per element, lane `l` taking
`k = c * lanes + l`, and folds them pairwise after the loops. A range that is no multiple of
`lanes` ends with one partial step, `c` = range // lanes, in which only the lanes below the
remainder take a value; the others aggregate the identity, so that every step updates all
the lanes alike and they stay vectors in registers (a step of 9 lanes left LLVM 22 shuffling
single lanes in and out of the accumulators in every step of the loop before it). The lanes
are independent, so the innermost loop vectorizes without reassociating floating-point
operations, and the summation order is the same on every device that runs these kernels
(`tile.lower.contract` writes them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import For, Load, Lookup, Store, Subscript
from semtree.types import DType
from tile.lang.syntax import AggOp
from tile.lower.kernel import affine, product
from tile.lower.ops import aggregate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.nodes import Expr, Stmt
    from tile.lower.flat import FlatContraction
    from tile.lower.kernel import KernelWriter


# The most accumulators a work-group keeps for a reduction in lanes: its elements times lanes.
MAX_LANE_ACCUMULATORS = 256


def accumulator_dtype(dtype: DType) -> DType:
    """Half results accumulate in f32 (spec 8.11 allows a wider float accumulator)."""
    return DType.FLOAT32 if dtype is DType.FLOAT16 else dtype


def lane_split(flat: FlatContraction, tiles: Sequence[int], acc_dtype: DType) -> tuple[int, int]:
    """(k, lanes) for a reduction that runs in lanes (module docstring), else (-1, 1).
    `tiles` of all 1 asks whether it could (tile.lower.tiles then gives one element per group)."""
    if flat.agg not in (AggOp.SUM, AggOp.MAX, AggOp.MIN) or not acc_dtype.is_float:
        return -1, 1
    if flat.constraints or flat.derived or flat.needs_hit or not flat.reductions:
        return -1, 1
    k = flat.reductions[-1]
    strides = {access.strides[k] for access in flat.operands}
    if 1 not in strides or not strides <= {0, 1}:
        return -1, 1
    for lanes in (64, 32, 16, 8):
        count = flat.ranges[k]
        if count >= 2 * lanes and product(tiles) * lanes <= MAX_LANE_ACCUMULATORS:
            return k, lanes
    return -1, 1


def identity_is_unwritten(flat: FlatContraction) -> bool:
    """Whether an element without contributions may keep the accumulator's start value: 0
    for `+`, `=` and the logical or `>` of bools is exactly what spec 8.6 asks for when there
    is no default, so those need no hit flag."""
    if flat.default is not None:
        return False
    return flat.agg in (AggOp.SUM, AggOp.ASSIGN) or (flat.agg is AggOp.MAX and flat.dtype.is_bool)


def fold_lanes(
    writer: KernelWriter, acc: str, index: Expr, lanes: int, agg: AggOp, dtype: DType
) -> list[Stmt]:
    """Lanes `l` and `l + half` of the accumulator of the tile's element `index` meet,
    halving until one is left."""
    statements: list[Stmt] = []
    half = lanes // 2
    while half:
        name = writer.fresh(f"fold{half}")
        counter = Load(Lookup(name))
        low = Subscript(Lookup(acc), affine([(lanes, index), (1, counter)]))
        high = Subscript(Lookup(acc), affine([(lanes, index), (1, counter)], half))
        store = Store(low, aggregate(agg, dtype, Load(low), Load(high)))
        statements.append(For(name, half, 1, sb.block(store)))
        half //= 2
    return statements
