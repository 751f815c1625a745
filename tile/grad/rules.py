"""The derivative of every differentiable elementwise operator and builtin (docs/GRADIENTS.md).

`RULES[fn](args, node, g)` gives, for a call `node = fn(args)` whose cotangent is `g`, the
cotangent of each argument it passes one to, as `(argument index, expression)` pairs. Every
expression is elementwise in `g`, the arguments and `node` itself (the forward value, computed
again), so it keeps the broadcast shape of `g`; `tile.grad.derive` sums it down to the
argument's shape (`cotangent(x, T)`). Builtins missing from the table (comparisons, bitwise
operators, rounding, integer conversions, `index`, `shape`, the random numbers) carry no
gradient; the special ones (`reshape`, `gather`, softmax, ...) are handled by `derive`.

Conventions where the derivative is not unique: `relu` and `abs` have derivative 0 at 0;
`max(a, b)` and `min(a, b)` follow their expansions (spec 9.1), so a tie passes the whole
gradient to the argument the expansion returns (`b` for `max(a, b)` only where `a < b`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tile.lang.syntax import Binary, BinaryOp, Call, Expr, FloatLit, Ternary, Unary, UnaryOp

Rule = Callable[[Sequence[Expr], Expr, Expr], list[tuple[int, Expr]]]


def lit(value: float) -> FloatLit:
    return FloatLit(float(value), repr(float(value)))


ZERO, ONE, TWO = lit(0.0), lit(1.0), lit(2.0)


def add(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.ADD, a, b)


def sub(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.SUB, a, b)


def mul(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.MUL, a, b)


def div(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.DIV, a, b)


def neg(a: Expr) -> Expr:
    return Unary(UnaryOp.NEG, a)


def less(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.LT, a, b)


def greater(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.GT, a, b)


def equal(a: Expr, b: Expr) -> Expr:
    return Binary(BinaryOp.EQ, a, b)


def select(c: Expr, a: Expr, b: Expr) -> Expr:
    return Ternary(c, a, b)


def call(fn: str, *args: Expr) -> Expr:
    return Call(fn, tuple(args))


def _square(x: Expr) -> Expr:
    return mul(x, x)


def _pow(args: Sequence[Expr], node: Expr, g: Expr) -> list[tuple[int, Expr]]:
    x, y = args
    base = mul(mul(g, y), call("pow", x, sub(y, ONE)))
    exponent = select(equal(x, ZERO), ZERO, mul(mul(g, node), call("log", mul(x, ONE))))
    return [(0, base), (1, exponent)]


def _unary(derivative: Callable[[Expr, Expr, Expr], Expr]) -> Rule:
    def rule(args: Sequence[Expr], node: Expr, g: Expr) -> list[tuple[int, Expr]]:
        return [(0, derivative(args[0], node, g))]

    return rule


def _binary(first: Callable[..., Expr], second: Callable[..., Expr]) -> Rule:
    def rule(args: Sequence[Expr], node: Expr, g: Expr) -> list[tuple[int, Expr]]:
        a, b = args
        return [(0, first(a, b, node, g)), (1, second(a, b, node, g))]

    return rule


RULES: dict[str, Rule] = {
    "ident": _unary(lambda x, n, g: g),
    "as_float": lambda args, node, g: [(0, g)],
    "neg": _unary(lambda x, n, g: neg(g)),
    "add": _binary(lambda a, b, n, g: g, lambda a, b, n, g: g),
    "sub": _binary(lambda a, b, n, g: g, lambda a, b, n, g: neg(g)),
    "mul": _binary(lambda a, b, n, g: mul(g, b), lambda a, b, n, g: mul(g, a)),
    "div": _binary(lambda a, b, n, g: div(g, b), lambda a, b, n, g: div(mul(neg(g), n), b)),
    "cond": lambda args, node, g: [
        (1, select(args[0], g, ZERO)),
        (2, select(args[0], ZERO, g)),
    ],
    "exp": _unary(lambda x, n, g: mul(g, n)),
    "log": _unary(lambda x, n, g: div(g, x)),
    "sqrt": _unary(lambda x, n, g: div(g, mul(TWO, n))),
    "tanh": _unary(lambda x, n, g: mul(g, sub(ONE, _square(n)))),
    "sin": _unary(lambda x, n, g: mul(g, call("cos", x))),
    "cos": _unary(lambda x, n, g: neg(mul(g, call("sin", x)))),
    "tan": _unary(lambda x, n, g: mul(g, add(ONE, _square(n)))),
    "asin": _unary(lambda x, n, g: div(g, call("sqrt", sub(ONE, _square(x))))),
    "acos": _unary(lambda x, n, g: neg(div(g, call("sqrt", sub(ONE, _square(x)))))),
    "atan": _unary(lambda x, n, g: div(g, add(ONE, _square(x)))),
    "sinh": _unary(lambda x, n, g: mul(g, call("cosh", x))),
    "cosh": _unary(lambda x, n, g: mul(g, call("sinh", x))),
    "asinh": _unary(lambda x, n, g: div(g, call("sqrt", add(_square(x), ONE)))),
    "acosh": _unary(lambda x, n, g: div(g, call("sqrt", sub(_square(x), ONE)))),
    "atanh": _unary(lambda x, n, g: div(g, sub(ONE, _square(x)))),
    "recip": _unary(lambda x, n, g: neg(mul(g, _square(n)))),
    "pow": _pow,
    "abs": _unary(lambda x, n, g: select(less(x, ZERO), neg(g), select(greater(x, ZERO), g, ZERO))),
    "relu": _unary(lambda x, n, g: select(greater(x, ZERO), g, ZERO)),
    "sigmoid": _unary(lambda x, n, g: mul(mul(g, n), sub(ONE, n))),
    "max": _binary(
        lambda a, b, n, g: select(less(a, b), ZERO, g),
        lambda a, b, n, g: select(less(a, b), g, ZERO),
    ),
    "min": _binary(
        lambda a, b, n, g: select(less(a, b), g, ZERO),
        lambda a, b, n, g: select(less(a, b), ZERO, g),
    ),
    "reverse_grad": lambda args, node, g: [(0, neg(mul(args[1], g)))],
    # -T log P - (1 - T) log(1 - P); the scale S does not change the value, so it takes no
    # part in the derivative either.
    "builtin_binary_crossentropy": lambda args, node, g: [
        (0, div(mul(g, sub(args[0], args[1])), mul(args[0], sub(ONE, args[0])))),
        (1, mul(g, sub(call("log", sub(ONE, args[0])), call("log", args[0])))),
    ],
}

# Calls whose value does not depend smoothly on any argument.
CONSTANT = frozenset(
    {
        "cmp_eq", "cmp_ne", "cmp_lt", "cmp_gt", "cmp_le", "cmp_ge",
        "bit_and", "bit_or", "bit_xor", "bit_left", "bit_right", "bit_not",
        "floor", "ceil", "round", "as_int", "as_uint", "as_bool",
        "index", "shape", "prng_step", "prng_value", "prng_state",
        "mod", "broadcast", "dim",
    }
)  # fmt: skip
