"""Semtree nodes: the C-like kernel IR that the generator writes and every backend reads.

A kernel body is a `Function` of statements (`Stmt`) over expressions (`Expr`) and lvalues
(`LValue`), all frozen slotted dataclasses compared structurally (ARCHITECTURE 4.2). Passes
never mutate a tree: they dispatch with `match` on the node classes, finish with
`case _: raise UnsupportedNode(node)`, and rebuild with `rewrite()`. `walk()` visits every node.

Every node takes an optional keyword-only `span`: text naming the Tile statement it came from.
It is excluded from equality and hashing; printers may show it as a comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import TYPE_CHECKING

from semtree.types import DType, Type

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class SemtreeError(Exception):
    """Base class of errors raised by the semtree package."""


class UnsupportedNode(SemtreeError):  # noqa: N818 - the name ARCHITECTURE 4.2 gives it
    """A pass met a node class it does not handle."""

    def __init__(self, node: object, detail: str = "") -> None:
        self.node = node
        text = f"unsupported semtree node {type(node).__name__}"
        super().__init__(f"{text}: {detail}" if detail else text)


class SemtreeTypeError(SemtreeError, TypeError):
    """An expression or statement breaks the typing rules of ARCHITECTURE 4.4."""


# ---- operators and closed vocabularies --------------------------------------------------


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


# ---- names ----------------------------------------------------------------------------------

_RESERVED_WORDS = """
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while bool true false
kernel __kernel global __global local __local constant __constant private __private
read_only write_only half uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t
barrier select clamp mad fabs fmin fmax min max abs exp log sqrt pow tanh sin cos tan asin
acos atan sinh cosh floor ceil round recip native_exp native_log native_sqrt native_recip
get_global_id get_group_id get_local_id vload_half vstore_half INFINITY NAN
"""  # C keywords, then OpenCL C qualifiers, types and the functions our printers emit
_RESERVED = frozenset(_RESERVED_WORDS.split())
_VECTOR_TYPE = re.compile(
    r"(bool|char|uchar|short|ushort|int|uint|long|ulong|half|float|double)"
    r"(2|3|4|8|16)"
)
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def c_identifier(name: str) -> str:
    """`name` made a valid C and OpenCL C identifier; idempotent.

    Characters outside `[A-Za-z0-9_]` become `_`, a leading digit gets a `_` prefix, and a
    reserved word (keyword, type or builtin function name) gets a `_` suffix. Distinct names
    may collide after sanitising; generators pick names that do not.
    """
    text = _NOT_IDENTIFIER.sub("_", name) or "_"
    if text[0].isdigit():
        text = "_" + text
    if text in _RESERVED or _VECTOR_TYPE.fullmatch(text) or text.startswith("convert_"):
        text += "_"
    return text


# ---- node classes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    span: str | None = field(default=None, compare=False, repr=False, kw_only=True)

    def __str__(self) -> str:
        from semtree.printer import CPrinter  # the printer imports this module

        return CPrinter().render(self)


@dataclass(frozen=True, slots=True)
class Expr(Node):
    """A side-effect-free expression with a type (ARCHITECTURE 4.4)."""


@dataclass(frozen=True, slots=True)
class LValue(Node):
    """Something that can be loaded or stored: a named variable or an element of one."""


@dataclass(frozen=True, slots=True)
class Stmt(Node):
    """A statement."""


def _expect(value: object, kind: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise SemtreeTypeError(f"{what} must be a {names}, got {value!r}")


@dataclass(frozen=True, slots=True)
class IntConst(Expr):
    """An integer literal; weakly typed (ARCHITECTURE 4.4 rule 4)."""

    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            try:
                object.__setattr__(self, "value", int(self.value))  # numpy integers
            except (TypeError, ValueError):
                raise SemtreeTypeError(f"not an integer: {self.value!r}") from None
        if not -(2**63) <= self.value < 2**64:
            raise SemtreeTypeError(f"integer literal {self.value} does not fit in 64 bits")


@dataclass(frozen=True, slots=True, eq=False)
class FloatConst(Expr):
    """A float literal; weakly typed (rule 4). Equality is by bit pattern, so NaN == NaN."""

    value: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", float(self.value))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not FloatConst:
            return NotImplemented
        return _float_key(self.value) == _float_key(other.value)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(_float_key(self.value))


def _float_key(value: float) -> str:
    return "nan" if value != value else value.hex()


@dataclass(frozen=True, slots=True)
class LimitConst(Expr):
    """The dtype's lowest or highest finite value, 0 or 1 (MIN of f32 is -FLT_MAX)."""

    which: Limit
    dtype: DType


@dataclass(frozen=True, slots=True)
class IndexExpr(Expr):
    """A work-item id: `get_<kind>_id(dim)`; its type is INDEX."""

    kind: IdKind
    dim: int

    def __post_init__(self) -> None:
        if self.dim not in (0, 1, 2):
            raise SemtreeTypeError(f"work-item dimension {self.dim} is not 0, 1 or 2")


@dataclass(frozen=True, slots=True)
class Lookup(LValue):
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", c_identifier(self.name))


@dataclass(frozen=True, slots=True)
class Subscript(LValue):
    """Element `offset` of a pointer or array (in units of its possibly-vector elements)."""

    base: LValue
    offset: Expr

    def __post_init__(self) -> None:
        _expect(self.base, LValue, "Subscript.base")
        _expect(self.offset, Expr, "Subscript.offset")


@dataclass(frozen=True, slots=True)
class Load(Expr):
    ref: LValue

    def __post_init__(self) -> None:
        _expect(self.ref, LValue, "Load.ref")


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: UnOp
    operand: Expr

    def __post_init__(self) -> None:
        _expect(self.operand, Expr, f"operand of {self.op.value}")


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: BinOp
    lhs: Expr
    rhs: Expr

    def __post_init__(self) -> None:
        _expect(self.lhs, Expr, f"left operand of {self.op.value}")
        _expect(self.rhs, Expr, f"right operand of {self.op.value}")


@dataclass(frozen=True, slots=True)
class Cond(Expr):
    """`cond ? then : other`, evaluating only the chosen branch."""

    cond: Expr
    then: Expr
    other: Expr

    def __post_init__(self) -> None:
        for name in ("cond", "then", "other"):
            _expect(getattr(self, name), Expr, f"Cond.{name}")


@dataclass(frozen=True, slots=True)
class Select(Expr):
    """`cond ? then : other`, evaluating both branches (branch-free)."""

    cond: Expr
    then: Expr
    other: Expr

    def __post_init__(self) -> None:
        for name in ("cond", "then", "other"):
            _expect(getattr(self, name), Expr, f"Select.{name}")


@dataclass(frozen=True, slots=True)
class Clamp(Expr):
    value: Expr
    lo: Expr
    hi: Expr

    def __post_init__(self) -> None:
        for name in ("value", "lo", "hi"):
            _expect(getattr(self, name), Expr, f"Clamp.{name}")


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """Explicit conversion of `value` to `type` (rule 8)."""

    type: Type
    value: Expr

    def __post_init__(self) -> None:
        _expect(self.type, Type, "Cast.type")
        _expect(self.value, Expr, "Cast.value")


@dataclass(frozen=True, slots=True)
class Call(Expr):
    fn: Builtin
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if len(self.args) != self.fn.arity:
            raise SemtreeTypeError(
                f"{self.fn.value} takes {self.fn.arity} argument(s), got {len(self.args)}"
            )
        for arg in self.args:
            _expect(arg, Expr, f"argument of {self.fn.value}")


@dataclass(frozen=True, slots=True)
class Declare(Stmt):
    """Declare `name`; for an array, `init` (if any) fills every element."""

    type: Type
    name: str
    init: Expr | None = None

    def __post_init__(self) -> None:
        _expect(self.type, Type, "Declare.type")
        object.__setattr__(self, "name", c_identifier(self.name))
        if self.init is not None:
            _expect(self.init, Expr, f"initialiser of {self.name}")


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    ref: LValue
    value: Expr

    def __post_init__(self) -> None:
        _expect(self.ref, LValue, "Store.ref")
        _expect(self.value, Expr, "Store.value")


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    """A sequence of statements forming one scope."""

    stmts: tuple[Stmt, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stmts", tuple(self.stmts))
        for stmt in self.stmts:
            _expect(stmt, Stmt, "a statement of a Block")


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    other: Stmt | None = None

    def __post_init__(self) -> None:
        _expect(self.cond, Expr, "If.cond")
        _expect(self.then, Stmt, "If.then")
        if self.other is not None:
            _expect(self.other, Stmt, "If.other")


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """`var` takes the values 0, step, ..., (count - 1) * step; `var` has type INDEX."""

    var: str
    count: int
    step: int
    body: Stmt

    def __post_init__(self) -> None:
        object.__setattr__(self, "var", c_identifier(self.var))
        if self.count < 0 or self.step < 1:
            raise SemtreeTypeError(f"For {self.var}: count {self.count}, step {self.step}")
        _expect(self.body, Stmt, "For.body")


@dataclass(frozen=True, slots=True)
class While(Stmt):
    cond: Expr
    body: Stmt

    def __post_init__(self) -> None:
        _expect(self.cond, Expr, "While.cond")
        _expect(self.body, Stmt, "While.body")


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """Work-group barrier on local memory; every work-item of the group must reach it."""


@dataclass(frozen=True, slots=True)
class Return(Stmt):
    value: Expr | None = None

    def __post_init__(self) -> None:
        if self.value is not None:
            _expect(self.value, Expr, "Return.value")


@dataclass(frozen=True, slots=True)
class Param(Node):
    name: str
    type: Type

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", c_identifier(self.name))
        _expect(self.type, Type, f"type of parameter {self.name}")


@dataclass(frozen=True, slots=True)
class Function(Node):
    """A kernel (or helper) function: parameters, a body block and a return type."""

    name: str
    params: tuple[Param, ...]
    body: Block
    ret: Type = field(default_factory=Type.void)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", c_identifier(self.name))
        object.__setattr__(self, "params", tuple(self.params))
        for param in self.params:
            _expect(param, Param, f"a parameter of {self.name}")
        _expect(self.body, Block, f"body of {self.name}")
        names = [param.name for param in self.params]
        if len(set(names)) != len(names):
            raise SemtreeTypeError(f"{self.name}: duplicate parameter names {names}")


# ---- traversal ------------------------------------------------------------------------------

_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names = _CHILD_FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in fields(cls) if f.name != "span")
        _CHILD_FIELDS[cls] = names
    return names


def children(node: Node) -> Iterator[Node]:
    """The direct child nodes of `node`, in field order."""
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Node):
            yield value
        elif isinstance(value, tuple):
            yield from (item for item in value if isinstance(item, Node))


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree rooted at `node`, parents before children, left to right."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(children(current))))


def rewrite(node: Node, fn: Callable[[Node], Node | None]) -> Node:
    """Rebuild the tree bottom-up, replacing each node by `fn(node)` (None keeps it).

    `fn` sees each node after its children were rewritten. Subtrees in which nothing changed
    are reused as they are (the result `is` the input when `fn` changes nothing).
    """
    changes: dict[str, object] = {}
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Node):
            new = rewrite(value, fn)
            if new is not value:
                changes[name] = new
        elif isinstance(value, tuple) and any(isinstance(item, Node) for item in value):
            items = tuple(rewrite(item, fn) if isinstance(item, Node) else item for item in value)
            if any(new is not old for new, old in zip(items, value, strict=True)):
                changes[name] = items
    if changes:
        node = replace(node, **changes)  # type: ignore[type-var]
    result = fn(node)
    return node if result is None else result
