"""Stage 1b: reverse-mode differentiation of a checked Tile function, source to source.

`derive(function, of, wrt)` turns the AST of a function into the Tile text of its gradient
function (`tile.grad.derive`); the rules for elementwise expressions are in `tile.grad.rules`.
The result is an ordinary Tile function, bound, lowered and run like any other.
"""

from __future__ import annotations

from tile.grad.derive import Gradient, derive

__all__ = ["Gradient", "derive"]
