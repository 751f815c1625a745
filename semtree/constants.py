"""Constant evaluation for `semtree.simplify`: the reference interpreter's semantics
(design 4.4 rules 8 to 10) on single values, and the spelling of folded constants.

Values are one-element numpy arrays of the type's dtype (int64 for INDEX). A folded constant of
type T is written `Cast(T, literal)`, because a bare literal is weakly typed (rule 4) and would
take the type of its neighbours; `exact_literal` recognises the casts a bare literal may
replace.
"""

from __future__ import annotations

import numpy as np

from semtree.nodes import BinOp, Cast, Expr, FloatConst, IntConst, Limit, LimitConst
from semtree.types import DType, Type
from semtree.typing import is_literal, literal_type


def numpy_dtype(type_: Type) -> np.dtype:
    return np.dtype(np.int64) if type_.is_index else type_.dtype.numpy  # type: ignore[union-attr]


def literal_value(value: float, type_: Type) -> np.ndarray:
    if type_.is_float:
        with np.errstate(over="ignore"):  # 1e30 as f16 is inf
            return np.array([float(value)]).astype(numpy_dtype(type_))
    if type_.is_bool:
        return np.array([bool(value)])
    return np.array([int(value) % 2**64], np.uint64).astype(numpy_dtype(type_))


def convert(value: np.ndarray, source: Type, target: Type) -> np.ndarray:
    with np.errstate(all="ignore"):
        if target.is_bool:
            return np.asarray(value != 0)
        if source.is_float and not target.is_float:
            info = np.iinfo(numpy_dtype(target))
            real = float(np.trunc(value.astype(np.float64))[0])
            if real != real:
                return np.zeros(1, numpy_dtype(target))
            clipped = min(max(real, float(info.min)), float(int(info.max) + 1))
            whole = int(info.max) if clipped >= int(info.max) + 1 else int(clipped)
            return np.array([whole], numpy_dtype(target))
        return value.astype(numpy_dtype(target))


def fold_binary(op: BinOp, left: np.ndarray, right: np.ndarray, common: Type) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op in _COMPARE:
            return _COMPARE[op](left, right)
        if op.is_logical:
            truth = (left != 0, right != 0)
            return truth[0] & truth[1] if op is BinOp.LAND else truth[0] | truth[1]
        if op in _PLAIN:
            return _PLAIN[op](left, right)
        if op is BinOp.DIV and common.is_float:
            return np.divide(left, right)
        if op.is_shift:
            bits = 32 if common.is_index else left.dtype.itemsize * 8
            count = right & (bits - 1)
            if op is BinOp.SHR:
                return np.right_shift(left, count)
            if common.is_index:
                return np.left_shift(left, count)
            unsigned = np.dtype(f"uint{bits}")
            shifted = np.left_shift(left.astype(unsigned), count.astype(unsigned))
            return shifted.astype(left.dtype)
        a, b = int(left[0]), int(right[0])  # DIV, MOD: exact in Python, then wrapped
        if b == 0:
            return np.zeros(1, left.dtype)
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        result = quotient if op is BinOp.DIV else a - b * quotient
        return literal_value(result, common)


_COMPARE = {
    BinOp.LT: np.less,
    BinOp.LE: np.less_equal,
    BinOp.GT: np.greater,
    BinOp.GE: np.greater_equal,
    BinOp.EQ: np.equal,
    BinOp.NE: np.not_equal,
}
_PLAIN = {
    BinOp.ADD: np.add,
    BinOp.SUB: np.subtract,
    BinOp.MUL: np.multiply,
    BinOp.AND: np.bitwise_and,
    BinOp.OR: np.bitwise_or,
    BinOp.XOR: np.bitwise_xor,
}


def make_constant(value: np.ndarray, type_: Type) -> Expr:
    """A strongly typed constant: `Cast(type_, literal)` (a bool scalar: a LimitConst)."""
    if type_.is_bool and not type_.is_vector:
        return LimitConst(Limit.ONE if bool(value[0]) else Limit.ZERO, DType.BOOLEAN)
    if type_.is_float:
        return Cast(type_, FloatConst(float(value[0])))
    return Cast(type_, IntConst(int(value[0])))


def exact_literal(expr: Expr) -> IntConst | FloatConst | None:
    """The literal of `Cast(T, literal)` when the literal is exactly a value of T."""
    if not (isinstance(expr, Cast) and is_literal(expr.value) and expr.type.is_numeric):
        return None
    literal = expr.value
    assert isinstance(literal, IntConst | FloatConst)
    own = literal_type(literal, expr.type)
    if own.scalar() != expr.type.scalar() or expr.type.is_bool:
        return None
    back = literal_value(literal.value, own)[0]
    same = float(back) == literal.value or (back != back and literal.value != literal.value)
    return literal if same else None
