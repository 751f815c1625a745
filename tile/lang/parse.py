"""Stage 1: Tile source text -> `tile.lang.syntax.FunctionDef`, with positioned diagnostics.

The first stage of the pipeline (`parse` -> `check` -> `bind` -> ...). The grammar is
`tile/lang/tile.lark`; one Lark LALR parser, built on first use and kept for the process, runs the
`_Builder` callbacks as it reduces, so the AST is built in the same pass as the parse, without a
parse tree and without recursion. A syntax error makes `parse` re-read the text piece by piece
(the header, then each statement up to its `;`, then the closing `}`) so that every bad
statement is reported; all diagnostics are raised together in one `TileSyntaxError`.
"""

from __future__ import annotations

import math
import struct
import threading
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput

from tile.errors import DiagnosticSink
from tile.lang import syntax as ast
from tile.lang.grammar import GRAMMAR, START_SYMBOLS, TILE_WHITESPACE
from tile.lang.messages import position, syntax_diagnostic
from tile.lang.nesting import MAX_NESTING, check_nesting

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tile.errors import Diagnostic

__all__ = ["MAX_NESTING", "parse"]

INT64_MAX = 2**63 - 1

_BINARY_OPS = {op.value: op for op in ast.BinaryOp}
_UNARY_OPS = {op.value: op for op in ast.UnaryOp}
_POLY_OPS = {op.value: op for op in ast.PolyOp}
_AGG_OPS = {op.value: op for op in ast.AggOp}
_COMB_OPS = {op.value: op for op in ast.CombOp}


def parse(source: str, warnings: list[Diagnostic] | None = None) -> ast.FunctionDef:
    """Parse one Tile function; W-PREC warnings are appended to `warnings` when it is given.

    Raises `TileSyntaxError` (codes E-LEX and E-SYNTAX) listing every independent error.
    """
    parser = _parser()
    sink = DiagnosticSink(source)
    function: ast.FunctionDef | None = None
    try:
        with _building(sink, source):
            function = parser.parse(source, start="start")
    except UnexpectedInput as error:
        # Callbacks may have reported errors before the parse failed; the piecewise pass
        # reports them again.
        sink.errors.clear()
        sink.warnings.clear()
        _parse_pieces(parser, source, sink)
        if not sink.errors:  # cannot happen, but never lose the error
            sink.errors.append(syntax_diagnostic(error, source, source))
    if function is not None:
        check_nesting(function, sink)
    if warnings is not None:
        warnings.extend(sorted(sink.warnings, key=lambda d: (d.line, d.column)))
    sink.raise_if_any()
    assert function is not None
    return function


# ---- the parser ------------------------------------------------------------------------------

_parser_lock = threading.Lock()
_shared_parser: Lark | None = None


def _parser() -> Lark:
    global _shared_parser
    with _parser_lock:
        if _shared_parser is None:
            _shared_parser = build_parser()
        return _shared_parser


def build_parser(debug: bool = False) -> Lark:
    """A new LALR parser for the Tile grammar (tests build one with `debug=True`)."""
    return Lark(
        GRAMMAR.read_text(),
        parser="lalr",
        start=START_SYMBOLS,
        transformer=_Builder(),
        propagate_positions=False,
        debug=debug,
    )


class _Context(threading.local):
    """What the shared `_Builder` needs to know about the text it is building."""

    sink: DiagnosticSink
    text: str  # the text given to Lark (positions in it are those of the source)
    bare_or: dict[int, ast.Expr]  # `|` expressions not (yet) inside parentheses


_context = _Context()


@contextmanager
def _building(sink: DiagnosticSink, text: str) -> Iterator[None]:
    _context.sink, _context.text, _context.bare_or = sink, text, {}
    try:
        yield
    finally:
        del _context.sink, _context.text, _context.bare_or


def _span(token: Token) -> ast.Span:
    return ast.Span(token.line, token.column)


def _error(message: str, token: Token, code: str = "E-SYNTAX") -> None:
    _context.sink.error(code, message, _span(token))


class _Builder(Transformer):
    """The callbacks of the grammar's rules: each builds the AST node of one reduction."""

    # ---- the function and its statements ----

    def start(self, children: list) -> ast.FunctionDef:
        (inputs, outputs), *body = children
        return ast.FunctionDef(inputs, outputs, tuple(body))

    def header(self, children: list) -> tuple[tuple[ast.InputDecl, ...], tuple[ast.Name, ...]]:
        inputs = tuple(c for c in children if isinstance(c, ast.InputDecl))
        outputs = tuple(c for c in children if isinstance(c, ast.Name))
        return inputs, outputs

    def chunk(self, children: list) -> ast.Statement | None:
        return children[0] if children else None

    def closing(self, children: list) -> None:
        return None

    def input_unranked(self, children: list) -> ast.InputDecl:
        (name,) = children
        return ast.InputDecl(str(name), None, _span(name))

    def input_dims(self, children: list) -> ast.InputDecl:
        name, *dims = children
        sizes = tuple(ast.Name(str(d), _span(d)) for d in dims if d is not None)
        return ast.InputDecl(str(name), sizes, _span(name))

    def output(self, children: list) -> ast.Name:
        (name,) = children
        return ast.Name(str(name), _span(name))

    def statement(self, children: list) -> ast.Statement:
        *attrs, statement = children
        return replace(statement, attrs=tuple(attrs)) if attrs else statement

    def attribute(self, children: list) -> ast.Attribute:
        name, *args = children
        return ast.Attribute(str(name), tuple(str(a) for a in args if a is not None), _span(name))

    def assignment(self, children: list) -> ast.Assign:
        target, _, value = children
        return ast.Assign(str(target), value, span=_span(target))

    # ---- contractions ----

    def contraction(self, children: list) -> ast.ContractionStmt:
        out, assign, agg, (comb, operands), *tail = children
        if agg.value == "=" and assign.end_pos == agg.start_pos:
            _error(
                "'==' after the output: the assignment aggregation needs a space after the "
                "statement's '=' (write '= =(')",
                assign,
            )
        constraints = tuple(t for t in tail if isinstance(t, ast.Constraint))
        default: ast.Name | None = None
        no_defract = False
        seen: set[str] = set()
        for keyword, *rest in (t for t in tail if not isinstance(t, ast.Constraint)):
            if keyword.type in seen:
                _error(f"the modifier '{keyword}' is given twice", keyword)
            seen.add(keyword.type)
            if keyword.type == "DEFAULT":
                default = ast.Name(str(rest[0]), _span(rest[0]))
            else:
                no_defract = True
        return ast.ContractionStmt(
            out,
            _AGG_OPS[agg.value],
            comb,
            operands,
            constraints,
            default,
            no_defract,
            span=out.span,
            agg_span=_span(agg),
        )

    def out_scalar(self, children: list) -> ast.OutSpec:
        (name,) = children
        return ast.OutSpec(str(name), (), None, _span(name))

    def out_scalar_sized(self, children: list) -> ast.OutSpec:
        (name,) = children
        return ast.OutSpec(str(name), (), (), _span(name))

    def out_unsized(self, children: list) -> ast.OutSpec:
        name, *indices = children
        return ast.OutSpec(str(name), tuple(indices), None, _span(name))

    def out_sized(self, children: list) -> ast.OutSpec:
        name, *rest = children
        indices = tuple(p for p in rest if isinstance(p, ast.PolyExpr))
        sizes = tuple(e for e in rest if isinstance(e, ast.Expr))
        return ast.OutSpec(str(name), indices, sizes, _span(name))

    def operands(self, children: list) -> tuple[ast.CombOp, tuple[ast.TensorRef, ...]]:
        first, comb, second, question, third = children
        if comb is None:
            return ast.CombOp.NONE, (first,)
        if question is None:
            return _COMB_OPS[comb.value], (first, second)
        if comb.value != "==":
            _error(
                f"only '==' may come before '?' in a contraction, not '{comb}' "
                "(the conditional form is 'A[...] == B[...] ? C[...]')",
                comb,
            )
        return ast.CombOp.COND, (first, second, third)

    def access(self, children: list) -> ast.TensorRef:
        name, *indices = children
        return ast.TensorRef(str(name), tuple(p for p in indices if p is not None), _span(name))

    def constraint(self, children: list) -> ast.Constraint:
        comma, poly, operator, bound = children
        if operator.value == "<=":
            _error(
                "a constraint is written 'polynomial < bound' (it means 0 <= polynomial < "
                "bound); '<=' is not allowed",
                operator,
            )
        return ast.Constraint(poly, bound, _span_after(comma))

    def modifier(self, children: list) -> list[Token]:
        return children

    # ---- index polynomials ----

    def pconst(self, children: list) -> ast.PConst:
        (token,) = children
        return ast.PConst(_int_value(token), _span(token))

    def pscaled(self, children: list) -> ast.PBinary:
        number, index = children
        span = _span(number)
        scale = ast.PConst(_int_value(number), span)
        return ast.PBinary(ast.PolyOp.MUL, scale, ast.PIndex(str(index), _span(index)), span)

    def psize(self, children: list) -> ast.PSize:
        (token,) = children
        return ast.PSize(str(token), _span(token))

    def pindex(self, children: list) -> ast.PIndex:
        (token,) = children
        return ast.PIndex(str(token), _span(token))

    def pfloat(self, children: list) -> ast.PConst:
        (token,) = children
        _error(
            f"a float literal cannot appear in an index polynomial: '{token}' "
            "(index polynomials are integer affine expressions)",
            token,
        )
        return ast.PConst(0, _span(token))

    def pneg(self, children: list) -> ast.PNeg:
        operator, operand = children
        return ast.PNeg(operand, _span(operator))

    def pbinary(self, children: list) -> ast.PBinary:
        lhs, operator, rhs = children
        return ast.PBinary(_POLY_OPS[operator.value], lhs, rhs, _span(operator))

    # ---- elementwise expressions ----

    def int_literal(self, children: list) -> ast.IntLit:
        (token,) = children
        return ast.IntLit(_int_value(token), _span(token))

    def float_literal(self, children: list) -> ast.FloatLit:
        (token,) = children
        value = float(token)
        if not _fits_float32(value):
            _error(f"the float literal '{token}' is not finite in float32", token, "E-LEX")
        return ast.FloatLit(value, str(token), _span(token))

    def name(self, children: list) -> ast.Name:
        (token,) = children
        return ast.Name(str(token), _span(token))

    def call(self, children: list) -> ast.Call:
        function, *args = children
        return ast.Call(str(function), tuple(args), _span(function))

    def paren(self, children: list) -> ast.Expr:
        (inner,) = children
        _context.bare_or.pop(id(inner), None)
        return inner

    def unary(self, children: list) -> ast.Unary:
        operator, operand = children
        return ast.Unary(_UNARY_OPS[operator.value], operand, _span(operator))

    def binary(self, children: list) -> ast.Binary:
        lhs, operator, rhs = children
        return ast.Binary(_BINARY_OPS[operator.value], lhs, rhs, _span(operator))

    def bit_or(self, children: list) -> ast.Binary:
        node = self.binary(children)
        _context.bare_or[id(node)] = node
        return node

    def bit_xor(self, children: list) -> ast.Binary:
        lhs, operator, rhs = children
        bare = _context.bare_or
        if id(lhs) in bare or id(rhs) in bare:
            _context.sink.warn(
                "W-PREC",
                "'^' mixed with '|' without parentheses: in Tile '^' binds more loosely than "
                "'|' ('A ^ B | C' means 'A ^ (B | C)'); add parentheses",
                _span(operator),
            )
        return self.binary(children)

    def chained(self, children: list) -> ast.Binary:
        operands, operators = children[0::2], children[1::2]
        _error(
            f"comparisons do not chain: '{operators[1]}' follows '{operators[0]}' without "
            "parentheses (write '(a < b) < c' or combine the tests with '&')",
            operators[1],
        )
        node = operands[0]
        for operator, operand in zip(operators, operands[1:], strict=True):
            node = ast.Binary(_BINARY_OPS[operator.value], node, operand, _span(operator))
        return node

    def cond(self, children: list) -> ast.Ternary:
        condition, question, then, other = children
        return ast.Ternary(condition, then, other, _span(question))

    def cond_chain(self, children: list) -> ast.Ternary:
        condition, question, then, middle, inner_question, inner_then, other = children
        _error(
            "a conditional in the condition or else position of another must be "
            "parenthesised: write 'a ? b : (c ? d : e)' or '(a ? b : c) ? d : e'",
            inner_question,
        )
        inner = ast.Ternary(middle, inner_then, other, _span(inner_question))
        return ast.Ternary(condition, then, inner, _span(question))


def _int_value(token: Token) -> int:
    digits = token.lstrip("0") or "0"
    if len(digits) > len(str(INT64_MAX)) or int(digits) > INT64_MAX:  # no int() of huge texts
        _error(
            f"the integer literal '{token}' does not fit in a signed 64-bit integer", token, "E-LEX"
        )
        return 0
    return int(digits)


def _fits_float32(value: float) -> bool:
    if math.isinf(value):
        return False
    try:
        struct.pack("<f", value)  # rounds to float32; raises OverflowError if that is infinite
    except OverflowError:
        return False
    return True


def _span_after(token: Token) -> ast.Span:
    """The position of the first token after `token` (it always has one: `, poly < bound`)."""
    text = _context.text
    line, column, position = token.end_line, token.end_column, token.end_pos
    while text[position] in TILE_WHITESPACE:
        if text[position] == "\n":
            line, column = line + 1, 0
        position, column = position + 1, column + 1
    return ast.Span(line, column)


# ---- error recovery --------------------------------------------------------------------------


def _parse_pieces(parser: Lark, source: str, sink: DiagnosticSink) -> None:
    """Re-read a text that failed to parse as its header, each statement up to its `;`, and
    the closing `}`, reporting the first error of each piece.

    `{`, `;` and `}` are one-character tokens that occur nowhere else (Tile has no strings and
    no comments), so the pieces can be cut from the raw text. A piece is parsed with the
    grammar's start symbol for it, padded so that its positions are those of the source.
    """
    brace = source.find("{")
    if brace < 0:
        _parse_piece(parser, source, "start", source, sink)
        return
    pieces = [(0, brace + 1, "header")]
    close = source.find("}", brace)
    body_end = close if close >= 0 else len(source)
    start = brace + 1
    while (semicolon := source.find(";", start, body_end)) >= 0:
        if source[start:semicolon].strip(TILE_WHITESPACE):
            pieces.append((start, semicolon + 1, "chunk"))
        start = semicolon + 1
    if source[start:body_end].strip(TILE_WHITESPACE):
        # A statement without its `;`: parse it with the `}` that follows it, if any.
        pieces.append((start, close + 1 if close >= 0 else body_end, "chunk"))
    elif close < 0:
        end = len(source.rstrip(TILE_WHITESPACE))
        sink.error("E-SYNTAX", "unexpected end of text: expected '}'", position(source, end))
    if close >= 0:
        pieces.append((close, len(source), "closing"))
    line, line_start = 1, 0
    for start, end, symbol in pieces:
        line += source.count("\n", line_start, start)
        line_start = source.rfind("\n", 0, start) + 1
        # Padding keeps the positions of the source: line feeds, then spaces.
        text = "\n" * (line - 1) + " " * (start - line_start) + source[start:end]
        _parse_piece(parser, text, symbol, source, sink)


def _parse_piece(parser: Lark, text: str, symbol: str, source: str, sink: DiagnosticSink) -> None:
    try:
        with _building(sink, text):
            parser.parse(text, start=symbol)
    except UnexpectedInput as error:
        sink.errors.append(syntax_diagnostic(error, text, source))
