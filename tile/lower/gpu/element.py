"""What a GPU contraction kernel computes for one index tuple and for one output element.

These are the semantics of `tile.lower.contract`'s kernels (spec 8.5 to 8.11), written once
more for kernels whose loops are organised differently (`tile.lower.gpu.contract`): a tuple
contributes only when every derived variable divides exactly and every guard holds; the
combined value is computed in the output type and aggregated in the accumulator type; an
element that received no contribution is 0 or its `default` element (identities are never
visible), then the fused epilogue runs in registers and the stored values are written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Expr,
    IntConst,
    Select,
    Stmt,
)
from semtree.types import Type
from tile.lower.flatten import row_major
from tile.lower.kernel import affine, conjunction, fused_value, guard
from tile.lower.ops import Typed, convert, zero

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from semtree.kernel import HardwareSettings
    from tile.bind.program import BoundOp
    from tile.lower.flat import FlatConstraint, FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import KernelWriter, ProgramContext


def guarded(
    flat: FlatContraction,
    writer: KernelWriter,
    variables: dict[int, Expr],
    constraints: Sequence[FlatConstraint],
    body: Callable[[], list[Stmt]],
) -> list[Stmt]:
    """`body()` run only when every derived variable divides exactly and `constraints` hold.
    Declares the derived variables and enters them in `variables` (which must hold the
    coordinates and the reduction variables) before it calls `body`."""
    checks = []
    for position, derived in enumerate(flat.derived):
        terms = [(c, variables[j]) for j, c in enumerate(derived.numerator) if c]
        numerator_declaration, numerator = writer.declare(
            Type.index(), f"{derived.name}_num", affine(terms, derived.const)
        )
        declaration, value = writer.declare(
            Type.index(), derived.name, Binary(BinOp.DIV, numerator, IntConst(derived.divisor))
        )
        variables[flat.outputs + position] = value
        divisible = Binary(
            BinOp.EQ, Binary(BinOp.MOD, numerator, IntConst(derived.divisor)), IntConst(0)
        )
        checks.append((numerator_declaration, divisible, declaration))
    condition = conjunction([guard(c, variables) for c in constraints])
    statements = body()
    if condition is not None:
        statements = [sb.if_(condition, statements)]
    for numerator_declaration, divisible, declaration in reversed(checks):
        statements = [numerator_declaration, sb.if_(divisible, [declaration, *statements])]
    return statements


class OutputPhase:
    """The statements that finish one output element: its contraction value (aggregate, or
    0 / the default where nothing contributed), the fused epilogue, the stores."""

    def __init__(
        self,
        plan: KernelPlan,
        flat: FlatContraction | None,
        context: ProgramContext,
        settings: HardwareSettings,
        writer: KernelWriter,
    ) -> None:
        self.plan = plan
        self.flat = flat
        self.context = context
        self.settings = settings
        self.writer = writer

    def statements(
        self, coordinates: list[Expr], accumulated: Typed | None, hit: Expr | None
    ) -> list[Stmt]:
        """`accumulated`: the accumulator's value (None for an empty contraction); `hit`:
        whether anything contributed (None: something always did)."""
        statements: list[Stmt] = []
        values: dict[str, Typed] = {}
        ops = list(self.plan.ops)
        contraction = self.plan.contraction
        if contraction is not None:
            ops = ops[1:]
            value = self.result(coordinates, accumulated, hit)
            statements += self.bind(values, contraction.output, value)
        for op in ops:
            statements += self.bind(values, op.output, self.evaluate(op, values, coordinates))
        offset = affine(zip(row_major(self.plan.shape), coordinates, strict=True))
        for name in self.plan.stores:
            statements.append(self.writer.store(name, offset, values[name]))
        return statements

    def bind(self, values: dict[str, Typed], name: str, value: Typed) -> list[Stmt]:
        declaration, variable = self.writer.declare(Type.value(value.dtype), f"v{name}", value.expr)
        values[name] = Typed(variable, value.dtype)
        return [declaration]

    def result(self, coordinates: list[Expr], accumulated: Typed | None, hit: Expr | None) -> Typed:
        flat = self.flat
        assert flat is not None
        dtype = flat.dtype
        if flat.default is not None:
            unwritten = Typed(convert(self.writer.read_at(flat.default, coordinates), dtype), dtype)
        else:
            unwritten = zero(dtype)
        if accumulated is None:
            return unwritten
        value = convert(accumulated, dtype)
        if hit is None:
            return Typed(value, dtype)
        return Typed(Select(hit, value, unwritten.expr), dtype)

    def evaluate(self, op: BoundOp, values: dict[str, Typed], coordinates: list[Expr]) -> Typed:
        return fused_value(op, values, coordinates, self.context, self.writer, self.settings)
