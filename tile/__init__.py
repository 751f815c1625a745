"""Tile: a tensor compiler for the Tile contraction language."""

from __future__ import annotations

from semtree.types import DType
from tile.errors import Diagnostic, TileBindError, TileError, TileSyntaxError, TileTypeError

__all__ = [
    "DType",
    "Diagnostic",
    "TileBindError",
    "TileError",
    "TileSyntaxError",
    "TileTypeError",
]
