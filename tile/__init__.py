"""Tile: a tensor compiler for the Tile contraction language."""

from __future__ import annotations

from semtree.types import DType, TensorShape
from tile.errors import Diagnostic, TileBindError, TileError, TileSyntaxError, TileTypeError
from tile.function import Function

__all__ = [
    "DType",
    "Diagnostic",
    "Function",
    "TensorShape",
    "TileBindError",
    "TileError",
    "TileSyntaxError",
    "TileTypeError",
]
