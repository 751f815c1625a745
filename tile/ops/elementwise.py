"""Elementwise ops: arithmetic, comparisons, math builtins and activations, with NumPy
broadcasting (Tile's own). The arithmetic and comparisons are the Python operators of `Value`
(tile.ops.graph), which write them."""

from __future__ import annotations

from tile.ops.graph import Operand, OpsError, Value, apply, as_value


def add(a: Operand, b: Operand) -> Value:
    return as_value(a) + b


def subtract(a: Operand, b: Operand) -> Value:
    return as_value(a) - b


def multiply(a: Operand, b: Operand) -> Value:
    return as_value(a) * b


def divide(a: Operand, b: Operand) -> Value:
    return as_value(a) / b


def negative(a: Operand) -> Value:
    return -as_value(a)


def power(a: Operand, b: Operand) -> Value:
    return as_value(a) ** b


def maximum(a: Operand, b: Operand) -> Value:
    return apply("max({0}, {1})", a, b)


def minimum(a: Operand, b: Operand) -> Value:
    return apply("min({0}, {1})", a, b)


def where(condition: Operand, a: Operand, b: Operand) -> Value:
    return apply("({0} ? {1} : {2})", condition, a, b)


def less(a: Operand, b: Operand) -> Value:
    return as_value(a) < b


def less_equal(a: Operand, b: Operand) -> Value:
    return as_value(a) <= b


def greater(a: Operand, b: Operand) -> Value:
    return as_value(a) > b


def greater_equal(a: Operand, b: Operand) -> Value:
    return as_value(a) >= b


def equal(a: Operand, b: Operand) -> Value:
    return as_value(a) == b


def not_equal(a: Operand, b: Operand) -> Value:
    return as_value(a) != b


def _unary(builtin: str, doc: str):  # type: ignore[no-untyped-def]
    def op(x: Operand) -> Value:
        return apply(f"{builtin}({{0}})", x)

    op.__name__ = op.__qualname__ = builtin
    op.__doc__ = doc
    return op


exp = _unary("exp", "e to the power of x, elementwise.")
log = _unary("log", "The natural logarithm, elementwise.")
sqrt = _unary("sqrt", "The square root, elementwise.")
tanh = _unary("tanh", "The hyperbolic tangent, elementwise.")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)), elementwise.")
relu = _unary("relu", "max(x, 0), elementwise (0 for x < 0).")
abs = _unary("abs", "|x|, elementwise.")


def cast(x: Operand, dtype: str) -> Value:
    """x converted to `dtype` ("float32", "int8", "bool", ...)."""
    kinds = {"float": "as_float", "int": "as_int", "uint": "as_uint"}
    if dtype == "bool":
        return apply("as_bool({0})", x)
    for prefix, builtin in kinds.items():
        width = dtype[len(prefix) :]
        if dtype.startswith(prefix) and width.isdigit():
            return apply(f"{builtin}({{0}}, {width})", x)
    raise OpsError(f"unknown element type {dtype!r}")


def gelu(x: Operand) -> Value:
    """The Gaussian error linear unit in its tanh form (PyTorch's `approximate="tanh"`):
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return apply(
        "0.5 * {0} * (1.0 + tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))", x
    )
