"""A small DSL in which generators write semtrees (design 4.3).

    from semtree import builder as sb

    acc, out, i = sb.var("acc"), sb.var("out"), sb.global_id(0)
    body = sb.block(
        sb.declare(Type.value(DType.FLOAT32), "acc", 0.0),
        sb.for_("k", count=64, body=sb.assign(acc, acc + sb.var("a")[i * 64 + sb.var("k")])),
        sb.if_(i.lt(100), sb.assign(out[i], sb.call(Builtin.TANH, acc))),
    )

`var(name)` is both an lvalue and an expression; `[]` subscripts it. Python operators build
`Binary`/`Unary` nodes; comparisons are the methods `lt le gt ge eq ne` (`==` keeps its Python
meaning) and logic is `and_ / or_ / not_`. Python ints, floats and bools become literals.
Expression helpers return `Value` wrappers (`.node` is the `Expr`); statement helpers return
nodes. Every statement helper takes an optional `span`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias, Union

import numpy as np

from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Block,
    Builtin,
    Call,
    Cast,
    Clamp,
    Cond,
    Declare,
    Expr,
    FloatConst,
    For,
    Function,
    IdKind,
    If,
    IndexExpr,
    IntConst,
    Lanes,
    Limit,
    LimitConst,
    Load,
    Lookup,
    LValue,
    Param,
    Return,
    Select,
    SemtreeTypeError,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnOp,
    While,
)
from semtree.types import DType, Type

# Unions of real types (not one string), so that `ExprLike | None` evaluates (API reference).
ExprLike: TypeAlias = Union["Value", Expr, int, float, np.number]
StmtLike: TypeAlias = "Stmt | Iterable[Stmt | None] | None"


class Value:
    """An expression under construction; Python operators build semtree nodes."""

    __slots__ = ("node",)

    def __init__(self, node: Expr) -> None:
        self.node = node

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.node})"

    def __bool__(self) -> bool:
        raise TypeError("a semtree expression has no Python truth value; use sb.if_ or sb.cond")

    def __add__(self, other: ExprLike) -> Value:
        return _binary(BinOp.ADD, self, other)

    def __radd__(self, other: ExprLike) -> Value:
        return _binary(BinOp.ADD, other, self)

    def __sub__(self, other: ExprLike) -> Value:
        return _binary(BinOp.SUB, self, other)

    def __rsub__(self, other: ExprLike) -> Value:
        return _binary(BinOp.SUB, other, self)

    def __mul__(self, other: ExprLike) -> Value:
        return _binary(BinOp.MUL, self, other)

    def __rmul__(self, other: ExprLike) -> Value:
        return _binary(BinOp.MUL, other, self)

    def __truediv__(self, other: ExprLike) -> Value:
        """C division: truncating for integers (`x / 0` is 0), IEEE for floats."""
        return _binary(BinOp.DIV, self, other)

    def __rtruediv__(self, other: ExprLike) -> Value:
        return _binary(BinOp.DIV, other, self)

    def __mod__(self, other: ExprLike) -> Value:
        """C remainder (sign of the dividend; `x % 0` is 0); integers only."""
        return _binary(BinOp.MOD, self, other)

    def __rmod__(self, other: ExprLike) -> Value:
        return _binary(BinOp.MOD, other, self)

    def __lshift__(self, other: ExprLike) -> Value:
        return _binary(BinOp.SHL, self, other)

    def __rlshift__(self, other: ExprLike) -> Value:
        return _binary(BinOp.SHL, other, self)

    def __rshift__(self, other: ExprLike) -> Value:
        return _binary(BinOp.SHR, self, other)

    def __rrshift__(self, other: ExprLike) -> Value:
        return _binary(BinOp.SHR, other, self)

    def __and__(self, other: ExprLike) -> Value:
        return _binary(BinOp.AND, self, other)

    def __rand__(self, other: ExprLike) -> Value:
        return _binary(BinOp.AND, other, self)

    def __or__(self, other: ExprLike) -> Value:
        return _binary(BinOp.OR, self, other)

    def __ror__(self, other: ExprLike) -> Value:
        return _binary(BinOp.OR, other, self)

    def __xor__(self, other: ExprLike) -> Value:
        return _binary(BinOp.XOR, self, other)

    def __rxor__(self, other: ExprLike) -> Value:
        return _binary(BinOp.XOR, other, self)

    def __neg__(self) -> Value:
        match self.node:
            case IntConst(value) if -value < 2**63:
                return Value(IntConst(-value))
            case FloatConst(value):
                return Value(FloatConst(-value))
            case _:
                return Value(Unary(UnOp.NEG, self.node))

    def __invert__(self) -> Value:
        return Value(Unary(UnOp.BIT_NOT, self.node))

    def lt(self, other: ExprLike) -> Value:
        return _binary(BinOp.LT, self, other)

    def le(self, other: ExprLike) -> Value:
        return _binary(BinOp.LE, self, other)

    def gt(self, other: ExprLike) -> Value:
        return _binary(BinOp.GT, self, other)

    def ge(self, other: ExprLike) -> Value:
        return _binary(BinOp.GE, self, other)

    def eq(self, other: ExprLike) -> Value:
        return _binary(BinOp.EQ, self, other)

    def ne(self, other: ExprLike) -> Value:
        return _binary(BinOp.NE, self, other)


class Var(Value):
    """A variable or an element of one: loads as an expression, stores as an lvalue."""

    __slots__ = ("ref",)

    def __init__(self, ref: LValue) -> None:
        super().__init__(Load(ref))
        self.ref = ref

    def __getitem__(self, offset: ExprLike) -> Var:
        return Var(Subscript(self.ref, expr(offset)))


def _binary(op: BinOp, lhs: ExprLike, rhs: ExprLike) -> Value:
    return Value(Binary(op, expr(lhs), expr(rhs)))


# ---- conversions ------------------------------------------------------------------------------


def expr(value: ExprLike) -> Expr:
    """The `Expr` for a wrapper, a node, or a Python/numpy number (bools: LimitConst)."""
    match value:
        case Value():
            return value.node
        case Expr():
            return value
        case bool() | np.bool_():
            return LimitConst(Limit.ONE if value else Limit.ZERO, DType.BOOLEAN)
        case int() | np.integer():
            return IntConst(int(value))
        case float() | np.floating():
            return FloatConst(float(value))
        case _:
            raise SemtreeTypeError(f"not a semtree expression: {value!r}")


def lvalue(target: Var | LValue | str) -> LValue:
    match target:
        case Var():
            return target.ref
        case LValue():
            return target
        case str():
            return Lookup(target)
        case _:
            raise SemtreeTypeError(f"not an lvalue: {target!r}")


def _type(type_: Type | DType) -> Type:
    return Type.value(type_) if isinstance(type_, DType) else type_


# ---- expressions ------------------------------------------------------------------------------


def var(name: str) -> Var:
    return Var(Lookup(name))


def lanes(
    pointer: Var,
    offset: ExprLike,
    width: int,
    count: ExprLike | None = None,
    fill: ExprLike | None = None,
) -> Var:
    """`width` elements of the scalar pointer `pointer` from element `offset`, as one vector;
    only the first `count` accessed when given, a load giving `fill` (else 0) in the others
    (`semtree.nodes.Lanes`)."""
    counted = None if count is None else expr(count)
    return Var(
        Lanes(pointer.ref, expr(offset), width, counted, None if fill is None else expr(fill))
    )


def const(value: int | float | bool, dtype: DType | None = None) -> Value:
    """A literal (weakly typed), or with `dtype` a literal converted to that type."""
    literal = expr(value)
    if dtype is None or (dtype.is_bool and isinstance(literal, LimitConst)):
        return Value(literal)
    return Value(Cast(Type.value(dtype), literal))


def limit(which: Limit, dtype: DType) -> Value:
    return Value(LimitConst(which, dtype))


def global_id(dim: int) -> Value:
    return Value(IndexExpr(IdKind.GLOBAL, dim))


def group_id(dim: int) -> Value:
    return Value(IndexExpr(IdKind.GROUP, dim))


def local_id(dim: int) -> Value:
    return Value(IndexExpr(IdKind.LOCAL, dim))


def cast(type_: Type | DType, value: ExprLike) -> Value:
    return Value(Cast(_type(type_), expr(value)))


def cond(condition: ExprLike, then: ExprLike, other: ExprLike) -> Value:
    """`condition ? then : other`, evaluating only the chosen branch."""
    return Value(Cond(expr(condition), expr(then), expr(other)))


def select(condition: ExprLike, then: ExprLike, other: ExprLike) -> Value:
    """`condition ? then : other`, evaluating both branches."""
    return Value(Select(expr(condition), expr(then), expr(other)))


def clamp(value: ExprLike, lo: ExprLike, hi: ExprLike) -> Value:
    return Value(Clamp(expr(value), expr(lo), expr(hi)))


def call(fn: Builtin, *args: ExprLike) -> Value:
    return Value(Call(fn, tuple(expr(arg) for arg in args)))


def and_(first: ExprLike, *rest: ExprLike) -> Value:
    result = expr(first)
    for item in rest:
        result = Binary(BinOp.LAND, result, expr(item))
    return Value(result)


def or_(first: ExprLike, *rest: ExprLike) -> Value:
    result = expr(first)
    for item in rest:
        result = Binary(BinOp.LOR, result, expr(item))
    return Value(result)


def not_(value: ExprLike) -> Value:
    return Value(Unary(UnOp.NOT, expr(value)))


# ---- statements -------------------------------------------------------------------------------


def declare(
    type_: Type | DType, name: str, init: ExprLike | None = None, *, span: str | None = None
) -> Declare:
    return Declare(_type(type_), name, None if init is None else expr(init), span=span)


def assign(target: Var | LValue | str, value: ExprLike, *, span: str | None = None) -> Store:
    return Store(lvalue(target), expr(value), span=span)


def block(*items: StmtLike, span: str | None = None) -> Block:
    """A block of the given statements (or iterables of them); None and empty blocks vanish."""
    stmts: list[Stmt] = []
    for item in items:
        if item is None or (isinstance(item, Block) and not item.stmts):
            continue
        if isinstance(item, Stmt):
            stmts.append(item)
        elif isinstance(item, Iterable):
            stmts.extend(block(*item).stmts)
        else:
            raise SemtreeTypeError(f"not a statement: {item!r}")
    return Block(tuple(stmts), span=span)


def _body(item: StmtLike) -> Block:
    return item if isinstance(item, Block) else block(item)


def if_(
    condition: ExprLike, then: StmtLike, other: StmtLike = None, *, span: str | None = None
) -> If:
    otherwise = None if other is None else _body(other)
    return If(expr(condition), _body(then), otherwise, span=span)


def for_(
    var: str, count: int, step: int = 1, body: StmtLike = None, *, span: str | None = None
) -> For:
    """`for (var = 0; var < count * step; var += step) body`."""
    return For(var, count, step, _body(body), span=span)


def while_(condition: ExprLike, body: StmtLike, *, span: str | None = None) -> While:
    return While(expr(condition), _body(body), span=span)


def barrier(*, span: str | None = None) -> Barrier:
    return Barrier(span=span)


def ret(value: ExprLike | None = None, *, span: str | None = None) -> Return:
    return Return(None if value is None else expr(value), span=span)


def param(name: str, type_: Type) -> Param:
    return Param(name, type_)


def function(
    name: str,
    params: Iterable[Param | tuple[str, Type]],
    body: StmtLike,
    ret: Type | None = None,
) -> Function:
    items = tuple(item if isinstance(item, Param) else Param(*item) for item in params)
    return Function(name, items, _body(body), Type.void() if ret is None else ret)
