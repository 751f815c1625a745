"""A scoped rewriting walker shared by the semtree passes (`semtree.simplify`).

`ScopedPass` rebuilds a function statement by statement, keeping the types of the names in
scope (parameters, declarations, loop counters) so that each expression can be typed with
`semtree.typing` as it is rewritten; unchanged subtrees are reused, not copied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree.nodes import (
    Barrier,
    Binary,
    Block,
    Call,
    Cast,
    Clamp,
    Cond,
    Declare,
    Expr,
    For,
    Function,
    If,
    Lanes,
    Load,
    LValue,
    Return,
    Select,
    Shuffle,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnsupportedNode,
    While,
)
from semtree.typing import INDEX, operands, result_type, type_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.types import Type


class ScopedPass:
    """Rebuilds a function statement by statement, keeping the scope for typing; `node()`
    sees each expression after its operands were rewritten, with their types."""

    def __init__(self, native_fp16: bool) -> None:
        self.native_fp16 = native_fp16
        self.scope: dict[str, Type] = {}
        self.loops: set[str] = set()

    def run(self, function: Function) -> Function:
        self.scope = {param.name: param.type for param in function.params}
        self.ret = function.ret
        body = self.block(function.body)
        return function if body is function.body else replace(function, body=body)

    def block(self, block: Block) -> Block:
        outer, outer_loops = self.scope, self.loops
        self.scope, self.loops = dict(outer), set(outer_loops)
        try:
            stmts = self.splice([new for stmt in block.stmts for new in self.statement(stmt)])
        finally:
            self.scope, self.loops = outer, outer_loops
        if len(stmts) == len(block.stmts) and all(map(same, stmts, block.stmts)):
            return block
        return Block(tuple(stmts), span=block.span)

    def splice(self, stmts: list[Stmt]) -> list[Stmt]:
        """The statements of a rewritten block (a subclass may merge nested blocks)."""
        return stmts

    def body(self, stmt: Stmt) -> Block:
        return self.block(stmt if isinstance(stmt, Block) else Block((stmt,)))

    def statement(self, stmt: Stmt) -> list[Stmt]:
        match stmt:
            case Declare(type_, name, init):
                new = stmt if init is None else rebuilt(stmt, init=self.assigned(init, type_))
                self.scope[name] = type_
                self.loops.discard(name)
                return [new]
            case Store(ref, value):
                target = type_of(Load(ref), self.scope, self.native_fp16)
                new_ref = self.lvalue(ref)
                return [rebuilt(stmt, ref=new_ref, value=self.assigned(value, target))]
            case Block():
                return [self.block(stmt)]
            case If(cond, then, other):
                new_other = None if other is None else self.body(other)
                return [
                    rebuilt(stmt, cond=self.condition(cond), then=self.body(then), other=new_other)
                ]
            case For(var, _, _, body):
                self.scope[var], outer = INDEX, self.scope.get(var)
                self.loops.add(var)
                try:
                    return [rebuilt(stmt, body=self.body(body))]
                finally:
                    self.loops.discard(var)
                    if outer is None:
                        del self.scope[var]
                    else:
                        self.scope[var] = outer
            case While(cond, body):
                return [rebuilt(stmt, cond=self.condition(cond), body=self.body(body))]
            case Barrier() | Return(None):
                return [stmt]
            case Return(value):
                return [rebuilt(stmt, value=self.assigned(value, self.ret))]
            case _:
                raise UnsupportedNode(stmt)

    def condition(self, cond: Expr) -> Expr:
        return self.expr(cond)[0]

    def assigned(self, value: Expr, target: Type) -> Expr:
        """A value stored to (or initialising, or returned as) `target`."""
        return self.expr(value)[0]

    def lvalue(self, ref: LValue) -> LValue:
        if isinstance(ref, Subscript):
            base, offset = self.lvalue(ref.base), self.condition(ref.offset)
            return rebuilt(ref, base=base, offset=offset)
        if isinstance(ref, Lanes):
            base, offset = self.lvalue(ref.base), self.condition(ref.offset)
            count = None if ref.count is None else self.condition(ref.count)
            return rebuilt(ref, base=base, offset=offset, count=count)
        return ref

    def expr(self, expr: Expr) -> tuple[Expr, Type]:
        if isinstance(expr, Load):
            new = rebuilt(expr, ref=self.lvalue(expr.ref))
            return self.leaf(new)
        children = operands(expr)
        if not children:
            return self.leaf(expr)
        rewritten = [self.expr(child) for child in children]
        new = with_operands(expr, [child for child, _ in rewritten])
        types = [type_ for _, type_ in rewritten]
        type_ = result_type(new, types, self.scope, self.native_fp16)
        return self.node(new, types, type_), type_

    def leaf(self, expr: Expr) -> tuple[Expr, Type]:
        return expr, type_of(expr, self.scope, self.native_fp16)

    def node(self, expr: Expr, types: list[Type], type_: Type) -> Expr:
        return expr


def same(new: object, old: object) -> bool:
    return new is old


def rebuilt(node: object, **fields: object) -> object:
    """`node` with new field values, or `node` itself if every value is the same object."""
    if all(getattr(node, name) is value for name, value in fields.items()):
        return node
    return replace(node, **fields)  # type: ignore[type-var]


def with_operands(expr: Expr, new: Sequence[Expr]) -> Expr:
    match expr:
        case Unary():
            return rebuilt(expr, operand=new[0])  # type: ignore[return-value]
        case Binary():
            return rebuilt(expr, lhs=new[0], rhs=new[1])  # type: ignore[return-value]
        case Cond() | Select():
            return rebuilt(expr, cond=new[0], then=new[1], other=new[2])  # type: ignore[return-value]
        case Clamp():
            return rebuilt(expr, value=new[0], lo=new[1], hi=new[2])  # type: ignore[return-value]
        case Cast():
            return rebuilt(expr, value=new[0])  # type: ignore[return-value]
        case Shuffle():
            return rebuilt(expr, first=new[0], second=new[1])  # type: ignore[return-value]
        case Call():
            if all(map(same, new, expr.args)):
                return expr
            return replace(expr, args=tuple(new))
        case _:
            raise UnsupportedNode(expr)
