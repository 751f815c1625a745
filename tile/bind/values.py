"""The values a name can hold while binding (tile.bind.binder and its helpers share them).

A tensor (its shape and element type), a compile-time constant (`tile.bind.evaluate.Const`), a
tuple, the opaque result of `prng_step`, or the poison left by a statement that failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tile.bind.evaluate import Const

if TYPE_CHECKING:
    from semtree.types import DType, TensorShape


class BindFailure(Exception):  # noqa: N818 - control flow, not an error to report
    """Stops binding the current statement; the diagnostic has been reported already."""


@dataclass(frozen=True, slots=True)
class TensorValue:
    name: str
    shape: TensorShape
    text: str  # how the source wrote it, for messages

    @property
    def dtype(self) -> DType:
        return self.shape.dtype

    def describe(self) -> str:
        return f"'{self.text}' ({self.shape})"


@dataclass(frozen=True, slots=True)
class TupleValue:
    members: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class PrngValue:
    """The opaque result of `prng_step(S, sizes...)` (spec 9.6)."""

    state: str
    dims: tuple[int, ...]
    step: int


@dataclass(frozen=True, slots=True)
class Poison:
    """The value of a statement that failed to bind."""


Value = TensorValue | Const | TupleValue | PrngValue | Poison
