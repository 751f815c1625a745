"""Stage 4: the flattened contraction — loops, strides, offsets and guards (design 3.4).

`tile.lower.flatten` builds one `FlatContraction` per contraction of a bound program; the kernel
generator (`tile.lower.contract`) turns it into a semtree loop nest. The flat form is
device-independent and exact: integer arithmetic only.

Variables, in this order (`names`):

* **output coordinates** `outputs` of them, one per output dimension, each ranging over the
  whole dimension: the kernel grid. Every output element is visited exactly once, by the
  work-item that owns it, so unwritten elements (spec 8.8) are written in the same kernel
  (0 or the `default` element) and elementwise consumers can fuse into the epilogue;
* **derived variables**, each `(numerator . variables + const) / divisor` over the
  coordinates and earlier derived variables, exact only when the divisor divides the
  numerator (a divisibility guard): they recover the loop variables of strided or fractional
  outputs (`O[2*i]`, `O[i/2]`) from the coordinates;
* **reduction variables**, each a loop from 0 to its range (shifted so that it starts at 0).

Every access is `offset + strides . variables` in elements of the accessed tensor's logical
row-major layout. A guard `lhs . variables <= rhs` is a half of a range constraint that the
variables' ranges do not imply (spec 8.13 step 7). A tuple contributes to its output element
only when every divisibility check and every guard holds; an element without any
contribution is unwritten (`needs_hit`: a per-element flag decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from semtree.types import DType
    from tile.lang.syntax import AggOp, CombOp


@dataclass(frozen=True, slots=True)
class FlatDerived:
    """`name = (numerator . variables + const) / divisor`, valid only if the division is exact.

    The numerator only uses coordinates and earlier derived variables."""

    name: str
    numerator: tuple[int, ...]
    const: int
    divisor: int


@dataclass(frozen=True, slots=True)
class FlatAccess:
    """One tensor access: element `offset + strides . variables` of `tensor` (logical layout).

    `panel` = (width, stride): the access reads a copy packed in panels of `width` columns
    (`tile.lower.pack.pack_operand`): the variable of stride 1 (j) is split, element
    `offset + strides . variables - j + (j // width) * stride + j % width`. Only the
    register-tiled vector kernel (`tile.lower.vector`) reads such an access."""

    tensor: str
    dtype: DType
    dims: tuple[int, ...]
    offset: int
    strides: tuple[int, ...]
    panel: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        count = 1
        for dim in self.dims:
            count *= dim
        return count


@dataclass(frozen=True, slots=True)
class FlatConstraint:
    """The guard `sum(lhs[k] * variable[k]) <= rhs`."""

    lhs: tuple[int, ...]
    rhs: int


@dataclass(frozen=True, slots=True)
class FlatContraction:
    """A contraction as loops; see the module docstring for the meaning of the variables."""

    statement: str  # the Tile statement, for comments and dumps
    names: tuple[str, ...]  # coordinates, then derived variables, then reductions
    outputs: int  # how many coordinates
    ranges: tuple[int, ...]  # coordinates: output sizes; reductions: trip counts; derived: 0
    derived: tuple[FlatDerived, ...]
    access: tuple[FlatAccess, ...]  # [0] the output (its coordinates), then the operands
    constraints: tuple[FlatConstraint, ...]
    agg: AggOp
    comb: CombOp
    dtype: DType  # the output element type (spec 8.11)
    default: str | None = None
    empty: bool = False  # no tuple is valid: every element is unwritten

    @property
    def output(self) -> FlatAccess:
        return self.access[0]

    @property
    def operands(self) -> tuple[FlatAccess, ...]:
        return self.access[1:]

    @property
    def reductions(self) -> range:
        """Positions of the reduction variables in `names`."""
        return range(self.outputs + len(self.derived), len(self.names))

    @property
    def needs_hit(self) -> bool:
        """Whether some element may receive no contribution, so a per-element flag must
        decide between the aggregate and 0 / the default (spec 8.6, 8.8)."""
        return self.empty or bool(self.derived) or bool(self.constraints)

    def key(self) -> str:
        """A structural key: contractions with equal keys generate equal kernels."""
        accesses = ";".join(
            f"{a.dtype.short}{list(a.dims)}@{a.offset}:{list(a.strides)}/{a.panel}"
            for a in self.access
        )
        derived = ";".join(f"{list(d.numerator)}+{d.const}/{d.divisor}" for d in self.derived)
        guards = ";".join(f"{list(c.lhs)}<={c.rhs}" for c in self.constraints)
        return (
            f"{self.agg.value}{self.comb.value}|{self.dtype.short}|{self.outputs}|"
            f"{list(self.ranges)}|{derived}|{accesses}|{guards}|{self.default is not None}|"
            f"{self.empty}"
        )

    # ---- printing ----------------------------------------------------------------------------

    def _form(self, coefficients: tuple[int, ...], const: int = 0) -> str:
        parts: list[str] = []
        for name, coefficient in zip(self.names, coefficients, strict=True):
            if coefficient == 0:
                continue
            magnitude = abs(coefficient)
            text = name if magnitude == 1 else f"{magnitude}*{name}"
            if not parts:
                parts.append(text if coefficient > 0 else f"-{text}")
            else:
                parts.append(f"+ {text}" if coefficient > 0 else f"- {text}")
        if const or not parts:
            if not parts:
                parts.append(str(const))
            else:
                parts.append(f"+ {const}" if const > 0 else f"- {-const}")
        return " ".join(parts)

    def __str__(self) -> str:
        lines = [self.statement]
        coordinates = range(self.outputs)
        reductions = self.reductions
        if self.empty:
            lines.append("  no valid index tuple: every element is 0 or the default")
        lines.append(
            "  output  "
            + ("  ".join(f"{self.names[k]}: {self.ranges[k]}" for k in coordinates) or "(0-D)")
        )
        for derived in self.derived:
            numerator = self._form(derived.numerator, derived.const)
            lines.append(f"  derive  {derived.name} = ({numerator}) / {derived.divisor}")
        if reductions:
            lines.append(
                "  reduce  " + "  ".join(f"{self.names[k]}: {self.ranges[k]}" for k in reductions)
            )
        width = max(len(access.tensor) for access in self.access)
        for access in self.access:
            strides = "  ".join(
                f"{name}: {stride}"
                for name, stride in zip(self.names, access.strides, strict=True)
                if stride
            )
            lines.append(
                f"  {access.tensor.ljust(width)}  offset {access.offset}  strides {strides or '-'}"
            )
        for constraint in self.constraints:
            if all(c <= 0 for c in constraint.lhs):  # a lower bound reads better as >=
                negated = tuple(-c for c in constraint.lhs)
                lines.append(f"  guard   {self._form(negated)} >= {-constraint.rhs}")
            else:
                lines.append(f"  guard   {self._form(constraint.lhs)} <= {constraint.rhs}")
        return "\n".join(lines)
