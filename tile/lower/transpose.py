"""Transpositions in 8 x 8 register blocks (design 8.7; issue 12 item 1).

A contraction that only moves elements (`O[n, m] = =(I[m, n])`, a batched transposition,
NCHW to NHWC: no reduction, one operand, no guard, default or epilogue), whose operand is
contiguous along an output dimension other than the last, reads each tile along that
dimension into a private array and writes it out element by element
(`tile.lower.tiles.read_order`). Intel's CPU OpenCL compiler keeps that private array in
memory and runs the write loop on scalars.

`with_blocks` gives such a kernel, where both its tiled sides are multiples of 8, blocks of
8 x 8 elements instead: each 8 vector loads of 8 elements along the operand's contiguous
dimension, a transposition in registers (3 rounds of 8 `semtree.Shuffle`s) and 8 vector
stores along the output's last dimension. In a tile at the edge of the shape, each block
chooses: one inside the shape runs as in a whole tile, one that sticks out counts its loads and
stores (`semtree.Lanes` with a count: nothing past the shape is read or written), one wholly
past the edge is skipped; so no tile needs the private array. Transposing 4096 x 4096 float32
on Intel's runtime (AMD EPYC Zen 5, 2 threads, tiles of 32 x 32): 9.3 ms by elements, 6.7 ms in
blocks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Block,
    Expr,
    IntConst,
    Lanes,
    Load,
    Lookup,
    Select,
    Shuffle,
    Stmt,
)
from semtree.types import Type
from tile.lang.syntax import CombOp
from tile.lower.flatten import row_major
from tile.lower.kernel import affine, conjunction
from tile.lower.widen import LANE_TYPES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.lower.flat import FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import GeneratedBody, Grid, KernelWriter

BLOCK = 8  # elements per block side: 8 lanes are one AVX vector of float32, and PoCL's limit


def transpose_masks(width: int) -> list[tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
    """The rounds of a `width` x `width` transposition of vectors v[0..width): per round, per
    pair of rows (i, i + d), the masks whose shuffles of (v[i], v[i + d]) become the new v[i]
    and v[i + d]: the first d lanes of each group of 2d from both, then the next d. After the
    rounds (d = 1, 2, 4 ...), v[j] holds lane j of every original row."""
    rounds = []
    distance = 1
    while distance < width:
        groups = range(0, width, 2 * distance)
        low = [g + k + side for g in groups for side in (0, width) for k in range(distance)]
        high = [lane + distance for lane in low]
        for row in range(width):
            if not row & distance:
                rounds.append((row, row + distance, tuple(low), tuple(high)))
        distance *= 2
    return rounds


def with_blocks(
    generated: GeneratedBody,
    plan: KernelPlan,
    flat: FlatContraction | None,
    tiles: Sequence[int],
    order: Sequence[int],
    grid: Grid,
    writer: KernelWriter,
) -> GeneratedBody:
    """`generated` (the element kernel) with 8 x 8 blocks for its whole tiles, where it is a
    transposition they can move (module docstring); else `generated` itself."""
    last = len(tiles) - 1
    crosswise = order[-1] if order else last
    if flat is None or crosswise == last or not _movable(plan, flat, tiles, crosswise):
        return generated
    parts = _Parts(plan, flat, tiles, crosswise, grid, writer)
    whole = [  # the tile lies inside the shape (always, where its side divides the shape)
        Binary(BinOp.LE, affine([(1, grid.bases[d])], tiles[d]), IntConst(plan.shape[d]))
        for d in (crosswise, last)
        if plan.shape[d] % tiles[d]
    ]
    if any(tiles[d] > plan.shape[d] for d in (crosswise, last)):  # no tile is whole
        blocks = parts.blocks(masked=True)
    elif whole:  # edge tiles: the same blocks, their loads and stores counted at the shape's edges
        blocks = sb.if_(conjunction(whole), parts.blocks(masked=False), parts.blocks(masked=True))
    else:
        blocks = parts.blocks(masked=False)
    guard = grid.guard()
    body = Block((*grid.setup, blocks if guard is None else sb.if_(guard, blocks)))
    return replace(generated, body=replace(generated.body, body=body))


class _Parts:
    """The pieces of a transposition's blocks: where its tile's blocks start, the buffers."""

    def __init__(
        self,
        plan: KernelPlan,
        flat: FlatContraction,
        tiles: Sequence[int],
        crosswise: int,
        grid: Grid,
        writer: KernelWriter,
    ) -> None:
        self.plan, self.flat, self.tiles, self.writer = plan, flat, tiles, writer
        self.crosswise, self.last = crosswise, len(tiles) - 1
        (self.access,) = flat.operands
        context = writer.context
        self.source = Lookup(writer.input_param(context.buffer_of[self.access.tensor]))
        self.stored = plan.stores[0]
        self.target = Lookup(writer.outputs[context.buffer_of[self.stored]])
        self.bases = list(grid.bases)

    def blocks(self, *, masked: bool) -> Stmt:
        """The loops over the tile's blocks; `masked` (a tile at the shape's edge): a block
        wholly past the edge is skipped, one that sticks out counts its loads and stores
        (nothing past the shape is read or written), and one inside runs unmasked. A pack of 81
        columns in tiles of 64 then spends on its edge tiles' 17 columns two whole blocks and
        one counted, not eight counted."""
        crosswise, last, shape = self.crosswise, self.last, self.plan.shape
        across, along = self.writer.fresh("block_c"), self.writer.fresh("block_l")
        corner = list(self.bases)
        corner[crosswise] = affine([(1, self.bases[crosswise]), (BLOCK, Load(Lookup(across)))])
        corner[last] = affine([(1, self.bases[last]), (BLOCK, Load(Lookup(along)))])
        body = self._block(corner, masked=False)
        if masked:
            whole = conjunction(
                [
                    Binary(BinOp.LE, affine([(1, corner[d])], BLOCK), IntConst(shape[d]))
                    for d in (crosswise, last)
                ]
            )
            body = sb.if_(whole, body, self._block(corner, masked=True))
            body = sb.if_(Binary(BinOp.LT, corner[last], IntConst(shape[last])), body)
        inner: Stmt = sb.for_(along, self.tiles[last] // BLOCK, 1, body)
        if masked:
            inner = sb.if_(Binary(BinOp.LT, corner[crosswise], IntConst(shape[crosswise])), inner)
        return sb.for_(across, self.tiles[crosswise] // BLOCK, 1, inner)

    def _block(self, corner: Sequence[Expr], *, masked: bool) -> Block:
        """One block at `corner`: 8 loads, the transposition in registers, 8 stores; `masked`:
        lanes and rows past the shape are neither read (a load gives 0 there) nor written."""
        writer, access, flat = self.writer, self.access, self.flat
        crosswise, last, shape = self.crosswise, self.last, self.plan.shape
        dtype = Type.value(flat.dtype, BLOCK)
        rows = []
        body: list[Stmt] = []
        for i in range(BLOCK):  # operand rows: BLOCK elements along its contiguous dimension
            at = [(s, corner[d]) for d, s in enumerate(access.strides[: flat.outputs]) if s]
            offset = affine([*at, (access.strides[last], IntConst(i))], access.offset)
            count = _count(corner, last, i, crosswise, shape) if masked else None
            load = Load(Lanes(self.source, offset, BLOCK, count))
            declaration, row = writer.declare(dtype, f"row{i}", load)
            body.append(declaration)
            rows.append(row)
        for first, second, low, high in transpose_masks(BLOCK):
            pair = (rows[first], rows[second])
            for index, mask in ((first, low), (second, high)):
                shuffled = Shuffle(*pair, mask)
                declaration, rows[index] = writer.declare(dtype, f"t{len(body)}", shuffled)
                body.append(declaration)
        strides = row_major(shape)
        start = flat.output.offset if flat.output.tensor == self.stored else 0
        for j in range(BLOCK):  # output rows: BLOCK elements along its last dimension
            at = [(s, c) for s, c in zip(strides, corner, strict=True)]
            offset = affine([*at, (strides[crosswise], IntConst(j))], start)
            count = _count(corner, crosswise, j, last, shape) if masked else None
            body.append(sb.assign(Lanes(self.target, offset, BLOCK, count), rows[j]))
        return Block(tuple(body))


def _count(
    corner: Sequence[Expr], row_axis: int, row: int, lane_axis: int, shape: Sequence[int]
) -> Expr:
    """The lanes of row `row` of a block (along `row_axis`) inside the shape: those before the
    shape's end along `lane_axis`, none where the row itself is past the end."""
    inside = Binary(BinOp.LT, affine([(1, corner[row_axis])], row), IntConst(shape[row_axis]))
    lanes = Binary(BinOp.SUB, IntConst(shape[lane_axis]), corner[lane_axis])
    return Select(inside, lanes, IntConst(0))


def _movable(plan: KernelPlan, flat: FlatContraction, tiles: Sequence[int], crosswise: int) -> bool:
    """A plain transposition of elements the blocks can move, tiled in whole blocks."""
    plain = (
        len(plan.ops) == 1
        and len(plan.stores) == 1
        and not flat.reductions
        and len(flat.operands) == 1
        and flat.comb is CombOp.NONE
        and not (flat.constraints or flat.derived or flat.default or flat.empty)
    )
    if not plain or flat.dtype not in LANE_TYPES or flat.operands[0].dtype is not flat.dtype:
        return False
    access = flat.operands[0]
    last = len(tiles) - 1
    if access.panel is not None or access.strides[crosswise] != 1:
        return False
    others = [t for d, t in enumerate(tiles) if d not in (crosswise, last)]
    sides = (tiles[crosswise], tiles[last])
    return all(t == 1 for t in others) and all(side % BLOCK == 0 for side in sides)
