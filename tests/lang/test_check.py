"""Shape-free semantic checks (spec 4, 6.4, 8.1, 8.7, 8.12): raised by Function()."""

from __future__ import annotations

import pytest

import tile


def error(source: str) -> tile.TileError:
    with pytest.raises(tile.TileError) as caught:
        tile.Function(source)
    return caught.value


@pytest.mark.parametrize(
    ("source", "code", "position"),
    [
        ("function (A) -> (O) {\n  O = Q + 1;\n  Q = A;\n}", "E-NAME", (2, 7)),
        ("function (A) -> (O) {\n  O = exq(A);\n}", "E-NAME", (2, 7)),
        ("function (A) -> (O) {\n  O = quantize(A);\n}", "E-NAME", (2, 7)),
        ("function (A[N]) -> (O) {\n  O[i: N] = +(A[i]) default Q;\n}", "E-NAME", (2, 29)),
        ("function (A) -> (O) {\n  O = A;\n  O = A + 1;\n}", "E-REDEF", (3, 3)),
        ("function (A[N]) -> (O) {\n  N = 3;\n  O = A;\n}", "E-REDEF", (2, 3)),
        ("function (A) -> (O, P) {\n  O = A;\n}", "E-OUTPUT", (1, 21)),
        ("function (A, A) -> (O) { O = A; }", "E-DUP", (1, 14)),
        ("function (A) -> (O, O) { O = A; }", "E-DUP", (1, 21)),
        ("function (A[A]) -> (O) { O = A; }", "E-DUP", (1, 13)),
        ("function (A[N]) -> (O) { O[i] = +(A[i]); }", "E-SHAPE", (1, 26)),
        ("function (A[N]) -> (O) { O[i: N, N] = +(A[i]); }", "E-SHAPE", (1, 26)),
        ("function (A[N]) -> (O) { O[i: N] = +(A[i]), j < 3; }", "E-INDEX", (1, 45)),
        ("function (I[N]) -> (O) { O[] = =(I[i]); }", "E-ASSIGN", (1, 36)),
        ("function (A) -> (O) { O = max(A); }", "E-ARG", (1, 27)),
        ("function (A) -> (O) { O = as_int(A); }", "E-ARG", (1, 27)),
    ],
)
def test_check_errors(source: str, code: str, position: tuple[int, int]) -> None:
    err = error(source)
    assert err.code == code, str(err)
    assert (err.line, err.column) == position, str(err)


def test_misspelt_function_gets_a_suggestion() -> None:
    assert "did you mean 'exp'" in error("function (A) -> (O) { O = exq(A); }").message


def test_all_statements_checked() -> None:
    source = "function (A) -> (O) {\n  X = exq(A);\n  Y = Z;\n  O = max(A);\n}"
    err = error(source)
    assert [(d.code, d.line) for d in err.diagnostics] == [
        ("E-NAME", 2),
        ("E-NAME", 3),
        ("E-ARG", 4),
    ]
    assert "(3 errors)" in str(err)


@pytest.mark.parametrize(
    "source",
    [
        "function (I) -> (I) { }",
        "function (A, Unused) -> (O) { O = A * 2; }",
        "function (A[N, N]) -> (T) { T[] = +(A[i, i]); }",
        "function (A) -> (O) { O = A * 2; P = O + 1; }",
        "function (A[N]) -> (O) { O[j, i: N, N] = =(A[i]), j < 1; }",
        "function (I[N]) -> (O) { O[3 * n + k: 3 * N] = =(I[n]), k < 3; }",
        "function (A) -> (O) { Ok = assert_small(1 < 2); O = A; }",
        "function () -> (O) { O = 3; }",
    ],
)
def test_valid_programs(source: str) -> None:
    tile.Function(source)
