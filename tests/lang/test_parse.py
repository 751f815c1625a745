"""Tests of `tile.lang.parse`: grammar, AST, positions, diagnostics, recovery (spec 2, 3, 11)."""

from __future__ import annotations

import json
import logging
import re
import threading

import lark
import pytest

from tests.conftest import SHARED
from tile.errors import TileSyntaxError
from tile.lang import syntax as ast
from tile.lang.parse import MAX_NESTING, build_parser, parse
from tile.lang.syntax import BinaryOp, Span

CASE_FILES = sorted(SHARED.glob("spec/cases/*.json")) + sorted(
    SHARED.glob("conformance/cases/*.json")
)
ERROR_FILE = SHARED / "spec" / "errors.json"
ERROR_CASES = (
    [c for c in json.loads(ERROR_FILE.read_text())["cases"] if c["error"] in ("E-LEX", "E-SYNTAX")]
    if ERROR_FILE.exists()
    else []
)
# Lark's names for terminals, and its exceptions, must never reach a user.
INTERNAL = re.compile(r"__ANON|\bRPAR\b|\bLPAR\b|SEMICOLON|\bUNAME\b|\bLNAME\b|\$END|Token\(")


def body(text: str, header: str = "function (A[N], B[N], C, D) -> (O)") -> tuple:
    """The statements of a function with the given body."""
    return parse(f"{header} {{\n{text}\n}}").body


def value(expression: str) -> ast.Expr:
    (statement,) = body(f"O = {expression};")
    return statement.value


def error(text: str) -> TileSyntaxError:
    """The error of a function body (statements start on line 2, column 1)."""
    with pytest.raises(TileSyntaxError) as info:
        body(text)
    return info.value


def where(failure: TileSyntaxError) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in failure.diagnostics]


# ---- the grammar -----------------------------------------------------------------------------


def lark_warnings(build, caplog: pytest.LogCaptureFixture) -> str:
    with caplog.at_level(logging.DEBUG, logger=lark.logger.name):
        build()
    return caplog.text


def test_grammar_has_no_conflicts(caplog: pytest.LogCaptureFixture) -> None:
    assert "Shift/Reduce conflict" not in lark_warnings(lambda: build_parser(debug=True), caplog)


def test_conflict_check_detects_conflicts(caplog: pytest.LogCaptureFixture) -> None:
    ambiguous = 'start: e\n?e: e "+" e | "x"'
    build = lambda: lark.Lark(ambiguous, parser="lalr", debug=True)  # noqa: E731
    assert "Shift/Reduce conflict" in lark_warnings(build, caplog)


def test_shared_cases_exist(shared) -> None:
    assert CASE_FILES and ERROR_CASES


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.stem)
def test_case_parses_and_round_trips(path) -> None:
    function = parse(json.loads(path.read_text())["source"])
    assert isinstance(function, ast.FunctionDef)
    assert parse(str(function)) == function


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c["source"][:60])
def test_error_case_is_reported(case) -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse(case["source"])
    failure = info.value
    assert failure.code == case["error"]
    assert failure.line >= 1 and failure.column >= 1
    line = case["source"].splitlines()[failure.line - 1]
    assert line in str(failure)
    assert re.search(r"\|\s*\^$", str(failure), re.MULTILINE)
    assert not INTERNAL.search(str(failure))


# ---- the AST ---------------------------------------------------------------------------------


def test_function_header() -> None:
    function = parse("function (A[M, N], B[], C) -> (O, P) { O = A; P = B; }")
    assert function.inputs == (
        ast.InputDecl("A", (ast.Name("M"), ast.Name("N"))),
        ast.InputDecl("B", ()),
        ast.InputDecl("C", None),
    )
    assert function.outputs == (ast.Name("O"), ast.Name("P"))
    assert parse("function () -> (O) { }") == ast.FunctionDef((), (ast.Name("O"),), ())


def test_whitespace_is_never_required() -> None:
    assert parse("function(A)->(O){O=A;}") == parse("function (A) -> (O) { O = A; }")


def test_empty_statements_and_body() -> None:
    assert body(";;") == ()
    assert body("; O = A; ;") == (ast.Assign("O", ast.Name("A")),)


def test_contraction() -> None:
    (statement,) = body("O[i, j: N, 2] = >(A[i] == B[j] ? C[i - j]), i < N, j < 2 default D;")
    assert statement == ast.ContractionStmt(
        out=ast.OutSpec("O", (ast.PIndex("i"), ast.PIndex("j")), (ast.Name("N"), ast.IntLit(2))),
        agg=ast.AggOp.MAX,
        comb=ast.CombOp.COND,
        operands=(
            ast.TensorRef("A", (ast.PIndex("i"),)),
            ast.TensorRef("B", (ast.PIndex("j"),)),
            ast.TensorRef("C", (ast.PBinary(ast.PolyOp.SUB, ast.PIndex("i"), ast.PIndex("j")),)),
        ),
        constraints=(
            ast.Constraint(ast.PIndex("i"), ast.Name("N")),
            ast.Constraint(ast.PIndex("j"), ast.IntLit(2)),
        ),
        default=ast.Name("D"),
    )


@pytest.mark.parametrize(
    ("text", "agg", "comb", "count"),
    [
        ("+(A[i])", ast.AggOp.SUM, ast.CombOp.NONE, 1),
        ("*(A[i] * B[i])", ast.AggOp.PROD, ast.CombOp.MUL, 2),
        ("<(A[i] + B[i])", ast.AggOp.MIN, ast.CombOp.ADD, 2),
        ("=(A[i] == B[i])", ast.AggOp.ASSIGN, ast.CombOp.EQ, 2),
        ("+(A[i] == B[i] ? C[])", ast.AggOp.SUM, ast.CombOp.COND, 3),
    ],
)
def test_aggregation_and_combination(text, agg, comb, count) -> None:
    (statement,) = body(f"O[i: N] = {text};")
    assert (statement.agg, statement.comb, len(statement.operands)) == (agg, comb, count)


def test_zero_dimensional_outputs_and_accesses() -> None:
    plain, sized = body("O[] = +(A[i]); P[:] = +(C[]);")
    assert plain.out == ast.OutSpec("O", (), None)
    assert sized.out == ast.OutSpec("P", (), ())
    assert sized.operands == (ast.TensorRef("C", ()),)
    assert str(plain.out) == "O[]" and str(sized.out) == "P[:]"
    (unsized,) = body("O[i] = +(A[i]);")  # missing sizes are a semantic error (E-SHAPE)
    assert unsized.out == ast.OutSpec("O", (ast.PIndex("i"),), None)


def test_aggregation_after_assignment_operator() -> None:
    assign, larger, smaller = body("O[i: N] = =(A[i]); P[i: N] =>(A[i]); Q[i: N] =<(A[i]);")
    assert (assign.agg, larger.agg, smaller.agg) == (ast.AggOp.ASSIGN, ast.AggOp.MAX, ast.AggOp.MIN)
    failure = error("O[i: N] ==(A[i]);")
    assert where(failure) == [("E-SYNTAX", 2, 9)]
    assert "= =(" in failure.message


def test_modifiers_in_either_order() -> None:
    first, second = body(
        "O[i: N] = +(A[i]), i < 2 no_defract default B; P[i: N] = +(A[i]) default B no_defract;"
    )
    for statement in (first, second):
        assert statement.no_defract and statement.default == ast.Name("B")
    (plain,) = body("O[i: N] = +(A[i]);")
    assert not plain.no_defract and plain.default is None


def test_repeated_and_detached_modifiers() -> None:
    assert where(error("O[i: N] = +(A[i]) no_defract no_defract;")) == [("E-SYNTAX", 2, 30)]
    assert where(error("O[i: N] = +(A[i]) default B no_defract default C;")) == [
        ("E-SYNTAX", 2, 40)
    ]
    detached = error("O[i: N] = +(A[i]); no_defract;")
    assert where(detached) == [("E-SYNTAX", 2, 20)]
    assert "modifier" in detached.message
    assert where(error("O = A default B;")) == [("E-SYNTAX", 2, 7)]
    assert where(error("O[i: N] = +(A[i]) no_defract, i < 2;")) == [("E-SYNTAX", 2, 29)]


def test_attributes() -> None:
    first, second = body("[[pid(Convolution, pool)]] [[fast]] O = A; [[pid(x)]] P[i: N] = +(A[i]);")
    assert first.attrs == (ast.Attribute("pid", ("Convolution", "pool")), ast.Attribute("fast", ()))
    assert second.attrs == (ast.Attribute("pid", ("x",)),)
    assert str(first) == "[[pid(Convolution, pool)]] [[fast]] O = A;"
    assert where(error("[[pid(3)]] O = A;")) == [("E-SYNTAX", 2, 7)]
    assert where(error("[[pid()]] O = A;")) == [("E-SYNTAX", 2, 7)]
    assert where(error("[[Pid]] O = A;")) == [("E-SYNTAX", 2, 3)]
    assert where(error("[[pid]];")) == [("E-SYNTAX", 2, 8)]


def test_calls_including_operator_names() -> None:
    assert value("add(A, mul(B, 2))") == ast.Call(
        "add", (ast.Name("A"), ast.Call("mul", (ast.Name("B"), ast.IntLit(2))))
    )
    assert value("Gather(A)") == ast.Call("Gather", (ast.Name("A"),))
    assert value("functions(A)") == ast.Call("functions", (ast.Name("A"),))
    assert where(error("O = exp();")) == [("E-SYNTAX", 2, 9)]


def test_primed_names() -> None:
    function = parse("function (A') -> (B') { B'[i': N] = +(A'[i']); }")
    (statement,) = function.body
    assert statement.target == "B'"
    assert statement.operands[0] == ast.TensorRef("A'", (ast.PIndex("i'"),))
    failure = error("O = A'';")
    assert where(failure) == [("E-LEX", 2, 7)]
    assert "prime" in failure.message


# ---- precedence (spec 3.2) and the conditional (spec 3.3) ------------------------------------


@pytest.mark.parametrize(
    ("text", "grouped"),
    [
        ("2 - 3 - A * 4 / 2", "(2 - 3) - ((A * 4) / 2)"),
        ("A < B == C < D", "(A < B) == (C < D)"),
        ("1 << 2 + A", "1 << (2 + A)"),
        ("A & 1 == 1", "A & (1 == 1)"),
        ("A ^ B | C & D", "A ^ (B | (C & D))"),
        ("-A * B", "(-A) * B"),
        ("- -A", "-(-A)"),
        ("A--B", "A - (-B)"),
        ("~A & B", "(~A) & B"),
        ("A >> 1 << 2", "(A >> 1) << 2"),
        ("A != B & C >= D", "(A != B) & (C >= D)"),
        ("A ^ B ^ C", "(A ^ B) ^ C"),
        ("A | B | C", "(A | B) | C"),
        ("C ? A + 1 : B * 2", "C ? (A + 1) : (B * 2)"),
        ("A <= B == C > D", "(A <= B) == (C > D)"),
    ],
)
def test_precedence(text: str, grouped: str) -> None:
    assert value(text) == value(grouped)


def test_precedence_structure() -> None:
    assert str(value("2 - 3 - A * 4 / 2")) == "((2 - 3) - ((A * 4) / 2))"
    assert str(value("A ^ B | C & D")) == "(A ^ (B | (C & D)))"
    assert value("-1") == ast.Unary(ast.UnaryOp.NEG, ast.IntLit(1))


@pytest.mark.parametrize(
    ("text", "column"),
    [("A < B < C", 11), ("A == B == C", 12), ("A == B != C", 12), ("A < B > C <= D", 11)],
)
def test_comparisons_do_not_chain(text: str, column: int) -> None:
    failure = error(f"O = {text};")
    assert where(failure) == [("E-SYNTAX", 2, column)]
    assert "chain" in failure.message


def test_conditional_nesting() -> None:
    inner = ast.Ternary(ast.Name("C"), ast.IntLit(5), ast.IntLit(6))
    assert value("A ? C ? 5 : 6 : 7") == ast.Ternary(ast.Name("A"), inner, ast.IntLit(7))
    assert value("A ? 1 : (C ? 5 : 6)") == ast.Ternary(ast.Name("A"), ast.IntLit(1), inner)
    assert value("(C ? 5 : 6) ? 1 : 2") == ast.Ternary(inner, ast.IntLit(1), ast.IntLit(2))
    failure = error("O = A ? 1 : C ? 2 : 3;")
    assert where(failure) == [("E-SYNTAX", 2, 15)]
    assert "parenthes" in failure.message


# ---- index polynomials -----------------------------------------------------------------------


def poly(text: str) -> ast.PolyExpr:
    (statement,) = body(f"O[i: N] = +(A[{text}]);")
    return statement.operands[0].indices[0]


def test_juxtaposition() -> None:
    twice = ast.PBinary(ast.PolyOp.MUL, ast.PConst(2), ast.PIndex("i"))
    assert poly("2i") == twice
    assert poly("2 i") == twice
    assert poly("2*i") == twice
    assert poly("0x10") == ast.PBinary(ast.PolyOp.MUL, ast.PConst(0), ast.PIndex("x10"))
    assert poly("-2i'") == ast.PNeg(ast.PBinary(ast.PolyOp.MUL, ast.PConst(2), ast.PIndex("i'")))
    assert poly("3 * 2k") == ast.PBinary(
        ast.PolyOp.MUL, ast.PConst(3), ast.PBinary(ast.PolyOp.MUL, ast.PConst(2), ast.PIndex("k"))
    )


def test_polynomial_precedence() -> None:
    assert poly("i + 2 * j - k / N") == poly("(i + (2 * j)) - (k / N)")
    assert poly("-i + 1") == ast.PBinary(ast.PolyOp.ADD, ast.PNeg(ast.PIndex("i")), ast.PConst(1))
    assert str(poly("(i + 1) / 2")) == "((i + 1) / 2)"


def test_float_in_polynomial() -> None:
    assert where(error("O[i: N] = +(A[i + 0.5]);")) == [("E-SYNTAX", 2, 19)]
    assert where(error("O[i: N] = +(A[2e3 * i]);")) == [("E-SYNTAX", 2, 15)]


def test_constraints() -> None:
    (statement,) = body("O[i: N] = +(A[i]), i - 2 < N - 1, 2 * i < 5;")
    assert statement.constraints == (
        ast.Constraint(
            ast.PBinary(ast.PolyOp.SUB, ast.PIndex("i"), ast.PConst(2)),
            ast.Binary(BinaryOp.SUB, ast.Name("N"), ast.IntLit(1)),
        ),
        ast.Constraint(ast.PBinary(ast.PolyOp.MUL, ast.PConst(2), ast.PIndex("i")), ast.IntLit(5)),
    )
    failure = error("O[i: N] = +(A[i]), i <= 2;")
    assert where(failure) == [("E-SYNTAX", 2, 22)]
    assert "'<='" in failure.message
    # `i` lexes as a function name here; the error is at the second comparison.
    assert where(error("O[i: N] = +(A[i]), 0 <= i < 2;")) == [("E-SYNTAX", 2, 27)]


# ---- literals --------------------------------------------------------------------------------


def test_integer_literals() -> None:
    assert value("007") == ast.IntLit(7)
    assert value("9223372036854775807") == ast.IntLit(2**63 - 1)
    failure = error("O = 9223372036854775808;")
    assert where(failure) == [("E-LEX", 2, 5)]
    assert "64-bit" in failure.message
    assert where(error("O[i: N] = +(A[99999999999999999999 * i]);")) == [("E-LEX", 2, 15)]
    assert where(error(f"O = {'9' * 5000};")) == [("E-LEX", 2, 5)]  # beyond int()'s limit
    assert value(f"{'0' * 5000}12") == ast.IntLit(12)


@pytest.mark.parametrize(
    ("text", "number"),
    [("1.5", 1.5), ("2e3", 2000.0), ("1.5e-3", 0.0015), ("2E0", 2.0), ("0.5E+2", 50.0)],
)
def test_float_literals(text: str, number: float) -> None:
    literal = value(text)
    assert literal == ast.FloatLit(number)
    assert literal.text == text and str(literal) == text


def test_float_literal_range() -> None:
    assert value("3.4028235e38") == ast.FloatLit(3.4028235e38)
    assert value("1e-50") == ast.FloatLit(1e-50)  # underflows to 0 in float32: finite
    for text in ("1e39", "3.4028236e38", "1e400", "9" * 400 + ".0"):
        failure = error(f"O = {text};")
        assert where(failure) == [("E-LEX", 2, 5)]
        assert "float32" in failure.message


@pytest.mark.parametrize(
    ("text", "column", "spelling"),
    [("1.", 9, "1."), (".5", 9, ".5"), ("1..5e3", 9, "1..5e3"), ("1.2.3e1", 9, "1.2.3e1")],
)
def test_malformed_numbers(text: str, column: int, spelling: str) -> None:
    failure = error(f"O = A + {text};")
    assert where(failure) == [("E-LEX", 2, column)]
    assert f"'{spelling}'" in failure.message


@pytest.mark.parametrize(("text", "column"), [("1.2e", 8), ("0x10", 6), ("2i", 6)])
def test_number_followed_by_name(text: str, column: int) -> None:
    assert where(error(f"O = {text};")) == [("E-SYNTAX", 2, column)]


# ---- lexical errors --------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["@", "`", "%", "!", '"', "#", "$", "\\", "é"])
def test_characters_that_start_no_token(char: str) -> None:
    failure = error(f"O = A {char} B;")
    assert where(failure) == [("E-LEX", 2, 7)]


def test_not_equal_is_a_token() -> None:
    assert value("A != B") == ast.Binary(BinaryOp.NE, ast.Name("A"), ast.Name("B"))


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("O[default: N] = +(A[i]);", 3),
        ("O[i: N] = +(A[no_defract]);", 15),
        ("function = A;", 1),
        ("O = default(A);", 5),
        ("O = polynomial(A);", 5),
        ("O[expression: N] = +(A[i]);", 3),
        ("[[contraction]] O = A;", 3),
    ],
)
def test_keywords_are_never_names(text: str, column: int) -> None:
    failure = error(text)
    assert where(failure) == [("E-SYNTAX", 2, column)]
    assert "keyword" in failure.message or "reserved" in failure.message


def test_upper_case_keyword_is_a_name() -> None:
    assert value("FUNCTION + Default") == ast.Binary(
        BinaryOp.ADD, ast.Name("FUNCTION"), ast.Name("Default")
    )


# ---- syntax errors and their messages --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "column"),
    [("O = A; // note", 8), ("O = A // 2;", 7), ("/* c */ O = A;", 1), ("O = A /* c */;", 7)],
)
def test_comments_are_explained(text: str, column: int) -> None:
    failure = error(text)
    assert where(failure) == [("E-SYNTAX", 2, column)]
    assert "no comment" in failure.message


@pytest.mark.parametrize(
    ("text", "column", "expected"),
    [
        ("O = A\nP = A;", 1, "expected ';', '(' or an operator"),
        ("O[i: N] = +(-A[i]);", 13, "expected a tensor name"),
        ("O[i: N] = +(A[i] - B[i]);", 18, "expected ')', '*', '+' or '=='"),
        ("O[i: N] = +(A[i] / B[i]);", 18, "expected ')', '*', '+' or '=='"),
        ("O[i: N] = +(A[i]) * 2;", 19, "expected ';', ',', 'default' or 'no_defract'"),
        ("O[i: N] = +(1[]);", 13, "expected a tensor name"),
        ("O = A[i];", 6, "expected ';', '(' or an operator"),
        ("O[i: N] = +(A[i;", 16, "expected ',', ']' or an operator"),
        ("O[i: N] = +(A[i] + B[i] ? C[i]);", 18, "only '=='"),
        ("O = (A + B;", 11, "expected ')'"),
        ("O = A -> B;", 8, "expected an expression"),
        ("O[:N] = +(A[i]);", 4, "expected ']'"),
        ("O = i + 1;", 7, "expected '(' ('i' is an index name"),
        ("O[i:] = +(A[i]);", 5, "expected an expression"),
    ],
)
def test_syntax_error_messages(text: str, column: int, expected: str) -> None:
    failure = error(text)
    assert failure.code == "E-SYNTAX"
    assert (failure.line, failure.column) == (2 if "\n" not in text else 3, column)
    assert expected in failure.message
    assert not INTERNAL.search(str(failure))


def test_unexpected_token_is_quoted_as_written() -> None:
    failure = error("O = A B;")
    assert failure.message.startswith("unexpected 'B': expected ")


def test_missing_semicolon_before_closing_brace() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse("function (A) -> (O) { O = A }")
    assert where(info.value) == [("E-SYNTAX", 1, 28)]  # just after the statement
    assert info.value.message == (
        "missing ';' after the statement: expected ';', '(' or an operator before '}'"
    )


def test_missing_semicolon_on_the_last_statement_points_after_it() -> None:
    source = "function (A) -> (O) {\n  T = A * 2;\n  O = T + 1\n\n}"
    with pytest.raises(TileSyntaxError) as info:
        parse(source)
    assert where(info.value) == [("E-SYNTAX", 3, 12)]  # after `O = T + 1`, not on the `}` line
    assert str(info.value).endswith(" 3 |   O = T + 1\n   |            ^")


@pytest.mark.parametrize(
    ("source", "position", "words"),
    [
        ("function (A) -> (O) { O = A; } P", (1, 32), "after the end of the function"),
        ("function (A) -> (O) { O = A; }}", (1, 31), "after the end of the function"),
        ("function (A) -> (O) { O = A;", (1, 29), "end of text: expected '}'"),
        ("function (A) -> (O) { O = A", (1, 28), "end of text: expected ';'"),
        ("function (A) -> (O)", (1, 20), "end of text: expected '{'"),
        ("", (1, 1), "end of text: expected 'function'"),
        ("function (A) -> () { }", (1, 18), "expected a tensor name"),
        ("function (A, ) -> (O) { }", (1, 14), "expected a tensor name"),
        ("function (a) -> (O) { }", (1, 11), "unexpected 'a'"),
        ("function A -> (O) { }", (1, 10), "unexpected 'A': expected '('"),
        ("O = A;", (1, 1), "expected 'function'"),
        ("function (A) -> (O) { O = A; }\nfunction (A) -> (O) { }", (2, 1), "after the end"),
    ],
)
def test_function_level_errors(source: str, position: tuple[int, int], words: str) -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse(source)
    assert (info.value.line, info.value.column) == position
    assert words in info.value.message
    assert not INTERNAL.search(str(info.value))


def test_error_display_has_source_line_and_caret() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse("function (A) -> (O) {\n  O = A @ 2;\n}")
    assert str(info.value) == (
        "error[E-LEX] 2:9: the character '@' cannot start a token\n"
        " 2 |   O = A @ 2;\n"
        "   |         ^"
    )


# ---- error recovery --------------------------------------------------------------------------


def test_every_bad_statement_is_reported() -> None:
    failure = error("O = A +;\nP = A;\nQ = A @ 2;\nR[i: N] = +(A[i]) * 2;\nS = (A;")
    assert where(failure) == [
        ("E-SYNTAX", 2, 8),
        ("E-LEX", 4, 7),
        ("E-SYNTAX", 5, 19),
        ("E-SYNTAX", 6, 7),
    ]
    assert str(failure).endswith("(4 errors)")


def test_recovery_reports_header_body_and_tail_errors() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse("function (A, ) -> (O) {\n  O = A +;\n  P = B\n} Q")
    assert where(info.value) == [
        ("E-SYNTAX", 1, 14),
        ("E-SYNTAX", 2, 10),
        ("E-SYNTAX", 3, 8),  # the missing ';' after `P = B`
        ("E-SYNTAX", 4, 3),
    ]


def test_recovery_keeps_semantic_syntax_errors_of_good_statements() -> None:
    # Errors found while building the AST (here a too-large literal) are reported even when
    # another statement fails to parse.
    failure = error("O = 99999999999999999999;\nP = A +;\nQ = A < B < C;")
    assert where(failure) == [("E-LEX", 2, 5), ("E-SYNTAX", 3, 8), ("E-SYNTAX", 4, 11)]


def test_errors_found_while_building_are_all_reported() -> None:
    failure = error("O = 1e39; P = A < B < C; Q = C ? 1 : D ? 2 : 3;")
    assert where(failure) == [("E-LEX", 2, 5), ("E-SYNTAX", 2, 21), ("E-SYNTAX", 2, 40)]


# ---- positions -------------------------------------------------------------------------------


def test_spans() -> None:
    function = parse(
        "function (A[N], B) -> (O, P) {\n"
        "  [[pid(x)]] O[i, j: N, 2] = +(A[2i + j] * B[-i]), i + 1 < N no_defract;\n"
        "\tP = -A + exp(B) * (C ? 1.5 : 2);\n"
        "}"
    )
    (a, b), outputs = function.inputs, function.outputs
    assert (a.span, a.dims[0].span, b.span) == (Span(1, 11), Span(1, 13), Span(1, 17))
    assert [o.span for o in outputs] == [Span(1, 24), Span(1, 27)]
    contraction, assign = function.body
    assert contraction.attrs[0].span == Span(2, 5)
    assert contraction.span == contraction.out.span == Span(2, 14)
    assert contraction.out.indices[0].span == Span(2, 16)
    assert contraction.out.sizes[1].span == Span(2, 25)
    assert contraction.agg_span == Span(2, 30)
    left, right = contraction.operands
    assert (left.span, right.span) == (Span(2, 32), Span(2, 44))
    shifted = left.indices[0]
    assert (shifted.span, shifted.lhs.span, shifted.rhs.span) == (
        Span(2, 37),
        Span(2, 34),
        Span(2, 39),
    )
    scaled = shifted.lhs  # "2i": the product, its 2 and its i
    assert (scaled.lhs.span, scaled.rhs.span) == (Span(2, 34), Span(2, 35))
    assert right.indices[0].span == Span(2, 46)  # PNeg: the '-'
    assert contraction.constraints[0].span == Span(2, 52)
    assert assign.span == Span(3, 2)
    total = assign.value
    assert total.span == Span(3, 9)  # '+'
    assert total.lhs.span == Span(3, 6)  # unary '-'
    assert total.lhs.operand.span == Span(3, 7)
    product = total.rhs
    assert (product.span, product.lhs.span) == (Span(3, 18), Span(3, 11))
    ternary = product.rhs
    assert (ternary.span, ternary.then.span, ternary.other.span) == (
        Span(3, 23),
        Span(3, 25),
        Span(3, 31),
    )


def test_constraint_span_is_its_first_token() -> None:
    (statement,) = body("O[i: N] = +(A[i]),\n   (i + 1) / 2 < N;")
    assert statement.constraints[0].span == Span(3, 4)


def test_only_line_feeds_end_lines() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse("function (A) -> (O) {\r\n  O = A @ 2;\r\n}")
    assert where(info.value) == [("E-LEX", 2, 9)]
    assert " 2 |   O = A @ 2;\n" in str(info.value)
    with pytest.raises(TileSyntaxError) as info:
        parse("function (A) -> (O) {\r  O = A @ 2;\r}")  # a carriage return is whitespace
    assert where(info.value) == [("E-LEX", 1, 31)]
    assert str(info.value).endswith("^")


def test_error_column_counts_characters_of_tabbed_lines() -> None:
    failure = error("\tO = A @ 2;")
    assert where(failure) == [("E-LEX", 2, 8)]
    assert "     O = A @ 2;" in str(failure)


# ---- warnings --------------------------------------------------------------------------------


def test_xor_mixed_with_or_warns() -> None:
    warnings: list = []
    parse(
        "function (A, B, C) -> (O) {\n O = A ^ B | C;\n P = A | B ^ C;\n"
        " Q = A ^ (B | C);\n R = (A ^ B) | C;\n S = f(A | B) ^ C;\n T = A ^ B & C;\n}",
        warnings,
    )
    assert [(w.code, w.line, w.column) for w in warnings] == [("W-PREC", 2, 8), ("W-PREC", 3, 12)]
    assert "parentheses" in warnings[0].message


def test_warnings_are_optional() -> None:
    assert value("A ^ B | C") == value("A ^ (B | C)")


# ---- size and concurrency --------------------------------------------------------------------


def large_program(count: int) -> str:
    lines = ["function (A[M, K], B[K, N], C[M, N]) -> (O) {"]
    for n in range(count):
        lines.append(
            [
                f"  T{n}[i, j: M, N] = +(A[i, k] * B[k, j]), i + 1 < M default C no_defract;",
                f"  T{n} = (T{n - 1} + 2.5 * C) / 3 - exp(-A < 2 ? C : T{n - 1});",
                f"  [[pid(step)]] T{n}[i: M] = >(T{n - 1}[i, 2j + 1] == C[i, j] ? A[i, j]);",
                f"  T{n} = (T{n - 1} << 2 | (T{n - 3} & ~T{n - 2})) ^ max(T{n - 1}, 0);",
            ][n % 4]
        )
    lines += [f"  O = T{count - 1};", "}"]
    return "\n".join(lines)


def test_large_program() -> None:
    function = parse(large_program(2000))
    assert len(function.body) == 2001
    assert [type(s).__name__ for s in function.body[:4]] == [
        "ContractionStmt",
        "Assign",
        "ContractionStmt",
        "Assign",
    ]
    assert function.body[2].attrs == (ast.Attribute("pid", ("step",)),)
    assert function.body[-1] == ast.Assign("O", ast.Name("T1999"))


def test_deep_nesting_needs_no_recursion() -> None:
    # The AST is built during the LALR parse, so deep nesting cannot overflow the stack.
    nested = parse(f"function (A) -> (O) {{ O = {'(' * 3000}A{')' * 3000}; }}")
    assert nested.body[0].value == ast.Name("A")
    chain = parse(f"function (A) -> (O) {{ O = {' + '.join(['A'] * MAX_NESTING)}; }}")
    assert chain.body[0].value.op is BinaryOp.ADD
    # Deeper expressions are measured without recursion too, and stopped (E-LIMIT) so that
    # the recursive stages after the parser never see them.
    with pytest.raises(TileSyntaxError) as caught:
        parse(f"function (A) -> (O) {{ O = {' + '.join(['A'] * 3000)}; }}")
    assert caught.value.code == "E-LIMIT"


def test_parsing_in_threads() -> None:
    sources = [large_program(40 + n) for n in range(4)]
    expected = [parse(s) for s in sources]
    results: dict[int, ast.FunctionDef] = {}

    def work(index: int) -> None:
        for _ in range(3):
            results[index] = parse(sources[index])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[n] for n in range(4)] == expected
