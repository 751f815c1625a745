"""Property tests of `tile.lang.parse`: printed ASTs parse back, mutated programs fail cleanly."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SHARED
from tests.lang.test_parse import INTERNAL
from tile.errors import TileError, TileSyntaxError
from tile.lang import syntax as ast
from tile.lang.parse import parse

PROPERTY_SETTINGS = settings(
    deadline=None,
    derandomize=True,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)

# ---- random ASTs -------------------------------------------------------------------------------

# Fixed pools (generating names from a regex is slow), with the awkward spellings: primes, digits,
# keywords in other cases, names that start like keywords or like exponents.
upper_names = st.sampled_from(["A", "B2", "Conv_1", "X'", "N", "FUNCTION", "Default", "E1"])
lower_names = st.sampled_from(
    ["i", "j", "kx", "c_o", "n'", "x10", "e", "e5", "defaults", "default'"]
)
names = upper_names.map(ast.Name)
int_values = st.one_of(st.integers(0, 20), st.integers(0, 2**63 - 1))
float_literals = (
    st.floats(0, 3e38, allow_nan=False, allow_infinity=False)
    .map(abs)
    .map(lambda number: ast.FloatLit(number, repr(number)))
)


def extend_expression(children: st.SearchStrategy[ast.Expr]) -> st.SearchStrategy[ast.Expr]:
    arguments = st.lists(children, min_size=1, max_size=3).map(tuple)
    return st.one_of(
        st.builds(ast.Unary, st.sampled_from(ast.UnaryOp), children),
        st.builds(ast.Binary, st.sampled_from(ast.BinaryOp), children, children),
        st.builds(ast.Ternary, children, children, children),
        st.builds(ast.Call, st.one_of(lower_names, upper_names), arguments),
    )


expressions = st.recursive(
    st.one_of(int_values.map(ast.IntLit), float_literals, names), extend_expression, max_leaves=8
)


def extend_polynomial(children: st.SearchStrategy[ast.PolyExpr]) -> st.SearchStrategy:
    return st.one_of(
        st.builds(ast.PBinary, st.sampled_from(ast.PolyOp), children, children),
        st.builds(ast.PNeg, children),
    )


polynomials = st.recursive(
    st.one_of(lower_names.map(ast.PIndex), upper_names.map(ast.PSize), int_values.map(ast.PConst)),
    extend_polynomial,
    max_leaves=6,
)
polynomial_lists = st.lists(polynomials, min_size=1, max_size=3).map(tuple)
attributes = st.builds(
    ast.Attribute,
    lower_names,
    st.lists(st.one_of(lower_names, upper_names), max_size=2).map(tuple),
)
attribute_lists = st.lists(attributes, max_size=2).map(tuple)
accesses = st.builds(ast.TensorRef, upper_names, st.lists(polynomials, max_size=3).map(tuple))


@st.composite
def out_specs(draw: st.DrawFn) -> ast.OutSpec:
    name = draw(upper_names)
    match draw(st.sampled_from(["O[]", "O[:]", "O[i]", "O[i: N]"])):
        case "O[]":
            return ast.OutSpec(name, (), None)
        case "O[:]":
            return ast.OutSpec(name, (), ())
        case "O[i]":
            return ast.OutSpec(name, draw(polynomial_lists), None)
        case _:
            sizes = draw(st.lists(expressions, min_size=1, max_size=3).map(tuple))
            return ast.OutSpec(name, draw(polynomial_lists), sizes)


@st.composite
def contractions(draw: st.DrawFn) -> ast.ContractionStmt:
    comb = draw(st.sampled_from(ast.CombOp))
    count = {ast.CombOp.NONE: 1, ast.CombOp.COND: 3}.get(comb, 2)
    return ast.ContractionStmt(
        out=draw(out_specs()),
        agg=draw(st.sampled_from(ast.AggOp)),
        comb=comb,
        operands=tuple(draw(st.lists(accesses, min_size=count, max_size=count))),
        constraints=tuple(
            draw(st.lists(st.builds(ast.Constraint, polynomials, expressions), max_size=2))
        ),
        default=draw(st.none() | names),
        no_defract=draw(st.booleans()),
        attrs=draw(attribute_lists),
    )


statements = st.one_of(
    st.builds(ast.Assign, upper_names, expressions, attribute_lists), contractions()
)
inputs = st.builds(ast.InputDecl, upper_names, st.none() | st.lists(names, max_size=3).map(tuple))
functions = st.builds(
    ast.FunctionDef,
    st.lists(inputs, max_size=3).map(tuple),
    st.lists(names, min_size=1, max_size=3).map(tuple),
    st.lists(statements, max_size=4).map(tuple),
)


@PROPERTY_SETTINGS
@given(functions)
def test_printed_function_parses_back(function: ast.FunctionDef) -> None:
    warnings: list = []
    assert parse(str(function), warnings) == function
    assert warnings == []  # printing parenthesises every operation


# ---- random mutations of valid programs ---------------------------------------------------------

SOURCES = [
    json.loads(path.read_text())["source"]
    for path in sorted(SHARED.glob("spec/cases/*.json"))[::10]
    + sorted(SHARED.glob("conformance/cases/*.json"))[::10]
] or ["function (A[N]) -> (O) { O[i: N] = +(A[i]); }"]
FRAGMENTS = [
    *"()[]{};,:?=<>+-*/^|&~!'.@#$`%\" \n\t",
    *("[[", "]]", "==", "<=", "<<", "->", "!=", "//", "/*", "1.", ".5", "1..5", "0x10", "2i"),
    *("1e39", "99999999999999999999", "default", "no_defract", "function", "polynomial"),
    *("A", "i", "B''", "= =(", "==(", "? A[i]", " : ", "exp(", "O[i: N] = +(A[i]);"),
]


@st.composite
def mutated_sources(draw: st.DrawFn) -> str:
    source = draw(st.sampled_from(SOURCES))
    fragments = st.sampled_from(FRAGMENTS) | st.characters(codec="ascii")
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(source)))
        match draw(st.sampled_from(["insert", "delete", "replace"])):
            case "insert":
                source = source[:position] + draw(fragments) + source[position:]
            case "delete":
                source = source[:position] + source[position + draw(st.integers(1, 8)) :]
            case _:
                source = source[:position] + draw(fragments) + source[position + 1 :]
    return source


def check_parse_is_clean(source: str) -> None:
    try:
        function = parse(source)
    except TileError as error:
        assert isinstance(error, TileSyntaxError)
        positions = [(d.line, d.column) for d in error.diagnostics]
        assert positions == sorted(positions)
        assert all(
            1 <= line <= source.count("\n") + 1 and column >= 1 for line, column in positions
        )
        assert all(d.code in ("E-LEX", "E-SYNTAX") for d in error.diagnostics)
        assert "^" in str(error) or not source.strip()
        assert not INTERNAL.search(str(error))
    else:
        assert parse(str(function)) == function


@settings(PROPERTY_SETTINGS, max_examples=200)
@given(mutated_sources())
def test_mutated_program_parses_or_fails_cleanly(source: str) -> None:
    check_parse_is_clean(source)


@PROPERTY_SETTINGS
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
def test_random_text_parses_or_fails_cleanly(text: str) -> None:
    check_parse_is_clean(text)
    check_parse_is_clean(f"function (A[N], B) -> (O) {{ {text} }}")
