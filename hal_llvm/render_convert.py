"""Conversions between semtree types in LLVM IR (design 4.4 rule 8), for the LLVM
renderer.

Place in the pipeline: `render_expr.ExpressionEmitter` converts every operand to the type
`semtree.typing` gives the operation, every stored value to its target's type, and buffer
elements between their memory form and their register form; all of it happens here, so
the conversions agree with `tests/reference.py` everywhere:

- integer to integer truncates, or extends by the *source's* signedness (INDEX is signed);
- integer to float rounds to nearest; float to integer truncates and saturates (as
  `llvm.fptosi.sat` / `fptoui.sat` would, NaN gives 0, but vectorisable); anything to bool is
  `!= 0` (a NaN is true); bool to number is 0 or 1;
- float16 goes through float32 both ways. float64 -> float16 rounds once, through float32
  rounded to odd: LLVM lowers the direct conversion to `__truncdfhf2`, which the JIT cannot
  resolve from the process;
- a scalar converted to a vector type is converted, then broadcast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from hal_llvm.render_types import (
    DOUBLE,
    FLOAT,
    HALF,
    I8,
    I32,
    Typed,
    bit_width,
    element_of,
    is_signed,
    register_type,
    same_register,
    splat_constant,
)
from semtree.types import DType, Type

if TYPE_CHECKING:
    from hal_llvm.render_math import Declarations


class Converter:
    """Emits conversions at `self.builder`; the base of `render_expr.ExpressionEmitter`."""

    def __init__(
        self, builder: ir.IRBuilder, declarations: Declarations, native_fp16: bool
    ) -> None:
        self.builder = builder
        self.declarations = declarations
        self.native_fp16 = native_fp16

    def splat(self, value: ir.Value, width: int) -> ir.Value:
        """A scalar broadcast to `width` lanes."""
        if width == 1:
            return value
        vector = ir.VectorType(value.type, width)
        if isinstance(value, ir.Constant):
            return ir.Constant(vector, [value] * width)
        undefined = ir.Constant(vector, ir.Undefined)
        first = self.builder.insert_element(undefined, value, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, width), [0] * width)
        return self.builder.shuffle_vector(first, undefined, mask)

    def lanes(self, element: ir.Type, like: ir.Type) -> ir.Type:
        """`element`, as a vector with as many lanes as `like` has."""
        if isinstance(like, ir.VectorType):
            return ir.VectorType(element, like.count)
        return element

    # ---- conversions ---------------------------------------------------------------------------

    def convert(self, value: ir.Value, source: Type, target: Type) -> ir.Value:
        """Rule 8: `value` of register type `source` as `target`, where FLOAT16 means `half`
        (so a caller converts to an emulated f16 by converting to it, then to FLOAT32)."""
        if target.base_is_pointer or same_register(source, target):
            return value
        if source.vec_width != target.vec_width:
            return self.splat(self.convert(value, source, target.scalar()), target.vec_width)
        builder = self.builder
        result = register_type(target)
        if target.is_bool:
            if source.is_float:
                return builder.fcmp_unordered("!=", value, splat_constant(value.type, 0.0))
            return builder.icmp_unsigned("!=", value, splat_constant(value.type, 0))
        if source.is_bool:
            if target.is_float:
                single = builder.uitofp(value, self.lanes(FLOAT, value.type))
                return self.convert(single, source.with_dtype(DType.FLOAT32), target)
            return builder.zext(value, result)
        if source.is_float and target.is_float:
            return self._float_to_float(value, source, target)
        if source.is_float:
            if source.dtype is DType.FLOAT16:
                value = builder.fpext(value, self.lanes(FLOAT, value.type))
            return self._saturating_to_integer(value, target)
        if target.is_float:
            to_float = builder.sitofp if is_signed(source) else builder.uitofp
            if target.dtype is DType.FLOAT16:
                # Through float32: exact up to 2^24, and every integer that float32 rounds
                # is far beyond half's range, so the result rounds once either way.
                return builder.fptrunc(to_float(value, self.lanes(FLOAT, value.type)), result)
            return to_float(value, result)
        source_bits, target_bits = bit_width(source), bit_width(target)
        if target_bits < source_bits:
            return builder.trunc(value, result)
        if target_bits > source_bits:
            return (builder.sext if is_signed(source) else builder.zext)(value, result)
        return value

    def _saturating_to_integer(self, value: ir.Value, target: Type) -> ir.Value:
        """float32/64 -> integer, truncating and saturating, NaN -> 0: what
        `llvm.fptosi.sat` computes, but written so that it vectorises (LLVM 22 expands the
        vector intrinsic lane by lane on x86). The value is clamped into the target's range
        (NaN to 0) so that the plain conversion is defined, and values from 2^(bits-1)
        (2^bits unsigned) up, which no float below that bound reaches, become MAX."""
        builder = self.builder
        signed, bits = is_signed(target), bit_width(target)
        low = -(1 << (bits - 1)) if signed else 0
        limit = 1 << (bits - 1) if signed else 1 << bits  # a power of two: exact
        precision = np.float32 if element_of(value.type) == FLOAT else np.float64
        below = float(np.nextafter(precision(limit), precision(0)))
        clamped = builder.select(
            builder.fcmp_ordered("<", value, splat_constant(value.type, float(low))),
            splat_constant(value.type, float(low)),
            value,
        )
        clamped = builder.select(
            builder.fcmp_ordered(">", clamped, splat_constant(value.type, below)),
            splat_constant(value.type, below),
            clamped,
        )
        ordered = builder.fcmp_ordered("ord", value, value)
        clamped = builder.select(ordered, clamped, splat_constant(value.type, 0.0))
        # Narrow targets convert through i32 (their whole range fits it), which x86 has
        # vector instructions for.
        result_type = register_type(target)
        work_type = result_type if bits >= 32 else self.lanes(I32, value.type)
        to_integer = builder.fptosi if signed or bits < 32 else builder.fptoui
        converted = to_integer(clamped, work_type)
        if bits < 32:
            converted = builder.trunc(converted, result_type)
        too_large = builder.fcmp_ordered(">=", value, splat_constant(value.type, float(limit)))
        maximum = splat_constant(result_type, limit - 1 if signed else -1)
        return builder.select(too_large, maximum, converted)

    def _float_to_float(self, value: ir.Value, source: Type, target: Type) -> ir.Value:
        builder = self.builder
        source_dtype, target_dtype = source.dtype, target.dtype
        if source_dtype is DType.FLOAT16:
            value = builder.fpext(value, self.lanes(FLOAT, value.type))
            source_dtype = DType.FLOAT32
        if source_dtype is target_dtype:
            return value
        if target_dtype is DType.FLOAT64:
            return builder.fpext(value, self.lanes(DOUBLE, value.type))
        if target_dtype is DType.FLOAT32:
            return builder.fptrunc(value, self.lanes(FLOAT, value.type))
        if source_dtype is DType.FLOAT64:
            value = self._round_to_odd_single(value)
        return builder.fptrunc(value, self.lanes(HALF, value.type))

    def _round_to_odd_single(self, value: ir.Value) -> ir.Value:
        """float64 -> float32 rounded to odd (truncate, then set the last bit if inexact):
        rounding that on to half is then the correctly rounded float64 -> half."""
        builder = self.builder
        single = builder.fptrunc(value, self.lanes(FLOAT, value.type))
        back = builder.fpext(single, value.type)
        fabs = self.declarations.overloaded("llvm.fabs", value.type)
        away = builder.fcmp_ordered(
            ">", builder.call(fabs, [back]), builder.call(fabs, [value])
        )  # rounded away from zero: step the magnitude back by one unit in the last place
        bits = builder.bitcast(single, self.lanes(I32, value.type))
        one = splat_constant(bits.type, 1)
        bits = builder.select(away, builder.sub(bits, one), bits)
        inexact = builder.fcmp_ordered("!=", back, value)
        bits = builder.select(inexact, builder.or_(bits, one), bits)
        return builder.bitcast(bits, single.type)

    def truth(self, typed: Typed, width: int = 1) -> ir.Value:
        """`x != 0` as `i1` lanes, broadcast to `width`."""
        return self.convert(typed.value, typed.type, Type.boolean(max(width, typed.type.vec_width)))

    # ---- memory forms --------------------------------------------------------------------------

    def from_memory(self, value: ir.Value, stored: Type) -> ir.Value:
        """A buffer element of type `stored` as a register value: booleans are bytes in
        memory (rule 6), emulated float16 is `half` in memory and float32 in registers."""
        if stored.dtype is DType.BOOLEAN:
            return self.builder.icmp_unsigned("!=", value, splat_constant(value.type, 0))
        if stored.dtype is DType.FLOAT16 and not self.native_fp16:
            return self.builder.fpext(value, self.lanes(FLOAT, value.type))
        return value

    def to_memory(self, value: ir.Value, stored: Type) -> ir.Value:
        """The inverse of `from_memory`: the value to store into a buffer element."""
        if stored.dtype is DType.BOOLEAN:
            return self.builder.zext(value, self.lanes(I8, value.type))
        if stored.dtype is DType.FLOAT16 and not self.native_fp16:
            return self.builder.fptrunc(value, self.lanes(HALF, value.type))
        return value
