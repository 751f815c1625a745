"""Tile: a tensor compiler for the Tile contraction language."""

from __future__ import annotations

from tile.errors import Diagnostic, TileBindError, TileError, TileSyntaxError, TileTypeError
from semtree.types import DType

__all__ = [
    "DType",
    "Diagnostic",
    "TileBindError",
    "TileError",
    "TileSyntaxError",
    "TileTypeError",
]
