"""The upper names a Tile expression or statement reads (for tile.grad.derive)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tile.lang.syntax import (
    Assign,
    Binary,
    Call,
    Name,
    PBinary,
    PNeg,
    PSize,
    Ternary,
    Unary,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tile.lang.syntax import Expr, PolyExpr, Statement


def subexpressions(node: Expr) -> Iterator[Expr]:
    """`node` and every expression inside it, parents first."""
    yield node
    match node:
        case Call(args=args):
            for arg in args:
                yield from subexpressions(arg)
        case Unary(operand=operand):
            yield from subexpressions(operand)
        case Binary(lhs=lhs, rhs=rhs):
            yield from subexpressions(lhs)
            yield from subexpressions(rhs)
        case Ternary(cond=cond, then=then, other=other):
            yield from subexpressions(cond)
            yield from subexpressions(then)
            yield from subexpressions(other)


def expr_names(node: Expr) -> Iterator[str]:
    return (item.name for item in subexpressions(node) if isinstance(item, Name))


def poly_names(poly: PolyExpr) -> Iterator[str]:
    match poly:
        case PSize(name=name):
            yield name
        case PBinary(lhs=lhs, rhs=rhs):
            yield from poly_names(lhs)
            yield from poly_names(rhs)
        case PNeg(operand=operand):
            yield from poly_names(operand)


def statement_names(statement: Statement) -> Iterator[str]:
    """Every upper name a statement reads."""
    if isinstance(statement, Assign):
        yield from expr_names(statement.value)
        return
    for size in statement.out.sizes or ():
        yield from expr_names(size)
    for poly in statement.out.indices:
        yield from poly_names(poly)
    for operand in statement.operands:
        yield operand.name
        for poly in operand.indices:
            yield from poly_names(poly)
    for constraint in statement.constraints:
        yield from poly_names(constraint.poly)
        yield from expr_names(constraint.bound)
    if statement.default is not None:
        yield statement.default.name
