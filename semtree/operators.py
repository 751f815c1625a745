"""Operators and closed vocabularies of the semtree (design 4.2).

Operator enums have their C spellings as values, so printers emit `op.value`. `Builtin` is
closed: a new member is added here, then in both backends and the conformance tests, in one
change. `semtree.nodes` re-exports every name of this module.
"""

from __future__ import annotations

from enum import Enum


class UnOp(Enum):
    NEG = "-"
    BIT_NOT = "~"
    NOT = "!"


class BinOp(Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"
    SHL = "<<"
    SHR = ">>"
    AND = "&"
    OR = "|"
    XOR = "^"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="
    LAND = "&&"
    LOR = "||"

    @property
    def is_arithmetic(self) -> bool:
        return self in _ARITHMETIC

    @property
    def is_bitwise(self) -> bool:
        """`& | ^ << >>`: integer (and, for `& | ^`, boolean) operands only."""
        return self in _BITWISE

    @property
    def is_shift(self) -> bool:
        return self in (BinOp.SHL, BinOp.SHR)

    @property
    def is_comparison(self) -> bool:
        return self in _COMPARISONS

    @property
    def is_logical(self) -> bool:
        return self in (BinOp.LAND, BinOp.LOR)


_ARITHMETIC = frozenset({BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.MOD})
_BITWISE = frozenset({BinOp.SHL, BinOp.SHR, BinOp.AND, BinOp.OR, BinOp.XOR})
_COMPARISONS = frozenset({BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE})


class Limit(Enum):
    """A constant that depends on the dtype: lowest finite, highest finite, 0 or 1."""

    MIN = "min"
    MAX = "max"
    ZERO = "zero"
    ONE = "one"


class IdKind(Enum):
    GLOBAL = "global"
    GROUP = "group"
    LOCAL = "local"


class Builtin(Enum):
    """The closed set of builtin functions; every backend implements every member."""

    ABS = "abs"
    ACOS = "acos"
    ASIN = "asin"
    ATAN = "atan"
    CEIL = "ceil"
    COS = "cos"
    COSH = "cosh"
    EXP = "exp"
    FLOOR = "floor"
    LOG = "log"
    MAD = "mad"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    RECIP = "recip"
    ROUND = "round"
    SIN = "sin"
    SINH = "sinh"
    SQRT = "sqrt"
    TAN = "tan"
    TANH = "tanh"

    @property
    def arity(self) -> int:
        return _ARITY.get(self, 1)

    @property
    def float_only(self) -> bool:
        """False for ABS, MAX, MIN and MAD, which also accept integers."""
        return self not in (Builtin.ABS, Builtin.MAX, Builtin.MIN, Builtin.MAD)


_ARITY = {Builtin.MAD: 3, Builtin.MAX: 2, Builtin.MIN: 2, Builtin.POW: 2}
