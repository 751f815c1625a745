"""The nesting limit of expressions and index polynomials (E-LIMIT), measured without recursion.

`tile.lang.parse` calls `check_nesting` on every function it builds. Later stages walk expressions
recursively; the limit keeps them far from Python's recursion limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tile.lang import syntax as ast

if TYPE_CHECKING:
    from tile.errors import DiagnosticSink

# The deepest expression or index polynomial accepted (operators, calls and conditionals
# nested in one another; parentheses alone do not count).
MAX_NESTING = 128

_Node = ast.Expr | ast.PolyExpr


def check_nesting(function: ast.FunctionDef, sink: DiagnosticSink) -> None:
    """E-LIMIT for every statement with an expression nested more than MAX_NESTING deep."""
    for statement in function.body:
        for root in _statement_roots(statement):
            depth, node = _depth(root)
            if node is not None:
                sink.error(
                    "E-LIMIT",
                    f"expression nested too deeply: {depth} levels of operators, calls or "
                    f"conditionals inside one another, more than this compiler's limit of "
                    f"{MAX_NESTING}; compute parts in separate statements (T = ...;)",
                    getattr(node, "span", None),
                )
                break


def _statement_roots(statement: ast.Statement) -> list[_Node]:
    if isinstance(statement, ast.Assign):
        return [statement.value]
    out = statement.out
    roots: list[_Node] = [*out.indices, *(out.sizes or ())]
    for operand in statement.operands:
        roots.extend(operand.indices)
    for constraint in statement.constraints:
        roots.extend((constraint.poly, constraint.bound))
    return roots


def _depth(root: _Node) -> tuple[int, _Node | None]:
    """How many levels `root` nests (a leaf is 1), and the first node found deeper than
    MAX_NESTING, if any. Iterative, so that any depth is measured without recursion."""
    stack: list[tuple[_Node, int]] = [(root, 1)]
    deepest, beyond = 0, None
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_NESTING and beyond is None:
            beyond = node
        stack.extend((child, level + 1) for child in _children(node))
    return deepest, beyond


def _children(node: _Node) -> tuple[_Node, ...]:
    match node:
        case ast.Binary(lhs=lhs, rhs=rhs) | ast.PBinary(lhs=lhs, rhs=rhs):
            return (lhs, rhs)
        case ast.Unary(operand=operand) | ast.PNeg(operand=operand):
            return (operand,)
        case ast.Call(args=args):
            return args
        case ast.Ternary(cond=cond, then=then, other=other):
            return (cond, then, other)
        case _:
            return ()
