"""Tile values as semtree expressions: constants, conversions and every elementwise builtin
(spec 5.4, 7.3, 7.4, 9.3, 9.4), for the kernel generators (`tile.lower.contract`).

A `Typed` pairs an expression with the Tile element type whose value set it holds exactly.
Operands are converted explicitly to the operation's compute type before they are combined,
so the semtree's own promotion rules (weak literals and all) never decide a Tile type; the
result of an `f16` operation is rounded back to half with an explicit `Cast`, because a
device without native half computes in `f32` registers (design 4.4 rules 4 and 7, spec
7.1: every intermediate is rounded to its type).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree.nodes import (
    Binary,
    BinOp,
    Builtin,
    Call,
    Cast,
    Expr,
    FloatConst,
    IntConst,
    Limit,
    LimitConst,
    Select,
    Unary,
    UnOp,
)
from semtree.types import DType, Type, promote
from tile.lang.syntax import AggOp, CombOp

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction


class GenerateError(Exception):
    """The generator met an operation it cannot express (an internal error)."""


@dataclass(frozen=True, slots=True)
class Typed:
    """An expression and the Tile type whose values it holds exactly."""

    expr: Expr
    dtype: DType


def constant(value: int | float, dtype: DType) -> Typed:
    """A literal of `dtype`; strongly typed by a `Cast` so that no operand adopts it."""
    if dtype.is_bool:
        return Typed(LimitConst(Limit.ONE if value else Limit.ZERO, DType.BOOLEAN), dtype)
    if dtype.is_float:
        literal: Expr = FloatConst(float(value))
    else:
        literal = IntConst(int(value))
    return Typed(Cast(Type.value(dtype), literal), dtype)


def zero(dtype: DType) -> Typed:
    return constant(0, dtype)


def identity(agg: str, dtype: DType) -> Typed:
    """The start value of an accumulation (never visible: see `FlatContraction.needs_hit`)."""
    match agg:
        case "+" | "=":
            return constant(0, dtype)
        case "*":
            return constant(1, dtype)
        case ">":
            if dtype.is_bool:
                return constant(0, dtype)
            if dtype.is_float:
                return constant(-math.inf, dtype)
            return Typed(LimitConst(Limit.MIN, dtype), dtype)
        case _:
            if dtype.is_bool:
                return constant(1, dtype)
            if dtype.is_float:
                return constant(math.inf, dtype)
            return Typed(LimitConst(Limit.MAX, dtype), dtype)


def convert(value: Typed, target: DType) -> Expr:
    """`value` converted to `target` by spec 5.4.

    Float to a narrow integer goes through `i64` so that out-of-range values wrap as PlaidML
    0.7.0's do (`as_int(300.0, 8) == 44`, `as_uint(-2.7, 8) == 254`) instead of saturating;
    the spec leaves those values implementation-defined.
    """
    source = value.dtype
    if source is target:
        return value.expr
    if source.is_float and target.is_integer:
        if target is DType.INT64:
            return Cast(Type.value(target), value.expr)
        wide = Cast(Type.value(DType.INT64), value.expr)
        if target is DType.UINT64:
            negative = Binary(BinOp.LT, value.expr, constant(0, source).expr)
            return Select(
                negative,
                Cast(Type.value(target), wide),
                Cast(Type.value(target), value.expr),
            )
        return Cast(Type.value(target), wide)
    return Cast(Type.value(target), value.expr)


def rounded(expr: Expr, dtype: DType) -> Typed:
    """The result of an operation computed in `dtype`: half results are rounded to half."""
    if dtype is DType.FLOAT16:
        return Typed(Cast(Type.value(dtype), expr), dtype)
    return Typed(expr, dtype)


_ARITH = {
    "add": BinOp.ADD,
    "sub": BinOp.SUB,
    "mul": BinOp.MUL,
    "div": BinOp.DIV,
    "bit_and": BinOp.AND,
    "bit_or": BinOp.OR,
    "bit_xor": BinOp.XOR,
    "bit_left": BinOp.SHL,
    "bit_right": BinOp.SHR,
}
_COMPARE = {
    "cmp_eq": BinOp.EQ,
    "cmp_ne": BinOp.NE,
    "cmp_lt": BinOp.LT,
    "cmp_gt": BinOp.GT,
    "cmp_le": BinOp.LE,
    "cmp_ge": BinOp.GE,
}
_MATH = {
    "exp": Builtin.EXP,
    "log": Builtin.LOG,
    "sqrt": Builtin.SQRT,
    "tanh": Builtin.TANH,
    "sin": Builtin.SIN,
    "cos": Builtin.COS,
    "tan": Builtin.TAN,
    "asin": Builtin.ASIN,
    "acos": Builtin.ACOS,
    "atan": Builtin.ATAN,
    "sinh": Builtin.SINH,
    "cosh": Builtin.COSH,
    "floor": Builtin.FLOOR,
    "ceil": Builtin.CEIL,
    "round": Builtin.ROUND,
    "recip": Builtin.RECIP,
    "pow": Builtin.POW,
}
ELEMENTWISE_FUNCTIONS = frozenset(
    {*_ARITH, *_COMPARE, *_MATH, "neg", "bit_not", "cond", "ident", "cast"}
    | {"asinh", "acosh", "atanh"}
)


def apply(
    fn: str,
    args: Sequence[Typed],
    result: DType,
    compute: DType,
    settings: HardwareSettings,
) -> Typed:
    """The value of the elementwise builtin `fn` (a `BoundOp.fn`) on `args`.

    `compute` is the type the operation works in (`BoundOp.compute`); the value returned has
    type `result` (the op's output element type).
    """
    if fn in _COMPARE:
        left, right = (convert(a, compute) for a in args)
        return Typed(Binary(_COMPARE[fn], left, right), DType.BOOLEAN)
    if fn in _ARITH:
        left, right = (convert(a, compute) for a in args)
        return _finish(rounded(Binary(_ARITH[fn], left, right), compute), result)
    if fn in _MATH:
        operands = tuple(convert(a, compute) for a in args)
        return _finish(rounded(Call(_MATH[fn], operands), compute), result)
    match fn:
        case "neg":
            return _finish(rounded(Unary(UnOp.NEG, convert(args[0], compute)), compute), result)
        case "bit_not":
            return _finish(Typed(Unary(UnOp.BIT_NOT, convert(args[0], compute)), compute), result)
        case "cond":
            condition = convert(args[0], DType.BOOLEAN)
            then, other = (convert(a, compute) for a in args[1:])
            return _finish(Typed(Select(condition, then, other), compute), result)
        case "ident" | "cast":
            return Typed(convert(args[0], result), result)
        case "asinh" | "acosh" | "atanh":
            return _finish(_inverse_hyperbolic(fn, args[0], compute, settings), result)
        case _:
            raise GenerateError(f"no elementwise semantics for '{fn}'")


def _finish(value: Typed, result: DType) -> Typed:
    return value if value.dtype is result else Typed(convert(value, result), result)


def _inverse_hyperbolic(
    fn: str, argument: Typed, compute: DType, settings: HardwareSettings
) -> Typed:
    """asinh, acosh, atanh by their logarithmic forms; there is no semtree builtin for them.

    Evaluated in `f64` where the device has it, so the cancellation near 0 costs nothing
    visible at `f32`; asinh uses the odd symmetry so that large negative arguments do not
    cancel either.
    """
    work = DType.FLOAT64 if settings.fp64 else DType.FLOAT32
    x = convert(Typed(convert(argument, compute), compute), work)

    def lit(value: float) -> Expr:
        return constant(value, work).expr

    def call(builtin: Builtin, *operands: Expr) -> Expr:
        return Call(builtin, operands)

    match fn:
        case "asinh":
            magnitude = Select(Binary(BinOp.LT, x, lit(0.0)), Unary(UnOp.NEG, x), x)
            root = call(Builtin.SQRT, Binary(BinOp.ADD, Binary(BinOp.MUL, x, x), lit(1.0)))
            positive = call(Builtin.LOG, Binary(BinOp.ADD, magnitude, root))
            value: Expr = Select(Binary(BinOp.LT, x, lit(0.0)), Unary(UnOp.NEG, positive), positive)
        case "acosh":
            root = call(Builtin.SQRT, Binary(BinOp.SUB, Binary(BinOp.MUL, x, x), lit(1.0)))
            value = call(Builtin.LOG, Binary(BinOp.ADD, x, root))
        case _:
            ratio = Binary(
                BinOp.DIV, Binary(BinOp.ADD, lit(1.0), x), Binary(BinOp.SUB, lit(1.0), x)
            )
            value = Binary(BinOp.MUL, lit(0.5), call(Builtin.LOG, ratio))
    return rounded(convert(Typed(value, work), compute), compute)


def combine(flat: FlatContraction, operands: Sequence[Typed]) -> Typed:
    """The combined value of one tuple (spec 8.5), of the output type."""
    dtype = flat.dtype
    match flat.comb:
        case CombOp.NONE:
            return Typed(convert(operands[0], dtype), dtype)
        case CombOp.ADD | CombOp.MUL:
            op = BinOp.ADD if flat.comb is CombOp.ADD else BinOp.MUL
            left, right = (convert(o, dtype) for o in operands)
            return rounded(Binary(op, left, right), dtype)
        case CombOp.EQ | CombOp.COND:
            common = promote(operands[0].dtype, operands[1].dtype)
            left, right = (convert(o, common) for o in operands[:2])
            equal = Binary(BinOp.EQ, left, right)
            if flat.comb is CombOp.EQ:
                return Typed(equal, DType.BOOLEAN)
            chosen = convert(operands[2], dtype)
            return Typed(Select(equal, chosen, zero(dtype).expr), dtype)
        case _:
            raise GenerateError(f"no combination {flat.comb}")


def aggregate(agg: AggOp, dtype: DType, current: Expr, value: Expr) -> Expr:
    """`current` (an accumulator of `dtype`) after aggregating `value` into it; merging two
    partial accumulators is the same operation (every aggregation but `=` is associative).

    A float `>` or `<` is a comparison and a choice, `value > current ? value : current`, not
    C's `fmax`: an accumulator starts at the identity (-inf or +inf) and so never holds a NaN,
    and then the two agree (a NaN value is passed over), but the choice is one instruction
    (x86's `maxps` is exactly it) where `fmax` also tests `current` for NaN. On the CPU that
    test cost a max over rows of 419 2-3x the time of the sum (AMD Zen 3): LLVM neither folds
    the row's lanes nor its tail in vectors around it."""
    if agg in (AggOp.MAX, AggOp.MIN) and dtype.is_float:
        op = BinOp.GT if agg is AggOp.MAX else BinOp.LT
        return Select(Binary(op, value, current), value, current)
    match agg:
        case AggOp.SUM:
            return Binary(BinOp.ADD, current, value)
        case AggOp.PROD:
            return Binary(BinOp.MUL, current, value)
        case AggOp.MAX if dtype.is_bool:
            return Binary(BinOp.LOR, current, value)
        case AggOp.MIN if dtype.is_bool:
            return Binary(BinOp.LAND, current, value)
        case AggOp.MAX:
            return Call(Builtin.MAX, (current, value))
        case AggOp.MIN:
            return Call(Builtin.MIN, (current, value))
        case _:
            return value
