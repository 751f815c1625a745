"""Semtree nodes: immutability, structural equality, construction checks, name sanitising,
walk() and rewrite()."""

from __future__ import annotations

import dataclasses

import pytest

from semtree import builder as sb
from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Block,
    Builtin,
    Call,
    Declare,
    Expr,
    FloatConst,
    For,
    Function,
    IdKind,
    If,
    IndexExpr,
    IntConst,
    Load,
    Lookup,
    Node,
    Param,
    SemtreeTypeError,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnOp,
    UnsupportedNode,
    c_identifier,
    children,
    rewrite,
    walk,
)
from semtree.types import DType, Type

F32 = DType.FLOAT32


def load(name: str) -> Load:
    return Load(Lookup(name))


def test_nodes_are_frozen_slotted_and_structural() -> None:
    node = Binary(BinOp.ADD, load("a"), IntConst(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = BinOp.SUB  # type: ignore[misc]
    assert not hasattr(node, "__dict__")
    assert node == Binary(BinOp.ADD, load("a"), IntConst(1))
    assert node != Binary(BinOp.ADD, load("a"), IntConst(2))
    assert hash(node) == hash(Binary(BinOp.ADD, load("a"), IntConst(1)))
    assert Binary.__match_args__ == ("op", "lhs", "rhs")


def test_spans_do_not_take_part_in_equality() -> None:
    with_span = Store(Lookup("x"), IntConst(1), span="X = 1")
    assert with_span == Store(Lookup("x"), IntConst(1))
    assert hash(with_span) == hash(Store(Lookup("x"), IntConst(1)))
    assert with_span.span == "X = 1"
    assert "span" not in repr(with_span)


def test_float_constants_compare_by_bits() -> None:
    assert FloatConst(float("nan")) == FloatConst(float("nan"))
    assert FloatConst(0.0) != FloatConst(-0.0)
    assert FloatConst(1) == FloatConst(1.0)
    assert hash(FloatConst(float("nan"))) == hash(FloatConst(float("nan")))
    assert FloatConst(1.0) != IntConst(1)


def test_integer_constants_accept_numpy_and_reject_the_rest() -> None:
    import numpy as np

    assert IntConst(np.int8(-3)).value == -3
    assert type(IntConst(np.uint64(2**63)).value) is int
    assert IntConst(True).value == 1
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises(SemtreeTypeError, match="64 bits"):
            IntConst(bad)
    with pytest.raises(SemtreeTypeError):
        IntConst("3")  # type: ignore[arg-type]


def test_operators_spell_c() -> None:
    assert [op.value for op in UnOp] == ["-", "~", "!"]
    assert BinOp.SHL.value == "<<" and BinOp.LAND.value == "&&" and BinOp.NE.value == "!="
    assert BinOp.LT.is_comparison and not BinOp.LT.is_arithmetic
    assert BinOp.SHR.is_shift and BinOp.SHR.is_bitwise and BinOp.XOR.is_bitwise
    assert BinOp.LOR.is_logical and BinOp.MOD.is_arithmetic


def test_builtins_are_closed_with_arities() -> None:
    names = [fn.name for fn in Builtin]
    assert names == [
        "ABS", "ACOS", "ASIN", "ATAN", "CEIL", "COS", "COSH", "EXP", "FLOOR", "LOG", "MAD",
        "MAX", "MIN", "POW", "RECIP", "ROUND", "SIN", "SINH", "SQRT", "TAN", "TANH",
    ]  # fmt: skip
    assert Builtin.MAD.arity == 3 and Builtin.POW.arity == 2 and Builtin.EXP.arity == 1
    assert not Builtin.ABS.float_only and Builtin.SQRT.float_only
    with pytest.raises(SemtreeTypeError, match="takes 2"):
        Call(Builtin.MAX, (IntConst(1),))
    assert Call(Builtin.EXP, [FloatConst(1.0)]).args == (FloatConst(1.0),)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Binary(BinOp.ADD, 1, IntConst(1)), "Binary.lhs must be a Expr"),  # type: ignore[arg-type]
        (lambda: Load(IntConst(1)), "Load.ref must be a LValue"),  # type: ignore[arg-type]
        (lambda: Subscript(load("a"), IntConst(0)), "Subscript.base"),  # type: ignore[arg-type]
        (lambda: Store(Lookup("a"), Store(Lookup("b"), IntConst(1))), "Store.value"),  # type: ignore[arg-type]
        (lambda: Block((IntConst(1),)), "an item of Block.stmts"),  # type: ignore[arg-type]
        (lambda: If(IntConst(1), Block(), IntConst(2)), "If.other"),  # type: ignore[arg-type]
        (lambda: Declare(F32, "x"), "Declare.type"),  # type: ignore[arg-type]
        (lambda: For("i", -1, 1, Block()), "count -1"),
        (lambda: For("i", 4, 0, Block()), "step 0"),
        (lambda: IndexExpr(IdKind.GLOBAL, 3), "dimension 3"),
        (lambda: Function("f", (), Barrier()), "Function.body must be a Block"),  # type: ignore[arg-type]
        (
            lambda: Function("f", (Param("a", Type.index()), Param("a", Type.index())), Block()),
            "duplicate",
        ),
        (lambda: Unary("-", load("a")), "Unary.op must be a UnOp"),  # type: ignore[arg-type]
    ],
)
def test_construction_checks(make: object, message: str) -> None:
    with pytest.raises(SemtreeTypeError, match=message):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("x", "x"),
        ("X_1", "X_1"),
        ("a.b", "a_b"),
        ("T$3", "T_3"),
        ("1st", "_1st"),
        ("", "_"),
        ("float", "float_"),
        ("float4", "float4_"),
        ("uchar16", "uchar16_"),
        ("half", "half_"),
        ("global", "global_"),
        ("exp", "exp_"),
        ("convert_int", "convert_int_"),
        ("float5", "float5"),
        ("naïve", "na_ve"),
    ],
)
def test_names_become_c_identifiers(name: str, expected: str) -> None:
    assert c_identifier(name) == expected
    assert c_identifier(expected) == expected  # idempotent
    assert Lookup(name).name == expected
    assert Declare(Type.index(), name).name == expected
    assert For(name, 1, 1, Block()).var == expected
    assert Param(name, Type.index()).name == expected


def test_sequences_become_tuples() -> None:
    block = Block([Barrier(), Barrier()])  # type: ignore[arg-type]
    assert block.stmts == (Barrier(), Barrier())
    function = Function("f", [Param("a", Type.index())], block)  # type: ignore[arg-type]
    assert isinstance(function.params, tuple)
    assert function.ret == Type.void()


def sample() -> Function:
    x, out = sb.var("x"), sb.var("out")
    return sb.function(
        "k",
        [("out", Type.ptr(F32))],
        [
            sb.declare(F32, "x", 1.5),
            sb.if_(x.lt(2.0), sb.assign(out[0], x + 1), sb.assign(out[1], x * 2)),
        ],
    )


def test_walk_visits_every_node_parents_first() -> None:
    function = sample()
    nodes = list(walk(function))
    assert nodes[0] is function
    kinds = [type(node).__name__ for node in nodes]
    assert kinds == [
        "Function", "Param", "Block", "Declare", "FloatConst", "If", "Binary", "Load", "Lookup",
        "FloatConst", "Block", "Store", "Subscript", "Lookup", "IntConst", "Binary", "Load",
        "Lookup", "IntConst", "Block", "Store", "Subscript", "Lookup", "IntConst", "Binary",
        "Load", "Lookup", "IntConst",
    ]  # fmt: skip
    assert sum(isinstance(node, Expr) for node in nodes) == 12
    assert sum(isinstance(node, Stmt) for node in nodes) == 7
    assert list(children(Binary(BinOp.ADD, IntConst(1), IntConst(2)))) == [IntConst(1), IntConst(2)]


def test_rewrite_shares_unchanged_subtrees() -> None:
    function = sample()
    assert rewrite(function, lambda node: None) is function

    def double_constants(node: Node) -> Node | None:
        return IntConst(node.value * 10) if isinstance(node, IntConst) else None

    changed = rewrite(function, double_constants)
    assert isinstance(changed, Function)
    assert changed is not function
    assert changed.params is function.params  # untouched subtree: the same objects
    declare = changed.body.stmts[0]
    assert declare is function.body.stmts[0]
    assert "out[0] = x + 10;" in str(changed) and "out[10] = x * 20;" in str(changed)


def test_rewrite_is_bottom_up_and_keeps_spans() -> None:
    seen: list[str] = []

    def record(node: Node) -> Node | None:
        seen.append(type(node).__name__)
        return None

    tree = Store(Lookup("a"), Binary(BinOp.MUL, load("b"), IntConst(2)), span="A = B * 2")
    rewrite(tree, record)
    assert seen == ["Lookup", "Lookup", "Load", "IntConst", "Binary", "Store"]

    def fold(node: Node) -> Node | None:
        if isinstance(node, IntConst):
            return IntConst(3)
        return None

    result = rewrite(tree, fold)
    assert result.span == "A = B * 2"
    assert str(result) == "a = b * 3;"


def test_unsupported_node_names_the_class() -> None:
    error = UnsupportedNode(Barrier(), "in a test")
    assert "Barrier" in str(error) and "in a test" in str(error)
    assert error.node == Barrier()


def test_str_uses_the_printer() -> None:
    assert str(Binary(BinOp.MUL, load("a"), IntConst(2))) == "a * 2"
    assert str(Subscript(Lookup("p"), IntConst(1))) == "p[1]"
    assert str(Param("out", Type.ptr(F32))) == "global float* out"
