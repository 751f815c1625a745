"""How semtree types and constants look in LLVM IR: the vocabulary of the LLVM renderer.

Place in the pipeline: `render.py` (statements), `render_expr.py` (expressions) and
`render_math.py` (builtins) turn a semtree `Function` into `llvmlite.ir`; this module holds
the mapping they share (design 7.2):

- registers: INDEX is `i64`; a VALUE is `i1`, `iN`, `half`, `float` or `double`, and
  `<W x T>` for vectors; the caller first applies `semtree.typing.value_type`, so an
  emulated FLOAT16 value is already FLOAT32 here, and FLOAT16 means `half` wherever it
  appears (the target of a conversion, memory, native fp16);
- memory: a boolean is one byte (rule 6), everything else as in registers; a pointer
  points to *scalar* memory elements even when the semtree pointer is a vector pointer,
  because semtree vectors of width 3 are packed (three scalars) while LLVM's `<3 x T>`
  occupies four; the renderer scales subscripts by the width instead;
- constants: literals round exactly as `tests/reference.py` rounds them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir

from hal_llvm.memory import ALIGNMENT
from semtree.nodes import UnsupportedNode
from semtree.types import DType, Type, TypeBase

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
HALF = ir.HalfType()
FLOAT = ir.FloatType()
DOUBLE = ir.DoubleType()
VOID = ir.VoidType()

# Every buffer the CPU device hands to a kernel is this aligned (design 7.5; arenas
# refuse misaligned offsets), so parameters carry `align` with it.
BUFFER_ALIGNMENT = ALIGNMENT

INDEX = Type.index()
BOOLEAN = Type.boolean()
FLOAT32 = Type.value(DType.FLOAT32)


class Typed(NamedTuple):
    """A rendered expression: its LLVM value and its semtree type."""

    value: ir.Value
    type: Type


def scalar_type(dtype: DType) -> ir.Type:
    """The register type of one element of `dtype`."""
    if dtype is DType.BOOLEAN:
        return I1
    if dtype is DType.FLOAT16:
        return HALF
    if dtype is DType.FLOAT32:
        return FLOAT
    if dtype is DType.FLOAT64:
        return DOUBLE
    return ir.IntType(dtype.bits)


def memory_scalar_type(dtype: DType) -> ir.Type:
    """The in-memory type of one element of `dtype` (booleans are bytes, rule 6)."""
    return I8 if dtype is DType.BOOLEAN else scalar_type(dtype)


def _vector(element: ir.Type, width: int) -> ir.Type:
    return element if width == 1 else ir.VectorType(element, width)


def register_type(type_: Type) -> ir.Type:
    """The LLVM type of a value, index or pointer of semtree type `type_` (not an array)."""
    if type_.is_index:
        return I64
    if type_.is_pointer:
        return pointer_type(type_)
    if type_.is_value:
        assert type_.dtype is not None
        return _vector(scalar_type(type_.dtype), type_.vec_width)
    raise UnsupportedNode(type_, "no register representation")


def memory_type(type_: Type) -> ir.Type:
    """The LLVM type of a buffer element of semtree value type `type_` (maybe a vector)."""
    assert type_.dtype is not None
    return _vector(memory_scalar_type(type_.dtype), type_.vec_width)


def pointer_type(type_: Type) -> ir.PointerType:
    """The LLVM type of a semtree pointer: a pointer to scalar memory elements."""
    assert type_.dtype is not None
    return memory_scalar_type(type_.dtype).as_pointer()


def is_signed(type_: Type) -> bool:
    """Whether integer instructions treat `type_` as signed (INDEX is signed)."""
    return type_.is_index or (type_.dtype is not None and type_.dtype.is_signed)


def bit_width(type_: Type) -> int:
    """Bits of one lane of an integer or index type."""
    if type_.is_index:
        return 64
    assert type_.dtype is not None
    return 1 if type_.dtype is DType.BOOLEAN else type_.dtype.bits


def same_register(left: Type, right: Type) -> bool:
    """Whether values of the two types are the same thing in registers."""
    return (left.base, left.dtype, left.vec_width) == (right.base, right.dtype, right.vec_width)


def intrinsic_suffix(type_: ir.Type) -> str:
    """The overload suffix LLVM mangles into intrinsic names: `f32`, `i64`, `v16f32`."""
    if isinstance(type_, ir.VectorType):
        return f"v{type_.count}{intrinsic_suffix(type_.element)}"
    if isinstance(type_, ir.IntType):
        return f"i{type_.width}"
    if isinstance(type_, ir.HalfType):
        return "f16"
    if isinstance(type_, ir.FloatType):
        return "f32"
    if isinstance(type_, ir.DoubleType):
        return "f64"
    raise UnsupportedNode(type_, "no intrinsic overload")


def element_of(type_: ir.Type) -> ir.Type:
    """The lane type of a vector type, or the type itself."""
    return type_.element if isinstance(type_, ir.VectorType) else type_


def lanes_of(type_: ir.Type) -> int:
    return type_.count if isinstance(type_, ir.VectorType) else 1


# ---- constants ------------------------------------------------------------------------------


def exact_number(value: int | float, type_: Type) -> int | float:
    """`value` in the scalar type `type_` as the reference interpreter computes it: floats
    round to nearest from a double (so an integer literal rounds twice, as there), integers
    wrap modulo 2^bits, booleans are `value != 0`."""
    if type_.is_float:
        assert type_.dtype is not None
        with np.errstate(over="ignore"):  # beyond the type's range: infinity, as intended
            return float(np.array(float(value)).astype(type_.dtype.numpy))
    if type_.is_bool:
        return int(value != 0)
    bits = bit_width(type_)
    wrapped = int(value) % (1 << bits)
    return wrapped - (1 << bits) if wrapped >= 1 << (bits - 1) else wrapped


def constant(type_: Type, value: int | float) -> ir.Constant:
    """A constant of semtree value or index type `type_` (vectors: every lane `value`)."""
    scalar = type_.scalar()
    number = exact_number(value, scalar)
    element = ir.Constant(register_type(scalar), number)
    if type_.vec_width == 1:
        return element
    return ir.Constant(register_type(type_), [element] * type_.vec_width)


def splat_constant(type_: ir.Type, value: int | float) -> ir.Constant:
    """A constant of LLVM type `type_` with every lane `value` (already representable)."""
    if isinstance(type_, ir.VectorType):
        return ir.Constant(type_, [ir.Constant(type_.element, value)] * type_.count)
    return ir.Constant(type_, value)


def is_value_or_index(type_: Type) -> bool:
    return type_.base in (TypeBase.VALUE, TypeBase.INDEX) and not type_.array
