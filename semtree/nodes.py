"""Semtree nodes: the C-like kernel IR that the generator writes and every backend reads.

A kernel body is a `Function` of statements (`Stmt`) over expressions (`Expr`) and lvalues
(`LValue`), all frozen slotted dataclasses compared structurally (design 4.2). Passes
never mutate a tree: they dispatch with `match` on the node classes, finish with
`case _: raise UnsupportedNode(node)`, and rebuild with `rewrite()`. `walk()` visits every node.

Every node takes an optional keyword-only `span`: text naming the Tile statement it came from.
It is excluded from equality and hashing; printers may show it as a comment.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

from semtree.names import c_identifier
from semtree.operators import BinOp, Builtin, IdKind, Limit, UnOp
from semtree.types import DType, Type

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "Barrier",
    "BinOp",
    "Binary",
    "Block",
    "Builtin",
    "Call",
    "Cast",
    "Clamp",
    "Cond",
    "Declare",
    "Expr",
    "FloatConst",
    "For",
    "Function",
    "IdKind",
    "If",
    "IndexExpr",
    "IntConst",
    "LValue",
    "Lanes",
    "Limit",
    "LimitConst",
    "Load",
    "Lookup",
    "Node",
    "Param",
    "Return",
    "Select",
    "SemtreeError",
    "SemtreeTypeError",
    "Shuffle",
    "Stmt",
    "Store",
    "Subscript",
    "UnOp",
    "Unary",
    "UnsupportedNode",
    "While",
    "c_identifier",
    "children",
    "rewrite",
    "walk",
]


class SemtreeError(Exception):
    """Base class of errors raised by the semtree package."""


class UnsupportedNode(SemtreeError):  # noqa: N818 - the name design 4.2 gives it
    """A pass met a node class it does not handle."""

    def __init__(self, node: object, detail: str = "") -> None:
        self.node = node
        text = f"unsupported semtree node {type(node).__name__}"
        super().__init__(f"{text}: {detail}" if detail else text)


class SemtreeTypeError(SemtreeError, TypeError):
    """An expression or statement breaks the typing rules of design 4.4."""


# ---- node classes ---------------------------------------------------------------------------

# How `str(node)` prints: semtree.printer (which imports this module) registers its C-like
# printer here when it loads, which `import semtree` always does; until then, `repr`.
_FORMAT: list[Callable[[Node], str]] = []


def set_formatter(format_node: Callable[[Node], str]) -> None:
    """Make `str(node)` call `format_node` (semtree.printer registers itself)."""
    _FORMAT[:] = [format_node]


@dataclass(frozen=True, slots=True)
class Node:
    span: str | None = field(default=None, compare=False, repr=False, kw_only=True)

    def __post_init__(self) -> None:
        _normalise(self)

    def __str__(self) -> str:
        return _FORMAT[0](self) if _FORMAT else repr(self)


@dataclass(frozen=True, slots=True)
class Expr(Node):
    """A side-effect-free expression with a type (design 4.4)."""


@dataclass(frozen=True, slots=True)
class LValue(Node):
    """Something that can be loaded or stored: a named variable or an element of one."""


@dataclass(frozen=True, slots=True)
class Stmt(Node):
    """A statement."""


@dataclass(frozen=True, slots=True)
class IntConst(Expr):
    """An integer literal; weakly typed (design 4.4 rule 4)."""

    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            try:
                object.__setattr__(self, "value", operator.index(self.value))  # numpy integers
            except TypeError:
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
    """A parameter or declared variable (the name is sanitised to a C identifier)."""

    name: str


@dataclass(frozen=True, slots=True)
class Subscript(LValue):
    """Element `offset` of a pointer or array (in units of its possibly-vector elements)."""

    base: LValue
    offset: Expr


@dataclass(frozen=True, slots=True)
class Lanes(LValue):
    """`width` consecutive elements of the scalar pointer or private array `base`, from element
    `offset`, as one vector, aligned only as a scalar is: a vector at any element of a buffer.
    With `count`, only the lanes before `count` are accessed (a ragged edge: a load gives
    `fill` in the others, 0 without one, a store leaves them; neither touches their memory;
    `count` <= 0 accesses nothing). `fill`: a scalar of the element type (a reduction's
    identity, where the lanes past the edge are folded into the result)."""

    base: LValue
    offset: Expr
    width: int
    count: Expr | None = None
    fill: Expr | None = None

    def __post_init__(self) -> None:
        _normalise(self)
        if self.width not in LANE_WIDTHS:
            raise SemtreeTypeError(f"lanes of width {self.width}: not one of {LANE_WIDTHS}")
        if self.fill is not None and self.count is None:
            raise SemtreeTypeError("lanes with a fill need a count (the lanes it fills)")


LANE_WIDTHS = (2, 4, 8, 16)


@dataclass(frozen=True, slots=True)
class Load(Expr):
    ref: LValue


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: UnOp
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: BinOp
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True, slots=True)
class Cond(Expr):
    """`cond ? then : other`, evaluating only the chosen branch."""

    cond: Expr
    then: Expr
    other: Expr


@dataclass(frozen=True, slots=True)
class Select(Expr):
    """`cond ? then : other`, evaluating both branches (branch-free)."""

    cond: Expr
    then: Expr
    other: Expr


@dataclass(frozen=True, slots=True)
class Shuffle(Expr):
    """Lanes of two vectors of one type, `first` then `second` (lanes 0 to 2w - 1): lane i of
    the result is lane `mask[i]` of the two (OpenCL's `shuffle2`, LLVM's `shufflevector`)."""

    first: Expr
    second: Expr
    mask: tuple[int, ...]

    def __post_init__(self) -> None:
        _normalise(self)
        if len(self.mask) not in LANE_WIDTHS or min(self.mask) < 0:
            raise SemtreeTypeError(f"shuffle mask {self.mask}: not 2, 4, 8 or 16 lanes >= 0")


@dataclass(frozen=True, slots=True)
class Clamp(Expr):
    value: Expr
    lo: Expr
    hi: Expr


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """Explicit conversion of `value` to `type` (rule 8)."""

    type: Type
    value: Expr


@dataclass(frozen=True, slots=True)
class Call(Expr):
    fn: Builtin
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _normalise(self)
        if len(self.args) != self.fn.arity:
            raise SemtreeTypeError(
                f"{self.fn.value} takes {self.fn.arity} argument(s), got {len(self.args)}"
            )


@dataclass(frozen=True, slots=True)
class Declare(Stmt):
    """Declare `name`; for an array, `init` (if any) fills every element."""

    type: Type
    name: str
    init: Expr | None = None


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    ref: LValue
    value: Expr


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    """A sequence of statements forming one scope."""

    stmts: tuple[Stmt, ...] = ()


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    other: Stmt | None = None


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """`var` takes the values 0, step, ..., (count - 1) * step; `var` has type INDEX."""

    var: str
    count: int
    step: int
    body: Stmt

    def __post_init__(self) -> None:
        _normalise(self)
        if self.count < 0 or self.step < 1:
            raise SemtreeTypeError(f"For {self.var}: count {self.count}, step {self.step}")


@dataclass(frozen=True, slots=True)
class While(Stmt):
    cond: Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """Work-group barrier on local memory; every work-item of the group must reach it."""


@dataclass(frozen=True, slots=True)
class Return(Stmt):
    value: Expr | None = None


@dataclass(frozen=True, slots=True)
class Param(Node):
    name: str
    type: Type


@dataclass(frozen=True, slots=True)
class Function(Node):
    """A kernel (or helper) function: parameters, a body block and a return type."""

    name: str
    params: tuple[Param, ...]
    body: Block
    ret: Type = field(default_factory=Type.void)

    def __post_init__(self) -> None:
        _normalise(self)
        names = [param.name for param in self.params]
        if len(set(names)) != len(names):
            raise SemtreeTypeError(f"{self.name}: duplicate parameter names {names}")


# ---- construction checks --------------------------------------------------------------------

_KINDS: dict[str, type] = {
    "Expr": Expr,
    "LValue": LValue,
    "Stmt": Stmt,
    "Block": Block,
    "Param": Param,
    "Type": Type,
    "UnOp": UnOp,
    "BinOp": BinOp,
    "Limit": Limit,
    "IdKind": IdKind,
    "Builtin": Builtin,
    "DType": DType,
    "int": int,
}
_SCHEMAS: dict[type, tuple[tuple[str, str, type | None, bool], ...]] = {}


def _schema(cls: type) -> tuple[tuple[str, str, type | None, bool], ...]:
    """(field, shape, class, optional) per field; shape is "one", "tuple", "name" or "any"."""
    schema = _SCHEMAS.get(cls)
    if schema is None:
        rows = []
        for item in fields(cls):
            text = str(item.type)
            optional = text.endswith(" | None")
            text = text.removesuffix(" | None")
            if item.name in ("name", "var"):
                rows.append((item.name, "name", None, False))
            elif text.startswith("tuple["):
                rows.append((item.name, "tuple", _KINDS[text[6:].split(",")[0]], False))
            elif text in _KINDS:
                rows.append((item.name, "one", _KINDS[text], optional))
        schema = _SCHEMAS[cls] = tuple(rows)
    return schema


def _normalise(node: Node) -> None:
    """Sanitise names, turn sequences into tuples and check every child's class, so that a
    generator's mistake fails where the node is built."""
    for name, shape, kind, optional in _schema(type(node)):
        value = getattr(node, name)
        if shape == "name":
            object.__setattr__(node, name, c_identifier(value))
        elif shape == "tuple":
            items = tuple(value)
            object.__setattr__(node, name, items)
            for item in items:
                _expect(item, kind, f"an item of {type(node).__name__}.{name}")
        elif not (optional and value is None):
            _expect(value, kind, f"{type(node).__name__}.{name}")


def _expect(value: object, kind: type | None, what: str) -> None:
    if kind is not None and not isinstance(value, kind):
        raise SemtreeTypeError(f"{what} must be a {kind.__name__}, got {value!r}")


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
