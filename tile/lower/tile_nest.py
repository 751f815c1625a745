"""The loops over a work-group's tile (design 8.7): `TileNest.tile_loops` visits each element
of the tile, declares its coordinates at the loop level that binds them, and tests it against
the shape where the last tile of a dimension may stick out. `tile.lower.contract` writes a
kernel's accumulation, folds and output phase in such loops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import Binary, BinOp, Expr, For, IntConst, Load, Lookup, Stmt
from semtree.types import Type
from tile.lower.kernel import Grid, KernelWriter, affine, conjunction
from tile.lower.tiles import read_order

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import ProgramContext


@dataclass(slots=True)
class TileElement:
    """One element of a work-group's tile, as the loop nest over the tile sees it."""

    coordinates: list[Expr]  # one INDEX expression per output dimension
    index: Expr  # the element's position in the tile's accumulator arrays
    levels: list[int]  # per dimension: the tile loop binding it (0: none, outside them)
    partial: set[int]  # dimensions whose last tile may stick out of the shape
    inside: Expr | None = None  # whether the element is inside the shape (None: always)


ElementBody = Callable[[TileElement], tuple[list[Stmt], list[tuple[int, Stmt]]]]


class TileNest:
    """A work-group's tile of a plan's output: its grid, the writer of its kernel, and the loops
    over its elements."""

    def __init__(
        self,
        plan: KernelPlan,
        flat: FlatContraction | None,
        context: ProgramContext,
        settings: HardwareSettings,
        tiles: tuple[int, ...],
    ) -> None:
        self.plan = plan
        self.flat = flat
        self.context = context
        self.settings = settings
        self.writer = KernelWriter(context, plan.stores)
        self.grid = Grid.build(self.writer, plan.shape, tiles, settings)
        self.tiles = tiles
        if flat is not None:
            names = flat.names[: flat.outputs]
        else:
            names = tuple(f"x{d}" for d in range(len(plan.shape)))
        self.coordinate_names = names
        self.read_order = read_order(flat, tiles)
        self.whole = False  # the tile lies wholly inside the shape (`tile.lower.contract`)

    def tile_loops(self, tag: str, element: ElementBody, *, reading: bool = False) -> Stmt:
        """Loops over the elements of the tile, one per tiled dimension: in output order, or
        in `read_order` when `reading` (the tile's elements are laid out in that order).

        `element(tile)` gives the statements for one element, run only where the element is
        inside the shape, and statements to hoist to outer loop levels (level 0 is outside
        every tile loop): loads that do not depend on the inner loops.
        """
        tile = TileElement([], IntConst(0), [], set())
        order = self.read_order if reading else range(len(self.plan.shape))
        nest = [d for d in order if self.tiles[d] > 1]
        counters = [(self.writer.fresh(f"t{tag}{d}"), self.tiles[d]) for d in nest]
        declarations: dict[int, list[Stmt]] = {}
        strides: dict[int, int] = {}
        stride = 1
        for dimension in reversed(self.read_order):
            if self.tiles[dimension] > 1:
                strides[dimension] = stride
                stride *= self.tiles[dimension]
        tile_terms: list[tuple[int, Expr]] = []
        for dimension, (size, extent) in enumerate(zip(self.plan.shape, self.tiles, strict=True)):
            value = self.grid.bases[dimension]
            level = 0
            if extent > 1:
                level = nest.index(dimension) + 1
                offset = Load(Lookup(counters[level - 1][0]))
                value = affine([(1, value), (1, offset)])
                tile_terms.append((strides[dimension], offset))
            declaration, coordinate = self.writer.declare(
                Type.index(), self.coordinate_names[dimension], value
            )
            declarations.setdefault(level, []).append(declaration)
            tile.coordinates.append(coordinate)
            tile.levels.append(level)
            if size % extent and not self.whole:
                tile.partial.add(dimension)
        tile.index = affine(tile_terms)
        inside = [
            Binary(BinOp.LT, tile.coordinates[d], IntConst(self.plan.shape[d]))
            for d in sorted(tile.partial)
        ]
        tile.inside = condition = conjunction(inside)
        statements, hoisted = element(tile)
        if tile.inside is None:  # the element's statements test it themselves, or need not
            condition = None
        body: list[Stmt] = [sb.if_(condition, statements)] if condition is not None else statements
        for level in reversed(range(len(counters) + 1)):
            prefix = declarations.get(level, []) + [h for at, h in hoisted if at == level]
            body = [*prefix, *body]
            if level > 0:
                counter, count = counters[level - 1]
                body = [For(counter, count, 1, sb.block(body))]
        return body[0] if len(body) == 1 else sb.block(body)
