"""Index bounds, emptiness, unboundedness and residual guards (spec 8.12, 8.13 steps 3, 6, 7).

The examples are those of the specification; the property tests compare `index_bounds`
against brute-force enumeration of integer points and against the rational optimum found by
enumerating the vertices of the polyhedron.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from math import ceil, floor
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tile.bind.bounds import (
    Bounds,
    BoundsResult,
    Guard,
    Half,
    index_bounds,
    interval,
    residual_guards,
)
from tile.bind.polynomial import Polynomial, RangeConstraint

if TYPE_CHECKING:
    from collections.abc import Sequence

v = Polynomial.var
i, j, k, x, y = v("i"), v("j"), v("k"), v("x"), v("y")


def access(sizes: Sequence[int], *polys: Polynomial) -> list[RangeConstraint]:
    """The range constraints of one tensor access `T[polys]` with dimension sizes `sizes`."""
    assert len(sizes) == len(polys)
    return [RangeConstraint(poly, size) for poly, size in zip(polys, sizes, strict=True)]


def box(**ranges: tuple[int, int]) -> dict[str, Bounds]:
    return {name: Bounds(lo, hi) for name, (lo, hi) in ranges.items()}


def solve(constraints: Sequence[RangeConstraint], variables: str) -> BoundsResult:
    return index_bounds(constraints, variables.split())


def guard_texts(constraints: Sequence[RangeConstraint], bounds: dict[str, Bounds]) -> list[str]:
    return [str(guard) for guard in residual_guards(constraints, bounds)]


# ---- examples of spec 8.13 -----------------------------------------------------------------


def test_plaidml_convolution_example_needs_no_guard() -> None:
    # O[x] = +(I[x + i] * K[i]) with O of size 5, I of size 7, K of size 3.
    constraints = access([5], x) + access([7], x + i) + access([3], i)
    result = solve(constraints, "x i")
    assert result == BoundsResult(box(x=(0, 4), i=(0, 2)))
    assert residual_guards(constraints, result.bounds or {}) == ()


def test_plaidml_convolution_example_with_offset_kernel_keeps_both_halves() -> None:
    # O of size 7 and K accessed as K[i + 1]: 0 <= x + i <= 6 stays as two run-time checks.
    constraints = access([7], x) + access([7], x + i) + access([3], i + 1)
    result = solve(constraints, "x i")
    assert result.bounds == box(x=(0, 6), i=(-1, 1))
    guards = residual_guards(constraints, result.bounds)
    assert guards == (
        Guard(1, x + i, Half.LOWER, 0),
        Guard(1, x + i, Half.UPPER, 6),
    )
    assert [str(guard) for guard in guards] == ["i + x >= 0", "i + x <= 6"]


def test_worked_example_1_max_pool() -> None:
    # O[i: 3] = >(I[2 * i + j]), j < 2; with I of size 5.
    constraints = access([3], i) + access([5], 2 * i + j) + [RangeConstraint(j, 2)]
    result = solve(constraints, "i j")
    assert result.bounds == box(i=(0, 2), j=(0, 1))
    # The worst case of 2i + j is 5: the upper half stays, the lower half is implied.
    assert residual_guards(constraints, result.bounds) == (Guard(1, 2 * i + j, Half.UPPER, 4),)


def test_worked_example_2_fractional_subscript() -> None:
    # O[i: 6] = +(I[i / 2]); with I of size 3. i / 2 must be an integer, so i is even and the
    # box ends at 4 although the rational optimum (rounded) would be 5.
    constraints = access([6], i) + access([3], i / 2)
    result = solve(constraints, "i")
    assert result.bounds == box(i=(0, 4))
    assert residual_guards(constraints, result.bounds) == ()
    # After the change of variables i = 2u: O[2u], I[u].
    u = v("u")
    constraints = access([6], 2 * u) + access([3], u)
    assert solve(constraints, "u").bounds == box(u=(0, 2))


def test_worked_example_3_output_reduction() -> None:
    # O[2 * x + k: 7] = +(I[x] * K[k]); with I and K of size 3. Without output reduction the
    # box already implies 0 <= 2x + k <= 6.
    constraints = access([7], 2 * x + k) + access([3], x) + access([3], k)
    result = solve(constraints, "x k")
    assert result.bounds == box(x=(0, 2), k=(0, 2))
    assert residual_guards(constraints, result.bounds) == ()
    # With v0 = 2x + k and v1 = x: O[v0], I[v1], K[v0 - 2 v1].
    v0, v1 = v("v0"), v("v1")
    constraints = access([7], v0) + access([3], v1) + access([3], v0 - 2 * v1)
    result = solve(constraints, "v0 v1")
    assert result.bounds == box(v0=(0, 6), v1=(0, 2))
    assert guard_texts(constraints, result.bounds) == ["v0 - 2*v1 >= 0", "v0 - 2*v1 <= 2"]


@pytest.mark.parametrize(("limit", "loops", "guards"), [(2, (49, 1), 0), (4, (49, 3), 1)])
def test_plaidml_lang_test_strided_output(limit: int, loops: tuple[int, int], guards: int) -> None:
    # O[2*x + i] = +(I[x]), i < limit with O of size 100 and I of size 50.
    constraints = access([100], 2 * x + i) + access([50], x) + [RangeConstraint(i, limit)]
    result = solve(constraints, "x i")
    assert result.bounds == box(x=(0, loops[0]), i=(0, loops[1]))
    assert len(residual_guards(constraints, result.bounds)) == guards


def test_cumulative_sum() -> None:
    # O[i: N] = +(I[k]), i - k < N: k <= i is the only residual check.
    n = 4
    constraints = access([n], i) + access([n], k) + [RangeConstraint(i - k, n)]
    result = solve(constraints, "i k")
    assert result.bounds == box(i=(0, 3), k=(0, 3))
    assert residual_guards(constraints, result.bounds) == (Guard(2, i - k, Half.LOWER, 0),)


@pytest.mark.parametrize(("size", "guards"), [(5, ["2*i + j <= 4"]), (6, [])])
def test_max_pool_with_partial_last_window(size: int, guards: list[str]) -> None:
    # O[i: (N + 1) / 2] = >(I[2 * i + j]), j < 2.
    constraints = access([(size + 1) // 2], i) + access([size], 2 * i + j)
    constraints.append(RangeConstraint(j, 2))
    result = solve(constraints, "i j")
    assert result.bounds == box(i=(0, 2), j=(0, 1))
    assert guard_texts(constraints, result.bounds) == guards


def test_max_pool_without_window_constraint_is_bounded_but_wide() -> None:
    # O[i: N / 2] = >(I[2 * i + j]) with N = 5: j is bounded only through 2i + j.
    constraints = access([2], i) + access([5], 2 * i + j)
    result = solve(constraints, "i j")
    assert result.bounds == box(i=(0, 1), j=(-2, 4))
    assert guard_texts(constraints, result.bounds) == ["2*i + j >= 0", "2*i + j <= 4"]


def test_overlapping_unpool() -> None:
    # O[2 * x + i: 2 * N + 2] = +(I[x]), i < 4 with N = 3.
    constraints = access([8], 2 * x + i) + access([3], x) + [RangeConstraint(i, 4)]
    result = solve(constraints, "x i")
    assert result.bounds == box(x=(0, 2), i=(0, 3))
    assert residual_guards(constraints, result.bounds) == ()


def test_conv2d_same_padding() -> None:
    result, constraints = conv2d_result()
    assert result.bounds == box(
        n=(0, 1), y=(0, 7), x=(0, 7), co=(0, 3), ky=(0, 2), kx=(0, 2), ci=(0, 2)
    )
    assert guard_texts(constraints, result.bounds) == [
        "ky + y - 1 >= 0",
        "ky + y - 1 <= 7",
        "kx + x - 1 >= 0",
        "kx + x - 1 <= 7",
    ]


def conv2d_constraints() -> tuple[list[RangeConstraint], list[str]]:
    # O[n, y, x, co: N, H, W, CO] = +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co])
    names = ["n", "y", "x", "co", "ky", "kx", "ci"]
    n, yy, xx, co, ky, kx, ci = (v(name) for name in names)
    constraints = (
        access([2, 8, 8, 4], n, yy, xx, co)
        + access([2, 8, 8, 3], n, yy + ky - 1, xx + kx - 1, ci)
        + access([3, 3, 3, 4], ky, kx, ci, co)
    )
    return constraints, names


def conv2d_result() -> tuple[BoundsResult, list[RangeConstraint]]:
    constraints, names = conv2d_constraints()
    return index_bounds(constraints, names), constraints


# ---- constraints of spec 8.3 and experiment log 12 item 10 --------------------------------


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        (RangeConstraint(i - 2, 2), (2, 3)),
        (RangeConstraint(1 - i, 2), (0, 1)),
        (RangeConstraint(-i, 1), (0, 0)),
        (RangeConstraint(i, 100), (0, 4)),
        (RangeConstraint(i, 5 - 2), (0, 2)),
        (RangeConstraint(2 * i, 5), (0, 2)),
        (RangeConstraint(i / 2, 2), (0, 2)),  # keeps {0, 2}
        (RangeConstraint((i + 1) / 2, 2), (1, 1)),  # keeps {1}
        (RangeConstraint(Polynomial.constant(3), 5), (0, 4)),  # 3 < 5 is dropped
    ],
)
def test_user_constraint_on_a_length_5_tensor(
    constraint: RangeConstraint, expected: tuple[int, int]
) -> None:
    # O[i: N] = +(A[i]), constraint; with A of length 5.
    constraints = [*access([5], i), *access([5], i), constraint, constraint]
    assert solve(constraints, "i").bounds == box(i=expected)


# ---- unbounded (spec 8.12, log 12 item 11) -------------------------------------------------


def test_unbounded_difference_of_variables() -> None:
    # O[i: N] = +(A[i + j - k]): j - k is free.
    constraints = access([5], i) + access([5], i + j - k)
    result = solve(constraints, "i j k")
    assert result == BoundsResult(None, unbounded=("j", "k"))


def test_unbounded_output_sum() -> None:
    # O[i + j: 5] = +(A[i + j]): i - j is free.
    constraints = access([5], i + j) + access([5], i + j)
    result = solve(constraints, "j i")
    assert result.bounds is None
    assert result.unbounded == ("i", "j")
    assert result.empty is None


def test_variable_without_constraint_is_unbounded() -> None:
    result = solve(access([5], i), "i k")
    assert result.unbounded == ("k",)
    assert result.bounds is None


def test_bounded_through_a_combination_only() -> None:
    # Neither i + j nor i - j bounds a variable alone; together they do.
    constraints = [RangeConstraint(i + j, 5), RangeConstraint(i - j + 2, 5)]
    result = solve(constraints, "i j")
    assert result.unbounded == ()
    assert result.bounds == box(i=(-1, 3), j=(-1, 3))


# ---- empty (spec 8.12, log 12 item 10) -----------------------------------------------------


@pytest.mark.parametrize(
    ("constraints", "involved", "fragment"),
    [
        # A[5] on a length-5 A.
        ([*access([5], i), RangeConstraint(Polynomial.constant(5), 5)], (1,), "outside [0, 4]"),
        # 5 < 3.
        ([*access([5], i), RangeConstraint(Polynomial.constant(5), 3)], (1,), "outside [0, 2]"),
        # i < 0 and i < -1.
        ([*access([5], i), RangeConstraint(i, 0)], (1,), "range is 0"),
        ([*access([5], i), RangeConstraint(i, -1)], (1,), "range is -1"),
        # A[i + N / 2] with N = 5.
        (access([5], i + Fraction(5, 2)), (0,), "never an integer"),
        # A constant subscript N / 2 with N = 5.
        ([*access([5], i), RangeConstraint(Polynomial.constant(Fraction(5, 2)), 5)], (1,), "5/2"),
        # 2i + 2j - 1 is odd, so it is never 0.
        ([RangeConstraint(2 * i + 2 * j - 1, 1)], (0,), "no integer value"),
        # Parallel constraints whose ranges do not meet: i in [0, 2] and i in [5, 6].
        ([*access([3], i), RangeConstraint(i - 5, 2)], (0, 1), "contradict"),
        # Parallel constraints with incompatible parities.
        (
            [*access([9], i), RangeConstraint(i / 2, 4), RangeConstraint((i + 1) / 2, 4)],
            (0, 1, 2),
            "contradict",
        ),
    ],
)
def test_empty_single_constraints(
    constraints: list[RangeConstraint], involved: tuple[int, ...], fragment: str
) -> None:
    result = solve(constraints, "i j")
    assert result.bounds is None
    assert result.empty is not None
    assert fragment in result.empty
    assert result.involved == involved


def test_first_failing_constant_constraint_is_reported() -> None:
    constraints = [
        RangeConstraint(i, 5),
        RangeConstraint(Polynomial.constant(7), 5),
        RangeConstraint(Polynomial.constant(9), 5),
    ]
    result = solve(constraints, "i")
    assert result.involved == (1,)
    assert result.empty == "the constant 7 is outside [0, 4]"


def test_empty_without_rational_solution_names_the_conflict() -> None:
    # i + j in [0, 1] and i - j = 5 give 2i in [5, 6], which misses i <= 2 even rationally.
    # The constant and the k constraints take no part in the conflict.
    constraints = [
        RangeConstraint(k, 3),
        RangeConstraint(i, 3),
        RangeConstraint(i + j, 2),
        RangeConstraint(Polynomial.constant(1), 2),
        RangeConstraint(i - j - 5, 1),
    ]
    result = solve(constraints, "i j k")
    assert result.bounds is None
    assert result.empty == (
        "no index tuple satisfies all of: 0 <= i < 3, 0 <= i + j < 2, 0 <= i - j - 5 < 1"
    )
    assert result.involved == (1, 2, 4)


def test_empty_with_rational_but_no_integer_solution() -> None:
    # i + j = 1 and i = j: only i = j = 1/2.
    constraints = [RangeConstraint(i + j - 1, 1), RangeConstraint(i - j, 1)]
    result = solve(constraints, "i j")
    assert result.bounds is None
    assert result.empty is not None
    assert "no integer value" in result.empty


def test_rounding_one_variable_tightens_another() -> None:
    # x = y and x + y <= 3 give x in [0, 3/2], so x <= 1; then z = x + y <= 2, although the
    # rational optimum of z is 3.
    z = v("z")
    constraints = [
        RangeConstraint(x + y, 4),
        RangeConstraint(x - y, 1),
        RangeConstraint(z - x - y, 1),
    ]
    result = solve(constraints, "x y z")
    assert result.bounds == box(x=(0, 1), y=(0, 1), z=(0, 2))


def test_empty_and_unbounded_are_both_reported() -> None:
    constraints = [RangeConstraint(i + j, 3), RangeConstraint(Polynomial.constant(4), 3)]
    result = solve(constraints, "i j")
    assert result.empty is not None
    assert result.unbounded == ("i", "j")


def test_no_variables() -> None:
    assert solve([RangeConstraint(Polynomial.constant(2), 3)], "") == BoundsResult({})


def test_bad_variable_lists() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        index_bounds(access([3], i), ["i", "i"])
    with pytest.raises(ValueError, match="not in"):
        index_bounds(access([3], i + j), ["i"])


# ---- residual guards -----------------------------------------------------------------------


def test_parallel_residual_halves_keep_the_tightest() -> None:
    constraints = [
        RangeConstraint(i, 5),
        RangeConstraint(j, 5),
        RangeConstraint(2 * i + 2 * j, 10),  # i + j <= 4 (9/2 rounded down)
        RangeConstraint(i + j, 4),  # i + j <= 3: tighter
        RangeConstraint(i + j + 1, 6),  # i + j <= 4
    ]
    bounds = box(i=(0, 4), j=(0, 4))
    assert residual_guards(constraints, bounds) == (Guard(3, i + j, Half.UPPER, 3),)


def test_guard_holds_and_interval() -> None:
    guard = Guard(0, 2 * i + j, Half.UPPER, 4)
    assert guard.holds({"i": 2, "j": 0})
    assert not guard.holds({"i": 2, "j": 1})
    assert Guard(0, i - k, Half.LOWER, 0).holds({"i": 1, "k": 1})
    assert interval(2 * i - j / 2 + 1, box(i=(0, 2), j=(-2, 4))) == (Fraction(-1), Fraction(6))
    with pytest.raises(ValueError, match="no bounds"):
        interval(i + k, box(i=(0, 2)))


def test_constant_constraints_give_no_guard() -> None:
    constraints = [RangeConstraint(i, 3), RangeConstraint(Polynomial.constant(1), 2)]
    assert residual_guards(constraints, box(i=(0, 2))) == ()


# ---- large systems (their speed: benchmarks/bounds.py) ---------------------------------------


def conv3d_constraints() -> tuple[list[RangeConstraint], list[str]]:
    """A strided, dilated conv3d with ten extra user constraints: 25 in all."""
    names = ["n", "z", "y", "x", "co", "kz", "ky", "kx", "ci"]
    n, z, yy, xx, co, kz, ky, kx, ci = (v(name) for name in names)
    constraints = (
        access([2, 8, 8, 8, 8], n, z, yy, xx, co)
        + access(
            [2, 16, 16, 16, 4], n, 2 * z + 2 * kz - 2, 2 * yy + 2 * ky - 2, 2 * xx + 2 * kx - 2, ci
        )
        + access([3, 3, 3, 4, 8], kz, ky, kx, ci, co)
        + [
            RangeConstraint(z + kz, 8),
            RangeConstraint(yy - ky + 2, 8),
            RangeConstraint(xx + ky, 8),
            RangeConstraint(kx + ky + kz, 7),
            RangeConstraint(z - yy + 8, 16),
            RangeConstraint((xx + yy) / 2, 8),
            RangeConstraint(co + ci, 12),
            RangeConstraint(n + z, 9),
            RangeConstraint(2 * n + co, 12),
            RangeConstraint(kz - kx + 2, 5),
        ]
    )
    return constraints, names


def dense_random_system() -> tuple[list[RangeConstraint], list[str], dict[str, int]]:
    """10 variables, 25 constraints of up to 10 variables with rational coefficients (far
    denser than any contraction), and an integer point that satisfies them all."""
    generator = random.Random(7)
    names = [f"v{index}" for index in range(10)]
    point = {name: generator.randint(-10, 10) for name in names}
    constraints = []
    for _ in range(25):
        chosen = generator.sample(names, generator.randint(2, 10))
        poly = sum(
            (generator.choice([-3, -2, -1, 1, 2, 3, Fraction(1, 2)]) * v(name) for name in chosen),
            Polynomial(),
        )
        size = generator.randint(5, 40)
        value = poly.evaluate(point)
        # Shift so that the known point satisfies the constraint (and keep it integral).
        poly = poly - value + generator.randint(0, size - 1)
        constraints.append(RangeConstraint(poly, size))
    return constraints, names, point


def test_strided_dilated_conv3d_with_extra_constraints_is_sound() -> None:
    constraints, names = conv3d_constraints()
    assert len(constraints) == 25
    result = index_bounds(constraints, names)
    assert result.bounds is not None
    # Random integer tuples of the bounds widened by one on each side: none that satisfies all
    # 25 constraints lies outside the bounds (about 350 of 20000 satisfy them).
    bounds = result.bounds
    generator = random.Random(11)
    valid = 0
    for _ in range(20000):
        values = {n: generator.randint(bounds[n].lo - 1, bounds[n].hi + 1) for n in names}
        if all(0 <= c.poly.evaluate(values) < c.range for c in constraints):
            valid += 1
            assert all(bounds[n].lo <= values[n] <= bounds[n].hi for n in names)
    assert valid > 100


def test_dense_random_system_is_sound() -> None:
    constraints, names, point = dense_random_system()
    result = index_bounds(constraints, names)
    assert result.bounds is not None
    assert all(result.bounds[name].lo <= point[name] <= result.bounds[name].hi for name in names)


# ---- properties against brute force --------------------------------------------------------

VARIABLES = ("i", "j", "k")
COEFFICIENTS = [-2, -1, Fraction(-1, 2), Fraction(1, 2), 1, 2, 3]
CONSTANTS = [-3, -2, -1, 0, 1, 2, 3, Fraction(-1, 2), Fraction(1, 2), Fraction(3, 2)]


@st.composite
def systems(draw: st.DrawFn) -> tuple[list[RangeConstraint], tuple[str, ...]]:
    names = VARIABLES[: draw(st.integers(1, 3))]
    # Most systems are built around an integer point that they keep valid, so that feasible
    # systems are common; the others are left to chance and are mostly empty.
    # (Hypothesis favours small integers, hence the comparisons with the largest value.)
    anchored = draw(st.integers(0, 3)) < 3
    anchor = {name: draw(st.integers(-3, 3)) for name in names} if anchored else None
    constraints = []
    for _ in range(draw(st.integers(1, 4))):
        chosen = draw(st.lists(st.sampled_from(names), max_size=len(names), unique=True))
        poly = Polynomial.constant(draw(st.sampled_from(CONSTANTS)))
        for name in chosen:
            poly += draw(st.sampled_from(COEFFICIENTS)) * v(name)
        if poly.is_constant and draw(st.booleans()):
            poly = Polynomial.constant(draw(st.integers(0, 3)))  # mostly true constant checks
        # Now and then a range of 0 or less, which never holds.
        never = draw(st.integers(0, 15)) == 15
        size = draw(st.integers(-1, 0)) if never else draw(st.integers(1, 6))
        if anchor is not None and size > 0:
            poly += draw(st.integers(0, size - 1)) - poly.evaluate(anchor)
        constraints.append(RangeConstraint(poly, size))
    if draw(st.booleans()):
        # A box around every variable: makes bounded systems common.
        for name in names:
            size = draw(st.integers(1, 6))
            start = anchor[name] if anchor else draw(st.integers(-2, 2))
            offset = draw(st.integers(0, size - 1)) - start
            constraints.append(RangeConstraint(v(name) + offset, size))
    return draw(st.permutations(constraints)), names


def coefficient_matrix(
    constraints: Sequence[RangeConstraint], names: Sequence[str]
) -> list[list[Fraction]]:
    return [[c.poly.coeff(name) for name in names] for c in constraints if not c.poly.is_constant]


def expected_unbounded(constraints: Sequence[RangeConstraint], names: Sequence[str]) -> set[str]:
    # Each constraint bounds its polynomial on both sides, so a variable is bounded iff its
    # unit vector lies in the row space of the coefficient matrix.
    rows = np.array(coefficient_matrix(constraints, names), dtype=float).reshape(-1, len(names))
    rank = np.linalg.matrix_rank(rows) if rows.size else 0
    unbounded = set()
    for index, name in enumerate(names):
        unit = np.eye(len(names))[index : index + 1]
        if np.linalg.matrix_rank(np.vstack([rows, unit])) > rank:
            unbounded.add(name)
    return unbounded


def solve_exact(matrix: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """The unique solution of a square system, or None when it is singular."""
    size = len(matrix)
    rows = [[*row, value] for row, value in zip(matrix, rhs, strict=True)]
    for column in range(size):
        pivot = next((r for r in range(column, size) if rows[r][column] != 0), None)
        if pivot is None:
            return None
        rows[column], rows[pivot] = rows[pivot], rows[column]
        for other in range(size):
            if other != column and rows[other][column] != 0:
                factor = rows[other][column] / rows[column][column]
                rows[other] = [
                    a - factor * b for a, b in zip(rows[other], rows[column], strict=True)
                ]
    return [rows[r][size] / rows[r][r] for r in range(size)]


def rational_vertices(
    constraints: Sequence[RangeConstraint], names: Sequence[str]
) -> list[list[Fraction]]:
    """Vertices of {0 <= p <= range - 1}: feasible intersections of len(names) hyperplanes."""
    planes = [
        ([c.poly.coeff(name) for name in names], side - c.poly.const)
        for c in constraints
        if not c.poly.is_constant
        for side in (Fraction(0), Fraction(c.range - 1))
    ]
    vertices = []
    for chosen in itertools.combinations(planes, len(names)):
        point = solve_exact([row for row, _ in chosen], [value for _, value in chosen])
        if point is None:
            continue
        values = dict(zip(names, point, strict=True))
        if all(0 <= c.poly.evaluate(values) <= c.range - 1 for c in constraints):
            vertices.append(point)
    return vertices


def valid_points(
    constraints: Sequence[RangeConstraint], names: Sequence[str], window: list[tuple[int, int]]
) -> np.ndarray:
    """Every integer point of the window that satisfies every constraint, integrality included."""
    axes = [np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in window]
    grid = np.stack([axis.ravel() for axis in np.meshgrid(*axes, indexing="ij")], axis=1)
    keep = np.ones(len(grid), dtype=bool)
    for constraint in constraints:
        poly = constraint.poly
        scale = poly.denominator()
        # scale * poly is an integer form; poly is an integer iff it is divisible by scale.
        scaled = np.full(len(grid), int(poly.const * scale), dtype=np.int64)
        for index, name in enumerate(names):
            scaled += int(poly.coeff(name) * scale) * grid[:, index]
        keep &= (scaled % scale == 0) & (scaled >= 0) & (scaled <= (constraint.range - 1) * scale)
    return grid[keep]


@settings(deadline=None, derandomize=True, max_examples=250)
@given(systems())
def test_bounds_agree_with_brute_force(
    system: tuple[list[RangeConstraint], tuple[str, ...]],
) -> None:
    constraints, names = system
    result = index_bounds(constraints, names)
    unbounded = expected_unbounded(constraints, names)
    assert set(result.unbounded) == unbounded
    assert list(result.unbounded) == sorted(result.unbounded)
    # With every variable bounded the polyhedron is a polytope: its vertices give the exact
    # rational optimum, and no vertex means no rational solution.
    vertices = rational_vertices(constraints, names) if not unbounded else []
    window = [(-10, 10)] * len(names)
    if not unbounded and vertices:
        window = [
            (
                min(-10, floor(min(p[a] for p in vertices))),
                max(10, ceil(max(p[a] for p in vertices))),
            )
            for a in range(len(names))
        ]
    points = valid_points(constraints, names, window)

    event("unbounded" if unbounded else "bounded")
    event("empty" if result.empty else "has valid points" if len(points) else "no valid point")
    if not unbounded and len(points):
        event("bounded with valid points")
    if len(points):
        assert result.empty is None, f"{result.empty}; but {points[0]} is valid"
    if result.empty is not None:
        assert result.bounds is None
        assert len(points) == 0
        return
    if unbounded:
        assert result.bounds is None
        return
    constant_ok = all(
        c.range > 0 and (not c.poly.is_constant or 0 <= c.poly.const < c.range) for c in constraints
    )
    if constant_ok and not vertices:
        pytest.fail(f"rationally infeasible system reported feasible: {result}")
    assert result.bounds is not None
    assert list(result.bounds) == list(names)
    for axis, name in enumerate(names):
        found = result.bounds[name]
        # Sound: every valid point lies in the box.
        assert all(found.lo <= point[axis] <= found.hi for point in points)
        # Tight: never looser than the rational optimum rounded inward.
        assert found.lo >= ceil(min(p[axis] for p in vertices))
        assert found.hi <= floor(max(p[axis] for p in vertices))
        if len(names) == 1 and len(points):
            # One variable: all constraints are parallel and merge exactly.
            assert (found.lo, found.hi) == (points[:, 0].min(), points[:, 0].max())
    check_guards(constraints, names, result.bounds)


def check_guards(
    constraints: Sequence[RangeConstraint], names: Sequence[str], bounds: dict[str, Bounds]
) -> None:
    """Over the integer points of the box, the guards hold iff every inequality holds."""
    guards = residual_guards(constraints, bounds)
    ranges = [range(bounds[name].lo, bounds[name].hi + 1) for name in names]
    for values in itertools.product(*ranges):
        point = dict(zip(names, values, strict=True))
        inside = all(0 <= c.poly.evaluate(point) <= c.range - 1 for c in constraints)
        assert inside == all(guard.holds(point) for guard in guards), (point, guards)
