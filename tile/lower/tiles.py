"""Tile sizes: how many output elements one work-group computes (design 8.6, 11.1).

Every tile-size decision of the generator is made here, so a performance pass can replace
the policy (a cost model, a search, autotuning) without touching code generation: the
generators (`tile.lower.contract`) accept any tile of at least 1 per output dimension and guard
partial tiles themselves.

Current policy, deliberately simple (correctness first):

* only the last two output dimensions are tiled; the last one is the contiguous one, which
  LLVM can vectorise inside a work-group;
* a contraction with reduction loops gets a register tile (about `vec_size` columns and a few
  rows, its accumulators within `settings.max_regs`): each loaded operand element then
  serves several outputs (PERFORMANCE.md 2.1); where every operand is contiguous along the
  last output dimension (a column sum, channels-last pooling), a strip of
  `STREAM_ELEMENTS` columns (whole vectors), so that each reduction step reads whole cache lines;
  under `settings.reduction_steps` (llvm_cpu) one strip per core instead where the operands
  come from memory (wide), or from the caches with a broadcast operand (register-sized:
  `_row_strip`);
* a reduction contiguous in every operand, which runs in `lanes` > 1 partial results per
  element (`tile.lower.contract`), computes one element per work-group: the lanes are its
  vectors, and the operands have nothing to share between neighbouring elements; under
  `settings.vector_loops` (an OpenCL CPU driver, which pays a call per group) short rows
  share a group (`_lane_group`), and under `settings.row_folds` (llvm_cpu) rows of a few
  vectors take a row of `lanes` elements, whose lanes fold together (`folds_rows`);
* a kernel without reductions (elementwise, or a contraction that is a pure permutation)
  processes a strip of `4 * vec_size` contiguous elements per work-group, to amortise the
  per-group overhead (one element on a device without SIMD, `vec_size` 1); when an operand
  is contiguous along another output dimension (a transposition), a square tile over that
  dimension and the last instead, so that neither side strides through memory
  (`settings.transpose_tile` per side, rounded up to whole blocks of 8 where at least half
  of a block's lanes are live: `tile.lower.transpose`), read along the operand's contiguous
  dimension (`read_order`); an elementwise kernel's strip then grows over the rows above it, up to
  `GROUP_ELEMENTS` elements per group (`_widen_group`), and under `settings.vector_loops` it
  is a whole number of vectors where a row has more than one (a row of 50 takes a strip of
  64: 3 vectors and a partial one), so that `tile.lower.widen` writes it on vectors.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from semtree.nodes import LANE_WIDTHS
from tile.lower.accumulators import MAX_LANE_ACCUMULATORS
from tile.lower.widen import LANE_TYPES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction

# Rows of a register tile. Measured with the LLVM backend on an AVX-512 host (2 threads,
# scalar semtree left to LLVM's vectorisers): a 2 x 16 tile gives matmul 512 about 17 and a
# 3x3 convolution about 25 GFLOP/s; with 4 x 16 the convolution gains 15% but LLVM turns the
# matmul into gathers (under 1 GFLOP/s). Explicit vector accumulators (PERFORMANCE.md 2.1)
# are what lifts this limit.
MAX_TILE_ROWS = 2

# Elements per work-group along the last output dimension of a reduction whose operands are
# contiguous along it (a column sum): each step of the reduction then reads a strip of 256
# bytes of float32, not one vector from every row (a new page each time). What counts is the
# bytes, not the vectors. Column sum of 4096 x 3001 on llvm_cpu.0 (AMD Zen 4, AVX-512, 16
# floats a vector): 8.7 ms with 16 elements, 5.1 with 32, 4.0 with 64, 4.3 with 128. On AVX2
# (AMD Zen 3, 8 a vector) 64 against 32: column sum 4096 x 4096 12.8 -> 10.1 ms, matvec-T 4096
# 11.2 -> 8.6, a sum over the middle axis of 256 x 1000 x 64 7.6 -> 5.5 (under load, in turns).
STREAM_ELEMENTS = 64

# Streaming reductions under `reduction_steps` (llvm_cpu; `_row_strip`). A work-group owns a
# strip of the last output dimension and walks the whole reduction. Where the operands come
# from memory (more than `CACHED_BYTES`), a strip per core of whole rows of up to
# `STRIP_BYTES`, accumulators in L1, several rows a step (`tile.lower.contract`'s jammed
# steps), not 256 bytes of every row, each in a new page: matvec-T 4096 4.8 -> 2.8 ms,
# 4099 x 3001 3.9 -> 3.1, a column sum 4096 x 4096 in the variants benchmark 0.77 -> 0.52 of
# torch's time. From the caches, a reduction with a broadcast operand (matvec-T's vector,
# loaded once a row per strip) takes a strip per core of half the vector registers (AVX-512:
# 16 of 32; AVX2: 8 of 16): matvec-T 1000 x 1000 0.10 -> 0.08 ms, 8192 x 512 0.97 -> 0.36
# (AVX2 code: 0.64 -> 0.45). A plain column sum from the caches keeps `STREAM_ELEMENTS`
# (strips of a vector keep their masked last vector, `ragged_vector`): the register strips
# ran it up to 1.5x slower in AVX2 code. AMD Zen 4, 2 threads, interleaved, warm.
# Shorter reductions (a pooling window, a depthwise filter: 4 to 25 rows) keep the strips
# of `STREAM_ELEMENTS`, a few vectors in registers; wide strips pay off over many rows.
# In AVX2 code a wide strip from memory that sticks out of the row masks every load of its
# elements: matvec-T 4099 x 3001 4.6 ms in two strips of 1504 (the second partial), 4.1 in
# register strips; AVX-512 masks at no cost (3.1 against 3.9). Narrower vectors than
# `MASKED_WIDTH` take wide strips only where they divide the row (4096: 2.4 against 4.4),
# else the strips from the caches.
CACHED_BYTES = 24 << 20
STRIP_ROWS = 64
MASKED_WIDTH = 16
STRIP_BYTES = 8192
REGISTER_STRIP = {16: 16, 8: 8}  # vectors of a strip from the caches, by vector width

# Elements per work-group of an elementwise kernel, at most: its strip grows over the rows
# above it (and along a long last dimension) while every core keeps `goal_groups` groups.
# A group costs PoCL a call of its own: converting an 8 x 128 x 256 float16 tensor to float32
# took 0.15 ms in groups of 64 elements and 0.075 ms in groups of 1024, and gelu over 16M
# elements went from 12.0 to 9.4 ms (Intel Xeon Emerald Rapids, 2 threads; no change on
# llvm_cpu.0).
GROUP_ELEMENTS = 1024

# Rows folded together (`folds_rows`): the widest lanes (a `semtree.Lanes` vector), and the
# steps of them per element under which a reduction takes a group of rows. Matvec over 20011
# rows (AMD Zen 4), µs one row per group / folded: rows of 16 101 / 45, 33 144 / 76, 48 84 /
# 68, 63 128 / 69; rows of 64 and more take 32 lanes, two vectors, and fold each row alone.
MAX_FOLD_LANES = 16
ROW_FOLD_STEPS = 4


def choose_tiles(
    shape: Sequence[int],
    settings: HardwareSettings,
    *,
    reduction_points: int,
    accumulator_bytes: int,
    lanes: int = 1,
    crosswise: int | None = None,
    streams: bool = False,
    broadcasts: bool = False,
    elementwise: bool = False,
) -> tuple[int, ...]:
    """Tile size per output dimension (outermost first) for a kernel writing `shape`.

    `reduction_points` is the trip count of the reduction loops (1 without any) and
    `accumulator_bytes` the size of one accumulator; `lanes` how many partial results the
    generator can keep per element along a contiguous reduction; `crosswise` the output
    dimension along which an operand of a reduction-free kernel is contiguous, when that is
    not the last one (a transposition); `streams` that every operand of a reduction reads the
    last output dimension contiguously (or not at all), as a column sum or a pooling over
    channels-last data does, and `broadcasts` that one of them is constant along it (the
    vector of a matvec-T, loaded once a row per strip); `elementwise` that the kernel is an
    elementwise one (no contraction: its tile is a loop nest over the elements, without a
    staging array).
    """
    tiles = [1] * len(shape)
    if not shape or (reduction_points > 1 and lanes > 1):
        if shape and lanes > 1 and settings.vector_loops:
            _lane_group(shape, tiles, reduction_points, lanes, settings.goal_groups)
        elif shape and folds_rows(shape, settings, reduction_points, lanes, accumulator_bytes):
            tiles[-1] = lanes
        return tuple(tiles)
    if reduction_points <= 1:
        if crosswise is not None and crosswise != len(shape) - 1 and settings.vec_size > 1:
            side = settings.transpose_tile
            while side > 1 and side * side * accumulator_bytes > settings.max_mem // 2:
                side //= 2  # the element path stages a tile in private memory
            for axis in (crosswise, -1):  # whole blocks of 8 where half their lanes are live
                size = shape[axis]
                tiles[axis] = min(size if 0 < size % 8 < 4 else -(-size // 8) * 8, side)
        elif settings.vec_size > 1:
            strip = 4 * settings.vec_size
            tiles[-1] = min(shape[-1], strip)
            if elementwise:
                width = settings.vec_size
                whole = settings.vector_loops and shape[-1] > width  # whole vectors (`widen`)
                if whole:
                    tiles[-1] = min(-(-shape[-1] // width) * width, strip)
                _widen_group(shape, tiles, settings.goal_groups, width if whole else 1)
        return tuple(tiles)
    columns = min(shape[-1], settings.vec_size)
    if streams and settings.reduction_steps:
        strip = 0
        if from_memory(shape, reduction_points, accumulator_bytes):
            strip = _row_strip(shape, settings, accumulator_bytes, True)
            if shape[-1] % strip and settings.vec_size < MASKED_WIDTH:
                strip = 0  # a partial wide strip: masked loads
        if not strip and broadcasts:
            strip = _row_strip(shape, settings, accumulator_bytes, False)
        if strip:
            tiles[-1] = strip
            return tuple(tiles)
    if streams:  # wider strips, while every core still gets work-groups
        wide = min(shape[-1], max(STREAM_ELEMENTS, settings.vec_size))
        others = prod(shape[:-1])
        while wide > columns and others * -(-shape[-1] // wide) < settings.goal_groups:
            wide //= 2
        if settings.vector_loops and wide > settings.vec_size:  # whole vectors (`widen_lanes`)
            vectors, most = -(-shape[-1] // settings.vec_size), -(-wide // settings.vec_size)
            wide = -(-vectors // -(-vectors // most)) * settings.vec_size  # strips alike
        columns = max(columns, wide)
    tiles[-1] = columns
    if len(shape) >= 2 and not streams:
        budget = max(1, settings.max_regs // (accumulator_bytes * columns))
        tiles[-2] = max(1, min(shape[-2], MAX_TILE_ROWS, budget))
    return tuple(tiles)


def read_order(flat: FlatContraction | None, tiles: Sequence[int]) -> tuple[int, ...]:
    """The order of the output dimensions in which a kernel reads its tile, and lays out its
    accumulators (the last one fastest): output order, except in a pure permutation (no
    reduction, as a transposition) with its operand contiguous along a tiled dimension other
    than the last, which then comes last. The tile then fills from whole cache lines, as
    vectors, and the transposition happens in private memory on the way out, not in strided
    loads from global memory (transpose 4096 on PoCL: 25 -> 16 ms)."""
    order = tuple(range(len(tiles)))
    if flat is None or flat.reductions or len(flat.operands) != 1 or flat.outputs != len(tiles):
        return order
    (access,) = flat.operands
    last = len(tiles) - 1
    if last < 1 or access.strides[last] == 1:
        return order
    contiguous = [d for d in range(last) if access.strides[d] == 1 and tiles[d] > 1]
    if not contiguous:
        return order
    (crosswise, *_) = contiguous
    return (*(d for d in order if d != crosswise), crosswise)


def streaming(flat: FlatContraction) -> bool:
    """Whether every operand of `flat` reads the last output dimension contiguously or not at
    all, and one reads it (a column sum, a matvec-T, channels-last pooling)."""
    last = flat.outputs - 1
    strides = [access.strides[last] for access in flat.operands] if last >= 0 else []
    return any(strides) and all(stride in (0, 1) for stride in strides)


def from_memory(shape: Sequence[int], reduction_points: int, accumulator_bytes: int) -> bool:
    """Whether a streaming reduction walks at least `STRIP_ROWS` rows and reads more than
    `CACHED_BYTES` (its largest operand's bytes, about: one element per tuple)."""
    if reduction_points < STRIP_ROWS:
        return False
    return prod(shape) * reduction_points * accumulator_bytes > CACHED_BYTES


def _row_strip(
    shape: Sequence[int], settings: HardwareSettings, accumulator_bytes: int, memory: bool
) -> int:
    """The strip of a streaming reduction under `settings.reduction_steps` (llvm_cpu): up to
    `STRIP_BYTES` of accumulators, kept in L1, where the operands come from `memory`, else up
    to `REGISTER_STRIP` vectors (within `max_regs`), kept in registers; as few strips as give
    every core one (`goal_groups` is four per core), a whole number of vectors each but the
    last."""
    size, width = shape[-1], settings.vec_size
    cores = max(1, settings.goal_groups // 4)
    if memory:
        most = STRIP_BYTES // accumulator_bytes
    else:
        most = min(width * REGISTER_STRIP.get(width, 8), settings.max_regs // accumulator_bytes)
    most = max(width, most // width * width)
    strips = max(-(-size // most), min(-(-size // width), -(-cores // prod(shape[:-1]))))
    strip = -(-size // strips)
    return min(size, -(-strip // width) * width)


def folds_rows(
    shape: Sequence[int], settings: HardwareSettings, points: int, lanes: int, item: int
) -> bool:
    """Whether a reduction in `lanes` of `points` per element (`item` bytes an accumulator)
    takes `lanes` elements of the last output dimension per work-group, folded together
    (`tile.lower.accumulators.fold_rows`): under `settings.row_folds`, where an element's lanes
    are one vector, its reduction is under `ROW_FOLD_STEPS` steps of them, and the grid keeps
    `goal_groups` groups."""
    return (
        settings.row_folds
        and 1 < lanes <= MAX_FOLD_LANES
        and lanes * item <= 4 * settings.vec_size
        and points < ROW_FOLD_STEPS * lanes
        and shape[-1] >= lanes
        and prod(shape[:-1]) * -(-shape[-1] // lanes) >= settings.goal_groups
    )


def _lane_group(
    shape: Sequence[int], tiles: list[int], points: int, lanes: int, goal_groups: int
) -> None:
    """Grow the last tile (in place) of a reduction in lanes whose rows are short, doubling it
    while a group reads under `GROUP_ELEMENTS` elements, its accumulators stay within
    `MAX_LANE_ACCUMULATORS` (`lane_split`) and the grid keeps `goal_groups` groups."""
    others = prod(shape[:-1])
    while (
        tiles[-1] * points < GROUP_ELEMENTS
        and 2 * tiles[-1] * lanes <= MAX_LANE_ACCUMULATORS
        and 2 * tiles[-1] <= shape[-1]
        and others * -(-shape[-1] // (2 * tiles[-1])) >= goal_groups
    ):
        tiles[-1] *= 2


def _widen_group(shape: Sequence[int], tiles: list[int], goal_groups: int, width: int) -> None:
    """Grow `tiles` (in place) from the last dimension outwards, doubling one dimension at a
    time, up to `GROUP_ELEMENTS` elements and while the grid keeps `goal_groups` groups; an
    outer dimension grows only once the tile spans every dimension inside it. The last one
    stays a multiple of `width` (a row of 333 in vectors of 16 grows to 336, not 333)."""

    def groups() -> int:
        return prod(-(-size // tile) for size, tile in zip(shape, tiles, strict=True))

    last = len(shape) - 1
    for axis in range(last, -1, -1):
        if axis < last and tiles[axis + 1] < shape[axis + 1]:
            return
        end = -(-shape[axis] // width) * width if axis == last else shape[axis]
        while tiles[axis] < end and 2 * prod(tiles) <= GROUP_ELEMENTS:
            before = tiles[axis]
            tiles[axis] = min(end, 2 * before)
            if groups() < goal_groups:
                tiles[axis] = before
                return


def ragged_vector(
    flat: FlatContraction,
    shape: Sequence[int],
    tiles: Sequence[int],
    order: Sequence[int],
    settings: HardwareSettings,
) -> bool:
    """Whether a contraction's innermost tile loop, the last of the read `order`, is one
    vector of the device's width whose last tile sticks out of the `shape`, along which every
    operand is read contiguously or not at all (so that `widen_lanes` widens the
    accumulation), on a device that vectorizes loops itself (no `vector_loops`).

    LLVM 22 unrolls such a loop whole and leaves its padded loads scalar, a branch each: a
    column sum of 26460 x 102 in tiles of 16 took 0.42 ms, 0.17 on vectors (the last one
    masked); 200000 x 17, 0.84 and 0.24 (AMD Zen 5; AVX2 code, tiles of 8, likewise). Not
    otherwise: longer tiles LLVM's loop vectorizer writes with masked loads itself (widened,
    a depthwise 3 x 3 over 97 channels in tiles of 64 ran 3.5x slower, its accumulators on
    the stack); and where the reads are strided the guarded scalar loop that would replace
    the padded one is slower still (a sum of 2 x 17 x 1346 x 4 over all but axis 2: 0.04 ms
    padded, 0.55 guarded)."""
    if settings.vector_loops or not order or settings.vec_size not in LANE_WIDTHS:
        return False
    last = order[-1]
    if tiles[last] != settings.vec_size or not shape[last] % tiles[last]:
        return False
    if flat.derived or any(c.lhs[last] for c in flat.constraints):  # per-lane guards
        return False
    if (
        any(a.dtype not in LANE_TYPES or a.panel for a in flat.access)
        or flat.dtype not in LANE_TYPES
    ):
        return False
    strides = {access.strides[last] for access in flat.operands}
    return 1 in strides and strides <= {0, 1}
