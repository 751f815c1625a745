"""Result types of builtin calls (spec 7.3, 9) and compile-time evaluation (spec 5.4, 7.6).

`call_type` is the one typing rule for elementwise calls, used by `tile.bind.binder` for tensors and
constants alike; `fold` evaluates a foldable call on constants with the arithmetic of the
result type (integers wrap, division truncates, floats round to their width), so a constant
holds exactly what the same operation on 0-D tensors would give.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from semtree.types import DType, promote
from tile.lang.builtins import Kind


class TypeRuleError(Exception):
    """A call's operand types break a rule of spec 7.3 / 9 (reported as E-TYPE)."""


class FoldError(Exception):
    """Compile-time evaluation failed; `code` is the spec error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Const:
    """A compile-time constant, its value already converted to its type."""

    value: int | float
    dtype: DType

    @staticmethod
    def of(value: int | float, dtype: DType) -> Const:
        return Const(convert(value, dtype), dtype)

    @property
    def is_integral(self) -> bool:
        """Usable where an integer constant is required (integer or bool type)."""
        return not self.dtype.is_float


def literal_int_type(value: int) -> DType:
    """Spec 5.3: an integer literal is i32 when it fits, otherwise i64."""
    return DType.INT32 if -(2**31) <= value < 2**31 else DType.INT64


def convert(value: int | float, dtype: DType) -> int | float:
    """Spec 5.4 conversions of a Python number to `dtype`'s value set."""
    if dtype.is_bool:
        return 1 if value != 0 else 0  # NaN != 0, so NaN is true
    if dtype.is_float:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return float(dtype.numpy.type(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            return 0  # implementation-defined (spec 5.4); never undefined
        value = math.trunc(value)
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# ---- typing -----------------------------------------------------------------------------

_ARITH_VERB = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}


def call_type(fn: str, kind: Kind, dtypes: list[DType]) -> tuple[DType, DType]:
    """(result type, computation type) of an elementwise call; TypeRuleError if invalid."""
    match kind:
        case Kind.ARITH:
            if all(d.is_bool for d in dtypes):
                raise TypeRuleError(
                    f"cannot {_ARITH_VERB[fn]} two bool values; convert one first "
                    f"(as_int(X, 32) or X ? 1 : 0)"
                )
            result = promote(dtypes)
            return result, result
        case Kind.NEG:
            if dtypes[0].is_bool:
                raise TypeRuleError("cannot negate a bool value")
            return dtypes[0], dtypes[0]
        case Kind.COMPARE:
            return DType.BOOLEAN, promote(dtypes)
        case Kind.BITWISE | Kind.BIT_NOT:
            bad = [d for d in dtypes if not d.is_integer]
            if bad:
                raise TypeRuleError(
                    f"bitwise operators need integer operands, not {_types(dtypes)}"
                )
            result = promote(dtypes)
            return result, result
        case Kind.COND:
            result = promote(dtypes[1:])
            return result, result
        case Kind.IDENT:
            return dtypes[0], dtypes[0]
        case Kind.FLOAT_MATH:
            result = promote(dtypes)
            if not result.is_float:
                raise TypeRuleError(
                    f"'{fn}' needs a float argument, not {_types(dtypes)}; "
                    f"convert first with as_float(X, 32)"
                )
            return result, result
        case _:
            raise ValueError(f"call_type does not type {kind} builtins ({fn})")


def _types(dtypes: list[DType]) -> str:
    return " and ".join(d.short for d in dtypes)


# ---- folding ------------------------------------------------------------------------------

FOLDABLE = frozenset(
    {
        "add", "sub", "mul", "div", "neg", "ident", "cond", "floor", "ceil",
        "cmp_eq", "cmp_ne", "cmp_lt", "cmp_gt", "cmp_le", "cmp_ge",
        "bit_and", "bit_or", "bit_xor", "bit_left", "bit_right", "bit_not",
    }
)  # fmt: skip


def fold(fn: str, kind: Kind, args: list[Const]) -> Const:
    """Evaluate a call in FOLDABLE on constants (spec 7.6)."""
    result, compute = call_type(fn, kind, [a.dtype for a in args])
    if fn == "cond":
        chosen = args[1] if args[0].value != 0 else args[2]
        return Const.of(chosen.value, result)
    values = [convert(a.value, compute) for a in args]
    value = _fold_float(fn, values) if compute.is_float else _fold_int(fn, values, compute)
    return Const.of(value, result)


def _fold_float(fn: str, values: list[int | float]) -> int | float:
    with np.errstate(all="ignore"):
        x = np.float64(values[0])
        y = np.float64(values[1]) if len(values) > 1 else np.float64(0)
        match fn:
            case "add":
                return float(x + y)
            case "sub":
                return float(x - y)
            case "mul":
                return float(x * y)
            case "div":
                return float(x / y)
            case "neg":
                return float(-x)
            case "ident":
                return float(x)
            case "floor":
                return float(np.floor(x))
            case "ceil":
                return float(np.ceil(x))
            case "cmp_eq" | "cmp_ne" | "cmp_lt" | "cmp_gt" | "cmp_le" | "cmp_ge":
                return int(_compare(fn, x, y))
    raise ValueError(f"cannot fold {fn} on floats")


def _fold_int(fn: str, values: list[int | float], dtype: DType) -> int:
    x = int(values[0])
    y = int(values[1]) if len(values) > 1 else 0
    match fn:
        case "add":
            return x + y
        case "sub":
            return x - y
        case "mul":
            return x * y
        case "div":
            if y == 0:
                raise FoldError("E-CONST", "integer division by zero in a constant expression")
            quotient = abs(x) // abs(y)
            return quotient if (x < 0) == (y < 0) else -quotient
        case "neg":
            return -x
        case "ident":
            return x
        case "cmp_eq" | "cmp_ne" | "cmp_lt" | "cmp_gt" | "cmp_le" | "cmp_ge":
            return int(_compare(fn, x, y))
        case "bit_and":
            return x & y
        case "bit_or":
            return x | y
        case "bit_xor":
            return x ^ y
        case "bit_not":
            return ~x
        case "bit_left":
            return x << (y % dtype.bits)
        case "bit_right":
            return x >> (y % dtype.bits)  # arithmetic for signed, logical for unsigned values
    raise ValueError(f"cannot fold {fn} on integers")


def _compare(fn: str, x: object, y: object) -> bool:
    match fn:
        case "cmp_eq":
            return bool(x == y)
        case "cmp_ne":
            return bool(x != y)
        case "cmp_lt":
            return bool(x < y)  # type: ignore[operator]
        case "cmp_gt":
            return bool(x > y)  # type: ignore[operator]
        case "cmp_le":
            return bool(x <= y)  # type: ignore[operator]
        case _:
            return bool(x >= y)  # type: ignore[operator]


def fold_mod(a: Const, b: Const) -> Const:
    """`mod(a, b)`: remainder of truncating division, sign of the dividend (spec 9.7)."""
    if b.value == 0:
        raise FoldError("E-CONST", "mod by zero in a constant expression")
    x, y = int(a.value), int(b.value)
    remainder = abs(x) % abs(y)
    return Const.of(-remainder if x < 0 else remainder, promote(a.dtype, b.dtype))
