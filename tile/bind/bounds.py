"""Exact index bounds of one contraction (spec 8.12, 8.13 steps 3, 6 and 7).

Sits after binding (`tile.bind.binder` gives every access and user constraint as `RangeConstraint`s
over exact `Polynomial`s) and before flattening (`tile.lower.flatten` turns the box into loop ranges
and the residual halves into kernel guards). Pure exact arithmetic on `int` and `Fraction`.

`index_bounds` answers three questions about the valid tuples of a contraction:

* **emptiness** (E-EMPTY): a range of 0 or less, a constant subscript out of range or not an
  integer, a polynomial that can never take an integer value in its range, parallel constraints
  whose ranges do not meet, a system with no rational solution, or a variable whose rational
  range holds no integer;
* **unboundedness** (E-UNBOUNDED): a variable with no finite lower or upper bound;
* otherwise the **box**: integer bounds `[lo, hi]` per variable holding every valid tuple.

Method. Every constraint `0 <= g*w + c <= n - 1`, with `w = b.v` for a primitive integer
vector `b` (first entry positive) and a rational scale `g`, becomes integer bounds on `w`:
`w` is an integer whenever the variables are, and `g*w + c` must be an integer too, so both
ends of the rational interval round inward to the right residue class (this alone finds
`2*i + 2*j - 1 < 1`, `A[i + N/2]` with odd `N`, ... empty). Constraints with the same `b` are
parallel and merge by intersecting their intervals (spec step 3). Every variable is bounded iff
the vectors `b` span every unit vector, because each constraint bounds its form on both sides:
the recession cone of the polyhedron is the null space of the `b`s, so unboundedness is exact
linear algebra and needs no optimisation. The bounds themselves are the exact minimum and
maximum of each variable over the polyhedron `{lo_k <= b_k.v <= hi_k}`, found by an exact
bounded-variable primal simplex, warm started from one optimum to the next. Feasibility comes
first, on the same tableau (the Dutertre-de Moura check), and its failing row names the
constraints that conflict. Rounding an optimum inward is a valid cut, so when some optimum was
fractional the rounded box joins the system and the bounds are computed again, a few rounds
at most. The result is never looser than the rational optimum of the original constraints
rounded inward, and often tighter (`0 <= i < 6, 0 <= i/2 < 3` gives `i <= 4`: `i` is even).

Why a simplex and not Fourier-Motzkin: both are exact, but elimination can grow doubly
exponentially on a dense system unless redundant rows are removed, and the cheap pruning rules
(Chernikov's) are easy to get subtly wrong once combined with deduplication. The tableau has
one row per non-parallel multi-variable constraint; single-variable constraints (most of those
of a convolution) become variable bounds and cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from math import ceil, floor, gcd, lcm
from typing import TYPE_CHECKING

from tile.bind.simplex import Simplex

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tile.bind.polynomial import Polynomial, RangeConstraint

# Rounding rounds are a refinement, not needed for soundness: stop after a few.
_MAX_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class Bounds:
    """Inclusive integer range `lo <= v <= hi` of one index variable."""

    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True, slots=True)
class BoundsResult:
    """The answer of `index_bounds`.

    `bounds` (in the order of the given variables) is set exactly when the system is neither
    empty nor unbounded. `unbounded` lists, sorted, every variable without a finite lower or
    upper bound; it is filled even when the system is also empty. `empty` explains why no
    tuple is valid, and `involved` gives the positions (in the constraint sequence) of the
    constraints behind it, when they are known, so that callers can point at the source.
    """

    bounds: dict[str, Bounds] | None
    unbounded: tuple[str, ...] = ()
    empty: str | None = None
    involved: tuple[int, ...] = ()


class Half(Enum):
    """Which side of `0 <= poly <= range - 1` a guard checks."""

    LOWER = "lower"  # poly >= 0
    UPPER = "upper"  # poly <= range - 1


@dataclass(frozen=True, slots=True)
class Guard:
    """One half of a range constraint that the box does not imply (spec 8.13 step 7)."""

    constraint: int  # position in the sequence given to `residual_guards`
    poly: Polynomial
    half: Half
    limit: int  # 0 for LOWER (poly >= 0), range - 1 for UPPER (poly <= range - 1)

    def holds(self, values: Mapping[str, int | Fraction]) -> bool:
        value = self.poly.evaluate(values)
        return value >= self.limit if self.half is Half.LOWER else value <= self.limit

    def __str__(self) -> str:
        return f"{self.poly} {'>=' if self.half is Half.LOWER else '<='} {self.limit}"


# ---- normal form of one constraint ---------------------------------------------------------

_Direction = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class _NormalForm:
    """`poly == scale * (direction . v) + const`, direction primitive, first entry positive."""

    direction: _Direction
    scale: Fraction
    const: Fraction

    @staticmethod
    def of(poly: Polynomial) -> _NormalForm:
        assert not poly.is_constant, "constant constraints have no direction"
        numerators = [c.numerator for _, c in poly.terms]
        denominators = [c.denominator for _, c in poly.terms]
        scale = Fraction(gcd(*numerators), lcm(*denominators))
        if numerators[0] < 0:
            scale = -scale
        direction = tuple((name, int(c / scale)) for name, c in poly.terms)
        return _NormalForm(direction, scale, poly.const)

    def form_bound(self, limit: Fraction, lower_half: bool) -> tuple[bool, int]:
        """The half `poly >= limit` (or `<=`) as `(w >= bound?, bound)` for integer `w`."""
        value = (limit - self.const) / self.scale
        at_least = lower_half == (self.scale > 0)
        return at_least, ceil(value) if at_least else floor(value)

    def integral_class(self) -> tuple[int, int] | None:
        """`(modulus, residue)` of the integers `w` for which `poly` is an integer; None if none.

        `scale * w + const` is an integer iff `A * w = B (mod L)` with `L` the common
        denominator; a linear congruence is solvable iff `gcd(A, L)` divides `B`.
        """
        common = lcm(self.scale.denominator, self.const.denominator)
        multiplier = self.scale.numerator * (common // self.scale.denominator)
        target = -self.const.numerator * (common // self.const.denominator)
        divisor = gcd(multiplier, common)
        if target % divisor:
            return None
        modulus = common // divisor
        if modulus == 1:
            return 1, 0
        inverse = pow(multiplier // divisor, -1, modulus)
        return modulus, (target // divisor) * inverse % modulus


def _same_class(first: tuple[int, int], second: tuple[int, int]) -> tuple[int, int] | None:
    """The residue class `(modulus, residue)` of both congruences (Chinese remainders)."""
    (modulus, residue), (other_modulus, other_residue) = first, second
    common = gcd(modulus, other_modulus)
    if (other_residue - residue) % common:
        return None
    step = other_modulus // common
    multiplier = (other_residue - residue) // common * pow(modulus // common, -1, step) % step
    combined = modulus * step
    return combined, (residue + modulus * multiplier) % combined


@dataclass(slots=True)
class _Family:
    """Parallel constraints merged: `lo <= w <= hi` and `w = residue (mod modulus)` for the
    integer form `w = direction . v`; the class is where every polynomial is an integer."""

    direction: _Direction
    lo: int
    hi: int
    modulus: int
    residue: int
    sources: list[int]

    def snap(self) -> bool:
        """Move both ends into the residue class; False when nothing is left."""
        self.lo += (self.residue - self.lo) % self.modulus
        self.hi -= (self.hi - self.residue) % self.modulus
        return self.lo <= self.hi

    def merge(self, other: _Family) -> bool:
        """Intersect with a parallel family; False when the intersection is empty."""
        self.sources.extend(other.sources)
        joint = _same_class((self.modulus, self.residue), (other.modulus, other.residue))
        if joint is None:
            return False
        self.modulus, self.residue = joint
        self.lo, self.hi = max(self.lo, other.lo), min(self.hi, other.hi)
        return self.snap()


def _constant_failure(constraint: RangeConstraint) -> str | None:
    value = constraint.poly.const
    if value.denominator != 1:
        return f"the constant subscript {value} is not an integer"
    if not 0 <= value < constraint.range:
        return f"the constant {value} is outside [0, {constraint.range - 1}]"
    return None


def _normalize(index: int, constraint: RangeConstraint) -> _Family | str:
    """Integer bounds on the constraint's primitive form, or why no integer tuple meets it."""
    form = _NormalForm.of(constraint.poly)
    integral = form.integral_class()
    if integral is None:
        return f"{constraint.poly} is never an integer"
    # One half bounds w from below and the other from above; which is which follows the sign.
    halves = (
        form.form_bound(Fraction(0), lower_half=True),
        form.form_bound(Fraction(constraint.range - 1), lower_half=False),
    )
    lower = next(bound for at_least, bound in halves if at_least)
    upper = next(bound for at_least, bound in halves if not at_least)
    family = _Family(form.direction, lower, upper, *integral, [index])
    if not family.snap():
        return f"{constraint.poly} takes no integer value in [0, {constraint.range - 1}]"
    return family


# ---- unboundedness: linear algebra on the directions ---------------------------------------


def _unbounded(directions: Sequence[_Direction], names: Sequence[str]) -> tuple[str, ...]:
    """Variables not fixed by the span of `directions` (exactly those without finite bounds).

    In the reduced row echelon form of the directions, the unit vector of a variable lies in
    the row space iff its column is a pivot column whose row has no other entry.
    """
    position = {name: index for index, name in enumerate(names)}
    rows = []
    for direction in directions:
        row = [Fraction(0)] * len(names)
        for name, coefficient in direction:
            row[position[name]] = Fraction(coefficient)
        rows.append(row)
    pivot_columns: list[int] = []
    rank = 0
    for column in range(len(names)):
        pivot = next((r for r in range(rank, len(rows)) if rows[r][column] != 0), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        head = rows[rank][column]
        rows[rank] = [entry / head for entry in rows[rank]]
        for other in range(len(rows)):
            factor = rows[other][column]
            if other != rank and factor != 0:
                rows[other] = [a - factor * b for a, b in zip(rows[other], rows[rank], strict=True)]
        pivot_columns.append(column)
        rank += 1
    fixed = {
        column
        for column, row in zip(pivot_columns, rows, strict=False)
        if all(entry == 0 for index, entry in enumerate(row) if index != column)
    }
    return tuple(sorted(name for index, name in enumerate(names) if index not in fixed))


# ---- the public entry points ---------------------------------------------------------------


def _describe(constraints: Sequence[RangeConstraint], involved: Sequence[int]) -> str:
    return ", ".join(str(constraints[index]) for index in involved)


def index_bounds(constraints: Sequence[RangeConstraint], variables: Sequence[str]) -> BoundsResult:
    """Integer bounds of every index variable over the valid tuples (spec 8.13 step 6).

    `constraints` are all range constraints of one contraction (accesses and user
    constraints); `variables` its index variables. Variables range over all integers; only
    the constraints restrict them (spec 8.4).
    """
    names = tuple(variables)
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate index variables in {names}")
    position = {name: index for index, name in enumerate(names)}
    for constraint in constraints:
        stray = [name for name in constraint.poly.vars() if name not in position]
        if stray:
            raise ValueError(f"{constraint} uses variables not in {names}: {stray}")

    unbounded = _unbounded(
        [_NormalForm.of(c.poly).direction for c in constraints if not c.poly.is_constant], names
    )

    def empty(reason: str, involved: Sequence[int] = ()) -> BoundsResult:
        return BoundsResult(None, unbounded, reason, tuple(sorted(involved)))

    families: dict[_Direction, _Family] = {}
    for index, constraint in enumerate(constraints):
        if constraint.range <= 0:
            return empty(f"{constraint} can never hold: its range is {constraint.range}", [index])
        if constraint.poly.is_constant:
            failure = _constant_failure(constraint)
            if failure is not None:
                return empty(failure, [index])
            continue
        normal = _normalize(index, constraint)
        if isinstance(normal, str):
            return empty(normal, [index])
        family = families.setdefault(normal.direction, normal)
        if family is not normal and not family.merge(normal):
            return empty(
                f"parallel constraints contradict each other: "
                f"{_describe(constraints, family.sources)}",
                family.sources,
            )

    # Single-variable families are plain variable bounds; the others become tableau rows.
    lower: list[int | None] = [None] * len(names)
    upper: list[int | None] = [None] * len(names)
    sources: list[list[int]] = [[] for _ in names]
    forms: list[tuple[dict[int, int], int, int]] = []
    for family in families.values():
        if len(family.direction) == 1:
            column = position[family.direction[0][0]]
            lower[column], upper[column] = family.lo, family.hi
            sources[column] = family.sources
        else:
            coefficients = {position[name]: c for name, c in family.direction}
            forms.append((coefficients, family.lo, family.hi))
            sources.append(family.sources)
    simplex = Simplex(lower, upper, forms)

    conflict = simplex.check()
    if conflict is not None:
        involved = sorted({source for column in conflict for source in sources[column]})
        return empty(
            f"no index tuple satisfies all of: {_describe(constraints, involved)}", involved
        )
    if unbounded:
        return BoundsResult(None, unbounded)

    for _ in range(_MAX_ROUNDS):
        box: dict[str, Bounds] = {}
        refined = False
        for column, name in enumerate(names):
            highest = simplex.optimize(column, 1)
            lowest = simplex.optimize(column, -1)
            # The directions span every variable, so no optimum can be unbounded.
            assert highest is not None and lowest is not None
            low, high = ceil(lowest), floor(highest)
            if low > high:
                return empty(
                    f"{name} has no integer value: the constraints only allow "
                    f"{lowest} <= {name} <= {highest}"
                )
            refined |= low != lowest or high != highest
            box[name] = Bounds(low, high)
        if not refined:
            break
        # Rounding inward keeps every integer tuple; the tighter box may tighten the others.
        for column, name in enumerate(names):
            simplex.set_bounds(column, box[name].lo, box[name].hi)
        simplex.repair()
        if simplex.check() is not None:
            return empty("the constraints have rational solutions but no integer one")
    return BoundsResult(box)


def interval(poly: Polynomial, bounds: Mapping[str, Bounds]) -> tuple[Fraction, Fraction]:
    """The exact minimum and maximum of `poly` over the box (interval arithmetic)."""
    low = high = poly.const
    for name, coefficient in poly.terms:
        if name not in bounds:
            raise ValueError(f"no bounds for index variable {name!r} of {poly}")
        box = bounds[name]
        near, far = (box.lo, box.hi) if coefficient > 0 else (box.hi, box.lo)
        low += coefficient * near
        high += coefficient * far
    return low, high


def residual_guards(
    constraints: Sequence[RangeConstraint], bounds: Mapping[str, Bounds]
) -> tuple[Guard, ...]:
    """The halves of the constraints that the box does not imply (spec 8.13 step 7).

    A half is implied when its worst case over the box holds. Of residual halves that bound
    the same primitive form from the same side (parallel constraints), only the tightest is
    kept: for integer tuples it implies the others. Constant constraints are decided at
    compile time by `index_bounds` and give no guard. Result order: constraint, then lower
    before upper.
    """
    tightest: dict[tuple[_Direction, bool], tuple[int, Guard]] = {}
    for index, constraint in enumerate(constraints):
        poly = constraint.poly
        if poly.is_constant:
            continue
        low, high = interval(poly, bounds)
        form = _NormalForm.of(poly)
        halves = (
            (low < 0, Half.LOWER, 0),
            (high > constraint.range - 1, Half.UPPER, constraint.range - 1),
        )
        for residual, half, limit in halves:
            if not residual:
                continue
            at_least, bound = form.form_bound(Fraction(limit), half is Half.LOWER)
            key = (form.direction, at_least)
            kept = tightest.get(key)
            tighter = kept is None or (bound > kept[0] if at_least else bound < kept[0])
            if tighter:
                tightest[key] = (bound, Guard(index, poly, half, limit))
    guards = [guard for _, guard in tightest.values()]
    return tuple(sorted(guards, key=lambda g: (g.constraint, g.half is Half.UPPER)))
