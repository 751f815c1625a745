"""Arithmetic and comparison operators in LLVM IR, for `render_expr.ExpressionEmitter`.

Floats follow IEEE-754 (`!=` is true when either operand is NaN); integers wrap, divide with
the guards of spec 7.4 (x / 0 == 0, MIN / -1 == MIN, branch-free) and shift by counts taken
modulo the lane width (OpenCL's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal_llvm.render_types import bit_width, is_signed, splat_constant
from semtree.nodes import BinOp, UnsupportedNode

if TYPE_CHECKING:
    from llvmlite import ir

    from semtree.types import Type

_SIGNED_DIVISION = {BinOp.DIV: "sdiv", BinOp.MOD: "srem"}
_UNSIGNED_DIVISION = {BinOp.DIV: "udiv", BinOp.MOD: "urem"}


def float_operation(
    builder: ir.IRBuilder, op: BinOp, left: ir.Value, right: ir.Value, flags: tuple[str, ...]
) -> ir.Value:
    """`left op right` on floats (scalars or vectors) with the fast-math `flags`."""
    match op:
        case BinOp.ADD:
            return builder.fadd(left, right, flags=flags)
        case BinOp.SUB:
            return builder.fsub(left, right, flags=flags)
        case BinOp.MUL:
            return builder.fmul(left, right, flags=flags)
        case BinOp.DIV:
            return builder.fdiv(left, right, flags=flags)
        case BinOp.NE:
            return builder.fcmp_unordered("!=", left, right)  # true when either is NaN
        case _ if op.is_comparison:
            return builder.fcmp_ordered(op.value, left, right)
        case _:
            raise UnsupportedNode(op)


def integer_operation(
    builder: ir.IRBuilder, op: BinOp, left: ir.Value, right: ir.Value, common: Type
) -> ir.Value:
    """`left op right` on integers of type `common` with the semantics of spec 7.4."""
    # INDEX values stay within [-2^31, 2^31) (rule 10), so their i64 arithmetic never
    # wraps; saying so helps LLVM's loop and address analyses.
    wraps = ("nsw",) if common.is_index else ()
    signed = is_signed(common)
    match op:
        case BinOp.ADD:
            return builder.add(left, right, flags=wraps)
        case BinOp.SUB:
            return builder.sub(left, right, flags=wraps)
        case BinOp.MUL:
            return builder.mul(left, right, flags=wraps)
        case BinOp.DIV | BinOp.MOD:
            return _divide(builder, op, left, right, common)
        case BinOp.SHL | BinOp.SHR:
            # Counts modulo the lane width (OpenCL's rule); INDEX shifts as 32 bits.
            lane_bits = 32 if common.is_index else bit_width(common)
            count = builder.and_(right, splat_constant(right.type, lane_bits - 1))
            if op is BinOp.SHL:
                return builder.shl(left, count)
            return (builder.ashr if signed else builder.lshr)(left, count)
        case BinOp.AND:
            return builder.and_(left, right)
        case BinOp.OR:
            return builder.or_(left, right)
        case BinOp.XOR:
            return builder.xor(left, right)
        case _ if op.is_comparison:
            compare = builder.icmp_signed if signed else builder.icmp_unsigned
            return compare(op.value, left, right)
        case _:
            raise UnsupportedNode(op)


def _divide(
    builder: ir.IRBuilder, op: BinOp, left: ir.Value, right: ir.Value, common: Type
) -> ir.Value:
    """C division with the guards of spec 7.4, branch-free: the divisor becomes 1
    where it is 0 (then the result is replaced by 0) or where MIN / -1 would trap
    (MIN / 1 == MIN and MIN % 1 == 0 are the specified results)."""
    zero, one = splat_constant(left.type, 0), splat_constant(left.type, 1)
    is_zero = builder.icmp_unsigned("==", right, zero)
    divisor = builder.select(is_zero, one, right)
    if is_signed(common):
        minimum = splat_constant(left.type, -(1 << (bit_width(common) - 1)))
        overflow = builder.and_(
            builder.icmp_unsigned("==", left, minimum),
            builder.icmp_unsigned("==", right, splat_constant(left.type, -1)),
        )
        divisor = builder.select(overflow, one, divisor)
        instruction = _SIGNED_DIVISION[op]
    else:
        instruction = _UNSIGNED_DIVISION[op]
    quotient = getattr(builder, instruction)(left, divisor)
    return builder.select(is_zero, zero, quotient)
