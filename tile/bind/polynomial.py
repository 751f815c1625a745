"""Exact index polynomials and range constraints (spec 8.2-8.3, 8.13 step 1).

Binding (`tile.bind.binder`) turns every subscript and constraint of a contraction into a
`Polynomial`: an affine form with rational coefficients over index-variable names. Division in
an index polynomial is exact rational division (spec 8.2), so coefficients are `Fraction`s and
never floats. Each subscript of a dimension of size `n`, and each user constraint `p < n`,
becomes a `RangeConstraint` meaning "p is an integer and 0 <= p < n"; `tile.bind.bounds` reads those
to find the loop box, and flattening (`tile.lower.flatten`) rewrites the polynomials into strides.

The module depends on nothing of ours. Its errors are plain exceptions: binding knows where the
polynomial came from and turns them into E-INDEX diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import lcm
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

Rational = int | Fraction


class PolynomialError(Exception):
    """An index expression that is not an affine polynomial with a constant divisor."""


class NonLinearError(PolynomialError):
    """A product of two polynomials that both involve index variables (E-INDEX)."""


class NonConstantDivisorError(PolynomialError):
    """A division by a polynomial that involves index variables (E-INDEX)."""


def _rational(value: object) -> Fraction | None:
    # bool is an int subclass but never a meaningful coefficient; floats are inexact.
    if isinstance(value, bool):
        return None
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    return None


def _format_scaled(magnitude: Fraction, name: str) -> str:
    """`name` times a positive coefficient: `i`, `2*i`, `i/2`, `3*i/2`."""
    head = name if magnitude.numerator == 1 else f"{magnitude.numerator}*{name}"
    return head if magnitude.denominator == 1 else f"{head}/{magnitude.denominator}"


@dataclass(frozen=True, slots=True)
class Polynomial:
    """`const + sum(coefficient * variable)`, exact; immutable and hashable.

    `terms` is kept canonical (sorted by name, one entry per name, no zero coefficients), so
    equal polynomials compare and hash equal however they were built. The constructor
    normalises whatever it is given.
    """

    terms: tuple[tuple[str, Fraction], ...] = ()
    const: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        merged: dict[str, Fraction] = {}
        for name, coefficient in self.terms:
            value = _rational(coefficient)
            if not isinstance(name, str) or value is None:
                raise TypeError(f"bad polynomial term {(name, coefficient)!r}")
            merged[name] = merged.get(name, Fraction(0)) + value
        const = _rational(self.const)
        if const is None:
            raise TypeError(f"bad polynomial constant {self.const!r}")
        canonical = tuple((name, merged[name]) for name in sorted(merged) if merged[name] != 0)
        # The dataclass is frozen; normalising in place is the one sanctioned mutation.
        object.__setattr__(self, "terms", canonical)
        object.__setattr__(self, "const", const)

    # ---- construction ----------------------------------------------------------------------

    @staticmethod
    def constant(value: Rational) -> Polynomial:
        return Polynomial((), Fraction(value))

    @staticmethod
    def var(name: str) -> Polynomial:
        return Polynomial(((name, Fraction(1)),))

    @staticmethod
    def linear(coefficients: Mapping[str, Rational], const: Rational = 0) -> Polynomial:
        """`const + sum(coefficients[name] * name)`; a convenience for tests and binding."""
        return Polynomial(tuple((name, Fraction(c)) for name, c in coefficients.items()), const)

    # ---- queries ---------------------------------------------------------------------------

    def coeff(self, name: str) -> Fraction:
        for term, coefficient in self.terms:
            if term == name:
                return coefficient
        return Fraction(0)

    def vars(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.terms)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def evaluate(self, values: Mapping[str, Rational]) -> Fraction:
        """The value at `values`, which must give every variable of the polynomial."""
        total = self.const
        for name, coefficient in self.terms:
            if name not in values:
                raise KeyError(f"no value for index variable {name!r} in {self}")
            total += coefficient * values[name]
        return total

    def substitute(self, name: str, replacement: Polynomial) -> Polynomial:
        """This polynomial with every occurrence of `name` replaced by `replacement`."""
        coefficient = self.coeff(name)
        if coefficient == 0:
            return self
        rest = Polynomial(tuple(term for term in self.terms if term[0] != name), self.const)
        return rest + replacement * coefficient

    def denominator(self) -> int:
        """The least common multiple of the denominators of the coefficients and constant.

        Multiplying by it gives a polynomial with integer coefficients and constant.
        """
        return lcm(self.const.denominator, *(c.denominator for _, c in self.terms))

    # ---- arithmetic ------------------------------------------------------------------------

    @staticmethod
    def _coerce(value: object) -> Polynomial | None:
        if isinstance(value, Polynomial):
            return value
        rational = _rational(value)
        return None if rational is None else Polynomial((), rational)

    def _combine(self, other: Polynomial, sign: int) -> Polynomial:
        terms: Iterable[tuple[str, Fraction]] = self.terms + tuple(
            (name, sign * coefficient) for name, coefficient in other.terms
        )
        return Polynomial(tuple(terms), self.const + sign * other.const)

    def _scale(self, factor: Fraction) -> Polynomial:
        if factor == 0:
            return Polynomial()
        return Polynomial(tuple((n, c * factor) for n, c in self.terms), self.const * factor)

    def __add__(self, other: object) -> Polynomial:
        operand = Polynomial._coerce(other)
        return NotImplemented if operand is None else self._combine(operand, 1)

    def __radd__(self, other: object) -> Polynomial:
        return self.__add__(other)

    def __sub__(self, other: object) -> Polynomial:
        operand = Polynomial._coerce(other)
        return NotImplemented if operand is None else self._combine(operand, -1)

    def __rsub__(self, other: object) -> Polynomial:
        operand = Polynomial._coerce(other)
        return NotImplemented if operand is None else operand._combine(self, -1)

    def __neg__(self) -> Polynomial:
        return self._scale(Fraction(-1))

    def __pos__(self) -> Polynomial:
        return self

    def __mul__(self, other: object) -> Polynomial:
        operand = Polynomial._coerce(other)
        if operand is None:
            return NotImplemented
        if operand.is_constant:
            return self._scale(operand.const)
        if self.is_constant:
            return operand._scale(self.const)
        raise NonLinearError(f"non-linear index polynomial: ({self}) * ({operand})")

    def __rmul__(self, other: object) -> Polynomial:
        return self.__mul__(other)

    def __truediv__(self, other: object) -> Polynomial:
        operand = Polynomial._coerce(other)
        if operand is None:
            return NotImplemented
        return self._divide_by(operand)

    def __rtruediv__(self, other: object) -> Polynomial:
        operand = Polynomial._coerce(other)
        if operand is None:
            return NotImplemented
        return operand._divide_by(self)

    def _divide_by(self, divisor: Polynomial) -> Polynomial:
        if not divisor.is_constant:
            raise NonConstantDivisorError(
                f"the divisor of an index polynomial must be a constant: ({self}) / ({divisor})"
            )
        if divisor.const == 0:
            raise ZeroDivisionError(f"index polynomial divided by zero: ({self}) / 0")
        return self._scale(1 / divisor.const)

    # ---- printing --------------------------------------------------------------------------

    def __str__(self) -> str:
        parts: list[str] = []
        for name, coefficient in self.terms:
            text = _format_scaled(abs(coefficient), name)
            if not parts:
                parts.append(text if coefficient > 0 else f"-{text}")
            else:
                parts.append(f"+ {text}" if coefficient > 0 else f"- {text}")
        if self.const != 0 or not parts:
            if not parts:
                parts.append(str(self.const))
            else:
                parts.append(f"+ {self.const}" if self.const > 0 else f"- {-self.const}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class RangeConstraint:
    """`poly` is an integer and `0 <= poly < range` (spec 8.3, 8.13 step 2).

    One comes from every dimension of every access (the range is the dimension's size) and one
    from every user constraint. A range of 0 or less can never hold; `tile.bind.bounds` reports it.
    """

    poly: Polynomial
    range: int

    def __str__(self) -> str:
        return f"0 <= {self.poly} < {self.range}"
