"""Integer linear algebra for flattening (spec 8.13 steps 4 and 5).

`tile.lower.flatten` needs two changes of variables before a contraction becomes loops:

* **defractionalization** (step 5): the integer tuples at which every index polynomial is an
  integer form a translated lattice `v0 + B*Z^n`; `integral_lattice` finds `v0` and a basis `B`
  from the congruences that the fractional polynomials impose;
* **output reduction** (step 4): a basis of that lattice whose first vectors move the output
  position and whose other vectors leave it unchanged, so that output elements belong to
  output loops and the rest are pure reductions; `column_echelon` gives it.

Both rest on integer column operations (a column-style Hermite normal form): multiplying a
matrix on the right by a unimodular matrix changes the basis of the lattice its columns span,
never the lattice. Matrices are lists of rows of Python ints; everything is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

Matrix = list[list[int]]


def identity(size: int) -> Matrix:
    return [[1 if row == column else 0 for column in range(size)] for row in range(size)]


def multiply(left: Sequence[Sequence[int]], right: Sequence[Sequence[int]]) -> Matrix:
    inner = len(right)
    columns = len(right[0]) if right else 0
    return [
        [sum(row[k] * right[k][column] for k in range(inner)) for column in range(columns)]
        for row in left
    ]


def apply(matrix: Sequence[Sequence[int]], vector: Sequence[int]) -> list[int]:
    return [sum(a * b for a, b in zip(row, vector, strict=True)) for row in matrix]


def column(matrix: Sequence[Sequence[int]], index: int) -> list[int]:
    return [row[index] for row in matrix]


@dataclass(frozen=True, slots=True)
class Echelon:
    """`matrix * unimodular == echelon`, with `echelon` in column echelon form.

    The first `rank` columns of `echelon` are the pivot columns: column `k` has its first
    non-zero entry, which is positive, in row `pivot_rows[k]`, and in that row every later
    column is zero. The remaining columns of `echelon` are zero, so the matching columns of
    `unimodular` span the integer kernel of `matrix`.
    """

    echelon: Matrix
    unimodular: Matrix
    pivot_rows: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.pivot_rows)


def column_echelon(matrix: Sequence[Sequence[int]], columns: int | None = None) -> Echelon:
    """Column echelon form by integer column operations (extended Euclid on each row).

    The column with the smallest non-zero entry becomes the pivot, so columns that are
    already unit vectors stay where they are (and the unimodular matrix stays a permutation
    in the common cases, which keeps flattened loops close to the source's variables).
    """
    work = [list(row) for row in matrix]
    width = columns if columns is not None else (len(work[0]) if work else 0)
    unimodular = identity(width)

    def swap(first: int, second: int) -> None:
        for rows in (work, unimodular):
            for row in rows:
                row[first], row[second] = row[second], row[first]

    def subtract(target: int, source: int, factor: int) -> None:
        for rows in (work, unimodular):
            for row in rows:
                row[target] -= factor * row[source]

    def negate(target: int) -> None:
        for rows in (work, unimodular):
            for row in rows:
                row[target] = -row[target]

    rank = 0
    pivots: list[int] = []
    for index, row in enumerate(work):
        while True:
            nonzero = [c for c in range(rank, width) if row[c] != 0]
            if not nonzero:
                break
            smallest = min(nonzero, key=lambda c: (abs(row[c]), c))
            if smallest != rank:
                swap(smallest, rank)
            if len(nonzero) == 1:
                break
            for other in range(rank + 1, width):
                if row[other]:
                    subtract(other, rank, row[other] // row[rank])
        if rank < width and row[rank] != 0:
            if row[rank] < 0:
                negate(rank)
            pivots.append(index)
            rank += 1
    return Echelon(work, unimodular, tuple(pivots))


@dataclass(frozen=True, slots=True)
class IntegerSolutions:
    """`{particular + kernel * z : z integer}`: every integer solution of a linear system."""

    particular: list[int]
    kernel: Matrix  # columns are the kernel vectors (rows: one per unknown)


def solve_integer(matrix: Sequence[Sequence[int]], rhs: Sequence[int]) -> IntegerSolutions | None:
    """All integer `x` with `matrix * x == rhs`, or None when there is none."""
    width = len(matrix[0]) if matrix else 0
    form = column_echelon(matrix, width)
    unknowns = [0] * width
    pivot_of_row = {row: k for k, row in enumerate(form.pivot_rows)}
    for index, row in enumerate(form.echelon):
        known = sum(row[c] * unknowns[c] for c in range(form.rank))
        pivot = pivot_of_row.get(index)
        if pivot is None:
            if known != rhs[index]:
                return None
            continue
        remainder = rhs[index] - (known - row[pivot] * unknowns[pivot])
        quotient, rest = divmod(remainder, row[pivot])
        if rest:
            return None
        unknowns[pivot] = quotient
    particular = apply(form.unimodular, unknowns)
    kernel = [row[form.rank :] for row in form.unimodular]
    return IntegerSolutions(particular, kernel)


@dataclass(frozen=True, slots=True)
class Congruence:
    """`coefficients . v + const == 0 (mod modulus)`."""

    coefficients: tuple[int, ...]
    const: int
    modulus: int


@dataclass(frozen=True, slots=True)
class Lattice:
    """`v = origin + basis * u` for integer `u` (bijectively): a translated full lattice."""

    origin: list[int]
    basis: Matrix  # square, lower triangular, positive diagonal


def integral_lattice(congruences: Sequence[Congruence], size: int) -> Lattice | None:
    """The integer `v` (of `size` entries) that satisfy every congruence, or None if none.

    Each congruence `a.v + c == 0 (mod m)` becomes the equation `a.v - m*t = -c` with a new
    integer unknown `t`; the solutions projected on `v` form the lattice. Its generators are
    reduced to a square basis by column echelon form (the lattice always has full rank: it
    contains `lcm(m) * Z^size`), and the origin is reduced to `0 <= origin[i] < basis[i][i]`.
    """
    if not congruences:
        return Lattice([0] * size, identity(size))
    count = len(congruences)
    matrix = []
    for index, congruence in enumerate(congruences):
        extra = [0] * count
        extra[index] = -congruence.modulus
        matrix.append([*congruence.coefficients, *extra])
    solutions = solve_integer(matrix, [-c.const for c in congruences])
    if solutions is None:
        return None
    generators = [row for row in solutions.kernel[:size]]
    form = column_echelon(generators)
    assert form.rank == size, "the integral points of bounded polynomials form a full lattice"
    basis = [row[:size] for row in form.echelon]
    origin = solutions.particular[:size]
    for axis in range(size):
        quotient = origin[axis] // basis[axis][axis]
        if quotient:
            origin = [o - quotient * b[axis] for o, b in zip(origin, basis, strict=True)]
    return Lattice(origin, basis)
