"""The table of Tile builtin functions (spec 9): names, argument counts and kinds.

`tile.lang.check` uses it to reject unknown names (E-NAME) and wrong argument counts (E-ARG)
before any shape is known; `tile.bind.binder` dispatches on `Builtin.kind` to type each call.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    ARITH = "arith"  # + - * /: operands promote, not both bool
    NEG = "neg"  # unary minus: not bool
    COMPARE = "compare"  # result bool, compared in the promoted type
    BITWISE = "bitwise"  # integer operands only
    BIT_NOT = "bit_not"
    COND = "cond"  # c ? a : b
    IDENT = "ident"
    FLOAT_MATH = "float_math"  # the promoted argument type must be a float type
    EXPANSION = "expansion"  # defined by an expansion into other calls (spec 9.1)
    CAST = "cast"  # as_float / as_int / as_uint / as_bool
    SPECIAL = "special"  # reshape, index, shape, gather, scatter, prng_*
    COMPILE_TIME = "compile_time"  # mod, broadcast, assert_*, tuple, element
    HELPER = "helper"  # frontend helpers lowered to other statements (spec 9.8)


@dataclass(frozen=True, slots=True)
class Builtin:
    name: str
    kind: Kind
    min_args: int
    max_args: int | None  # None: no upper limit

    def arity_text(self) -> str:
        if self.max_args == self.min_args:
            count = self.min_args
            return f"{count} argument{'s' if count != 1 else ''}"
        if self.max_args is None:
            return f"at least {self.min_args} argument{'s' if self.min_args != 1 else ''}"
        return f"{self.min_args} to {self.max_args} arguments"


def _table() -> dict[str, Builtin]:
    entries: list[Builtin] = []

    def add(kind: Kind, low: int, high: int | None, *names: str) -> None:
        entries.extend(Builtin(name, kind, low, high) for name in names)

    add(Kind.ARITH, 2, 2, "add", "sub", "mul", "div")
    add(Kind.NEG, 1, 1, "neg")
    add(Kind.COMPARE, 2, 2, "cmp_eq", "cmp_ne", "cmp_lt", "cmp_gt", "cmp_le", "cmp_ge")
    add(Kind.BITWISE, 2, 2, "bit_and", "bit_or", "bit_xor", "bit_left", "bit_right")
    add(Kind.BIT_NOT, 1, 1, "bit_not")
    add(Kind.COND, 3, 3, "cond")
    add(Kind.IDENT, 1, 1, "ident")
    add(Kind.FLOAT_MATH, 1, 1, "exp", "log", "sqrt", "tanh", "sin", "cos", "tan", "asin", "acos")
    add(Kind.FLOAT_MATH, 1, 1, "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "recip")
    add(Kind.FLOAT_MATH, 1, 1, "floor", "ceil", "round")
    add(Kind.FLOAT_MATH, 2, 2, "pow")
    add(Kind.EXPANSION, 1, 1, "abs", "relu", "sigmoid")
    add(Kind.EXPANSION, 2, 2, "max", "min")
    add(Kind.CAST, 2, 2, "as_float", "as_int", "as_uint")
    add(Kind.CAST, 1, 2, "as_bool")
    add(Kind.SPECIAL, 1, None, "reshape")
    add(Kind.SPECIAL, 2, 2, "index", "gather")
    add(Kind.SPECIAL, 1, 1, "shape", "prng_state", "prng_value")
    add(Kind.SPECIAL, 3, 3, "scatter")
    add(Kind.SPECIAL, 1, None, "prng_step")
    add(Kind.COMPILE_TIME, 2, 2, "mod", "element")
    add(Kind.COMPILE_TIME, 2, None, "broadcast")
    add(Kind.COMPILE_TIME, 1, None, "tuple")
    add(Kind.HELPER, 3, 3, "builtin_softmax", "builtin_logsoftmax", "builtin_binary_crossentropy")
    add(Kind.HELPER, 2, 2, "reverse_grad")
    add(Kind.HELPER, 1, None, "simple_reduce")
    # Extensions for automatic differentiation (tile.grad; docs/GRADIENTS.md).
    add(Kind.COMPILE_TIME, 2, 2, "dim")
    add(Kind.HELPER, 2, 2, "cotangent", "reshape_like")
    return {entry.name: entry for entry in entries}


BUILTINS: dict[str, Builtin] = _table()
ASSERT = Builtin("assert_", Kind.COMPILE_TIME, 1, 1)

# Names PlaidML uses internally; never callable (spec 9.9).
RESERVED = frozenset({"fconst", "iconst", "match", "quantize"})


def lookup(name: str) -> Builtin | None:
    """The builtin called `name`, or None. Every `assert_NAME` is a builtin (spec 9.7)."""
    if name.startswith("assert_") and len(name) > len("assert_"):
        return ASSERT
    if name in RESERVED:
        return None
    return BUILTINS.get(name)


def suggest(name: str) -> str | None:
    """The known name closest to a misspelt one, for 'did you mean' hints."""
    import difflib

    matches = difflib.get_close_matches(name.lower(), list(BUILTINS), n=1, cutoff=0.6)
    return matches[0] if matches else None
