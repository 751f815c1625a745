"""Stage 1: the abstract syntax tree of a Tile function, with source positions.

Produced by `tile.lang.parse`, checked by `tile.lang.check`, consumed by `tile.bind.binder`. Nodes
are frozen dataclasses; children live in tuples; the `span` of a node (line and column of the token
that names it: the operator of a binary expression, the name of a call or tensor) takes no part in
equality. `str()` of a node prints Tile text that parses back to an equal node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True, slots=True)
class Span:
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


# ---- index polynomials (the language of tensor subscripts, spec 8.2) ----------------------


class PolyOp(Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"


class PolyExpr:
    """Base of index-polynomial nodes."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class PIndex(PolyExpr):
    """A lower-case index variable: `k`, `x'`."""

    name: str
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class PSize(PolyExpr):
    """An upper-case integer constant: a dimension size, named constant or constant input."""

    name: str
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class PConst(PolyExpr):
    value: int
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class PBinary(PolyExpr):
    op: PolyOp
    lhs: PolyExpr
    rhs: PolyExpr
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"({self.lhs} {self.op.value} {self.rhs})"


@dataclass(frozen=True, slots=True)
class PNeg(PolyExpr):
    operand: PolyExpr
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"(-{self.operand})"


# ---- value expressions (elementwise code, spec 7) -------------------------------------------


class UnaryOp(Enum):
    NEG = "-"
    BIT_NOT = "~"


class BinaryOp(Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    EQ = "=="
    NE = "!="
    LT = "<"
    GT = ">"
    LE = "<="
    GE = ">="
    BIT_AND = "&"
    BIT_OR = "|"
    BIT_XOR = "^"
    SHL = "<<"
    SHR = ">>"


# Appendix A of the spec: the function each operator is a call of.
UNARY_FUNCTION = {UnaryOp.NEG: "neg", UnaryOp.BIT_NOT: "bit_not"}
BINARY_FUNCTION = {
    BinaryOp.ADD: "add",
    BinaryOp.SUB: "sub",
    BinaryOp.MUL: "mul",
    BinaryOp.DIV: "div",
    BinaryOp.EQ: "cmp_eq",
    BinaryOp.NE: "cmp_ne",
    BinaryOp.LT: "cmp_lt",
    BinaryOp.GT: "cmp_gt",
    BinaryOp.LE: "cmp_le",
    BinaryOp.GE: "cmp_ge",
    BinaryOp.BIT_AND: "bit_and",
    BinaryOp.BIT_OR: "bit_or",
    BinaryOp.BIT_XOR: "bit_xor",
    BinaryOp.SHL: "bit_left",
    BinaryOp.SHR: "bit_right",
}


class Expr:
    """Base of value-expression nodes."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class IntLit(Expr):
    value: int
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class FloatLit(Expr):
    value: float
    text: str = field(default="", compare=False)  # the spelling in the source
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.text or repr(self.value)


@dataclass(frozen=True, slots=True)
class Name(Expr):
    """An upper-case name: tensor, dimension size, named constant or constant input."""

    name: str
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Call(Expr):
    fn: str
    args: tuple[Expr, ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.fn}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: UnaryOp
    operand: Expr
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"({self.op.value}{self.operand})"


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: BinaryOp
    lhs: Expr
    rhs: Expr
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"({self.lhs} {self.op.value} {self.rhs})"


@dataclass(frozen=True, slots=True)
class Ternary(Expr):
    cond: Expr
    then: Expr
    other: Expr
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"({self.cond} ? {self.then} : {self.other})"


# ---- contractions (spec 8) --------------------------------------------------------------------


class AggOp(Enum):
    SUM = "+"
    PROD = "*"
    MAX = ">"
    MIN = "<"
    ASSIGN = "="


class CombOp(Enum):
    NONE = ""  # one operand
    MUL = "*"
    ADD = "+"
    EQ = "=="
    COND = "?"  # A == B ? C


@dataclass(frozen=True, slots=True)
class TensorRef:
    """An operand access `X[p1, ..., pn]`; the span is the tensor name's."""

    name: str
    indices: tuple[PolyExpr, ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.name}[{', '.join(_poly_text(p) for p in self.indices)}]"


@dataclass(frozen=True, slots=True)
class OutSpec:
    """The output `O[p1, ..., pr : S1, ..., Sr]`; `sizes` is None when there is no ':'."""

    name: str
    indices: tuple[PolyExpr, ...]
    sizes: tuple[Expr, ...] | None
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        idx = ", ".join(_poly_text(p) for p in self.indices)
        if self.sizes is None:
            return f"{self.name}[{idx}]"
        sizes = ", ".join(_expr_text(s) for s in self.sizes)
        return f"{self.name}[{idx}: {sizes}]" if idx else f"{self.name}[:{sizes}]"


@dataclass(frozen=True, slots=True)
class Constraint:
    """`, poly < bound`, meaning 0 <= poly < bound; the span is the first token of `poly`."""

    poly: PolyExpr
    bound: Expr
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{_poly_text(self.poly)} < {_expr_text(self.bound)}"


# ---- statements and the function ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attribute:
    """`[[pid(Convolution, Pool)]]`: no semantic effect (spec 3.4)."""

    name: str
    args: tuple[str, ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        args = f"({', '.join(self.args)})" if self.args else ""
        return f"[[{self.name}{args}]]"


@dataclass(frozen=True, slots=True)
class Assign:
    """`O = expr;` (the span is the target name's)."""

    target: str
    value: Expr
    attrs: tuple[Attribute, ...] = ()
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{_attrs_text(self.attrs)}{self.target} = {_expr_text(self.value)};"


@dataclass(frozen=True, slots=True)
class ContractionStmt:
    out: OutSpec
    agg: AggOp
    comb: CombOp
    operands: tuple[TensorRef, ...]  # 1, 2 or 3
    constraints: tuple[Constraint, ...] = ()
    default: Name | None = None
    no_defract: bool = False
    attrs: tuple[Attribute, ...] = ()
    span: Span | None = field(default=None, compare=False, repr=False)  # the output name
    # the aggregation operator
    agg_span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def target(self) -> str:
        return self.out.name

    def __str__(self) -> str:
        text = contraction_text(
            self.agg,
            self.comb,
            [str(o) for o in self.operands],
            [str(c) for c in self.constraints],
            self.default.name if self.default is not None else None,
            self.no_defract,
        )
        return f"{_attrs_text(self.attrs)}{self.out} = {text};"


def contraction_text(
    agg: AggOp,
    comb: CombOp,
    operands: list[str],
    constraints: list[str],
    default: str | None,
    no_defract: bool,
) -> str:
    """`agg(operands), constraints default D no_defract` as Tile writes it."""
    match comb:
        case CombOp.NONE:
            body = operands[0]
        case CombOp.COND:
            body = f"{operands[0]} == {operands[1]} ? {operands[2]}"
        case _:
            body = f" {comb.value} ".join(operands)
    text = f"{agg.value}({body})"
    for constraint in constraints:
        text += f", {constraint}"
    if default is not None:
        text += f" default {default}"
    if no_defract:
        text += " no_defract"
    return text


Statement = Assign | ContractionStmt


@dataclass(frozen=True, slots=True)
class InputDecl:
    """`A[M, N]` (dims), `A[]` (dims == ()), or `A` (dims is None: rank from the binding)."""

    name: str
    dims: tuple[Name, ...] | None
    span: Span | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        if self.dims is None:
            return self.name
        return f"{self.name}[{', '.join(d.name for d in self.dims)}]"


@dataclass(frozen=True, slots=True)
class FunctionDef:
    inputs: tuple[InputDecl, ...]
    outputs: tuple[Name, ...]
    body: tuple[Statement, ...]

    def __str__(self) -> str:
        head = (
            f"function ({', '.join(str(i) for i in self.inputs)}) -> "
            f"({', '.join(o.name for o in self.outputs)}) {{"
        )
        return "\n".join([head, *(f"  {s}" for s in self.body), "}"])


def _strip(text: str) -> str:
    """Drop the one pair of parentheses every compound node prints around itself."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for pos, char in enumerate(text):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and pos < len(text) - 1:
                return text
        return text[1:-1]
    return text


def source_text(node: Expr | PolyExpr) -> str:
    """Tile text of an expression or polynomial without redundant outer parentheses."""
    return _strip(str(node))


_poly_text = _expr_text = source_text


def _attrs_text(attrs: tuple[Attribute, ...]) -> str:
    return "".join(f"{a} " for a in attrs)
