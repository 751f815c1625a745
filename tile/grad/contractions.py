"""The transposes of contractions for tile.grad.derive (docs/GRADIENTS.md, "Contractions").

`ContractionRules` is a part of the deriver: `_contraction(statement, g)` writes, for each
active operand of a contraction whose output has the cotangent `g`, the contraction that
computes the operand's contribution, and hands it to `_contribute`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tile.grad.rules import ONE, ZERO, div, mul, select
from tile.lang.syntax import (
    AggOp,
    CombOp,
    ContractionStmt,
    IntLit,
    Name,
    OutSpec,
    PBinary,
    PIndex,
    PNeg,
    TensorRef,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.errors import TileGradientError
    from tile.lang.syntax import Expr, PolyExpr, Span, Statement


def _index_names(poly: PolyExpr) -> list[str]:
    match poly:
        case PIndex(name=name):
            return [name]
        case PBinary(lhs=lhs, rhs=rhs):
            return _index_names(lhs) + _index_names(rhs)
        case PNeg(operand=operand):
            return _index_names(operand)
    return []


class ContractionRules:
    """The contraction half of `tile.grad.derive._Deriver` (which provides the state)."""

    active: set[str]
    emitted: list[Statement]

    def _temp(self, base: str, value: Expr) -> Name:
        raise NotImplementedError

    def _fresh(self, base: str) -> str:
        raise NotImplementedError

    def _dims(self, name: str, rank: int) -> tuple[Expr, ...]:
        raise NotImplementedError

    def _contribute(self, name: str, value: Expr) -> None:
        raise NotImplementedError

    def _fail(self, message: str, span: Span | None = None) -> TileGradientError:
        raise NotImplementedError

    def _contraction(self, statement: ContractionStmt, g: Name) -> None:
        out = statement.out
        operands = statement.operands
        active = [k for k, ref in enumerate(operands) if ref.name in self.active]
        agg, comb = statement.agg, statement.comb
        g_ref = TensorRef(g.name, out.indices)
        if statement.default is not None and statement.default.name in self.active:
            self._default(statement, g)
        if not active:
            return
        if comb is CombOp.EQ:
            return  # a bool value
        for index in active:
            ref = operands[index]
            others = [other for k, other in enumerate(operands) if k != index]
            body: tuple[TensorRef, ...]
            match agg, comb:
                case (AggOp.SUM | AggOp.ASSIGN, CombOp.NONE):
                    body, kind = (g_ref,), CombOp.NONE
                case (AggOp.SUM | AggOp.ASSIGN, CombOp.MUL):
                    body, kind = (g_ref, others[0]), CombOp.MUL
                case (AggOp.SUM | AggOp.ASSIGN, CombOp.ADD):
                    body, kind = (g_ref, self._ones(others[0])), CombOp.MUL
                case (AggOp.SUM | AggOp.ASSIGN, CombOp.COND):
                    if index != 2:
                        continue  # the compared values select; they carry no gradient
                    body, kind = (operands[0], operands[1], g_ref), CombOp.COND
                case (AggOp.MAX | AggOp.MIN, CombOp.NONE):
                    extreme = TensorRef(out.name, out.indices)
                    body, kind = (ref, extreme, g_ref), CombOp.COND
                case (AggOp.PROD, CombOp.NONE):
                    scaled = self._temp(f"G_{out.name}", mul(g, Name(out.name)))
                    inverse = self._temp(f"R_{ref.name}", div(ONE, Name(ref.name)))
                    body = (
                        TensorRef(scaled.name, out.indices),
                        TensorRef(inverse.name, ref.indices),
                    )
                    kind = CombOp.MUL
                case (AggOp.MAX | AggOp.MIN, CombOp.MUL | CombOp.ADD):
                    # Every tuple whose combined value is the extreme passes the cotangent
                    # times the other operand (MUL) or as it is (ADD): the combined values
                    # are compared where an outer product of the operands holds them.
                    other = others[0]
                    values = self._outer(statement, (ref, other), comb)
                    if comb is CombOp.MUL:
                        weights = self._outer(statement, (g_ref, other), CombOp.MUL, out.sizes)
                    else:
                        weights = self._outer(
                            statement, (g_ref, self._ones(other)), CombOp.MUL, out.sizes
                        )
                    extreme = TensorRef(out.name, out.indices)
                    body, kind = (values, extreme, weights), CombOp.COND
                case (AggOp.MAX | AggOp.MIN, CombOp.COND):
                    if index != 2:
                        continue  # the compared values select; they carry no gradient
                    values = self._outer(statement, operands, comb)
                    # the cotangent where the compared values are equal, else 0
                    pair = (operands[0], operands[1], g_ref)
                    weights = self._outer(statement, pair, CombOp.COND, out.sizes, first=2)
                    extreme = TensorRef(out.name, out.indices)
                    body, kind = (values, extreme, weights), CombOp.COND
                case (AggOp.PROD, CombOp.MUL | CombOp.ADD):
                    # d(prod)/d(factor) = prod / factor, per tuple
                    scaled = self._temp(f"G_{out.name}", mul(g, Name(out.name)))
                    factors = self._outer(statement, (ref, others[0]), comb)
                    inverse = self._temp(f"R_{ref.name}", div(ONE, Name(factors.name)))
                    scaled_ref = TensorRef(scaled.name, out.indices)
                    if comb is CombOp.MUL:  # factor x*y: (prod / (x*y)) * y
                        weights = self._outer(
                            statement, (scaled_ref, others[0]), CombOp.MUL, out.sizes
                        )
                        body = (weights, TensorRef(inverse.name, factors.indices))
                    else:  # factor x+y: prod / (x+y)
                        body = (scaled_ref, TensorRef(inverse.name, factors.indices))
                    kind = CombOp.MUL
                case _:
                    raise self._fail(
                        f"the gradient of a '{agg.value}' aggregation of a "
                        f"'{comb.value}' combination is not supported; write the combined "
                        "value to its own tensor first",
                        statement.span,
                    )
            name = self._fresh(f"G_{ref.name}")
            sizes = self._dims(ref.name, len(ref.indices))
            self.emitted.append(
                ContractionStmt(
                    out=OutSpec(name, ref.indices, sizes),
                    agg=AggOp.SUM,
                    comb=kind,
                    operands=body,
                    constraints=statement.constraints,
                )
            )
            self._contribute(ref.name, Name(name))

    def _outer(
        self,
        statement: ContractionStmt,
        refs: Sequence[TensorRef],
        comb: CombOp,
        first_sizes: Sequence[Expr] | None = None,
        first: int = 0,
    ) -> TensorRef:
        """A tensor holding `comb` of the operands `refs` for every combination of their
        elements (an outer product: one dimension per dimension of each operand), and its
        access at the operands' own indices. The operand `refs[first]` comes first; its
        sizes are `first_sizes` when it is not one of the statement's operands (the
        cotangent, accessed where the output is).

        Where every index variable of the statement is a whole subscript of some access,
        the tensor is indexed by the variables instead: one element per index tuple, as
        many as the forward contraction visits, not the product of the operands' sizes."""
        space = self._tuple_space(statement)
        if space is not None:
            variables, sizes_of = space
            name = self._fresh(f"P_{statement.target}")
            self.emitted.append(
                ContractionStmt(
                    out=OutSpec(name, tuple(PIndex(v) for v in variables), sizes_of),
                    agg=AggOp.ASSIGN,
                    comb=comb,
                    operands=tuple(refs),
                    constraints=statement.constraints,
                )
            )
            return TensorRef(name, tuple(PIndex(v) for v in variables))
        order = [first, *(k for k in range(len(refs)) if k != first)]
        fresh = [[f"v{k}_{axis}" for axis in range(len(refs[k].indices))] for k in range(len(refs))]
        sizes: list[Expr] = []
        for k in order:
            if k == first and first_sizes is not None:
                sizes.extend(first_sizes)
            else:
                sizes.extend(self._dims(refs[k].name, len(refs[k].indices)))
        name = self._fresh(f"P_{statement.target}")
        self.emitted.append(
            ContractionStmt(
                out=OutSpec(name, tuple(PIndex(v) for k in order for v in fresh[k]), tuple(sizes)),
                agg=AggOp.ASSIGN,
                comb=comb,
                operands=tuple(
                    TensorRef(ref.name, tuple(PIndex(v) for v in names))
                    for ref, names in zip(refs, fresh, strict=True)
                ),
            )
        )
        return TensorRef(name, tuple(index for k in order for index in refs[k].indices))

    def _tuple_space(self, statement: ContractionStmt) -> tuple[list[str], tuple[Expr, ...]] | None:
        """The statement's index variables and, for each, the size of a dimension that it
        indexes on its own (bounding it), or None where some variable has no such place."""
        accesses = [(statement.out.indices, tuple(statement.out.sizes or ()))]
        accesses += [
            (ref.indices, self._dims(ref.name, len(ref.indices))) for ref in statement.operands
        ]
        variables: list[str] = []
        for indices, _ in accesses:
            for poly in indices:
                variables.extend(v for v in _index_names(poly) if v not in variables)
        for constraint in statement.constraints:
            variables.extend(v for v in _index_names(constraint.poly) if v not in variables)
        sizes: list[Expr] = []
        for variable in variables:
            size = next(
                (
                    dims[axis]
                    for indices, dims in accesses
                    for axis, poly in enumerate(indices)
                    if poly == PIndex(variable) and axis < len(dims)
                ),
                None,
            )
            if size is None:
                return None
            sizes.append(size)
        return variables, tuple(sizes)

    def _ones(self, ref: TensorRef) -> TensorRef:
        """An access of ones shaped like `ref`'s tensor, at `ref`'s indices."""
        ones = self._temp(f"ONES_{ref.name}", select(Name(ref.name), IntLit(1), IntLit(1)))
        return TensorRef(ones.name, ref.indices)

    def _default(self, statement: ContractionStmt, g: Name) -> None:
        """Unwritten elements take the default's values: they pass their cotangent to it."""
        out = statement.out
        ones = tuple(self._ones(ref) for ref in statement.operands)
        comb = CombOp.EQ if statement.comb is CombOp.EQ else statement.comb
        if comb is CombOp.EQ:
            comb = CombOp.COND
            ones = (ones[0], ones[1], ones[1])
        name = self._fresh(f"W_{out.name}")
        self.emitted.append(
            ContractionStmt(
                out=OutSpec(name, out.indices, out.sizes),
                agg=AggOp.MAX,
                comb=comb,
                operands=ones,
                constraints=statement.constraints,
            )
        )
        assert statement.default is not None
        self._contribute(statement.default.name, select(Name(name), ZERO, g))
