"""C-like text for semtrees: debugging dumps, golden tests, notebooks (design 4.5).

`CPrinter` renders any node deterministically. It is also the base class of the OpenCL
renderer, which overrides only the hooks where OpenCL spells things differently: address
spaces (`address_space`), type names (`dtype_name`, `type_name`), conversions (`cast`),
`select`, builtin names (`builtin_name`), limits, literals, the function header and barriers.
The printer tracks the types of the names in scope (`self.scope`, `self.type_of`) so that a
subclass can choose spellings by type; the base class itself never needs them.

Conventions of the base class: INDEX prints as `int`, vectors as `float4`, pointers as
`global const float*`; `Cond` is `c ? a : b`; `Select` is `select(other, then, cond)` in
OpenCL's argument order; an array initialiser becomes a fill loop after the declaration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Block,
    Call,
    Cast,
    Clamp,
    Cond,
    Declare,
    Expr,
    FloatConst,
    For,
    Function,
    IdKind,
    If,
    IndexExpr,
    IntConst,
    Lanes,
    Limit,
    LimitConst,
    Load,
    Lookup,
    LValue,
    Node,
    Param,
    Return,
    Select,
    Shuffle,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnsupportedNode,
    While,
    set_formatter,
)
from semtree.types import DType, Region, Type, TypeBase
from semtree.typing import type_of

if TYPE_CHECKING:
    from semtree.nodes import Builtin

_PRECEDENCE = {
    BinOp.MUL: 13,
    BinOp.DIV: 13,
    BinOp.MOD: 13,
    BinOp.ADD: 12,
    BinOp.SUB: 12,
    BinOp.SHL: 11,
    BinOp.SHR: 11,
    BinOp.LT: 10,
    BinOp.LE: 10,
    BinOp.GT: 10,
    BinOp.GE: 10,
    BinOp.EQ: 9,
    BinOp.NE: 9,
    BinOp.AND: 8,
    BinOp.XOR: 7,
    BinOp.OR: 6,
    BinOp.LAND: 5,
    BinOp.LOR: 4,
}
_ATOM, _UNARY, _TERNARY = 16, 15, 3

_C_NAMES = {
    DType.BOOLEAN: "bool",
    DType.INT8: "char",
    DType.UINT8: "uchar",
    DType.INT16: "short",
    DType.UINT16: "ushort",
    DType.INT32: "int",
    DType.UINT32: "uint",
    DType.INT64: "long",
    DType.UINT64: "ulong",
    DType.FLOAT16: "half",
    DType.FLOAT32: "float",
    DType.FLOAT64: "double",
}
_LIMIT_MACROS = {
    DType.INT8: ("CHAR_MIN", "CHAR_MAX"),
    DType.UINT8: ("0", "UCHAR_MAX"),
    DType.INT16: ("SHRT_MIN", "SHRT_MAX"),
    DType.UINT16: ("0", "USHRT_MAX"),
    DType.INT32: ("INT_MIN", "INT_MAX"),
    DType.UINT32: ("0", "UINT_MAX"),
    DType.INT64: ("LONG_MIN", "LONG_MAX"),
    DType.UINT64: ("0", "ULONG_MAX"),
    DType.FLOAT16: ("-HALF_MAX", "HALF_MAX"),
    DType.FLOAT32: ("-FLT_MAX", "FLT_MAX"),
    DType.FLOAT64: ("-DBL_MAX", "DBL_MAX"),
    DType.BOOLEAN: ("false", "true"),
}


class CPrinter:
    """Renders semtree nodes as C-like text; subclass and override the hooks to retarget."""

    indent = "  "

    def __init__(self, *, native_fp16: bool = True, spans: bool = False) -> None:
        self.native_fp16 = native_fp16
        self.spans = spans  # print each statement's span as a `//` comment above it
        self.scope: dict[str, Type] = {}

    # ---- entry points ----------------------------------------------------------------------

    def render(self, node: Node) -> str:
        """Any node: a function, a statement (several lines), an expression or an lvalue."""
        match node:
            case Function():
                return self.function(node)
            case Stmt():
                return "\n".join(self.statement(node, 0))
            case Expr():
                return self.expr(node)
            case LValue():
                return self.lvalue(node)
            case Param():
                return self.param_declaration(node)
            case _:
                raise UnsupportedNode(node)

    def function(self, function: Function) -> str:
        self.scope = {param.name: param.type for param in function.params}
        lines = [self.function_header(function) + " {"]
        lines += self.statements(function.body.stmts, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def type_of(self, expr: Expr) -> Type:
        """The type of `expr` in the current scope (for subclasses choosing spellings)."""
        return type_of(expr, self.scope, self.native_fp16)

    # ---- statements ------------------------------------------------------------------------

    def statements(self, stmts: tuple[Stmt, ...], depth: int) -> list[str]:
        """A sequence of statements in a new scope."""
        outer = self.scope
        self.scope = dict(outer)
        try:
            return [line for stmt in stmts for line in self.statement(stmt, depth)]
        finally:
            self.scope = outer

    def statement(self, stmt: Stmt, depth: int) -> list[str]:
        pad = self.indent * depth
        lines = [f"{pad}// {stmt.span}"] if self.spans and stmt.span else []
        match stmt:
            case Declare(type_, name, _):
                lines += self.declare(stmt, depth)
                self.scope[name] = type_
            case Store(ref, value):
                lines.append(f"{pad}{self.lvalue(ref)} = {self.expr(value)};")
            case Block(stmts):
                lines += [pad + "{", *self.statements(stmts, depth + 1), pad + "}"]
            case If():
                lines += self.if_(stmt, depth)
            case For(var, count, step, body):
                loop = self.type_name(Type.index())
                head = f"for ({loop} {var} = 0; {var} < {count * step}; {var} += {step})"
                outer = self.scope
                self.scope = {**outer, var: Type.index()}
                try:
                    lines += [f"{pad}{head} {{", *self.body(body, depth + 1), pad + "}"]
                finally:
                    self.scope = outer
            case While(cond, body):
                lines += [f"{pad}while ({self.expr(cond)}) {{"]
                lines += [*self.body(body, depth + 1), pad + "}"]
            case Barrier():
                lines.append(pad + self.barrier())
            case Return(value):
                lines.append(pad + ("return;" if value is None else f"return {self.expr(value)};"))
            case _:
                raise UnsupportedNode(stmt)
        return lines

    def body(self, stmt: Stmt, depth: int) -> list[str]:
        """The lines inside the braces of an if, for or while."""
        if isinstance(stmt, Block):
            return self.statements(stmt.stmts, depth)
        return self.statements((stmt,), depth)

    def if_(self, stmt: If, depth: int) -> list[str]:
        pad = self.indent * depth
        lines = [f"{pad}if ({self.expr(stmt.cond)}) {{", *self.body(stmt.then, depth + 1)]
        other = stmt.other
        while (chained := self._else_if(other)) is not None:
            lines.append(f"{pad}}} else if ({self.expr(chained.cond)}) {{")
            lines += self.body(chained.then, depth + 1)
            other = chained.other
        if other is not None:
            lines += [pad + "} else {", *self.body(other, depth + 1)]
        lines.append(pad + "}")
        return lines

    def _else_if(self, other: Stmt | None) -> If | None:
        """An `else` branch that is a lone `If` (possibly in its own block) chains."""
        if isinstance(other, Block) and len(other.stmts) == 1 and not other.span:
            other = other.stmts[0]
        if isinstance(other, If) and not (self.spans and other.span):
            return other
        return None

    def declare(self, stmt: Declare, depth: int) -> list[str]:
        pad = self.indent * depth
        text = pad + self.declaration(stmt.type, stmt.name)
        if stmt.init is None:
            return [text + ";"]
        if not stmt.type.is_array:
            return [f"{text} = {self.expr(stmt.init)};"]
        return [text + ";", *self.array_fill(stmt, depth)]

    def array_fill(self, stmt: Declare, depth: int) -> list[str]:
        """Initialise every element of a declared array (a loop in C)."""
        assert stmt.init is not None
        var, loop = f"{stmt.name}_fill", self.type_name(Type.index())
        head = f"for ({loop} {var} = 0; {var} < {stmt.type.array}; {var} += 1)"
        return [f"{self.indent * depth}{head} {stmt.name}[{var}] = {self.expr(stmt.init)};"]

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    # ---- declarations and types ------------------------------------------------------------

    def function_header(self, function: Function) -> str:
        params = ", ".join(self.param_declaration(param) for param in function.params)
        return (
            f"{self.function_qualifier()}{self.type_name(function.ret)} {function.name}({params})"
        )

    def function_qualifier(self) -> str:
        return ""

    def param_declaration(self, param: Param) -> str:
        return self.declaration(param.type, param.name)

    def declaration(self, type_: Type, name: str) -> str:
        """`local float tile[256]`, `global const float4* in`, `int n`."""
        element = type_.element() if type_.is_array else type_
        text = f"{self.type_name(element)} {name}"
        if type_.is_array:
            text += f"[{type_.array}]"
            space = "" if type_.base_is_pointer else self.address_space(type_.region)
            if space:
                text = f"{space} {text}"
        return text

    def address_space(self, region: Region) -> str:
        return "" if region is Region.PRIVATE else region.value

    def dtype_name(self, dtype: DType) -> str:
        return _C_NAMES[dtype]

    def type_name(self, type_: Type) -> str:
        match type_.base:
            case TypeBase.VOID:
                return "void"
            case TypeBase.INDEX:
                return "int"
            case TypeBase.VALUE:
                assert type_.dtype is not None
                return self.vector_name(type_.dtype, type_.vec_width)
            case TypeBase.POINTER_MUT | TypeBase.POINTER_CONST:
                assert type_.dtype is not None
                space = self.address_space(type_.region)
                const = "const " if type_.is_const else ""
                prefix = f"{space} " if space else ""
                return f"{prefix}{const}{self.vector_name(type_.dtype, type_.vec_width)}*"
            case _:
                raise UnsupportedNode(type_)

    def vector_name(self, dtype: DType, width: int) -> str:
        return self.dtype_name(dtype) + (str(width) if width > 1 else "")

    # ---- expressions -----------------------------------------------------------------------

    def expr(self, expr: Expr, context: int = 0) -> str:
        """`expr`, parenthesised if its precedence is below `context`."""
        text, precedence = self.expr_text(expr)
        return f"({text})" if precedence < context else text

    def expr_text(self, expr: Expr) -> tuple[str, int]:
        """The text of `expr` and its C precedence (16 for atoms)."""
        match expr:
            case IntConst(value):
                return self.int_literal(value), _UNARY if value < 0 else _ATOM
            case FloatConst(value):
                text = self.float_literal(value)
                return text, _UNARY if text.startswith("-") else _ATOM
            case LimitConst(which, dtype):
                text = self.limit(which, dtype)
                return text, _UNARY if text.startswith("-") else _ATOM
            case IndexExpr(kind, dim):
                return self.index_id(kind, dim), _ATOM
            case Load(ref):
                return self.lvalue(ref), _ATOM
            case Unary(op, operand):
                inner = self.expr(operand, _UNARY)
                if inner[0] in "-+~!" and op.value in "-+":
                    inner = f"({inner})"
                return op.value + inner, _UNARY
            case Binary(op, lhs, rhs):
                return self.binary(expr, op, lhs, rhs), _PRECEDENCE[op]
            case Cond(cond, then, other):
                text = f"{self.expr(cond, 4)} ? {self.expr(then, 4)} : {self.expr(other, 3)}"
                return text, _TERNARY
            case Select():
                return self.select(expr), _ATOM
            case Clamp(value, lo, hi):
                return f"clamp({self.expr(value)}, {self.expr(lo)}, {self.expr(hi)})", _ATOM
            case Shuffle(first, second, mask):
                lanes = ", ".join(map(str, mask))
                return f"shuffle2({self.expr(first)}, {self.expr(second)}, ({lanes}))", _ATOM
            case Cast(type_, value):
                return self.cast(type_, value), _UNARY
            case Call(fn, args):
                arguments = ", ".join(self.expr(arg) for arg in args)
                return f"{self.builtin_name(fn, args)}({arguments})", _ATOM
            case _:
                raise UnsupportedNode(expr)

    def binary(self, expr: Binary, op: BinOp, lhs: Expr, rhs: Expr) -> str:
        left = self.operand(op, lhs, left=True)
        right = self.operand(op, rhs, left=False)
        return f"{left} {op.value} {right}"

    def operand(self, parent: BinOp, child: Expr, left: bool) -> str:
        """An operand of a binary operator: C precedence, plus parentheses around bitwise
        operations and `&&` inside `||` so that no reader has to know their precedence."""
        text, precedence = self.expr_text(child)
        wrap = precedence < _PRECEDENCE[parent] + (0 if left else 1)
        if isinstance(child, Binary) and child.op is not parent:
            wrap |= child.op.is_bitwise or parent.is_bitwise
            wrap |= parent is BinOp.LOR and child.op is BinOp.LAND
        return f"({text})" if wrap else text

    def lvalue(self, ref: LValue) -> str:
        match ref:
            case Lookup(name):
                return name
            case Subscript(base, offset):
                return f"{self.lvalue(base)}[{self.expr(offset)}]"
            case Lanes(base, offset, width, count, fill):
                last = "" if count is None else f", {self.expr(count)}"
                last += "" if fill is None else f", {self.expr(fill)}"
                return f"lanes{width}({self.lvalue(base)}, {self.expr(offset)}{last})"
            case _:
                raise UnsupportedNode(ref)

    def cast(self, type_: Type, value: Expr) -> str:
        return f"({self.type_name(type_)}){self.expr(value, _UNARY)}"

    def select(self, expr: Select) -> str:
        parts = (expr.other, expr.then, expr.cond)
        return "select(" + ", ".join(self.expr(part) for part in parts) + ")"

    def builtin_name(self, fn: Builtin, args: tuple[Expr, ...]) -> str:
        return fn.value

    def index_id(self, kind: IdKind, dim: int) -> str:
        return f"get_{kind.value}_id({dim})"

    def int_literal(self, value: int) -> str:
        if value == -(2**31):
            return "(-2147483647 - 1)"
        if value == -(2**63):
            return "(-9223372036854775807L - 1)"
        if value >= 2**63:
            return f"{value}UL"
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)

    def float_literal(self, value: float) -> str:
        if value != value:
            return "NAN"
        if value in (float("inf"), float("-inf")):
            return "INFINITY" if value > 0 else "-INFINITY"
        return repr(value)

    def limit(self, which: Limit, dtype: DType) -> str:
        if which is Limit.ZERO or which is Limit.ONE:
            one = which is Limit.ONE
            if dtype.is_bool:
                return "true" if one else "false"
            text = ("1" if one else "0") + (".0" if dtype.is_float else "")
            if dtype is DType.INT32 or dtype is DType.FLOAT64:
                return text
            return text + "f" if dtype is DType.FLOAT32 else f"({self.dtype_name(dtype)}){text}"
        return _LIMIT_MACROS[dtype][0 if which is Limit.MIN else 1]


def _format(node: Node) -> str:
    return CPrinter().render(node)


set_formatter(_format)  # str(node) prints C-like text (semtree.nodes cannot import this module)
