"""Stage 2: the bound program — every value has a shape and an element type (design 3.3).

`tile.bind.binder` produces a `BoundProgram` from a checked AST and the caller's inputs. Its `ops`
are single-assignment operations in a valid execution order: elementwise calls (with numpy
broadcasting already resolved into the output shape), contractions (with exact rational
index polynomials) and special operations (reshape, index, gather, scatter, shape, prng).
Compile-time constants are not ops: they are `ConstBinding`s that ops name as inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape
from tile.lang.syntax import AggOp, CombOp, Span, contraction_text

if TYPE_CHECKING:
    import numpy as np

    from tile.bind.polynomial import Polynomial, RangeConstraint


@dataclass(frozen=True, slots=True)
class TensorBinding:
    shape: TensorShape

    def __str__(self) -> str:
        return str(self.shape)


@dataclass(frozen=True, slots=True)
class ConstBinding:
    """A compile-time constant: a literal, a dimension size, a named constant or an input
    bound to a scalar. `value` is already converted to `dtype` (spec 7.6)."""

    value: int | float
    dtype: DType

    def __str__(self) -> str:
        return f"{self.dtype.short} {_number(self.value)}"


Binding = TensorBinding | ConstBinding


class OpKind(Enum):
    ELEMENTWISE = "elementwise"
    CONTRACTION = "contraction"
    SPECIAL = "special"


@dataclass(frozen=True, slots=True)
class BoundAccess:
    tensor: str
    polys: tuple[Polynomial, ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(str(p) for p in self.polys)}]"


@dataclass(frozen=True, slots=True)
class BoundContraction:
    agg: AggOp
    comb: CombOp
    access: tuple[BoundAccess, ...]  # [0] is the output, then the operands in order
    constraints: tuple[RangeConstraint, ...]  # the user's constraints that involve variables
    index_names: tuple[str, ...]  # every index variable, in order of first occurrence
    default: str | None = None
    no_defract: bool = False

    @property
    def output(self) -> BoundAccess:
        return self.access[0]

    @property
    def operands(self) -> tuple[BoundAccess, ...]:
        return self.access[1:]

    def __str__(self) -> str:
        return contraction_text(
            self.agg,
            self.comb,
            [str(a) for a in self.operands],
            [f"{c.poly} < {c.range}" for c in self.constraints],
            self.default,
            self.no_defract,
        )


@dataclass(frozen=True, slots=True)
class BoundOp:
    """One operation. Elementwise `fn`s are builtin names (`add`, `cmp_lt`, `exp`, `cond`,
    `ident`, `cast`, ...); special ones are `reshape`, `index`, `shape`, `gather`, `scatter`,
    `prng_value`, `prng_state`. The output's binding gives its shape and element type;
    `compute` is the type the operation works in (for comparisons the promoted operand
    type, otherwise the output type)."""

    kind: OpKind
    output: str
    inputs: tuple[str, ...]
    fn: str = ""
    compute: DType | None = None
    params: tuple[int, ...] = ()  # integer arguments: the axis of `index`, prng sizes
    contraction: BoundContraction | None = None
    span: Span | None = field(default=None, compare=False)

    def __str__(self) -> str:
        if self.contraction is not None:
            return f"{self.contraction.output} = {self.contraction}"
        args = ", ".join([*self.inputs, *(str(p) for p in self.params)])
        return f"{self.output} = {self.fn}({args})"


@dataclass(slots=True)
class BoundProgram:
    source: str
    ops: tuple[BoundOp, ...]
    bindings: dict[str, Binding]  # every input, constant, temporary and output
    inputs: tuple[str, ...]  # the function's inputs, in header order
    output_names: tuple[str, ...]
    # How each input was bound: a tensor (a buffer at run time) or a scalar constant (folded
    # into the program). Differs from `bindings` only for a constant input that is also an
    # output, which `bindings` holds as the 0-D tensor materialising it.
    input_bindings: dict[str, Binding] = field(default_factory=dict)
    floatx: DType = DType.FLOAT32

    @property
    def outputs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Each output's shape and numpy dtype."""
        result = {}
        for name in self.output_names:
            binding = self.bindings[name]
            if isinstance(binding, TensorBinding):
                result[name] = (binding.shape.dims, binding.shape.dtype.numpy)
            else:
                result[name] = ((), binding.dtype.numpy)
        return result

    def __str__(self) -> str:
        lines = []
        for name in self.inputs:
            lines.append(f"in    {name}: {self.input_bindings.get(name, self.bindings[name])}")
        constants = [n for n, b in self.bindings.items() if isinstance(b, ConstBinding)]
        for name in constants:
            if name not in self.inputs:
                lines.append(f"const {name} = {self.bindings[name]}")
        width = max((len(str(self.bindings[op.output])) for op in self.ops), default=0)
        for op in self.ops:
            lines.append(f"{str(self.bindings[op.output]).ljust(width)}  {op}")
        for name in self.output_names:
            lines.append(f"out   {name}: {self.bindings[name]}")
        return "\n".join(lines)


def _number(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(value)
