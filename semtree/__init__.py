"""The contract between the Tile front end and every back end: types and (later) the kernel IR."""

from __future__ import annotations

from semtree.types import DType, TensorShape, promote

__all__ = ["DType", "TensorShape", "promote"]
