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

Rows folded together: where the reduction is short and each element's lanes are one vector
(`tile.lower.tiles.folds_rows`: llvm_cpu), a work-group takes `lanes` consecutive elements of
the last output dimension. Each element reduces into an accumulator of its own
(`own_accumulator`), and after the loops `fold_rows` folds the tile's accumulators together
instead of one by one: each round adds the halves of the blocks of two vectors into one vector
(two `semtree.Shuffle`s and one aggregation), so that after log2(lanes) rounds one vector holds
every element's result, in order. Each round adds the same pairs of partial results as the
halving of `fold_lanes`. With one element per group, LLVM vectorised the grid loop across
elements, each lane reading its own row, or folded each row in single-lane steps: a matvec
over 100003 x 33 took 470-540 µs, 250-260 so, and over 100003 x 17 220-260, 105-130 (AMD
Zen 4; torch 320-340 and 200).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import For, IntConst, Lanes, Load, Lookup, Shuffle, Store, Subscript
from semtree.types import DType, Type, TypeBase
from tile.lang.syntax import AggOp
from tile.lower.kernel import affine, product
from tile.lower.ops import aggregate, identity

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


def regroupable(flat: FlatContraction, acc_dtype: DType) -> bool:
    """Whether `flat` is a float `+`, `>` or `<` reduction over plain ranges, whose tuples may
    be taken in any grouping (its result then differs in float rounding only)."""
    if flat.agg not in (AggOp.SUM, AggOp.MAX, AggOp.MIN) or not acc_dtype.is_float:
        return False
    return not (flat.constraints or flat.derived or flat.needs_hit or not flat.reductions)


def lane_split(flat: FlatContraction, tiles: Sequence[int], acc_dtype: DType) -> tuple[int, int]:
    """(k, lanes) for a reduction that runs in lanes (module docstring), else (-1, 1).
    `tiles` of all 1 asks whether it could (tile.lower.tiles then gives one element per group)."""
    if not regroupable(flat, acc_dtype):
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


def own_accumulator(
    writer: KernelWriter,
    nest: Stmt,
    tile: str,
    own: str,
    index: Expr,
    lanes: int,
    agg: AggOp,
    dtype: DType,
) -> Stmt:
    """`nest`, which aggregates one element's lanes into an accumulator of its own, `own`
    (declared here, at the identity), then those lanes copied into the tile's accumulators,
    `tile`, at element `index`. LLVM keeps it in registers and reads the rows of a tile one
    after the other; reduced into the tile's accumulators, it interleaved the loads of 16 rows,
    and a matvec over 1000003 x 40 from memory took 10.4 ms, not 5.7 (AMD Zen 4)."""
    name = writer.fresh("lane")
    lane = Load(Lookup(name))
    target = Subscript(Lookup(tile), affine([(lanes, index), (1, lane)]))
    copy = Store(target, Load(Subscript(Lookup(own), lane)))
    declaration = sb.declare(
        Type(TypeBase.VALUE, dtype, 1, lanes), own, identity(agg.value, dtype).expr
    )
    return sb.block(declaration, nest, For(name, lanes, 1, sb.block(copy)))


def fold_masks(lanes: int, block: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The masks of one round of `fold_rows` over blocks of `block` lanes: the shuffles of two
    vectors (a, b) whose sum holds, in each block, the folded halves of a's block in its first
    half and of b's block in its second half."""
    half = block // 2
    low, high = [], []
    for lane in range(lanes):
        if lane % block < half:
            low.append(lane)
            high.append(lane + half)
        else:
            low.append(lanes + lane - half)
            high.append(lanes + lane)
    return tuple(low), tuple(high)


def fold_rows(writer: KernelWriter, acc: str, lanes: int, agg: AggOp, dtype: DType) -> list[Stmt]:
    """Fold the lanes of `lanes` elements, element `r`'s at `acc[r * lanes ...]`, into
    `acc[0 ... lanes)`, element `r`'s result at `acc[r]` (module docstring). Round by round
    the vectors pair up as (j, j + n / 2) of n: the blocks of vector j then hold elements j,
    j + n / 2 ... in turn, so that the last vector holds 0, 1, ..., lanes - 1."""
    vector = Type(TypeBase.VALUE, dtype, lanes)
    statements: list[Stmt] = []
    values: list[Expr] = []
    for row in range(lanes):
        declaration, value = writer.declare(
            vector, "row", Load(Lanes(Lookup(acc), IntConst(row * lanes), lanes))
        )
        statements.append(declaration)
        values.append(value)
    block = lanes
    while len(values) > 1:
        low, high = fold_masks(lanes, block)
        half = len(values) // 2
        folded = []
        for first, second in zip(values[:half], values[half:], strict=True):
            pair = aggregate(agg, dtype, Shuffle(first, second, low), Shuffle(first, second, high))
            declaration, value = writer.declare(vector, "fold", pair)
            statements.append(declaration)
            folded.append(value)
        values = folded
        block //= 2
    statements.append(Store(Lanes(Lookup(acc), IntConst(0), lanes), values[0]))
    return statements
