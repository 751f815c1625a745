"""Random elementwise Tile expressions and their meaning in numpy (spec 5, 7, 9.1, 9.3, 9.4).

`expressions()` draws a Tile function `O = <expression>` over up to four tensors of mixed
element types whose shapes broadcast together (spec 7.2), plus literals. `Evaluator` computes
the same expression directly from the specification: every operation is evaluated on numpy
arrays holding values of its exact Tile type (floats computed in float64 and rounded to the
result type, which is exact IEEE rounding for + - * / at every width; integers wrap; integer
division truncates with x / 0 = 0; shift counts are taken modulo the width). Conversions
whose result the specification leaves implementation-defined (a float out of the target
integer range, NaN or an infinity to an integer) mark those elements undefined, and the
mark propagates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from hypothesis import strategies as st

from semtree.types import DType, promote

if TYPE_CHECKING:
    from collections.abc import Callable

FLOATS = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)
INTEGERS = (
    DType.INT8,
    DType.UINT8,
    DType.INT16,
    DType.UINT16,
    DType.INT32,
    DType.UINT32,
    DType.INT64,
    DType.UINT64,
)
ALL = (DType.BOOLEAN, *INTEGERS, *FLOATS)
MATH = ("exp", "log", "sqrt", "tanh", "sin", "cos", "atan", "sinh")


@dataclass
class Value:
    """An intermediate: values of `dtype` and a mask of the defined elements."""

    data: np.ndarray
    dtype: DType
    defined: np.ndarray = field(default_factory=lambda: np.array(True))


@dataclass(frozen=True)
class Node:
    text: str
    evaluate: Callable[[Evaluator], Value]
    dtype: DType
    has_tensor: bool  # False: a compile-time constant, which binding folds (spec 7.6)


class Evaluator:
    def __init__(self, inputs: dict[str, np.ndarray]) -> None:
        self.inputs = inputs


# ---- spec semantics on numpy arrays ------------------------------------------------------------


def convert(value: Value, target: DType) -> Value:
    """Spec 5.4."""
    data, source = value.data, value.dtype
    defined = value.defined
    with np.errstate(all="ignore"):
        if source is target:
            return value
        if target.is_bool:
            return Value(np.asarray(data != 0), target, defined)
        if source.is_float and target.is_integer:
            whole = np.trunc(data.astype(np.float64))
            # The range as exact powers of two: int(info.max) would round up to 2^63 in float.
            low = -(2.0 ** (target.bits - 1)) if target.is_signed else 0.0
            high = 2.0 ** (target.bits - 1) if target.is_signed else 2.0**target.bits
            inside = np.isfinite(whole) & (whole >= low) & (whole < high)
            safe = np.where(inside, whole, 0)
            if target is DType.UINT64:
                converted = safe.astype(np.uint64)
            else:
                converted = safe.astype(np.int64).astype(target.numpy)
            return Value(converted, target, defined & inside)
        return Value(data.astype(target.numpy), target, defined)


def _round(data: np.ndarray, dtype: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(data).astype(dtype.numpy)


def arithmetic(op: str, left: Value, right: Value, dtype: DType) -> Value:
    a, b = convert(left, dtype), convert(right, dtype)
    defined = a.defined & b.defined
    with np.errstate(all="ignore"):
        if dtype.is_float:
            x, y = a.data.astype(np.float64), b.data.astype(np.float64)
            result = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[op]
            return Value(_round(result, dtype), dtype, defined)
        x, y = a.data, b.data
        match op:
            case "add":
                result = x + y
            case "sub":
                result = x - y
            case "mul":
                result = x * y
            case "div":
                result = _divide(x, y, dtype)
            case "bit_and":
                result = x & y
            case "bit_or":
                result = x | y
            case "bit_xor":
                result = x ^ y
            case "bit_left" | "bit_right":
                count = (y & (dtype.bits - 1)).astype(dtype.numpy)
                if op == "bit_left":
                    unsigned = np.dtype(f"uint{dtype.bits}")
                    shifted = np.left_shift(x.astype(unsigned), count.astype(unsigned))
                    result = shifted.astype(dtype.numpy)
                else:
                    result = np.right_shift(x, count)
            case _:
                raise AssertionError(op)
        return Value(np.asarray(result).astype(dtype.numpy), dtype, defined)


def _divide(x: np.ndarray, y: np.ndarray, dtype: DType) -> np.ndarray:
    """Truncating integer division; x / 0 = 0, MIN / -1 = MIN (spec 7.4)."""
    xs, ys = np.broadcast_arrays(x, y)
    bits = dtype.bits
    out = []
    for p, q in zip(xs.flat, ys.flat, strict=True):
        p, q = int(p), int(q)
        quotient = 0 if q == 0 else (abs(p) // abs(q)) * (1 if (p < 0) == (q < 0) else -1)
        quotient %= 2**bits
        if dtype.is_signed and quotient >= 2 ** (bits - 1):
            quotient -= 2**bits
        out.append(quotient)
    return np.array(out, dtype=dtype.numpy).reshape(xs.shape)


def compare(op: str, left: Value, right: Value) -> Value:
    common = promote(left.dtype, right.dtype)
    a, b = convert(left, common), convert(right, common)
    function = {
        "cmp_eq": np.equal,
        "cmp_ne": np.not_equal,
        "cmp_lt": np.less,
        "cmp_gt": np.greater,
        "cmp_le": np.less_equal,
        "cmp_ge": np.greater_equal,
    }[op]
    with np.errstate(all="ignore"):
        return Value(np.asarray(function(a.data, b.data)), DType.BOOLEAN, a.defined & b.defined)


def select(condition: Value, then: Value, other: Value) -> Value:
    dtype = promote(then.dtype, other.dtype)
    truth = convert(condition, DType.BOOLEAN)
    a, b = convert(then, dtype), convert(other, dtype)
    data = np.where(truth.data, a.data, b.data).astype(dtype.numpy)
    defined = truth.defined & np.where(truth.data, a.defined, b.defined)
    return Value(data, dtype, defined)


def negate(value: Value) -> Value:
    with np.errstate(all="ignore"):
        if value.dtype.is_float:
            return Value(
                _round(-value.data.astype(np.float64), value.dtype), value.dtype, value.defined
            )
        return Value(np.negative(value.data).astype(value.dtype.numpy), value.dtype, value.defined)


def math_function(name: str, value: Value) -> Value:
    x = value.data.astype(np.float64)
    with np.errstate(all="ignore"):
        match name:
            case "floor":
                result = np.floor(x)
            case "ceil":
                result = np.ceil(x)
            case "round":
                # halves away from zero, keeping the sign (of -0.0 too: C's round)
                result = np.copysign(np.floor(np.abs(x) + 0.5), x)
            case "atan":
                result = np.arctan(x)
            case _:
                result = getattr(np, name)(x)
    return Value(_round(result, value.dtype), value.dtype, value.defined)


# ---- the strategy ------------------------------------------------------------------------------


def literal(value: int | float) -> Node:
    dtype = DType.FLOAT32 if isinstance(value, float) else DType.INT32
    text = repr(value) if isinstance(value, float) else str(value)
    if value < 0:
        text = f"(-{text[1:]})"

    def evaluate(_: Evaluator) -> Value:
        return Value(np.asarray(value, dtype=dtype.numpy), dtype)

    return Node(text, evaluate, dtype, False)


def tensor(name: str, dtype: DType) -> Node:
    def evaluate(evaluator: Evaluator) -> Value:
        return Value(np.asarray(evaluator.inputs[name]), dtype)

    return Node(name, evaluate, dtype, True)


def _binary(fn: str, left: Node, right: Node) -> Node:
    if fn.startswith("cmp_"):

        def evaluate(e: Evaluator) -> Value:
            return compare(fn, left.evaluate(e), right.evaluate(e))

        dtype = DType.BOOLEAN
    else:
        dtype = promote(left.dtype, right.dtype)

        def evaluate(e: Evaluator) -> Value:
            return arithmetic(fn, left.evaluate(e), right.evaluate(e), dtype)

    return Node(
        f"{fn}({left.text}, {right.text})", evaluate, dtype, left.has_tensor or right.has_tensor
    )


def _expansion(fn: str, args: list[Node]) -> Node:
    """abs, max, min, relu by their definitions (spec 9.1)."""
    zero_int, zero_float = literal(0), literal(0.0)
    match fn:
        case "abs":
            (x,) = args
            less = _binary("cmp_lt", x, zero_int)
            neg = _unary("neg", x)
            return _cond(less, neg, x, f"abs({x.text})")
        case "relu":
            (x,) = args
            return _cond(_binary("cmp_lt", x, zero_float), zero_float, x, f"relu({x.text})")
        case _:
            a, b = args
            less = _binary("cmp_lt", a, b)
            pair = (b, a) if fn == "max" else (a, b)
            return _cond(less, *pair, f"{fn}({a.text}, {b.text})")


def _cond(condition: Node, then: Node, other: Node, text: str | None = None) -> Node:
    dtype = promote(then.dtype, other.dtype)
    if not condition.has_tensor:
        # A constant condition keeps only the selected branch (spec 7.4), with its shape.
        truth = bool(convert(condition.evaluate(Evaluator({})), DType.BOOLEAN).data)
        chosen = then if truth else other

        def pick(e: Evaluator) -> Value:
            return convert(chosen.evaluate(e), dtype)

        text = text or f"({condition.text} ? {then.text} : {other.text})"
        return Node(text, pick, dtype, chosen.has_tensor)

    def evaluate(e: Evaluator) -> Value:
        return select(condition.evaluate(e), then.evaluate(e), other.evaluate(e))

    has = condition.has_tensor or then.has_tensor or other.has_tensor
    return Node(text or f"({condition.text} ? {then.text} : {other.text})", evaluate, dtype, has)


def _unary(fn: str, x: Node) -> Node:
    match fn:
        case "neg":
            return Node(f"(-{x.text})", lambda e: negate(x.evaluate(e)), x.dtype, x.has_tensor)
        case "bit_not":

            def evaluate(e: Evaluator) -> Value:
                value = x.evaluate(e)
                return Value(np.invert(value.data), value.dtype, value.defined)

            return Node(f"(~{x.text})", evaluate, x.dtype, x.has_tensor)
        case _:
            folds = fn in ("floor", "ceil")  # the only math functions that fold (spec 7.6)
            return Node(
                f"{fn}({x.text})",
                lambda e: math_function(fn, x.evaluate(e)),
                x.dtype,
                x.has_tensor or not folds,
            )


_CASTS = {
    DType.FLOAT16: ("as_float", 16),
    DType.FLOAT32: ("as_float", 32),
    DType.FLOAT64: ("as_float", 64),
    DType.INT8: ("as_int", 8),
    DType.INT16: ("as_int", 16),
    DType.INT32: ("as_int", 32),
    DType.INT64: ("as_int", 64),
    DType.UINT8: ("as_uint", 8),
    DType.UINT16: ("as_uint", 16),
    DType.UINT32: ("as_uint", 32),
    DType.UINT64: ("as_uint", 64),
}


def _cast(x: Node, target: DType) -> Node:
    if target.is_bool:
        text = f"as_bool({x.text})"
    else:
        fn, width = _CASTS[target]
        text = f"{fn}({x.text}, {width})"
    # Conversions never fold (spec 7.6): even of a constant they give a 0-D tensor.
    return Node(text, lambda e: convert(x.evaluate(e), target), target, True)


@st.composite
def _node(draw: st.DrawFn, leaves: list[Node], depth: int) -> Node:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.integers(0, 4)) == 0:
            if draw(st.booleans()):
                return literal(draw(st.integers(-3, 3)))
            return literal(draw(st.sampled_from([0.5, -1.5, 2.0, 0.25])))
        return draw(st.sampled_from(leaves))
    kind = draw(
        st.sampled_from(["arith", "arith", "compare", "cond", "unary", "bits", "cast", "expand"])
    )
    first = draw(_node(leaves, depth - 1))
    match kind:
        case "arith":
            second = draw(_node(leaves, depth - 1))
            if first.dtype.is_bool and second.dtype.is_bool:
                second = _cast(second, DType.INT8)
            return _binary(draw(st.sampled_from(["add", "sub", "mul", "div"])), first, second)
        case "compare":
            second = draw(_node(leaves, depth - 1))
            fn = draw(st.sampled_from(["cmp_eq", "cmp_ne", "cmp_lt", "cmp_gt", "cmp_le", "cmp_ge"]))
            return _binary(fn, first, second)
        case "cond":
            return _cond(first, draw(_node(leaves, depth - 1)), draw(_node(leaves, depth - 1)))
        case "unary":
            if first.dtype.is_bool:
                return _cast(first, DType.INT16)
            if first.dtype.is_float:
                return _unary(draw(st.sampled_from(["neg", "floor", "ceil", "round"])), first)
            return _unary(draw(st.sampled_from(["neg", "bit_not"])), first)
        case "bits":
            second = draw(_node(leaves, depth - 1))
            if not first.dtype.is_integer:
                first = _cast(first, draw(st.sampled_from(INTEGERS)))
            if not second.dtype.is_integer:
                second = _cast(second, draw(st.sampled_from(INTEGERS)))
            fn = draw(st.sampled_from(["bit_and", "bit_or", "bit_xor", "bit_left", "bit_right"]))
            return _binary(fn, first, second)
        case "cast":
            return _cast(first, draw(st.sampled_from(ALL)))
        case _:
            fn = draw(st.sampled_from(["abs", "max", "min", "relu"]))
            if fn in ("abs", "relu"):
                if first.dtype.is_bool:
                    first = _cast(first, DType.INT32)
                return _expansion(fn, [first])
            second = draw(_node(leaves, depth - 1))
            return _expansion(fn, [first, second])


def _values(draw: st.DrawFn, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    if dtype.is_bool:
        items: list[object] = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    elif dtype.is_float:
        specials = [0.0, -0.0, float("nan"), float("inf"), float("-inf")]
        ordinary = st.integers(-12, 12).map(lambda k: k / 4)
        element = st.one_of(ordinary, ordinary, ordinary, st.sampled_from(specials))
        items = draw(st.lists(element, min_size=size, max_size=size))
    else:
        info = np.iinfo(dtype.numpy)
        extremes = st.sampled_from([int(info.min), int(info.max)])
        small = st.integers(max(int(info.min), -6), min(int(info.max), 9))
        items = draw(
            st.lists(st.one_of(small, small, small, extremes), min_size=size, max_size=size)
        )
    return np.array(items, dtype=dtype.numpy).reshape(shape)


@dataclass(frozen=True)
class ExpressionCase:
    source: str
    inputs: dict[str, np.ndarray]
    node: Node


@st.composite
def expressions(draw: st.DrawFn, *, math: bool = False) -> ExpressionCase:
    rank = draw(st.integers(0, 3))
    base = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    leaves = []
    inputs = {}
    for index in range(draw(st.integers(1, 4))):
        name = f"X{index}"
        length = draw(st.integers(0, rank))
        dims = tuple(d if draw(st.integers(0, 3)) else 1 for d in base[rank - length :])
        if not dims:
            dims = (1,)  # 0-d arrays bind as constants; keep tensors tensors
        dtype = draw(st.sampled_from(FLOATS if math else ALL))
        inputs[name] = _values(draw, dtype, dims)
        leaves.append(tensor(name, dtype))
    node = draw(_node(leaves, 3))
    if math and not node.has_tensor:
        node = _binary("add", node, leaves[0])
    if math:
        if not node.dtype.is_float:
            node = _cast(node, draw(st.sampled_from(FLOATS)))
        node = _unary(draw(st.sampled_from(MATH)), node)
    if not node.has_tensor:
        node = _binary("add", node, leaves[0])
    header = ", ".join(inputs)
    source = f"function ({header}) -> (O) {{ O = {node.text}; }}"
    return ExpressionCase(source, inputs, node)
