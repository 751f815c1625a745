"""What a measured search may choose in a program's kernels, and what it chose (issue 11 item
4, issue 12 item 5).

The cost model picks every tile. For the register-tiled kernel of a dense contraction
(`tile.lower.vector`), the best register tile also depends on things it does not model (how
the CPU's caches and prefetchers meet the shape's edges and strides), and a wrong one can
cost 2x on an odd shape. So `generate_program` takes a `Tuning`:

* `chosen`: register tiles by the contraction's structural key (`FlatContraction.key()`, as
  flattened, before any packing or float32 copies), which the search in `tile.runtime.tune`
  measured and remembers on disk; a contraction not in it keeps the cost model's tile;
* `sites`: filled while generating, one `Site` per contraction that takes the register-tiled
  kernel and has more than one candidate tile: the tiles to try, the cost model's first, and
  the name of its kernel, whose launch (with the kernels it brings: packed panels, float32
  copies, a float16 result's conversion, all named `<kernel>_<suffix>`) the search times.

The choice reaches the generator as `HardwareSettings.register_tile`, set for that
contraction's kernel plan only, so every step that sizes something by the register tile
(packing B in panels, the reduction-blocked order) sees the same tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tile.lower.vector import model_tile, tile_shapes, vector_shape

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction

Tile = tuple[int, int]


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
