"""Work-group tiling for GPU-style contraction kernels (design 8.7 steps 3 and 5, 11.2).

Pure integer decisions, no semtree: `tile.lower.gpu.contract` turns a `GpuTiling` into a kernel.

* **Output tile.** A work-group of `threads` work-items (`settings.threads`, rounded down to
  a power of two) owns a box of output elements, a power of two per output dimension
  (`tiles`), the contiguous (last) dimension grown first. Its `lanes = min(threads,
  elements)` work-items each own `per_item` elements, element `lane + lanes * j`; when the
  tile has fewer elements than the group has work-items, the `splits = threads / lanes`
  groups of lanes share the reduction and their partial accumulators are merged through
  local memory at the end.
* **Reduction chunks.** The reduction runs in chunks: a box of `chunks[k]` consecutive values
  of every reduction variable, the innermost (last) variable grown first.
* **Staging.** For every chunk the work-group copies each operand's footprint on the output
  tile and the chunk into a `__local` array. The footprint is described in the space of the
  kernel variables: an access `offset + sum(stride[v] * v)` over a box of extents `E[v]` is
  grouped into *axes*, sets of variables whose strides are multiples of one `unit`; an axis
  spans the positions `low .. low + extent - 1` of `sum(coefficient[v] * i[v])`. Variables of
  one tensor dimension (`x + i` of a convolution, `2*x + k` of a strided one) share an axis,
  so their overlap is loaded once. An operand is read from global memory instead when it is a
  constant, touches a derived variable (a fractional output), or does not fit `max_mem`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree.types import DType
from tile.lower.kernel import INDEX_LIMIT, product

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction

PER_ITEM = 4  # output elements one work-item may own (its register tile)
MIN_CHUNK = 32  # reduction points per chunk to aim for, at least `4 * splits`


@dataclass(frozen=True, slots=True)
class Axis:
    """Positions `low .. low + extent - 1` of `sum(coefficient * i[variable])`, one global
    step of `unit` elements apart."""

    unit: int
    terms: tuple[tuple[int, int], ...]  # (variable, coefficient); stride = unit * coefficient
    low: int
    extent: int


@dataclass(frozen=True, slots=True)
class Staging:
    """The local-memory copy of one operand's footprint: axes fastest first."""

    operand: int  # position in `FlatContraction.operands`
    axes: tuple[Axis, ...]
    itemsize: int  # bytes of one element in local memory

    @property
    def size(self) -> int:
        return product(axis.extent for axis in self.axes)

    @property
    def bytes(self) -> int:
        return self.size * self.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Local-memory stride of each axis."""
        strides, step = [], 1
        for axis in self.axes:
            strides.append(step)
            step *= axis.extent
        return tuple(strides)


@dataclass(frozen=True, slots=True)
class GpuTiling:
    threads: int
    tiles: tuple[int, ...]  # per output dimension
    chunks: tuple[int, ...]  # per reduction variable, in `FlatContraction.reductions` order
    staged: tuple[Staging, ...]
    merge_bytes: int  # local memory of the merge of partial accumulators

    @property
    def elements(self) -> int:
        return product(self.tiles)

    @property
    def lanes(self) -> int:
        return min(self.threads, self.elements)

    @property
    def splits(self) -> int:
        return self.threads // self.lanes

    @property
    def per_item(self) -> int:
        return self.elements // self.lanes

    @property
    def local_bytes(self) -> int:
        return sum(s.bytes for s in self.staged) + self.merge_bytes

    def groups(self, shape: Sequence[int]) -> int:
        """Work-groups covering an output of `shape`."""
        return product(-(-size // tile) for size, tile in zip(shape, self.tiles, strict=True))

    def grid(self, shape: Sequence[int]) -> tuple[int, int]:
        """(work-groups per grid row, rows): one row, unless the work-items' global ids would
        reach 2^31 (INDEX values are 32-bit); then the last row may be partly padding."""
        groups = self.groups(shape)
        width = groups
        if groups * self.threads >= INDEX_LIMIT:
            width = (INDEX_LIMIT - 1) // self.threads
        return width, -(-groups // width)


def layout(strides: Sequence[int], extents: Sequence[int]) -> tuple[Axis, ...]:
    """Axes of the footprint of an access with `strides` over a box of `extents` per
    variable: each variable joins the axis where it adds the fewest positions, or starts a
    new one (variables with extent 1 or stride 0 add nothing)."""
    axes: list[Axis] = []
    order = sorted(
        (v for v, (s, e) in enumerate(zip(strides, extents, strict=True)) if s and e > 1),
        key=lambda v: (abs(strides[v]), v),
    )
    for v in order:
        stride, extent = strides[v], extents[v]
        best: tuple[int, int] | None = None  # (extent after joining, axis position)
        for position, axis in enumerate(axes):
            if stride % axis.unit:
                continue
            grown = axis.extent + abs(stride // axis.unit) * (extent - 1)
            if grown <= axis.extent * extent and (best is None or grown < best[0]):
                best = (grown, position)
        if best is None:
            low = 0 if stride > 0 else -(extent - 1)
            axes.append(Axis(abs(stride), ((v, 1 if stride > 0 else -1),), low, extent))
            continue
        grown, position = best
        axis = axes[position]
        coefficient = stride // axis.unit
        low = axis.low + min(0, coefficient * (extent - 1))
        axes[position] = Axis(axis.unit, (*axis.terms, (v, coefficient)), low, grown)
    return tuple(axes)


def local_itemsize(dtype: DType, settings: HardwareSettings) -> int:
    """Bytes of one element of `dtype` in local memory (booleans are bytes; half is `float`
    on a device without native half arithmetic)."""
    if dtype is DType.FLOAT16 and not settings.native_fp16:
        return 4
    return dtype.itemsize


def choose_tiling(
    flat: FlatContraction, settings: HardwareSettings, acc_dtype: DType
) -> GpuTiling | None:
    """The work-group tiling of a contraction with reductions, or None when even the merge
    of partial results does not fit local memory (the caller then uses a simpler kernel)."""
    threads = 1 << (settings.threads.bit_length() - 1)  # the tiles are powers of two
    ranges = flat.ranges
    tiles = _output_tiles(ranges[: flat.outputs], threads, settings.goal_groups)
    lanes = min(threads, product(tiles))
    splits, per_item = threads // lanes, product(tiles) // lanes
    merge = 0
    if splits > 1:
        hit = local_itemsize(DType.BOOLEAN, settings) if flat.needs_hit else 0
        merge = threads * per_item * (local_itemsize(acc_dtype, settings) + hit)
    budget = settings.max_mem - merge
    if budget < 0:
        return None
    reductions = list(flat.reductions)
    stageable = [
        index
        for index, access in enumerate(flat.operands)
        if not any(access.strides[flat.outputs : reductions[0]])  # no derived variable
        and any(access.strides)
    ]

    def staged(chunks: Sequence[int], which: Sequence[int]) -> list[Staging]:
        extents = [*tiles, *(1 for _ in flat.derived), *chunks]
        result = []
        for index in which:
            access = flat.operands[index]
            axes = layout(access.strides, extents)
            if axes:
                result.append(Staging(index, axes, local_itemsize(access.dtype, settings)))
        return result

    chunks = [1] * len(reductions)
    # Operands whose footprint does not fit even for one reduction point stay in global
    # memory, the biggest first.
    which = list(stageable)
    while sum(s.bytes for s in staged(chunks, which)) > budget:
        biggest = max(staged(chunks, which), key=lambda s: s.bytes)
        which.remove(biggest.operand)
    limit = max(MIN_CHUNK, 4 * splits)
    for position in reversed(range(len(reductions))):
        size = ranges[reductions[position]]
        while chunks[position] < size:
            current = chunks[position]
            grown = size if size <= 2 * current else 2 * current
            trial = [*chunks[:position], grown, *chunks[position + 1 :]]
            if product(trial) > limit:
                break
            if sum(s.bytes for s in staged(trial, which)) > budget:
                break
            chunks = trial
        if chunks[position] < size:
            break
    return GpuTiling(threads, tiles, tuple(chunks), tuple(staged(chunks, which)), merge)


def _output_tiles(shape: Sequence[int], threads: int, goal_groups: int) -> tuple[int, ...]:
    """Powers of two per dimension, grown round-robin from the last dimension while the tile
    has fewer than `threads` elements, or fewer than `PER_ITEM * threads` and the output
    still has `goal_groups` tiles."""
    tiles = [1] * len(shape)

    def groups(candidate: Sequence[int]) -> int:
        return product(-(-size // tile) for size, tile in zip(shape, candidate, strict=True))

    grew = True
    while grew:
        grew = False
        for dimension in reversed(range(len(shape))):
            if tiles[dimension] >= shape[dimension]:
                continue
            elements = product(tiles) * 2
            trial = [*tiles[:dimension], tiles[dimension] * 2, *tiles[dimension + 1 :]]
            if elements <= threads or (
                elements <= PER_ITEM * threads and groups(trial) >= goal_groups
            ):
                tiles = trial
                grew = True
    return tuple(tiles)
