"""Exact index polynomials (spec 8.2): arithmetic, canonical form, printing, errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tile.bind.polynomial import (
    NonConstantDivisorError,
    NonLinearError,
    Polynomial,
    PolynomialError,
    RangeConstraint,
)

i, j, k = Polynomial.var("i"), Polynomial.var("j"), Polynomial.var("k")


def test_canonical_terms_sorted_merged_without_zeros() -> None:
    poly = Polynomial((("j", Fraction(1)), ("i", Fraction(2)), ("j", Fraction(-1)), ("k", 0)), 3)
    assert poly.terms == (("i", Fraction(2)),)
    assert poly.const == Fraction(3)
    assert isinstance(poly.const, Fraction)
    assert poly == 2 * i + 3
    assert hash(poly) == hash(3 + i + i)


def test_constant_and_var() -> None:
    assert Polynomial.constant(5).is_constant
    assert Polynomial.constant(Fraction(5, 2)).const == Fraction(5, 2)
    assert Polynomial.var("i").terms == (("i", Fraction(1)),)
    assert not i.is_constant
    assert Polynomial() == Polynomial.constant(0)
    assert Polynomial.linear({"i": 2, "j": Fraction(1, 3)}, -1) == 2 * i + j / 3 - 1


def test_addition_subtraction_negation() -> None:
    assert (i + j) - (j - i) == 2 * i
    assert 1 + i == i + 1
    assert 5 - i == -i + 5
    assert Fraction(1, 2) - i == -(i - Fraction(1, 2))
    assert (i - i).is_constant
    assert i - i == Polynomial()
    assert +i == i


def test_multiplication_by_constants() -> None:
    assert 3 * (i + 1) == 3 * i + 3
    assert (i + 1) * Fraction(1, 2) == i / 2 + Fraction(1, 2)
    assert (i + j) * Polynomial.constant(2) == 2 * i + 2 * j
    assert Polynomial.constant(2) * (i + j) == 2 * i + 2 * j
    assert (i + j) * 0 == Polynomial()


def test_product_of_two_variables_is_non_linear() -> None:
    with pytest.raises(NonLinearError):
        _ = i * j
    with pytest.raises(NonLinearError):
        _ = (i + 1) * (i - 1)
    with pytest.raises(PolynomialError):
        _ = (i + 1) * (j + 2)


def test_division_is_exact_rational() -> None:
    assert (i + 1) / 2 == i / 2 + Fraction(1, 2)
    assert Polynomial.constant(5) / 2 == Polynomial.constant(Fraction(5, 2))
    assert (2 * i) / Polynomial.constant(4) == i / 2
    assert 1 / Polynomial.constant(4) == Polynomial.constant(Fraction(1, 4))


def test_division_errors() -> None:
    with pytest.raises(NonConstantDivisorError):
        _ = i / j
    with pytest.raises(NonConstantDivisorError):
        _ = 4 / (i + 1)
    with pytest.raises(ZeroDivisionError):
        _ = i / 0
    with pytest.raises(ZeroDivisionError):
        _ = i / (j - j)


def test_floats_are_rejected() -> None:
    with pytest.raises(TypeError):
        _ = i + 0.5  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = i * 2.0  # type: ignore[operator]
    with pytest.raises(TypeError):
        Polynomial((("i", 1.5),))  # type: ignore[arg-type]


def test_queries() -> None:
    poly = 2 * i - j / 3 + Fraction(1, 4)
    assert poly.coeff("i") == 2
    assert poly.coeff("j") == Fraction(-1, 3)
    assert poly.coeff("k") == 0
    assert poly.vars() == ("i", "j")
    assert poly.evaluate({"i": 1, "j": 3}) == Fraction(5, 4)
    assert poly.evaluate({"i": Fraction(1, 2), "j": 0, "k": 9}) == Fraction(5, 4)
    assert poly.denominator() == 12
    assert (2 * i + 1).denominator() == 1
    assert Polynomial.constant(Fraction(5, 2)).denominator() == 2
    with pytest.raises(KeyError):
        poly.evaluate({"i": 1})


def test_substitute() -> None:
    poly = 2 * i + j - 1
    assert poly.substitute("i", j + 1) == 3 * j + 1
    assert poly.substitute("k", j) == poly
    assert poly.substitute("j", Polynomial.constant(4)) == 2 * i + 3
    assert (i / 2).substitute("i", 2 * k) == k


@pytest.mark.parametrize(
    ("poly", "text"),
    [
        (Polynomial(), "0"),
        (Polynomial.constant(5), "5"),
        (Polynomial.constant(Fraction(-5, 2)), "-5/2"),
        (i, "i"),
        (-i, "-i"),
        (2 * i + j - Fraction(1, 2), "2*i + j - 1/2"),
        (j + 2 * i - Fraction(1, 2), "2*i + j - 1/2"),
        (i / 2, "i/2"),
        (-3 * i / 2 + 1, "-3*i/2 + 1"),
        (i - 2 * j - k, "i - 2*j - k"),
        ((i + 1) / 2, "i/2 + 1/2"),
    ],
)
def test_str(poly: Polynomial, text: str) -> None:
    assert str(poly) == text


def test_range_constraint() -> None:
    constraint = RangeConstraint(2 * i + j, 5)
    assert constraint.poly == 2 * i + j
    assert constraint.range == 5
    assert str(constraint) == "0 <= 2*i + j < 5"
    assert constraint == RangeConstraint(j + 2 * i, 5)


small = st.fractions(min_value=-4, max_value=4, max_denominator=4)
names = st.sampled_from(["i", "j", "k"])
polys = st.builds(
    lambda terms, const: Polynomial(tuple(terms), const),
    st.lists(st.tuples(names, small), max_size=4),
    small,
)
points = st.fixed_dictionaries({"i": small, "j": small, "k": small})


@settings(deadline=None, derandomize=True, max_examples=100)
@given(polys, polys, small, points)
def test_arithmetic_agrees_with_evaluation(
    first: Polynomial, second: Polynomial, factor: Fraction, point: dict[str, Fraction]
) -> None:
    left, right = first.evaluate(point), second.evaluate(point)
    assert (first + second).evaluate(point) == left + right
    assert (first - second).evaluate(point) == left - right
    assert (-first).evaluate(point) == -left
    assert (first * factor).evaluate(point) == left * factor
    if factor != 0:
        assert (first / factor).evaluate(point) == left / factor
    substituted = first.substitute("i", second)
    assert substituted.evaluate(point) == first.evaluate({**point, "i": right})
    scaled = first * first.denominator()
    assert all(c.denominator == 1 for _, c in scaled.terms)
    assert scaled.const.denominator == 1
    assert all(c != 0 for _, c in first.terms)
    assert list(first.vars()) == sorted(first.vars())
