"""Deep nesting (issue 9): an expression nested beyond `MAX_NESTING` is an E-LIMIT error
raised by the parser, never a RecursionError; anything up to the limit passes every
front-end stage (the device runs are in tests/backends/test_nesting.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tile.lang.parse import MAX_NESTING


def chained_add(depth: int) -> str:
    """`A + A + ... + A`: `depth` levels (a left-deep chain of depth - 1 additions)."""
    return " + ".join(["A"] * depth)


def right_add(depth: int) -> str:
    return "(A + " * (depth - 1) + "A" + ")" * (depth - 1)


def nested_calls(depth: int) -> str:
    return "neg(" * (depth - 1) + "A" + ")" * (depth - 1)


def nested_negations(depth: int) -> str:
    return "-" * (depth - 1) + "A"


def nested_conditionals(depth: int) -> str:
    return "A ? " * (depth - 1) + "A" + " : A" * (depth - 1)


ELEMENTWISE = [chained_add, right_add, nested_calls, nested_negations, nested_conditionals]


def program(expression: str) -> str:
    return f"function (A[N]) -> (O) {{\n  O = {expression};\n}}"


def polynomial_program(depth: int) -> str:
    """An index polynomial `i + 0 + ... + 0` nested `depth` levels, in an access and in a
    constraint, and a size expression `1 + 1 + ...` as deep."""
    poly = " + ".join(["i"] + ["0"] * (depth - 1))
    size = " + ".join(["1"] * depth)
    return (
        f"function (A[N]) -> (O, P) {{\n  O[i: N] = +(A[{poly}]), {poly} < N;\n"
        f"  P[i: {size}] = +(A[i]);\n}}"
    )


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1000, 5000])
@pytest.mark.parametrize("build", ELEMENTWISE, ids=lambda f: f.__name__)
def test_too_deep_expression_is_an_e_limit_error(build, depth: int) -> None:
    with pytest.raises(tile.TileSyntaxError) as caught:
        tile.Function(program(build(depth)))
    error = caught.value
    assert error.code == "E-LIMIT"
    assert error.line == 2 and error.column > 1
    assert f"limit of {MAX_NESTING}" in error.message and "separate statements" in error.message
    assert len(error.diagnostics) == 1


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1000, 5000])
def test_too_deep_polynomial_is_an_e_limit_error(depth: int) -> None:
    with pytest.raises(tile.TileSyntaxError) as caught:
        tile.Function(polynomial_program(depth))
    assert {d.code for d in caught.value.diagnostics} == {"E-LIMIT"}
    assert [d.line for d in caught.value.diagnostics] == [2, 3]  # one per statement


@pytest.mark.parametrize("depth", [1000, 5000, 100_000])
def test_parentheses_alone_do_not_nest(depth: int) -> None:
    function = tile.Function(program("(" * depth + "A" + ")" * depth))
    assert function.bind(A=np.zeros(3, np.float32)).outputs == {"O": ((3,), np.float32)}


def test_the_depth_is_in_the_message() -> None:
    with pytest.raises(tile.TileSyntaxError) as caught:
        tile.Function(program(chained_add(1000)))
    assert "1000 levels" in caught.value.message


@pytest.mark.parametrize("build", ELEMENTWISE, ids=lambda f: f.__name__)
def test_the_limit_itself_passes_the_front_end(build) -> None:
    function = tile.Function(program(build(MAX_NESTING)))
    assert str(function.ast).count("(") >= MAX_NESTING - 1
    bound = function.bind(A=np.ones(3, np.float32))
    assert bound.outputs["O"][0] == (3,)
    assert str(bound)


def test_polynomials_at_the_limit_pass_the_front_end() -> None:
    bound = tile.Function(polynomial_program(MAX_NESTING)).bind(A=np.ones(3, np.float32))
    assert bound.outputs["P"] == ((MAX_NESTING,), np.float32)
