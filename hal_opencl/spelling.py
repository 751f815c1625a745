"""OpenCL C spellings of semtree values: types, literals and conversions (design 6.2).

Place in the pipeline: `render.py` walks a kernel's semtree and asks this module how each value
is written in OpenCL C. Everything here is pure string work on `Text`s, so the renderer keeps
one invariant, which every function below preserves:

    A `Text` is OpenCL C code whose C type is exactly the one its semtree `type` names.

- INDEX is `int`; numbers have their own C types (`char` ... `double`, `float4`); FLOAT16 is
  `float` when the device lacks cl_khr_fp16, because half is then a storage format (rule 7).
- A scalar boolean is an integer expression whose value is 0 or 1 (a C comparison is `int`).
- A vector boolean is a *mask*: a signed integer vector whose lanes are -1 (true) or 0, as
  OpenCL vector comparisons produce them; `Text.lanes` is its lane type (comparing `float4`s
  gives an `int4` mask, comparing `double4`s a `long4` one). Rule 5 keeps this invisible.
- Booleans in memory (buffers, variables, arrays) are `char` 0 or 1 (rule 6).

OpenCL C promotes scalars narrower than `int` before arithmetic and refuses to mix a vector
with a scalar of another element type (`char4 + 5` does not compile), so conversions are
always explicit, and results are converted back to the semtree type.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from semtree.types import DType, Type

if TYPE_CHECKING:
    from collections.abc import Iterator

# C precedence levels of the text (higher binds tighter).
ATOM, UNARY, MULTIPLY, ADD, SHIFT, RELATION, EQUALITY = 16, 15, 13, 12, 11, 10, 9
BIT_AND, BIT_XOR, BIT_OR, LOGIC_AND, LOGIC_OR, TERNARY = 8, 7, 6, 5, 4, 3

C_NAMES = {
    DType.BOOLEAN: "char",  # booleans in memory; scalar boolean values are int 0/1
    DType.INT8: "char",
    DType.UINT8: "uchar",
    DType.INT16: "short",
    DType.UINT16: "ushort",
    DType.INT32: "int",
    DType.UINT32: "uint",
    DType.INT64: "long",
    DType.UINT64: "ulong",
    DType.FLOAT16: "half",
    DType.FLOAT32: "float",
    DType.FLOAT64: "double",
}
# The signed integer type whose lanes mask a vector of elements of each size (in bytes).
MASK_LANES = {1: DType.INT8, 2: DType.INT16, 4: DType.INT32, 8: DType.INT64}
UNSIGNED = {
    DType.INT8: DType.UINT8,
    DType.INT16: DType.UINT16,
    DType.INT32: DType.UINT32,
    DType.INT64: DType.UINT64,
}
# Integer limits spelled with the OpenCL macros where the macro has the right type.
_LIMIT_MACROS = {
    (DType.INT32, -(2**31)): "INT_MIN",
    (DType.INT32, 2**31 - 1): "INT_MAX",
    (DType.UINT32, 2**32 - 1): "UINT_MAX",
    (DType.INT64, -(2**63)): "LONG_MIN",
    (DType.INT64, 2**63 - 1): "LONG_MAX",
    (DType.UINT64, 2**64 - 1): "ULONG_MAX",
}
INDEX = Type.index()
BOOLEAN = Type.boolean()


@dataclass(frozen=True, slots=True)
class Text:
    """OpenCL C code, its precedence, the semtree type of its value (after rule 7), the lane
    type of a vector boolean's mask, and the value when the text is a literal."""

    code: str
    precedence: int
    type: Type
    lanes: DType | None = None
    constant: int | float | None = None
    # The same value in the unsigned domain of wrapping arithmetic, for results of it.
    unsigned: Text | None = field(default=None, compare=False)

    def at(self, precedence: int) -> str:
        """The code, parenthesised when it binds less tightly than `precedence`."""
        return self.code if self.precedence >= precedence else f"({self.code})"


class Helpers:
    """The helper types and functions one program needs, by name; emitted once each, types
    first, each kind sorted by name."""

    def __init__(self) -> None:
        self.functions: dict[str, str] = {}
        self.types: dict[str, str] = {}

    def use(self, name: str, source: str) -> str:
        self.functions.setdefault(name, source)
        return name

    def use_type(self, name: str, source: str) -> str:
        self.types.setdefault(name, source)
        return name

    def unaligned(self, vector: str, alignment: int) -> str:
        """`vector` as a type aligned only to `alignment` bytes (its element's): a vector
        read or written through it may start at any element (`vmovups` on x86)."""
        name = f"tile_unaligned_{vector}"
        source = f"typedef {vector} {name} __attribute__((aligned({alignment})));"
        return self.use_type(name, source)

    def __iter__(self) -> Iterator[str]:
        types = (self.types[name] for name in sorted(self.types))
        return itertools.chain(types, (self.functions[name] for name in sorted(self.functions)))

    def __bool__(self) -> bool:
        return bool(self.functions or self.types)


# ---- names ----------------------------------------------------------------------------------


def vector_name(dtype: DType, width: int = 1) -> str:
    """`float`, `float4`, `char3` ... (booleans are `char`: their memory form)."""
    return C_NAMES[dtype] + (str(width) if width > 1 else "")


def element_dtype(type_: Type) -> DType:
    """The element dtype of a register type (INDEX is INT32)."""
    if type_.is_index:
        return DType.INT32
    assert type_.dtype is not None
    return type_.dtype


def register_name(type_: Type, lanes: DType | None = None) -> str:
    """The C type of a value: `int` for INDEX and scalar booleans, the mask type for vector
    booleans, else the dtype's vector name."""
    if type_.is_index:
        return "int"
    if type_.is_bool:
        if type_.vec_width == 1:
            return "int"
        assert lanes is not None
        return vector_name(lanes, type_.vec_width)
    return vector_name(element_dtype(type_), type_.vec_width)


def mask_lanes_of(type_: Type) -> DType:
    """The lane type of the mask that selects between values of `type_`."""
    return MASK_LANES[element_dtype(type_).itemsize]


def is_narrow(type_: Type) -> bool:
    """A scalar integer narrower than `int`, which C promotes before arithmetic."""
    return (
        type_.is_integer
        and not type_.is_index
        and not type_.is_vector
        and element_dtype(type_).itemsize < 4
    )


# ---- constants ------------------------------------------------------------------------------


def exact(value: int | float, type_: Type) -> int | float:
    """`value` in `type_` as the reference interpreter holds it: integers wrap, floats round
    to the dtype, booleans are `value != 0`."""
    if type_.is_bool:
        return int(value != 0)
    dtype = element_dtype(type_)
    if dtype.is_float:
        return float(np.array(float(value)).astype(dtype.numpy))
    return int(np.array(int(value) % 2**64, np.uint64).astype(dtype.numpy))


def convert_constant(value: int | float, source: Type, target: Type) -> int | float:
    """Rule 8 on a constant: float to integer truncates and saturates (NaN gives 0)."""
    if target.is_bool:
        return int(value != 0)
    if isinstance(value, float) and not target.is_float:
        dtype = element_dtype(target)
        if math.isnan(value):
            return 0
        low, high = dtype.min, dtype.max
        if math.isinf(value):
            return high if value > 0 else low
        return int(min(max(math.trunc(value), low), high))
    del source
    return exact(value, target)


def float_code(value: float, dtype: DType) -> str:
    """A float literal of `dtype` (FLOAT16 only when the device has native half)."""
    if math.isnan(value) or math.isinf(value):
        text = "NAN" if math.isnan(value) else "INFINITY" if value > 0 else "-INFINITY"
        return text if dtype is DType.FLOAT32 else f"({C_NAMES[dtype]}){text}"
    if dtype is DType.FLOAT64:
        return repr(float(value))
    text = str(np.float32(value)) + "f"  # the shortest decimal that reads back exactly
    return text if dtype is DType.FLOAT32 else f"(half){text}"


def literal(value: int | float, type_: Type) -> Text:
    """A scalar literal of the scalar type `type_` (for a vector type: its element type)."""
    scalar = type_.scalar()
    if scalar.is_bool:
        return Text("1" if value else "0", ATOM, BOOLEAN, constant=int(bool(value)))
    dtype = element_dtype(scalar)
    value = exact(value, scalar)
    if dtype.is_float:
        code = float_code(float(value), dtype)
    else:
        number = int(value)
        macro = _LIMIT_MACROS.get((dtype, number))
        if macro is not None:
            code = macro
        elif dtype is DType.INT32:
            code = str(number)
        elif dtype is DType.INT64:
            code = f"{number}L"
        elif dtype in (DType.UINT32, DType.UINT64):
            code = f"{number}u" if dtype is DType.UINT32 else f"{number}UL"
        else:
            code = f"({C_NAMES[dtype]}){number}"
    precedence = UNARY if code.startswith(("-", "(")) else ATOM  # negative, or a cast
    return Text(code, precedence, scalar, constant=value)


def zero(type_: Type) -> Text:
    return literal(0, type_)


# ---- broadcasting and conversions -----------------------------------------------------------


def broadcast(text: Text, width: int) -> Text:
    """A scalar widened to `width` lanes of its own type (`(float4)(x)`); vectors unchanged."""
    if width == 1 or text.type.is_vector:
        return text
    if text.type.is_bool:
        lanes = text.lanes or DType.INT32
        name = vector_name(lanes, width)
        code = f"({name})(-{text.at(UNARY)})"
        return Text(code, UNARY, Type.boolean(width), lanes)
    type_ = Type.value(element_dtype(text.type), width)
    return Text(f"({register_name(type_)})({text.code})", UNARY, type_, constant=text.constant)


def truth(text: Text) -> Text:
    """A scalar usable as a C condition (OpenCL refuses float conditions in some places)."""
    if text.type.is_float:
        return Text(f"{text.at(RELATION)} != {zero(text.type).code}", EQUALITY, BOOLEAN)
    return text


def to_mask(text: Text, width: int, lanes: DType) -> Text:
    """Any value as a boolean mask of `width` lanes of type `lanes` (x != 0 per lane)."""
    type_ = Type.boolean(width)
    name = vector_name(lanes, width)
    source = text.type
    if source.is_bool and source.is_vector:
        if text.lanes is lanes:
            return text
        return Text(f"convert_{name}({text.code})", ATOM, type_, lanes)
    if not source.is_vector:
        flag = text if source.is_bool else truth_value(text)
        return Text(f"({name})(-{flag.at(UNARY)})", UNARY, type_, lanes)
    own = mask_lanes_of(source)
    mask = Text(f"{text.at(RELATION)} != {zero(source).code}", EQUALITY, type_, own)
    return to_mask(mask, width, lanes)


def truth_value(text: Text) -> Text:
    """A scalar as a scalar boolean (0 or 1)."""
    if text.type.is_bool:
        return text
    return Text(f"{text.at(RELATION)} != {zero(text.type).code}", EQUALITY, BOOLEAN)


def mask_to_numbers(mask: Text, target: Type, helpers: Helpers | None = None) -> Text:
    """A mask as 0/1 numbers of the vector type `target` (true lanes are -1, so negate)."""
    assert mask.lanes is not None
    negated = Text(f"-{mask.at(UNARY)}", UNARY, Type.value(mask.lanes, target.vec_width))
    return convert(negated, target, None, helpers)


def convert(
    text: Text, target: Type, lanes: DType | None = None, helpers: Helpers | None = None
) -> Text:
    """`text` as a value of the register type `target` (rule 8): floats to integers truncate
    and saturate (through a helper in `helpers` that maps NaN to 0, see `saturate`), integers
    wrap, anything to boolean is `!= 0`, scalars broadcast."""
    source = text.type
    if target.is_pointer or source.is_pointer:
        return text
    if target.is_bool:
        if target.is_vector:
            return to_mask(text, target.vec_width, lanes or text.lanes or DType.INT32)
        return truth_value(text)
    if source.is_bool and source.is_vector:
        return mask_to_numbers(text, target, helpers)
    if source.vec_width != target.vec_width:
        return broadcast(convert(text, target.scalar(), None, helpers), target.vec_width)
    if register_name(source, text.lanes) == register_name(target):
        if source == target:
            return text
        return Text(text.code, text.precedence, target, constant=text.constant)
    name = register_name(target)
    if source.is_float and not target.is_float:
        return saturate(text, target, helpers)
    if target.is_vector:
        return Text(f"convert_{name}({text.code})", ATOM, target)
    return Text(f"({name}){text.at(UNARY)}", UNARY, target)


def saturate(text: Text, target: Type, helpers: Helpers | None) -> Text:
    """Float to integer: truncate toward zero and saturate; NaN gives 0. `convert_<T>_sat`
    alone is not enough: PoCL 3.0 returns INT_MIN, UINT_MAX, LONG_MIN or ULONG_MAX for NaN
    (and, once its work-group vectoriser is involved, SHRT_MIN for short), so NaN is replaced
    by zero first (`select` on `isnan`, whose mask matches the float's lanes)."""
    name, source = register_name(target), register_name(text.type)
    zero_code = zero(text.type).code
    if target.is_vector:
        zero_code = f"({source})({zero_code})"

    def body(value: str) -> str:
        if target.is_vector:
            return f"convert_{name}_sat(select({value}, {zero_code}, isnan({value})))"
        return f"convert_{name}_sat(isnan({value}) ? {zero_code} : {value})"

    if helpers is None:
        return Text(body(f"({text.code})"), ATOM, target)
    helper = f"tile_sat_{name}_{source}"
    lines = [
        f"// {source} to {name}: truncate toward zero, saturate, NaN gives 0",
        f"{name} {helper}({source} x) {{",
        f"  return {body('x')};",
        "}",
    ]
    helpers.use(helper, "\n".join(lines))
    return Text(f"{helper}({text.code})", ATOM, target)
