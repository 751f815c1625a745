"""What a measured search may choose in a program's kernels, and what it chose (issue 11 item
4, issue 12 item 5).

The cost model picks every tile. The best one also depends on things it does not model (how
the CPU's caches and prefetchers meet the shape's edges and strides), and a wrong one can
cost 2x on an odd shape. Two choices are open to a search:

* the register tile (rows, vectors) of the register-tiled kernel of a dense contraction
  (`tile.lower.vector`; `tile_candidates`);
* the work-group tiles of a generic kernel with a reduction (`tile.lower.contract`;
  `tiles_candidates`): wider strips of the last output dimension, more rows of the one
  before it (several rows of a row-wise reduction per work-group are more memory streams).

So `generate_program` takes a `Tuning`:

* `chosen`: tiles by the contraction's structural key (`FlatContraction.key()`, as
  flattened, before any packing or float32 copies; `tiles|` before it for a generic kernel),
  which the search in `tile.runtime.tune` measured and remembers on disk; a contraction not
  in it keeps the cost model's tiles;
* `sites`: filled while generating, one `Site` per contraction with more than one
  candidate: the tiles to try, the cost model's first, and the name of its kernel, whose
  launch (with the kernels it brings: packed panels, float32 copies, a float16 result's
  conversion, the partial sums of a split reduction, all named `<kernel>_<suffix>`) the
  search times.

A register tile reaches the generator as `HardwareSettings.register_tile`, set for that
contraction's kernel plan only, so every step that sizes something by it (packing B in
panels, the reduction-blocked order) sees the same tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tile.lower.accumulators import MAX_LANE_ACCUMULATORS
from tile.lower.vector_shape import model_tile, tile_shapes, vector_shape

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction

Tile = tuple[int, ...]  # a register tile (rows, vectors), or tiles per output dimension

# Work-group tiles of a generic kernel a search may try (`tiles_candidates`): the last output
# dimension's tile times these, the one before it times those, the cost model's first.
COLUMN_FACTORS = (1, 2, 4)
ROW_FACTORS = (1, 2, 4)
# The most output elements a candidate work-group may own, with lanes as the generator
# counts them (tile.lower.accumulators.lane_split).
MAX_ELEMENTS = MAX_LANE_ACCUMULATORS
MAX_CANDIDATES = 6


@dataclass(frozen=True, slots=True)
class Site:
    """A contraction whose register tile a search may choose (module docstring)."""

    key: str  # FlatContraction.key() as flattened
    kernel: str  # the name of its kernel
    candidates: tuple[Tile, ...]  # the cost model's tile first

    def owns(self, kernel_name: str) -> bool:
        """Whether a kernel of the program is this contraction's or one it brings."""
        return kernel_name == self.kernel or kernel_name.startswith(f"{self.kernel}_")


@dataclass(slots=True)
class Tuning:
    """Register tiles chosen by key, and the sites generation found (module docstring)."""

    chosen: dict[str, Tile] = field(default_factory=dict)
    sites: dict[str, Site] = field(default_factory=dict)

    def tiles_for(
        self, flat: FlatContraction, shape: Sequence[int], kernel: str, tiles: Tile
    ) -> Tile:
        """The work-group tiles of a generic kernel of `flat` writing `shape`
        (tile.lower.contract), the cost model's being `tiles`: the chosen ones, if any.
        Notes a site when there is a choice."""
        candidates = tiles_candidates(flat, shape, tiles)
        if len(candidates) < 2:
            return tiles
        key = f"tiles|{flat.key()}"
        self.sites.setdefault(key, Site(key, kernel, candidates))
        chosen = self.chosen.get(key)
        return chosen if chosen in candidates else tiles

    def settings_for(
        self, flat: FlatContraction, kernel: str, settings: HardwareSettings
    ) -> HardwareSettings:
        """The settings to generate `flat`'s kernel plan with: its chosen register tile, if
        any. Notes the contraction as a site when it has a choice to make."""
        candidates = tile_candidates(flat, settings)
        if len(candidates) < 2:
            return settings
        key = flat.key()
        self.sites.setdefault(key, Site(key, kernel, candidates))
        chosen = self.chosen.get(key)
        if chosen is None or chosen not in candidates:
            return settings
        return replace(settings, register_tile=chosen)


def tile_candidates(
    flat: FlatContraction, settings: HardwareSettings
) -> tuple[tuple[int, int], ...]:
    """The register tiles a measured search may try for `flat` (tile.runtime.tune), the cost
    model's first, each within the output and none twice; () where `flat` does not take the
    register-tiled kernel."""
    shape = vector_shape(flat, settings.vec_size, half=not settings.native_fp16)
    if shape is None:
        return ()
    columns = -(-flat.ranges[shape.j] // shape.width)
    tiles = [model_tile(flat, shape, replace(settings, register_tile=None))]
    for rows, vectors in tile_shapes(shape.width):
        tile = (min(rows, flat.ranges[shape.i]), min(vectors, columns))
        if tile not in tiles:
            tiles.append(tile)
    return tuple(tiles)


def tiles_candidates(flat: FlatContraction, shape: Sequence[int], tiles: Tile) -> tuple[Tile, ...]:
    """Work-group tiles a measured search may try for the generic kernel of `flat` whose
    cost-model tiles are `tiles` (first): wider along the last output dimension, taller along
    the one before it (several rows of a row-wise reduction per work-group: more memory
    streams per core), each within the output and `MAX_ELEMENTS`; () for a kernel without
    reductions (elementwise and copies: memory-bound, their tiles chosen for whole lines)."""
    if not tiles or flat.empty or not flat.reductions:
        return ()
    sizes = tuple(shape)
    found: list[Tile] = [tuple(tiles)]
    for rows in ROW_FACTORS if len(tiles) >= 2 else (1,):
        for columns in COLUMN_FACTORS:
            tile = list(tiles)
            tile[-1] = min(sizes[-1], tiles[-1] * columns)
            if len(tile) >= 2:
                tile[-2] = min(sizes[-2], tiles[-2] * rows)
            candidate = tuple(tile)
            elements = 1
            for size in candidate:
                elements *= size
            if candidate not in found and elements <= MAX_ELEMENTS:
                found.append(candidate)
    return tuple(found[:MAX_CANDIDATES])
