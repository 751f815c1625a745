"""The builder DSL of design 4.3 builds exactly the nodes one would write by hand."""

from __future__ import annotations

import numpy as np
import pytest

from semtree import builder as sb
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
    FloatConst,
    For,
    Function,
    IdKind,
    If,
    IndexExpr,
    IntConst,
    Limit,
    LimitConst,
    Load,
    Lookup,
    Param,
    Return,
    Select,
    SemtreeTypeError,
    Store,
    Subscript,
    Unary,
    UnOp,
    While,
)
from semtree.types import DType, Type

F32 = DType.FLOAT32


def load(name: str) -> Load:
    return Load(Lookup(name))


def test_the_example_of_the_architecture() -> None:
    i, acc, out = sb.var("i"), sb.var("acc"), sb.var("out")
    body = sb.block(
        sb.declare(Type.value(F32), "acc", sb.const(0.0)),
        sb.for_(
            "k",
            count=64,
            step=1,
            body=sb.block(
                sb.assign(acc, acc + sb.var("a")[i * 64 + sb.var("k")] * sb.var("b")[sb.var("k")]),
            ),
        ),
        sb.if_(i.lt(100), sb.assign(out[i], sb.call(Builtin.TANH, acc))),
    )
    k = load("k")
    a_index = Binary(BinOp.ADD, Binary(BinOp.MUL, load("i"), IntConst(64)), k)
    product = Binary(
        BinOp.MUL,
        Load(Subscript(Lookup("a"), a_index)),
        Load(Subscript(Lookup("b"), k)),
    )
    expected = Block(
        (
            Declare(Type.value(F32), "acc", FloatConst(0.0)),
            For(
                "k",
                64,
                1,
                Block((Store(Lookup("acc"), Binary(BinOp.ADD, load("acc"), product)),)),
            ),
            If(
                Binary(BinOp.LT, load("i"), IntConst(100)),
                Block(
                    (
                        Store(
                            Subscript(Lookup("out"), load("i")),
                            Call(Builtin.TANH, (load("acc"),)),
                        ),
                    )
                ),
            ),
        )
    )
    assert body == expected


@pytest.mark.parametrize(
    ("built", "op"),
    [
        (lambda a, b: a + b, BinOp.ADD),
        (lambda a, b: a - b, BinOp.SUB),
        (lambda a, b: a * b, BinOp.MUL),
        (lambda a, b: a / b, BinOp.DIV),
        (lambda a, b: a % b, BinOp.MOD),
        (lambda a, b: a << b, BinOp.SHL),
        (lambda a, b: a >> b, BinOp.SHR),
        (lambda a, b: a & b, BinOp.AND),
        (lambda a, b: a | b, BinOp.OR),
        (lambda a, b: a ^ b, BinOp.XOR),
        (lambda a, b: a.lt(b), BinOp.LT),
        (lambda a, b: a.le(b), BinOp.LE),
        (lambda a, b: a.gt(b), BinOp.GT),
        (lambda a, b: a.ge(b), BinOp.GE),
        (lambda a, b: a.eq(b), BinOp.EQ),
        (lambda a, b: a.ne(b), BinOp.NE),
        (lambda a, b: sb.and_(a, b), BinOp.LAND),
        (lambda a, b: sb.or_(a, b), BinOp.LOR),
    ],
)
def test_operators(built: object, op: BinOp) -> None:
    a, b = sb.var("a"), sb.var("b")
    assert sb.expr(built(a, b)) == Binary(op, load("a"), load("b"))  # type: ignore[operator]


def test_reflected_operators_and_python_numbers() -> None:
    a = sb.var("a")
    assert sb.expr(2 - a) == Binary(BinOp.SUB, IntConst(2), load("a"))
    assert sb.expr(1.5 * a) == Binary(BinOp.MUL, FloatConst(1.5), load("a"))
    assert sb.expr(1 << a) == Binary(BinOp.SHL, IntConst(1), load("a"))
    assert sb.expr(8 / a) == Binary(BinOp.DIV, IntConst(8), load("a"))
    assert sb.expr(7 % a) == Binary(BinOp.MOD, IntConst(7), load("a"))
    assert sb.expr(16 >> a) == Binary(BinOp.SHR, IntConst(16), load("a"))
    assert sb.expr(3 & a) == Binary(BinOp.AND, IntConst(3), load("a"))
    assert sb.expr(3 | a) == Binary(BinOp.OR, IntConst(3), load("a"))
    assert sb.expr(3 ^ a) == Binary(BinOp.XOR, IntConst(3), load("a"))
    assert sb.expr(np.int16(4) + a) == Binary(BinOp.ADD, IntConst(4), load("a"))
    assert sb.expr(a + np.float32(0.5)) == Binary(BinOp.ADD, load("a"), FloatConst(0.5))


def test_unary_operators_fold_literals() -> None:
    a = sb.var("a")
    assert sb.expr(-a) == Unary(UnOp.NEG, load("a"))
    assert sb.expr(~a) == Unary(UnOp.BIT_NOT, load("a"))
    assert sb.expr(sb.not_(a)) == Unary(UnOp.NOT, load("a"))
    assert sb.expr(-sb.const(3)) == IntConst(-3)
    assert sb.expr(-sb.const(2.5)) == FloatConst(-2.5)
    assert sb.expr(-sb.const(-(2**63))) == Unary(UnOp.NEG, IntConst(-(2**63)))


def test_comparison_is_not_python_equality() -> None:
    a = sb.var("a")
    assert (a == a) is True  # identity, not a semtree node
    assert (a == sb.var("a")) is False
    with pytest.raises(TypeError, match="truth value"):
        bool(a.lt(1))
    with pytest.raises(TypeError):
        a // 2  # type: ignore[operator]


def test_subscripts_are_lvalues() -> None:
    p = sb.var("p")
    element = p[sb.var("i")][3]
    assert element.ref == Subscript(Subscript(Lookup("p"), load("i")), IntConst(3))
    assert sb.expr(element) == Load(element.ref)
    assert sb.assign(element, 1) == Store(element.ref, IntConst(1))
    assert sb.assign("x", 1.0) == Store(Lookup("x"), FloatConst(1.0))
    with pytest.raises(SemtreeTypeError, match="not an lvalue"):
        sb.assign(sb.var("a") + 1, 2)  # type: ignore[arg-type]


def test_expression_helpers() -> None:
    a = sb.var("a")
    assert sb.expr(sb.const(True)) == LimitConst(Limit.ONE, DType.BOOLEAN)
    assert sb.expr(False) == LimitConst(Limit.ZERO, DType.BOOLEAN)
    assert sb.expr(sb.const(2, DType.UINT8)) == Cast(Type.value(DType.UINT8), IntConst(2))
    assert sb.expr(sb.const(True, DType.BOOLEAN)) == LimitConst(Limit.ONE, DType.BOOLEAN)
    assert sb.expr(sb.limit(Limit.MIN, F32)) == LimitConst(Limit.MIN, F32)
    assert sb.expr(sb.global_id(0)) == IndexExpr(IdKind.GLOBAL, 0)
    assert sb.expr(sb.group_id(1)) == IndexExpr(IdKind.GROUP, 1)
    assert sb.expr(sb.local_id(2)) == IndexExpr(IdKind.LOCAL, 2)
    assert sb.expr(sb.cast(F32, a)) == Cast(Type.value(F32), load("a"))
    assert sb.expr(sb.cast(Type.index(), a)) == Cast(Type.index(), load("a"))
    assert sb.expr(sb.cond(a, 1, 2)) == Cond(load("a"), IntConst(1), IntConst(2))
    assert sb.expr(sb.select(a, 1, 2)) == Select(load("a"), IntConst(1), IntConst(2))
    assert sb.expr(sb.clamp(a, 0, 9)) == Clamp(load("a"), IntConst(0), IntConst(9))
    assert sb.expr(sb.call(Builtin.MAD, a, 2, 1.0)) == Call(
        Builtin.MAD, (load("a"), IntConst(2), FloatConst(1.0))
    )
    three = sb.and_(a, sb.var("b"), sb.var("c"))
    assert sb.expr(three) == Binary(BinOp.LAND, Binary(BinOp.LAND, load("a"), load("b")), load("c"))
    assert sb.expr(sb.or_(a)) == load("a")
    with pytest.raises(SemtreeTypeError, match="not a semtree expression"):
        sb.expr("a")  # type: ignore[arg-type]
    assert repr(a + 1) == "Value(a + 1)"


def test_blocks_flatten_empty_blocks_and_lists() -> None:
    barrier = Barrier()
    block = sb.block(barrier, None, sb.block(), [barrier, None, [barrier]], sb.block(barrier))
    assert block == Block((barrier, barrier, barrier, Block((barrier,))))
    with pytest.raises(SemtreeTypeError, match="not a statement"):
        sb.block(3)  # type: ignore[arg-type]


def test_statement_helpers() -> None:
    a = sb.var("a")
    assert sb.declare(F32, "x") == Declare(Type.value(F32), "x", None)
    assert sb.declare(Type.index(), "i", 0) == Declare(Type.index(), "i", IntConst(0))
    assert sb.if_(a, sb.ret()) == If(load("a"), Block((Return(),)))
    assert sb.if_(a, [], sb.barrier()) == If(load("a"), Block(), Block((Barrier(),)))
    assert sb.for_("j", 3) == For("j", 3, 1, Block())
    assert sb.for_("j", 3, 2, sb.barrier()) == For("j", 3, 2, Block((Barrier(),)))
    assert sb.while_(a, [sb.barrier()]) == While(load("a"), Block((Barrier(),)))
    assert sb.ret(a) == Return(load("a"))
    assert sb.param("n", Type.index()) == Param("n", Type.index())
    stmt = sb.assign("x", 1, span="X = 1")
    assert stmt.span == "X = 1"


def test_function() -> None:
    function = sb.function("f.1", [("out", Type.ptr(F32)), sb.param("n", Type.index())], sb.ret())
    assert function == Function(
        "f_1",
        (Param("out", Type.ptr(F32)), Param("n", Type.index())),
        Block((Return(),)),
        Type.void(),
    )
    typed = sb.function("g", [], [sb.ret(1.0)], Type.value(F32))
    assert typed.ret == Type.value(F32)
