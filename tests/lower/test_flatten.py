"""Flattening: the integer lattice helpers, the worked examples of spec 8.13, golden flat
tables, and the central property — the flat form iterates exactly the valid tuples of the
contraction (spec 8.4), each once, with the same operand elements."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tile
from tests.lower.strategies import contractions, valid_tuples
from tile.lower.flatten import flatten
from tile.lower.lattice import Congruence, column_echelon, integral_lattice, multiply, solve_integer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tile.bind.program import BoundOp, BoundProgram
    from tile.lower.flat import FlatContraction


def bind(source: str, **shapes: tuple[int, ...]) -> BoundProgram:
    return tile.Function(source).bind({k: np.zeros(v, np.float32) for k, v in shapes.items()})


def flat_of(source: str, **shapes: tuple[int, ...]) -> FlatContraction:
    bound = bind(source, **shapes)
    (op,) = [op for op in bound.ops if op.contraction is not None]
    return flatten(op, bound.bindings)


def flat_tuples(flat: FlatContraction) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(output offset, operand offsets) of every iteration of the flat form that passes its
    divisibility checks and guards."""
    if flat.empty:
        return
    coordinates = [range(size) for size in flat.ranges[: flat.outputs]]
    reductions = [range(flat.ranges[k]) for k in flat.reductions]
    for point in itertools.product(*coordinates):
        values = list(point)
        divisible = True
        for derived in flat.derived:
            numerator = sum(c * v for c, v in zip(derived.numerator, values, strict=False))
            numerator += derived.const
            divisible = divisible and numerator % derived.divisor == 0
            values.append(numerator // derived.divisor)
        if not divisible:
            continue
        for loop in itertools.product(*reductions):
            variables = values + list(loop)
            guards = (
                sum(c * v for c, v in zip(g.lhs, variables, strict=True)) <= g.rhs
                for g in flat.constraints
            )
            if not all(guards):
                continue
            offsets = []
            for access in flat.access:
                offset = access.offset + sum(
                    s * v for s, v in zip(access.strides, variables, strict=True)
                )
                assert 0 <= offset < access.size, (str(flat), access.tensor, variables)
                offsets.append(offset)
            yield offsets[0], tuple(offsets[1:])


# ---- lattice -----------------------------------------------------------------------------------


def determinant(matrix: list[list[int]]) -> int:
    size = len(matrix)
    if size == 0:
        return 1
    return sum(
        (-1) ** column
        * matrix[0][column]
        * determinant([row[:column] + row[column + 1 :] for row in matrix[1:]])
        for column in range(size)
    )


@given(st.lists(st.lists(st.integers(-4, 4), min_size=3, max_size=3), min_size=0, max_size=3))
def test_column_echelon_is_a_unimodular_change_of_basis(rows: list[list[int]]) -> None:
    form = column_echelon(rows, 3)
    assert multiply(rows, form.unimodular) == form.echelon if rows else True
    assert abs(determinant(form.unimodular)) == 1
    for k, pivot in enumerate(form.pivot_rows):
        assert form.echelon[pivot][k] > 0
        assert all(form.echelon[pivot][j] == 0 for j in range(k + 1, 3))
        assert all(form.echelon[r][k] == 0 for r in range(pivot))
    for row in form.echelon:
        assert all(value == 0 for value in row[form.rank :])


def test_unit_columns_stay_in_place() -> None:
    form = column_echelon([[1, 0, 0], [0, 1, 0]], 3)
    assert form.unimodular == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert form.pivot_rows == (0, 1)


def test_solve_integer() -> None:
    solutions = solve_integer([[2, 4]], [6])
    assert solutions is not None
    x0 = solutions.particular
    assert 2 * x0[0] + 4 * x0[1] == 6
    assert solve_integer([[2, 4]], [5]) is None
    assert solve_integer([[1, 1], [1, 1]], [1, 2]) is None


def test_integral_lattice_of_halves() -> None:
    # i/2 integral and (i + j + 1)/2 integral: i even, j odd.
    lattice = integral_lattice([Congruence((1, 0), 0, 2), Congruence((1, 1), 1, 2)], 2)
    assert lattice is not None
    points = {
        tuple(
            o + sum(b * u for b, u in zip(row, (u0, u1), strict=True))
            for o, row in zip(lattice.origin, lattice.basis, strict=True)
        )
        for u0 in range(-3, 4)
        for u1 in range(-3, 4)
    }
    assert all(i % 2 == 0 and j % 2 == 1 for i, j in points)
    assert (0, 1) in points and (2, -1) in points
    assert integral_lattice([Congruence((1,), 0, 2), Congruence((1,), 1, 2)], 1) is None


# ---- spec 8.13 ---------------------------------------------------------------------------------


def test_worked_example_1_bounds_and_guards() -> None:
    flat = flat_of("function (I[N]) -> (O) { O[i: 3] = >(I[2 * i + j]), j < 2; }", I=(5,))
    assert flat.names == ("i", "j")
    assert flat.ranges == (3, 2)
    assert [a.strides for a in flat.access] == [(1, 0), (2, 1)]
    assert [a.offset for a in flat.access] == [0, 0]
    assert [(c.lhs, c.rhs) for c in flat.constraints] == [((2, 1), 4)]
    assert flat.outputs == 1 and list(flat.reductions) == [1]


def test_worked_example_2_fractional_index() -> None:
    flat = flat_of("function (I[N]) -> (O) { O[i: 6] = +(I[i / 2]); }", I=(3,))
    # The divisibility-guard alternative: i iterates 0..5, the derived u = i / 2 must be exact.
    assert flat.ranges[:1] == (6,)
    (derived,) = flat.derived
    assert (derived.numerator[:1], derived.const, derived.divisor) == ((1,), 0, 2)
    assert flat.access[1].strides == (0, 1)
    assert flat.needs_hit  # elements 1, 3, 5 are never written
    assert sorted(flat_tuples(flat)) == [(0, (0,)), (2, (1,)), (4, (2,))]


def test_worked_example_3_output_reduction() -> None:
    flat = flat_of(
        "function (I[N], K[M]) -> (O) { O[2 * x + k: 7] = +(I[x] * K[k]); }", I=(3,), K=(3,)
    )
    assert flat.names == ("o0", "x")
    assert flat.ranges == (7, 3)
    output, image, kernel = flat.access
    assert output.strides == (1, 0)
    assert image.strides == (0, 1)
    assert kernel.strides == (1, -2)
    assert sorted((c.lhs, c.rhs) for c in flat.constraints) == [((-1, 2), 0), ((1, -2), 2)]


def test_step_6_examples() -> None:
    plain = flat_of(
        "function (I[N], K[M]) -> (O) { O[x: 5] = +(I[x + i] * K[i]); }", I=(7,), K=(3,)
    )
    assert plain.ranges == (5, 3)
    assert plain.constraints == ()
    shifted = flat_of(
        "function (I[N], K[M]) -> (O) { O[x: 7] = +(I[x + i] * K[i + 1]); }", I=(7,), K=(3,)
    )
    # i in [-1, 1], shifted to start at 0; the two halves of 0 <= x + i <= 6 remain.
    assert shifted.ranges == (7, 3)
    assert shifted.access[1].offset == -1
    assert shifted.access[2].offset == 0
    assert sorted((c.lhs, c.rhs) for c in shifted.constraints) == [((-1, -1), -1), ((1, 1), 7)]


def test_lang_test_unpool_examples() -> None:
    two = flat_of("function (I[N]) -> (O) { O[2 * x + i: 100] = +(I[x]), i < 2; }", I=(50,))
    assert two.ranges == (100, 50)
    four = flat_of("function (I[N]) -> (O) { O[2 * x + i: 100] = +(I[x]), i < 4; }", I=(50,))
    assert len(list(flat_tuples(four))) == 4 * 50 - 2


def test_no_valid_tuple_is_all_unwritten() -> None:
    flat = flat_of(
        "function (I[N]) -> (O) { O[i: 4] = +(I[(i + j) / 2]), (i - j + 1) / 2 < 4; }", I=(4,)
    )
    assert flat.empty and flat.needs_hit
    assert list(flat_tuples(flat)) == []


GOLDEN = {
    "matmul": (
        "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }",
        {"A": (4, 6), "B": (6, 5)},
        """\
C[i, j: 4, 5] = +(A[i, k] * B[k, j])
  output  i: 4  j: 5
  reduce  k: 6
  C  offset 0  strides i: 5  j: 1
  A  offset 0  strides i: 6  k: 1
  B  offset 0  strides j: 1  k: 5""",
    ),
    "convolution": (
        "function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) { O[n, y, x, co: N, H, W, CO] = "
        "+(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]); }",
        {"I": (1, 5, 5, 2), "K": (3, 3, 2, 4)},
        """\
O[n, y, x, co: 1, 5, 5, 4] = +(I[n, ky + y - 1, kx + x - 1, ci] * K[ky, kx, ci, co])
  output  n: 1  y: 5  x: 5  co: 4
  reduce  ky: 3  kx: 3  ci: 2
  O  offset 0  strides n: 100  y: 20  x: 4  co: 1
  I  offset -12  strides n: 50  y: 10  x: 2  ky: 10  kx: 2  ci: 1
  K  offset 0  strides co: 1  ky: 24  kx: 8  ci: 4
  guard   y + ky >= 1
  guard   y + ky <= 5
  guard   x + kx >= 1
  guard   x + kx <= 5""",
    ),
    "pooling": (
        "function (I[N, H]) -> (O) { O[n, y: N, (H + 1) / 2] = >(I[n, 2 * y + j]), j < 2; }",
        {"I": (2, 5)},
        """\
O[n, y: 2, 3] = >(I[n, j + 2*y]), j < 2
  output  n: 2  y: 3
  reduce  j: 2
  O  offset 0  strides n: 3  y: 1
  I  offset 0  strides n: 5  y: 2  j: 1
  guard   2*y + j <= 4""",
    ),
    "strided_output": (
        "function (I[N]) -> (O) { O[2 * i: 2 * N] = +(I[i]); }",
        {"I": (3,)},
        """\
O[2*i: 6] = +(I[i])
  output  o0: 6
  derive  i = (o0) / 2
  O  offset 0  strides o0: 1
  I  offset 0  strides i: 1""",
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_flat_table(name: str) -> None:
    source, shapes, expected = GOLDEN[name]
    assert str(flat_of(source, **shapes)) == expected


# ---- the central property ----------------------------------------------------------------------


def _contraction(bound: BoundProgram) -> BoundOp:
    (op,) = [op for op in bound.ops if op.contraction is not None]
    return op


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions())
def test_flat_form_iterates_exactly_the_valid_tuples(case: object) -> None:
    try:
        bound = tile.Function(case.source).bind(  # type: ignore[attr-defined]
            {k: np.zeros(v, np.float32) for k, v in case.shapes.items()}  # type: ignore[attr-defined]
        )
    except tile.TileError:
        assume(False)
        return
    op = _contraction(bound)
    flat = flatten(op, bound.bindings)
    expected = Counter(valid_tuples(bound, op))
    assert Counter(flat_tuples(flat)) == expected, str(flat)
