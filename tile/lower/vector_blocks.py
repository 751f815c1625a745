"""The order in which the register-tiled vector kernel (`tile.lower.vector`) covers its tiles
and its reduction (issue 11 item 1; PERFORMANCE.md 2.2).

A register tile walks the whole reduction: for a matmul it reads a K x NR panel of B and an
MR x K panel of A. When B no longer fits in the L2 cache, every row tile streams its panels
from memory again, and a matmul 1024 ran at 0.4x numpy's speed (Intel Xeon, 2 cores). Two
orders keep the operands in cache:

* `column_block`: the tiles go in blocks of column tiles whose panels of B stay in cache
  while every row tile passes them (`BLOCK_BYTES`); the reduction is not cut.
* `Blocking` (a *reduction-blocked* kernel): one work-group owns a block of `row_tiles` x
  `column_tiles` register tiles and walks the reduction in steps of `step` points; for each
  step it runs every tile of its block over that step, the accumulators starting from the
  partial sums the step before stored in the output (zero on the first step). The step's
  slice of B (`step` x the block's columns) stays in L2 and the tile's slice of A in L1
  while all the tiles use them. The sums are added in the same order as without steps, so
  the results are bit-identical. Only a contraction with one reduction variable, no
  constraint and a float32 output that the kernel stores is cut this way, and only on
  devices whose settings ask for it (`HardwareSettings.reduction_steps`: llvm_cpu). B is
  then first packed in panels (`tile.lower.pack.pack_operand`), so that a step of a tile's
  panel is one contiguous run of memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import Builtin
from semtree.types import DType, Type
from tile.lower.kernel import product

if TYPE_CHECKING:
    from collections.abc import Callable

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction
    from tile.lower.kernel import KernelWriter

# Reduction-blocked kernels (measured on Intel Xeon Emerald Rapids and AMD Zen 4, llvm_cpu, 2
# threads): a step of about 256 reduction points, blocks of about 96 rows x 256 columns. A
# matmul 1024 went from 2.5x to 1.1x numpy's time. Below `STEP_ABOVE` bytes of B the plain
# order keeps B in cache anyway.
STEP = 256
BLOCK_ROWS = 96
BLOCK_COLUMNS = 256
STEP_ABOVE = 2 << 20

# The index variables of a reduction-blocked kernel (`steps`).
BLOCK_NAMES = ("jb", "ib", "jt", "it", "k0", "kb", "jr", "ir")

# Column blocks (reduction not cut): bytes of B that a block of column tiles reads, kept in
# the L2 cache while every row tile passes them, and the size of B above which the tiles go
# in such blocks. Below it B stays in the last-level cache and the row-major order, which
# keeps a row tile's A in L1, was faster (AMD Zen 4, matmul 1024 and 1536: 0.9-1.0x the
# blocked time; 2048: 1.9x, 1024x4096x1024: 1.6x).
BLOCK_BYTES = 1 << 20
BLOCKED_ABOVE = 8 << 20


@dataclass(frozen=True, slots=True)
class Blocking:
    """A reduction-blocked kernel's shape (module docstring)."""

    k: int  # the reduction variable (position in the flat contraction)
    step: int  # reduction points per step; the last step may be shorter
    row_tiles: int  # register tiles per block along the row coordinate
    column_tiles: int  # and along the vector coordinate

    def steps(self, points: int) -> tuple[int, int]:
        """(full steps, points left for a last shorter step) over `points`."""
        return points // self.step, points % self.step


def step_size(points: int) -> int:
    """A step near `STEP` reduction points, dividing `points` where one near it does (no
    shorter last step)."""
    count = max(1, round(points / STEP))
    for steps in (count, count + 1, count - 1, count + 2):
        if steps >= 1 and points % steps == 0 and STEP // 2 <= points // steps <= 2 * STEP:
            return points // steps
    return STEP


def blocking(
    flat: FlatContraction,
    i: int,
    j: int,
    tile: tuple[int, int, int],
    output_stored: bool,
    settings: HardwareSettings,
) -> Blocking | None:
    """The reduction-blocked shape for a vector kernel of `tile` = (rows, vectors, width)
    with row coordinate `i` and vector coordinate `j`, or None where the plain order is kept
    (module docstring)."""
    rows, vectors, width = tile
    if not settings.reduction_steps or len(flat.reductions) != 1 or flat.constraints:
        return None
    if not output_stored:
        return None
    if flat.output.dtype is not DType.FLOAT32:
        return None
    (k,) = flat.reductions
    points = flat.ranges[k]
    columns = -(-flat.ranges[j] // width)
    if points < 2 * STEP or points * columns * width * 4 <= STEP_ABOVE:
        return None
    row_tiles_all = -(-flat.ranges[i] // rows)
    column_tiles_all = -(-columns // vectors)
    row_tiles = min(row_tiles_all, max(1, -(-BLOCK_ROWS // rows)))
    column_tiles = min(column_tiles_all, max(1, BLOCK_COLUMNS // (vectors * width)))
    if row_tiles * column_tiles < 4:
        return None  # a block of a few tiles gains nothing from the steps
    others = product(flat.ranges[x] for x in range(flat.outputs) if x not in (i, j))

    def groups(row_tiles: int) -> int:
        return others * -(-row_tiles_all // row_tiles) * -(-column_tiles_all // column_tiles)

    # Enough work-groups for every core: smaller blocks before idle threads.
    while row_tiles > 1 and groups(row_tiles) < 2 * settings.goal_groups:
        row_tiles = -(-row_tiles // 2)
    return Blocking(k, step_size(points), row_tiles, column_tiles)


def column_block(flat: FlatContraction, columns: int, vectors: int, width: int) -> int:
    """Column tiles per block in the plain order (module docstring): all of them where B
    is small."""
    points = product(flat.ranges[k] for k in flat.reductions)
    column_tiles = -(-columns // vectors)
    if points * columns * width * 4 > BLOCKED_ABOVE:
        return max(1, BLOCK_BYTES // (points * vectors * width * 4))
    return column_tiles


def blocked_pair(
    writer: KernelWriter,
    body: list,
    pair: sb.Value,
    block: int,
    counts: tuple[int, int],
    names: tuple[str, str],
) -> tuple[sb.Value, sb.Value]:
    """(index in the blocked dimension, index in the other) of tile number `pair` of
    `counts` = (blocked, other) tiles, taken in blocks of `block` tiles of the blocked
    dimension: the blocks one after the other, in each block the other dimension's tiles in
    turn, and for each of those the block's tiles in turn. Their data is reused while it is
    in cache. One block (`block` >= blocked) is the plain order, the blocked index fastest."""
    blocked, other = counts
    fresh = {name: writer.fresh(name) for name in ("block", "within", "height", *names)}

    def declare(name: str, value: sb.Value) -> sb.Value:
        body.append(sb.declare(Type.index(), fresh[name], value))
        return sb.var(fresh[name])

    if block >= blocked:
        index = declare(names[0], pair % blocked)
        return index, declare(names[1], pair / blocked if blocked > 1 else pair)
    first = declare("block", pair / (block * other)) * block
    within = declare("within", pair % (block * other))
    height: sb.Value | int = block
    if blocked % block:  # the last block is narrower
        height = declare("height", sb.call(Builtin.MIN, block, blocked - first))
    return declare(names[0], first + within % height), declare(names[1], within / height)


def steps(
    blocks: Blocking,
    names: dict[str, str],
    tiles: tuple[int, int],
    trips: dict[int, int],
    loops: Callable[[], list],
    tile: tuple[sb.Stmt, sb.Stmt],
    stores: tuple[sb.Stmt, sb.Stmt],
) -> list:
    """The statements of a reduction-blocked work-group (module docstring): for each step,
    for each tile of the block: the accumulators from zero or the stored partial sums
    (`tile` = (zero, reload)), the reduction loops `loops()` builds over the step (it reads
    the count from `trips`), then the partial sums stored or, on the last step, the results
    (`stores` = (final, partial)). `names`: the index variables jb, ib (the block), jt, it
    (the tile), k0 (the step's first point) and the loop counters kb, jr, ir. `tiles`: the
    register tiles of the whole output, (rows, columns)."""
    var = {name: sb.var(value) for name, value in names.items()}
    zero, reload = tile
    final, partial = stores
    full, rest = blocks.steps(trips[blocks.k])
    guards = []
    if tiles[0] % blocks.row_tiles:
        guards.append(var["it"].lt(tiles[0]))
    if tiles[1] % blocks.column_tiles:
        guards.append(var["jt"].lt(tiles[1]))

    def step(points: int, start: sb.Value | int, last: sb.Value | bool) -> list:
        trips[blocks.k] = points
        end = final if last is True else partial if last is False else sb.if_(last, final, partial)
        work: list = [sb.if_(var["k0"].eq(0), zero, reload), *loops(), end]
        if guards:
            work = [sb.if_(sb.and_(*guards), work)]
        rows = [sb.assign(names["it"], var["ib"] * blocks.row_tiles + var["ir"]), *work]
        columns = [
            sb.assign(names["jt"], var["jb"] * blocks.column_tiles + var["jr"]),
            sb.for_(names["ir"], blocks.row_tiles, body=rows),
        ]
        tiles_loop = sb.for_(names["jr"], blocks.column_tiles, body=columns)
        return [sb.assign(names["k0"], start), tiles_loop]

    last: sb.Value | bool = False
    if not rest:
        last = True if full == 1 else var["kb"].eq(full - 1)
    body = [sb.for_(names["kb"], full, body=step(blocks.step, var["kb"] * blocks.step, last))]
    if rest:
        body += step(rest, full * blocks.step, True)
    return body
