"""Which flat contractions the register-tiled vector kernel takes (`vector_shape`: a matmul
in disguise, `tile.lower.vector`), and the register tile it runs them in (`model_tile`, the
cost model; `tile.lower.tuning` searches among `tile_shapes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree.nodes import LANE_WIDTHS
from semtree.types import DType
from tile.lang.syntax import AggOp, CombOp
from tile.lower.kernel import product

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatAccess, FlatContraction

F32 = DType.FLOAT32


@dataclass(frozen=True, slots=True)
class VectorShape:
    """How a flat contraction maps onto the register tile."""

    a: FlatAccess  # the broadcast operand
    b: FlatAccess  # the vector operand
    i: int  # position of the row coordinate
    j: int  # position of the vector coordinate
    width: int  # floats per vector
    lanes: bool = False  # B and C read and written as `Lanes` at element offsets, else aligned


def vector_shape(flat: FlatContraction, vec_size: int, half: bool = False) -> VectorShape | None:
    """The roles of a flat contraction's variables in the vector kernel, or None if it is
    not eligible. `half`: float16 operands and output may take it too, each or all of them
    (computed in float32, as on a device without native half), through aligned vectors
    only."""
    if flat.empty or flat.derived or flat.default is not None:
        return None
    if flat.agg is not AggOp.SUM or flat.comb is not CombOp.MUL or len(flat.operands) != 2:
        return None
    dtypes = {access.dtype for access in flat.access}
    if dtypes != {F32} and not (half and dtypes <= {F32, DType.FLOAT16}):
        return None
    output = flat.output
    coordinates = range(flat.outputs)
    # A coordinate of one element is no vector coordinate where the reduction is one loop:
    # `A @ x` with a column x ran as 4 rows of scalar products, 0.036 ms at 125 x 847 (3.8x
    # torch's time), the generic kernel's dot products along k 0.016 (AMD Zen 5). A convolution
    # with one output channel keeps the row tiles: its taps are short, guarded dot products.
    for a, b in (flat.operands, reversed(flat.operands)):
        j_choices = [
            k
            for k in coordinates
            if output.strides[k] == 1
            and b.strides[k] == 1
            and a.strides[k] == 0
            and (flat.ranges[k] > 1 or len(flat.reductions) > 1)
        ]
        if not j_choices:
            continue
        j = j_choices[0]
        i_choices = [k for k in coordinates if k != j and b.strides[k] == 0 and a.strides[k] != 0]
        if not i_choices:
            continue
        i = i_choices[-1]  # the one nearest the vector dimension
        if any(s < 0 for s in (*b.strides, *output.strides)):
            return None
        if any(constraint.lhs[j] for constraint in flat.constraints):
            return None
        width = vec_size
        terms = [flat.ranges[j], b.offset, output.offset]
        terms += [s for k, s in enumerate(b.strides) if k != j]
        terms += [s for k, s in enumerate(output.strides) if k != j]
        while width > 1 and any(term % width for term in terms):
            width //= 2
        lanes = min(vec_size, 1 << (flat.ranges[j] - 1).bit_length())
        if dtypes == {F32} and lanes > width and lanes in LANE_WIDTHS:  # unaligned vectors
            return VectorShape(a, b, i, j, lanes, lanes=True)
        return VectorShape(a, b, i, j, width)
    return None


# Register tiles (rows, vectors) by vector width: the model's first, then the others a search
# tries (`tile.lower.tuning`). 32 registers with AVX-512, else 16, B's vectors and A's included.
TILES = {
    16: ((6, 4), (8, 3), (4, 6), (12, 2), (4, 4), (3, 8)),
    4: ((6, 2), (4, 3), (3, 4), (8, 1), (4, 2), (12, 1)),
    1: ((4, 8), (8, 4), (2, 8), (4, 4)),
}


def tile_shapes(width: int) -> tuple[tuple[int, int], ...]:
    return TILES[16 if width >= 16 else 4 if width >= 4 else 1]


def model_tile(
    flat: FlatContraction, shape: VectorShape, settings: HardwareSettings
) -> tuple[int, int]:
    """(rows, vectors) of the register tile: 12-28 accumulators in 32 zmm registers, 12 in
    16 ymm ones, NV >= 2 where the output is that wide (PERFORMANCE.md 2.1), and smaller
    tiles before idle threads; or the tile a measured search chose (`register_tile`)."""
    columns, size = -(-flat.ranges[shape.j] // shape.width), flat.ranges[shape.i]
    rows, vectors = settings.register_tile or tile_shapes(shape.width)[0]
    if settings.register_tile is None:
        rows, vectors = dividing_tile(size, columns, min(rows, size), vectors, shape.width)
    vectors, rows = max(1, min(vectors, columns)), max(1, min(rows, size))
    if settings.register_tile is not None:
        return rows, vectors
    others = product(flat.ranges[k] for k in range(flat.outputs) if k not in (shape.i, shape.j))
    while rows > 1 and _groups(flat, shape, rows, vectors, others) < 2 * settings.goal_groups:
        rows -= 1
    return rows, vectors


def dividing_tile(size: int, columns: int, rows: int, vectors: int, width: int) -> tuple[int, int]:
    """As many accumulators or fewer in the rows (rows +- 1 or 2) that pad `size` least where
    `rows` would pad it by more than a tenth: outputs 7 and 14 wide in tiles of 7 x 3, not 6 x 4
    (a conv 8x7x7x512->512 7.7 -> 5.3 ms, 8x14x14x256->512 stride 2 6.4 -> 3.4); with 16
    registers 14 in 5 x 2, not 6 x 2 (a conv NCHW 4x128x28x28->256 stride 2 10% faster, AMD
    Zen 3), 7 in 4 x 3; else in vectors
    that divide `columns` (vectors +- 1 or 2) where the last column tile would be more than a
    fifth empty: 65 wide (5 vectors) in 4 x 5, 81 wide in 8 x 3 (matmul 513 x 300 x 65 0.12 ->
    0.08 ms on llvm_cpu.0, 0.35 -> 0.09-0.15 on Intel's CPU OpenCL, where the empty vectors of
    a tile past the edge cost most; 300 x 500 x 81 0.11 -> 0.084 on llvm_cpu.0; AMD Zen 5)."""
    registers = 32 if width >= 16 else 16  # with B's vectors and A's value
    padded = -(-size // rows) * rows
    if padded * 10 > size * 11:
        best = None
        for other in (r for r in (rows + 1, rows + 2, rows - 1, rows - 2) if r > 1):
            count = rows * vectors // other
            less = -(-size // other) * other
            if count >= 2 and (other + 1) * count < registers and less < padded:
                best, padded = (other, count), less
        if best is not None:
            return best
    if vectors < columns and -(-columns // vectors) * vectors * 4 > columns * 5:
        for other in (v for v in (vectors + 1, vectors - 1, vectors + 2, vectors - 2) if v > 1):
            count = rows * vectors // other
            if columns % other == 0 and count >= 2 and (count + 1) * other < registers:
                return count, other
    return rows, vectors


def _groups(flat: FlatContraction, shape: VectorShape, rows: int, vectors: int, others: int) -> int:
    columns = -(-flat.ranges[shape.j] // shape.width)
    return others * -(-flat.ranges[shape.i] // rows) * -(-columns // vectors)
