"""The typing rules of design 4.4, rule by rule (semantic rules 8 to 10 are executed in
test_reference.py)."""

from __future__ import annotations

import itertools

import pytest

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Builtin,
    Cast,
    FloatConst,
    IntConst,
    Limit,
    LimitConst,
    Load,
    Lookup,
    SemtreeTypeError,
    Subscript,
    c_identifier,
)
from semtree.types import DType, Region, Type, TypeBase
from semtree.types import promote as promote_dtypes
from semtree.typing import (
    check_function,
    literal_type,
    operand_type,
    promote,
    type_of,
    value_type,
)

F16, F32, F64 = DType.FLOAT16, DType.FLOAT32, DType.FLOAT64
I8, I16, I32, I64 = DType.INT8, DType.INT16, DType.INT32, DType.INT64
U8, U32, U64 = DType.UINT8, DType.UINT32, DType.UINT64
BOOL = DType.BOOLEAN
INDEX = Type.index()

SCOPE = {c_identifier(dtype.short): Type.value(dtype) for dtype in DType} | {  # bool -> bool_
    "n": INDEX,
    "f32x4": Type.value(F32, 4),
    "f32x8": Type.value(F32, 8),
    "i32x4": Type.value(I32, 4),
    "b4": Type.boolean(4),
    "p": Type.ptr(F32),
    "p4": Type.ptr(F32, 4),
    "cp": Type.ptr(F32, const=True),
    "hp": Type.ptr(F16),
    "q": Type.ptr(I32),
    "arr": Type(TypeBase.VALUE, F32, array=8),
    "ptrs": Type(TypeBase.POINTER_CONST, F32, array=4, region=Region.GLOBAL),
}
v = sb.var


def typed(value: object, native_fp16: bool = True) -> Type:
    return type_of(sb.expr(value), SCOPE, native_fp16)  # type: ignore[arg-type]


def value(dtype: DType, vec: int = 1) -> Type:
    return Type.value(dtype, vec)


# ---- rule 1: pointers ---------------------------------------------------------------------------


def test_pointer_arithmetic_keeps_the_pointer_type() -> None:
    assert typed(v("p") + 1) == Type.ptr(F32)
    assert typed(3 + v("p")) == Type.ptr(F32)
    assert typed(v("p4") - v("n")) == Type.ptr(F32, 4)
    assert typed(v("cp") + v("i64")) == Type.ptr(F32, const=True)
    assert typed(v("p")) == Type.ptr(F32)  # loading a pointer variable gives the pointer


@pytest.mark.parametrize(
    "expr",
    [
        lambda: v("p") * 2,
        lambda: v("p") + v("p"),
        lambda: v("p") + 1.5,
        lambda: v("p") + v("f32"),
        lambda: 1 - v("p"),
        lambda: v("p").lt(v("p")),
        lambda: v("p") + v("i32x4"),
    ],
)
def test_bad_pointer_arithmetic(expr: object) -> None:
    with pytest.raises(SemtreeTypeError):
        typed(expr())  # type: ignore[operator]


def test_select_between_pointers() -> None:
    assert typed(sb.select(v("n").lt(2), v("p"), v("p") + 4)) == Type.ptr(F32)
    with pytest.raises(SemtreeTypeError):
        typed(sb.select(v("b4"), v("p"), v("p")))
    with pytest.raises(SemtreeTypeError):
        typed(sb.select(v("bool"), v("p"), v("q")))


def test_subscripts() -> None:
    assert typed(v("p")[v("n")]) == value(F32)
    assert typed(v("p4")[3]) == value(F32, 4)
    assert typed(v("arr")[v("n") + 1]) == value(F32)
    assert typed(v("ptrs")[1]) == Type.ptr(F32, const=True)
    assert typed(v("ptrs")[1][v("n")]) == value(F32)
    for bad in (v("f32")[0], v("p")[0.5], v("p")[v("i32x4")], v("p")[v("p")]):
        with pytest.raises(SemtreeTypeError):
            typed(bad)
    with pytest.raises(SemtreeTypeError, match="not a value"):
        typed(v("arr"))
    with pytest.raises(SemtreeTypeError, match="undeclared"):
        typed(v("missing") + 1)


def test_lanes_are_vectors_at_any_element_of_a_scalar_pointer_or_array() -> None:
    assert typed(sb.lanes(v("p"), v("n") + 3, 8)) == value(F32, 8)
    assert typed(sb.lanes(v("p"), 0, 16, v("n") - 5)) == value(F32, 16)
    assert typed(sb.lanes(v("arr"), v("n"), 4)) == value(F32, 4)  # a private array
    assert str(sb.lanes(v("p"), 2, 4, 1).node) == "lanes4(p, 2, 1)"
    for bad in (
        sb.lanes(v("p4"), 0, 4),  # not a scalar pointer
        sb.lanes(v("ptrs"), 0, 4),  # an array of pointers
        sb.lanes(v("p"), 0.5, 4),
        sb.lanes(v("p"), 0, 4, v("i32x4")),
    ):
        with pytest.raises(SemtreeTypeError):
            typed(bad)
    with pytest.raises(SemtreeTypeError, match="width 3"):
        sb.lanes(v("p"), 0, 3)


# ---- rule 2: vector width -----------------------------------------------------------------------


def test_scalars_broadcast_to_the_widest_operand() -> None:
    assert typed(v("f32x4") + v("f32")) == value(F32, 4)
    assert typed(v("f16") * v("f32x4")) == value(F32, 4)
    assert typed(v("i32x4") + v("f64")) == value(F64, 4)
    assert typed(sb.call(Builtin.MAD, v("f32"), v("f32x4"), v("f32x4"))) == value(F32, 4)
    assert typed(sb.clamp(v("f32x4"), 0.0, 1.0)) == value(F32, 4)


def test_two_different_vector_widths_clash() -> None:
    with pytest.raises(SemtreeTypeError, match="mixed vector widths"):
        typed(v("f32x4") + v("f32x8"))
    with pytest.raises(SemtreeTypeError):
        typed(sb.select(v("b4"), v("f32x8"), 0.0))


def test_index_widens_to_int32_lanes() -> None:
    assert typed(v("i32x4") + v("n")) == value(I32, 4)
    assert typed(sb.select(v("b4"), v("n"), 0)) == value(I32, 4)


# ---- rule 3: rank -------------------------------------------------------------------------------

NUMBERS = [dtype for dtype in DType if not dtype.is_bool]


@pytest.mark.parametrize(("left", "right"), list(itertools.product(NUMBERS, repeat=2)))
def test_rank_matches_the_spec_promotion(left: DType, right: DType) -> None:
    expected = value(promote_dtypes(left, right))
    assert typed(v(left.short) + v(right.short)) == expected
    assert typed(v(left.short).lt(v(right.short))) == value(BOOL)
    assert promote(value(left), value(right, 4)) == expected.with_width(4)


def test_booleans_rank_lowest() -> None:
    assert typed(v("bool") + v("i8")) == value(I8)
    assert typed(v("u8") * v("bool")) == value(U8)
    assert typed(v("bool") & v("bool")) == value(BOOL)


def test_index_ranks_like_int32_and_wins_the_tie() -> None:
    assert typed(v("n") + v("i32")) == INDEX
    assert typed(v("i32") + v("n")) == INDEX
    assert typed(v("n") * v("i16")) == INDEX
    assert typed(v("n") + v("u32")) == value(U32)
    assert typed(v("n") + v("i64")) == value(I64)
    assert typed(v("n") + v("f16")) == value(F16)
    assert typed(sb.global_id(0) * 4 + v("n")) == INDEX


# ---- rule 4: weak literals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (lambda: v("i8") + 1, value(I8)),
        (lambda: 1 + v("u8"), value(U8)),
        (lambda: v("u8") + 300, value(U8)),
        (lambda: v("u64") - 1, value(U64)),
        (lambda: v("n") + 1, INDEX),
        (lambda: v("f16") * 0.5, value(F16)),
        (lambda: v("f16") * 2, value(F16)),
        (lambda: v("f64") + 0.1, value(F64)),
        (lambda: v("i32") + 0.5, value(F32)),
        (lambda: v("i64") * 0.5, value(F32)),
        (lambda: v("n") + 0.5, value(F32)),
        (lambda: v("bool") + 1, value(I32)),
        (lambda: v("bool") + 2**40, value(I64)),
        (lambda: v("f32x4") + 1, value(F32, 4)),
        (lambda: v("i32x4") * 0.5, value(F32, 4)),
        (lambda: sb.const(1) + 2, value(I32)),
        (lambda: sb.const(1) + 0.5, value(F32)),
        (lambda: sb.const(1) + 2**40, value(I64)),
        (lambda: v("i8").lt(1000), value(BOOL)),
        (lambda: sb.select(v("bool"), v("f16"), 1.0), value(F16)),
        (lambda: sb.select(v("bool"), 1, 0), value(I32)),
        (lambda: sb.select(v("b4"), 1, 0), value(I32, 4)),
        (lambda: sb.call(Builtin.MAX, v("i16"), 0), value(I16)),
        (lambda: sb.call(Builtin.POW, v("f64"), 2), value(F64)),
        (lambda: sb.clamp(v("u8"), 0, 255), value(U8)),
    ],
)
def test_literals_take_the_type_of_the_other_operand(expr: object, expected: Type) -> None:
    assert typed(expr()) == expected  # type: ignore[operator]


def test_literals_alone() -> None:
    assert typed(7) == value(I32)
    assert typed(-(2**31)) == value(I32)
    assert typed(2**31) == value(I64)
    assert typed(2**63) == value(U64)
    assert typed(0.5) == value(F32)
    assert typed(-sb.const(3)) == value(I32)


def test_literal_type_in_a_context() -> None:
    assert literal_type(FloatConst(0.1), value(F64)) == value(F64)
    assert literal_type(FloatConst(0.1), value(I32)) == value(F32)
    assert literal_type(IntConst(5), value(F16, 4)) == value(F16)
    assert literal_type(IntConst(5), INDEX) == INDEX
    assert literal_type(IntConst(5), value(BOOL)) == value(I32)
    assert literal_type(IntConst(5), Type.ptr(F32)) == value(I32)


def test_operand_type_is_what_operands_convert_to() -> None:
    load = Load(Lookup("i8"))
    assert operand_type((load, IntConst(1)), (value(I8), value(I32))) == value(I8)
    assert operand_type((IntConst(1), FloatConst(2.0)), (value(I32), value(F32))) == value(F32)
    comparison = Binary(BinOp.LT, Load(Lookup("u32")), Load(Lookup("i32")))
    assert type_of(comparison, SCOPE, True) == value(BOOL)
    assert operand_type((comparison.lhs, comparison.rhs), (value(U32), value(I32))) == value(U32)


# ---- rule 5: comparisons and logic --------------------------------------------------------------


def test_comparisons_and_logic_give_booleans_of_the_operand_width() -> None:
    assert typed(v("f32x4").lt(0.0)) == Type.boolean(4)
    assert typed(v("i32x4").eq(v("n"))) == Type.boolean(4)
    assert typed(sb.and_(v("i32"), v("f32"))) == Type.boolean()
    assert typed(sb.or_(v("b4"), v("bool"))) == Type.boolean(4)
    assert typed(sb.not_(v("f32x4"))) == Type.boolean(4)
    assert typed(sb.not_(v("n"))) == Type.boolean()


def test_vector_booleans_only_feed_selections_and_logic() -> None:
    assert typed(sb.select(v("f32x4").gt(0.0), v("f32x4"), 0.0)) == value(F32, 4)
    assert typed(sb.cond(v("b4"), 1.0, v("f32"))) == value(F32, 4)
    function = sb.function("k", [("out", Type.ptr(F32, 4))], sb.if_(v("out")[0].lt(0.0), []))
    with pytest.raises(SemtreeTypeError, match="scalar"):
        check_function(function, True)


# ---- rule 6: booleans in memory -----------------------------------------------------------------


def test_boolean_buffers_hold_booleans() -> None:
    scope = {"flags": Type.ptr(BOOL)}
    assert type_of(Load(Subscript(Lookup("flags"), IntConst(0))), scope, False) == value(BOOL)


# ---- rule 7: half precision ---------------------------------------------------------------------


def test_half_is_a_storage_format_without_native_fp16() -> None:
    load = v("hp")[0]
    assert typed(load, native_fp16=True) == value(F16)
    assert typed(load, native_fp16=False) == value(F32)
    assert typed(load * 0.5, native_fp16=False) == value(F32)
    assert typed(v("f16") + v("f16"), native_fp16=False) == value(F32)
    assert typed(sb.cast(F16, v("f32")), native_fp16=False) == value(F32)
    assert typed(sb.cast(F16, v("f32")), native_fp16=True) == value(F16)
    assert typed(sb.limit(Limit.MAX, F16), native_fp16=False) == value(F32)
    assert value_type(Type.ptr(F16), False) == Type.ptr(F16)
    assert value_type(value(F16, 4), False) == value(F32, 4)


# ---- rule 8: conversions (types only) -----------------------------------------------------------


def test_casts() -> None:
    assert typed(sb.cast(I32, v("f32"))) == value(I32)
    assert typed(sb.cast(value(I8, 4), v("f32x4"))) == value(I8, 4)
    assert typed(sb.cast(value(F32, 4), v("n"))) == value(F32, 4)
    assert typed(sb.cast(INDEX, v("u64"))) == INDEX
    assert typed(sb.cast(Type.ptr(F32, 4, const=True), v("p"))) == Type.ptr(F32, 4, const=True)
    for target, source in [
        (value(I32, 8), v("f32x4")),
        (value(F32), v("f32x4")),
        (value(F32), v("p")),
        (Type.ptr(F32), v("f32")),
        (Type.ptr(F32), v("cp")),
        (Type.ptr(I32), v("p")),
        (Type.ptr(F32, region=Region.LOCAL), v("p")),
        (Type.void(), v("f32")),
    ]:
        with pytest.raises(SemtreeTypeError):
            typed(Cast(target, sb.expr(source)))


# ---- rule 9 and 10: operator domains ------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        lambda: v("bool") + v("bool"),
        lambda: -v("bool"),
        lambda: ~v("f32"),
        lambda: v("f32") % 2,
        lambda: v("f32") << 1,
        lambda: v("f64") & v("i32"),
        lambda: v("bool") << v("bool"),
        lambda: sb.call(Builtin.EXP, v("i32")),
        lambda: sb.call(Builtin.SQRT, 4),
        lambda: sb.call(Builtin.ABS, v("bool")),
        lambda: sb.clamp(v("bool"), v("bool"), v("bool")),
        lambda: sb.select(v("p"), 1, 0),
    ],
)
def test_operator_domains(expr: object) -> None:
    with pytest.raises(SemtreeTypeError):
        typed(expr())  # type: ignore[operator]


def test_integer_builtins() -> None:
    assert typed(sb.call(Builtin.MAD, v("i32"), v("i32"), 1)) == value(I32)
    assert typed(sb.call(Builtin.ABS, v("i8"))) == value(I8)
    assert typed(sb.call(Builtin.MIN, v("n"), 7)) == INDEX
    assert typed(v("i32") % 3) == value(I32)
    assert typed(v("u8") >> v("i64")) == value(I64)
    assert typed(sb.global_id(2)) == INDEX
    assert typed(LimitConst(Limit.MIN, I8)) == value(I8)


# ---- whole functions ----------------------------------------------------------------------------


def kernel(
    *stmts: object, params: tuple = (("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True)))
):
    return sb.function("k", params, list(stmts))  # type: ignore[arg-type]


def test_check_function_accepts_well_typed_kernels() -> None:
    out, source, x = v("out"), v("in"), v("x")
    check_function(
        kernel(
            sb.declare(Type.value(F32, 4), "x", 1.0),
            sb.declare(Type.ptr(F32, const=True), "row", source + 4),
            sb.assign(out[0], v("row")[1] + 1),
            sb.assign(x, sb.cast(Type.value(F32, 4), source[0])),
            sb.assign(out[1], 3),
            sb.while_(out[0].lt(10.0), sb.assign(out[0], out[0] + 1)),
            sb.for_("j", 4, 2, sb.if_(v("j").gt(2), sb.ret(), sb.assign(out[v("j")], 0.0))),
        ),
        True,
    )


@pytest.mark.parametrize(
    "stmt",
    [
        lambda: sb.assign(v("in")[0], 1.0),  # through a const pointer
        lambda: sb.assign(v("out")[0], v("f")),  # vector into a scalar
        lambda: sb.assign(v("out"), v("in")),  # const pointer into a mutable one
        lambda: sb.assign(v("out"), 1.0),
        lambda: sb.assign(v("arr"), 1.0),
        lambda: sb.ret(1),
        lambda: sb.declare(Type(TypeBase.VALUE, F32, region=Region.GLOBAL), "g"),
        lambda: sb.declare(Type.void(), "nothing"),
        lambda: sb.declare(F32, "y", v("out")),
        lambda: sb.while_(v("f").lt(0.0), []),
        lambda: sb.assign(v("j"), 1),  # a loop variable outside its loop
        lambda: sb.for_("j", 2, body=sb.assign(v("j"), 1)),  # loop variables are read-only
    ],
)
def test_check_function_rejects(stmt: object) -> None:
    function = kernel(
        sb.declare(Type.value(F32, 4), "f", 0.0),
        sb.declare(Type(TypeBase.VALUE, F32, array=4), "arr"),
        stmt(),  # type: ignore[operator]
    )
    with pytest.raises(SemtreeTypeError):
        check_function(function, True)


def test_scopes_end_with_their_block() -> None:
    function = kernel(sb.block(sb.declare(F32, "t", 1.0)), sb.assign(v("out")[0], v("t")))
    with pytest.raises(SemtreeTypeError, match="undeclared"):
        check_function(function, True)
    function = kernel(sb.if_(1, sb.declare(F32, "t", 1.0)), sb.assign(v("out")[0], v("t")))
    with pytest.raises(SemtreeTypeError, match="undeclared"):
        check_function(function, True)


def test_a_declaration_may_shadow_a_loop_variable() -> None:
    body = sb.for_("j", 2, body=[sb.declare(F32, "j", 0.0), sb.assign(v("j"), 1.0)])
    check_function(kernel(body), True)


def test_functions_returning_values() -> None:
    function = sb.function("twice", [("x", Type.value(F32))], sb.ret(v("x") * 2), Type.value(F32))
    check_function(function, True)
    with pytest.raises(SemtreeTypeError):
        check_function(sb.function("f", [], sb.ret(), Type.value(F32)), True)
    with pytest.raises(SemtreeTypeError):
        check_function(sb.function("f", [("a", Type(TypeBase.VALUE, F32, array=2))], []), True)
