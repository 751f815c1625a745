"""Flattening: one bound contraction becomes a `FlatContraction` (spec 8.13, design 3.4).

Sits between binding (`tile.bind.binder`: exact rational index polynomials, checked bounds) and
kernel generation (`tile.lower.contract`). The steps, all exact:

1. **Integrality lattice** (spec step 5). A fractional polynomial `p` is an integer only on a
   congruence class of the variables; all of them together give the translated lattice
   `v = origin + B u` (`tile.lower.lattice.integral_lattice`). Substituting it makes every
   polynomial integral in `u`, and every integer `u` a tuple at which all accesses are
   integers. (No lattice point: no valid tuple, the result is all unwritten.)
2. **Output reduction** (spec step 4). Column operations on the output matrix (in `u`) give a
   new basis `w` whose first `k` vectors move the output position (echelon form `H`) and whose
   other vectors leave it unchanged: those become the reduction loops. `no_defract` asks to
   keep the source's loops; since it never changes results (spec 8.10) it is ignored, which
   keeps every output element owned by one work-item.
3. **Coordinates.** The kernel grid is the output shape itself. The output variables `w_j`
   follow from the coordinates by forward substitution through `H` (it is triangular):
   `w_j = (c_p - f_p - sum(H[p][l] w_l)) / H[p][j]`. A division that is not exact for every
   coordinate becomes a derived variable with a divisibility check (the strided output
   `O[2*i]` visits odd elements, which receive nothing); rows of `H` without a pivot become
   equality guards (the diagonal `O[i, i]`).
4. **Bounds** (spec step 6): exact box of the reduction variables by `tile.bind.bounds`.
5. **Guards** (spec step 7): the halves of the operand and user range constraints that the
   coordinates' and reductions' ranges do not imply (`tile.bind.bounds.residual_guards`).
6. **Strides** (spec step 8): every access as an offset plus one stride per variable.
7. **Merged loops**: neighbouring reductions of one operand that walk it as one loop become
   one (`tile.lower.collapse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil, floor
from typing import TYPE_CHECKING

from tile.bind.bounds import Bounds, Half, index_bounds, residual_guards
from tile.bind.polynomial import Polynomial, RangeConstraint
from tile.bind.program import ConstBinding, TensorBinding
from tile.lower.collapse import merge_reductions
from tile.lower.flat import FlatAccess, FlatConstraint, FlatContraction, FlatDerived
from tile.lower.lattice import Congruence, Lattice, column_echelon, integral_lattice, multiply

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from semtree.types import DType
    from tile.bind.program import Binding, BoundContraction, BoundOp


class FlattenError(Exception):
    """An internal inconsistency (a bound contraction the binder should have rejected)."""


@dataclass(slots=True)
class _Affine:
    """`const + sum(terms[name] * name)` with integer coefficients, over kernel variables."""

    terms: dict[str, int] = field(default_factory=dict)
    const: int = 0

    def plus(self, other: _Affine, factor: int = 1) -> _Affine:
        terms = dict(self.terms)
        for name, coefficient in other.terms.items():
            total = terms.get(name, 0) + factor * coefficient
            if total:
                terms[name] = total
            else:
                terms.pop(name, None)
        return _Affine(terms, self.const + factor * other.const)

    def divisible_by(self, divisor: int) -> bool:
        return self.const % divisor == 0 and all(c % divisor == 0 for c in self.terms.values())

    def divided(self, divisor: int) -> _Affine:
        return _Affine({n: c // divisor for n, c in self.terms.items()}, self.const // divisor)

    def polynomial(self) -> Polynomial:
        return Polynomial(tuple((n, Fraction(c)) for n, c in self.terms.items()), self.const)


def tensor_dims(bindings: Mapping[str, Binding], name: str) -> tuple[int, ...]:
    binding = bindings[name]
    return binding.shape.dims if isinstance(binding, TensorBinding) else ()


def tensor_dtype(bindings: Mapping[str, Binding], name: str) -> DType:
    binding = bindings[name]
    return binding.shape.dtype if isinstance(binding, TensorBinding) else binding.dtype


def row_major(dims: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(dims):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


class _Names:
    """Readable, unique variable names (the source's own where a variable survives)."""

    def __init__(self, taken: Sequence[str]) -> None:
        self.taken = set(taken)
        self.used: set[str] = set()

    def pick(self, preferred: str | None, prefix: str, index: int) -> str:
        if preferred is not None and preferred not in self.used:
            self.used.add(preferred)
            return preferred
        name = f"{prefix}{index}"
        while name in self.taken or name in self.used:
            name += "_"
        self.used.add(name)
        return name


def flatten(op: BoundOp, bindings: Mapping[str, Binding]) -> FlatContraction:
    """The flat form of the contraction `op` (see the module docstring)."""
    contraction = op.contraction
    if contraction is None:
        raise FlattenError(f"{op.output} is not a contraction")
    return merge_reductions(_Flattener(op, contraction, bindings).run())


class _Flattener:
    def __init__(
        self, op: BoundOp, contraction: BoundContraction, bindings: Mapping[str, Binding]
    ) -> None:
        self.op = op
        self.contraction = contraction
        self.bindings = bindings
        self.variables = contraction.index_names
        self.out_dims = tensor_dims(bindings, op.output)
        self.names = _Names(self.variables)
        self.statement = f"{op.output}{_output_spec(contraction, self.out_dims)} = {contraction}"
        self.out_ranges, self.other_ranges = self._ranges()
        # Filled by the steps of `run`.
        self.rank = 0
        self.basis: list[list[int]] = []
        self.forms: list[_Affine | None] = []
        self.derived: list[tuple[str, _Affine, int]] = []  # name, numerator, divisor
        self.equalities: list[_Affine] = []  # output rows without a pivot: each must be 0
        self.reductions: list[tuple[str, int]] = []  # name, trip count
        self.coordinate_names: list[str] = []
        self.kernel_names: list[str] = []

    # ---- the steps ---------------------------------------------------------------------------

    def run(self) -> FlatContraction:
        lattice = self._lattice()
        if lattice is None:
            return self._empty()
        coordinates = self._output_reduction(lattice)
        if coordinates is None:
            return self._empty()
        if not self._reduction_bounds(lattice):
            return self._empty()
        sources = self._sources(lattice)
        box = self._box(coordinates)
        if box is None:
            return self._empty()
        constraints = self._guards(sources, box)
        if constraints is None:
            return self._empty()
        accesses = [self._output_access(coordinates)]
        for access in self.contraction.operands:
            accesses.append(self._access(access.tensor, access.polys, sources))
        return FlatContraction(
            statement=self.statement,
            names=tuple(self.kernel_names),
            outputs=len(coordinates),
            ranges=(
                *self.out_dims,
                *(0 for _ in self.derived),
                *(extent for _, extent in self.reductions),
            ),
            derived=tuple(
                FlatDerived(name, _vector(numerator, self.kernel_names), numerator.const, divisor)
                for name, numerator, divisor in self.derived
            ),
            access=tuple(accesses),
            constraints=tuple(constraints),
            agg=self.contraction.agg,
            comb=self.contraction.comb,
            dtype=tensor_dtype(self.bindings, self.op.output),
            default=self.contraction.default,
        )

    def _lattice(self) -> Lattice | None:
        """Step 1: the integer tuples at which every polynomial is an integer."""
        contraction = self.contraction
        polys = [p for access in contraction.access for p in access.polys]
        polys += [c.poly for c in contraction.constraints]
        congruences = [self._congruence(p) for p in polys if p.denominator() != 1]
        return integral_lattice(congruences, len(self.variables))

    def _output_reduction(self, lattice: Lattice) -> list[str] | None:
        """Steps 2 and 3: the basis `w` (output vectors first) and, for each output variable,
        its value as a function of the coordinates (`self.forms`); None if no coordinate can
        satisfy the output's equalities."""
        size = len(self.variables)
        out_rows = [self._in_lattice(p, lattice.origin, lattice.basis) for p in self._out_polys()]
        form = column_echelon([row for row, _ in out_rows], size)
        self.rank = form.rank
        self.basis = self._tidy_kernel(multiply(lattice.basis, form.unimodular), form.rank)
        coordinates = [
            self.names.pick(self._coordinate_name(d), "o", d) for d in range(len(out_rows))
        ]
        self.coordinate_names = coordinates
        self.forms = [None] * size
        pivot_of_row = {row: k for k, row in enumerate(form.pivot_rows)}
        for row_index, (_, offset) in enumerate(out_rows):
            # c[row] - offset = sum(H[row][k] * w[k]): solve for the pivot, triangularly.
            position = _Affine({coordinates[row_index]: 1}, -offset)
            pivot = pivot_of_row.get(row_index)
            for k in range(form.rank if pivot is None else pivot):
                coefficient = form.echelon[row_index][k]
                if coefficient:
                    position = position.plus(self.forms[k], -coefficient)  # type: ignore[arg-type]
            if pivot is None:
                if not position.terms and position.const:
                    return None
                self.equalities.append(position)
                continue
            divisor = form.echelon[row_index][pivot]
            if position.divisible_by(divisor):
                self.forms[pivot] = position.divided(divisor)
            else:
                preferred = self._variable_name(self.basis, pivot)
                name = self.names.pick(preferred, "d", len(self.derived))
                self.derived.append((name, position, divisor))
                self.forms[pivot] = _Affine({name: 1})
        return coordinates

    def _reduction_bounds(self, lattice: Lattice) -> bool:
        """Step 4: the exact box of the reduction variables; False if no tuple is valid."""
        size = len(self.variables)
        w_names = [f"_w{k}" for k in range(size)]
        w_constraints = []
        for poly, extent in [*self.out_ranges, *self.other_ranges]:
            row, const = self._in_lattice(poly, lattice.origin, self.basis)
            terms = tuple((w_names[k], Fraction(c)) for k, c in enumerate(row) if c)
            w_constraints.append(RangeConstraint(Polynomial(terms, const), extent))
        result = index_bounds(w_constraints, w_names)
        if result.bounds is None:
            if result.unbounded:
                raise FlattenError(f"{self.statement}: unbounded after flattening")
            return False
        for k in range(self.rank, size):
            box = result.bounds[w_names[k]]
            name = self.names.pick(self._variable_name(self.basis, k), "r", k - self.rank)
            self.reductions.append((name, box.size))
            self.forms[k] = _Affine({name: 1}, box.lo)  # shifted to start at 0
        return True

    def _sources(self, lattice: Lattice) -> dict[str, _Affine]:
        """Every source variable over the kernel variables."""
        self.kernel_names = [
            *self.coordinate_names,
            *(name for name, _, _ in self.derived),
            *(name for name, _ in self.reductions),
        ]
        sources: dict[str, _Affine] = {}
        for index, variable in enumerate(self.variables):
            value = _Affine({}, lattice.origin[index])
            for k, coefficient in enumerate(self.basis[index]):
                if coefficient:
                    value = value.plus(self.forms[k], coefficient)  # type: ignore[arg-type]
            sources[variable] = value
        return sources

    def _box(self, coordinates: list[str]) -> dict[str, Bounds] | None:
        """The range of every kernel variable (derived ones: where they can be exact)."""
        box = {
            name: Bounds(0, extent - 1)
            for name, extent in zip(coordinates, self.out_dims, strict=True)
        }
        for name, numerator, divisor in self.derived:
            low, high = _interval(numerator, box)
            lo, hi = ceil(Fraction(low, divisor)), floor(Fraction(high, divisor))
            if lo > hi:
                return None
            box[name] = Bounds(lo, hi)
        for name, extent in self.reductions:
            box[name] = Bounds(0, extent - 1)
        return box

    def _guards(
        self, sources: dict[str, _Affine], box: dict[str, Bounds]
    ) -> list[FlatConstraint] | None:
        """Step 5: the halves of the operand and user constraints (and of the output's
        equalities) that the box does not imply; None if one can never hold. The output's own
        range constraints hold by construction: its subscripts are the coordinates."""
        sources_of_guards = [
            RangeConstraint(self._substitute(poly, sources).polynomial(), extent)
            for poly, extent in self.other_ranges
        ]
        sources_of_guards += [
            RangeConstraint(e.polynomial(), 1) for e in self.equalities if e.terms
        ]
        for constraint in sources_of_guards:
            if constraint.poly.is_constant and not 0 <= constraint.poly.const < constraint.range:
                return None
        constraints = []
        for guard in residual_guards(sources_of_guards, box):
            affine = _Affine({n: int(c) for n, c in guard.poly.terms}, int(guard.poly.const))
            coefficients = _vector(affine, self.kernel_names)
            if guard.half is Half.LOWER:  # poly >= 0  <=>  -poly <= 0
                constraints.append(FlatConstraint(tuple(-c for c in coefficients), affine.const))
            else:  # poly <= limit
                constraints.append(FlatConstraint(coefficients, guard.limit - affine.const))
        return constraints

    # ---- helpers -----------------------------------------------------------------------------

    def _out_polys(self) -> tuple[Polynomial, ...]:
        return self.contraction.output.polys

    def _ranges(self) -> tuple[list[tuple[Polynomial, int]], list[tuple[Polynomial, int]]]:
        """The range constraints (spec 8.13 step 2): of the output's subscripts, and of the
        operands' subscripts and the user's constraints. Constant subscripts were checked by
        binding."""
        ranges: list[list[tuple[Polynomial, int]]] = [[], []]
        for position, access in enumerate(self.contraction.access):
            # The binder may rename the output op after binding the contraction.
            dims = self.out_dims if position == 0 else tensor_dims(self.bindings, access.tensor)
            for poly, extent in zip(access.polys, dims, strict=True):
                if not poly.is_constant:
                    ranges[position > 0].append((poly, extent))
        ranges[1] += [(c.poly, c.range) for c in self.contraction.constraints]
        return ranges[0], ranges[1]

    def _congruence(self, poly: Polynomial) -> Congruence:
        scale = poly.denominator()
        coefficients = tuple(int(poly.coeff(v) * scale) for v in self.variables)
        return Congruence(coefficients, int(poly.const * scale), scale)

    def _in_lattice(
        self, poly: Polynomial, origin: Sequence[int], basis: Sequence[Sequence[int]]
    ) -> tuple[list[int], int]:
        """`poly(origin + basis . u)` as integer coefficients over `u` and a constant."""
        coefficients = [poly.coeff(v) for v in self.variables]
        const = poly.const + sum(c * o for c, o in zip(coefficients, origin, strict=True))
        row = [
            sum(c * basis[i][k] for i, c in enumerate(coefficients))
            for k in range(len(self.variables))
        ]
        if const.denominator != 1 or any(Fraction(x).denominator != 1 for x in row):
            raise FlattenError(f"{self.statement}: {poly} is not integral on its lattice")
        return [int(x) for x in row], int(const)

    def _tidy_kernel(self, basis: list[list[int]], rank: int) -> list[list[int]]:
        """Re-base the kernel (reduction) columns in echelon form over the source variables,
        so that a reduction variable is a source variable whenever the lattice allows."""
        kernel = [row[rank:] for row in basis]
        if not kernel or not kernel[0]:
            return basis
        tidy = column_echelon(kernel).echelon
        return [row[:rank] + tidy_row for row, tidy_row in zip(basis, tidy, strict=True)]

    def _coordinate_name(self, dimension: int) -> str | None:
        poly = self._out_polys()[dimension]
        if len(poly.terms) == 1 and poly.terms[0][1] == 1 and poly.const == 0:
            name = poly.terms[0][0]
            if sum(p.coeff(name) != 0 for p in self._out_polys()) == 1:
                return name
        return None

    def _variable_name(self, basis: Sequence[Sequence[int]], position: int) -> str | None:
        """The source variable equal to `w[position]` (up to a constant), if there is one."""
        for index, row in enumerate(basis):
            if row[position] == 1 and all(c == 0 for k, c in enumerate(row) if k != position):
                return self.variables[index]
        return None

    def _substitute(self, poly: Polynomial, sources: Mapping[str, _Affine]) -> _Affine:
        total: dict[str, Fraction] = {}
        const = poly.const
        for variable, coefficient in poly.terms:
            value = sources[variable]
            const += coefficient * value.const
            for name, c in value.terms.items():
                total[name] = total.get(name, Fraction(0)) + coefficient * c
        if const.denominator != 1 or any(c.denominator != 1 for c in total.values()):
            raise FlattenError(f"{self.statement}: {poly} has fractional kernel coefficients")
        return _Affine({n: int(c) for n, c in total.items() if c}, int(const))

    def _access(
        self, tensor: str, polys: Sequence[Polynomial], sources: Mapping[str, _Affine]
    ) -> FlatAccess:
        dims = tensor_dims(self.bindings, tensor)
        offset = 0
        strides = [0] * len(self.kernel_names)
        for poly, stride in zip(polys, row_major(dims), strict=True):
            affine = self._substitute(poly, sources)
            offset += stride * affine.const
            for k, coefficient in enumerate(_vector(affine, self.kernel_names)):
                strides[k] += stride * coefficient
        return FlatAccess(tensor, tensor_dtype(self.bindings, tensor), dims, offset, tuple(strides))

    def _output_access(self, coordinates: Sequence[str]) -> FlatAccess:
        extra = len(self.kernel_names) - len(coordinates) if self.kernel_names else 0
        strides = list(row_major(self.out_dims)) + [0] * extra
        return FlatAccess(
            self.op.output,
            tensor_dtype(self.bindings, self.op.output),
            self.out_dims,
            0,
            tuple(strides),
        )

    def _empty(self) -> FlatContraction:
        """No tuple is valid: the kernel only writes 0 or the default (spec 8.12)."""
        names = _Names(self.variables)
        coordinates = [
            names.pick(self._coordinate_name(d), "o", d) for d in range(len(self.out_dims))
        ]
        self.kernel_names = []
        operands = []
        for access in self.contraction.operands:
            operands.append(
                FlatAccess(
                    access.tensor,
                    tensor_dtype(self.bindings, access.tensor),
                    tensor_dims(self.bindings, access.tensor),
                    0,
                    (0,) * len(coordinates),
                )
            )
        return FlatContraction(
            statement=self.statement,
            names=tuple(coordinates),
            outputs=len(coordinates),
            ranges=self.out_dims,
            derived=(),
            access=(self._output_access(coordinates), *operands),
            constraints=(),
            agg=self.contraction.agg,
            comb=self.contraction.comb,
            dtype=tensor_dtype(self.bindings, self.op.output),
            default=self.contraction.default,
            empty=True,
        )


def _vector(affine: _Affine, names: Sequence[str]) -> tuple[int, ...]:
    return tuple(affine.terms.get(name, 0) for name in names)


def _interval(affine: _Affine, box: Mapping[str, Bounds]) -> tuple[int, int]:
    low = high = affine.const
    for name, coefficient in affine.terms.items():
        bounds = box[name]
        near, far = (bounds.lo, bounds.hi) if coefficient > 0 else (bounds.hi, bounds.lo)
        low += coefficient * near
        high += coefficient * far
    return low, high


def _output_spec(contraction: BoundContraction, dims: Sequence[int]) -> str:
    polys = ", ".join(str(p) for p in contraction.output.polys)
    sizes = ", ".join(str(d) for d in dims)
    return f"[{polys}: {sizes}]" if dims else "[]"


def is_constant(bindings: Mapping[str, Binding], name: str) -> bool:
    return isinstance(bindings[name], ConstBinding)
