"""Binding one contraction (spec 8): sizes, operand ranks, exact index polynomials,
constraints, the result type, the `default` tensor, and the bound checks of 8.12.

Called by `Binder.run`; returns the contraction's output value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape, promote
from tile.bind.bounds import index_bounds
from tile.bind.evaluate import Const
from tile.bind.polynomial import (
    NonConstantDivisorError,
    NonLinearError,
    Polynomial,
    RangeConstraint,
)
from tile.bind.program import BoundAccess, BoundContraction, OpKind
from tile.bind.values import BindFailure, Poison, TensorValue
from tile.lang.syntax import (
    AggOp,
    CombOp,
    PBinary,
    PConst,
    PIndex,
    PNeg,
    PolyExpr,
    PolyOp,
    PSize,
    Span,
    source_text,
)

if TYPE_CHECKING:
    from tile.bind.binder import Binder
    from tile.lang.syntax import ContractionStmt, TensorRef

_AGG_WORD = {AggOp.SUM: "sum", AggOp.PROD: "multiply"}


def bind_contraction(binder: Binder, stmt: ContractionStmt) -> TensorValue:
    out = stmt.out
    dims = []
    for node in out.sizes or ():
        text = source_text(node)
        size = binder.integer(
            binder.expr(node), text, node.span, "E-CONST", f"each size of output '{out.name}'"
        )
        if size < 1:
            raise binder.fail(
                "E-CONST",
                f"output size '{text}' of '{out.name}' is {size}; sizes must be at least 1",
                node.span,
            )
        dims.append(size)

    operands = [_operand(binder, ref) for ref in stmt.operands]
    index_names = _index_names(stmt)
    converter = _PolyConverter(binder)
    out_polys = tuple(converter.convert(p) for p in out.indices)
    accesses = [BoundAccess(out.name, out_polys)]
    ranges: list[RangeConstraint] = []
    _access_ranges(binder, out.name, out_polys, tuple(dims), out.span, ranges)
    for ref, value in zip(stmt.operands, operands, strict=True):
        polys = tuple(converter.convert(p) for p in ref.indices)
        accesses.append(BoundAccess(value.name, polys))
        _access_ranges(binder, ref.name, polys, value.shape.dims, ref.span, ranges)

    user: list[RangeConstraint] = []
    for constraint in stmt.constraints:
        text = source_text(constraint.bound)
        bound = binder.integer(
            binder.expr(constraint.bound),
            text,
            constraint.bound.span,
            "E-CONST",
            "a constraint bound",
        )
        poly = converter.convert(constraint.poly)
        where = f"'{constraint}'"
        if bound <= 0:
            raise binder.fail(
                "E-EMPTY",
                f"constraint {where} can never hold: its bound is {bound}",
                constraint.span,
            )
        if poly.is_constant:
            if not _in_range(poly, bound):
                raise binder.fail(
                    "E-EMPTY",
                    f"constraint {where} can never hold ({poly} is not in [0, {bound}))",
                    constraint.span,
                )
            continue
        user.append(RangeConstraint(poly, bound))
    ranges.extend(user)

    dtype = _result_type(binder, stmt, operands)
    inputs = list(operands)
    default_name = None
    if stmt.default is not None:
        default = binder.values[stmt.default.name]
        if isinstance(default, Poison):
            raise BindFailure
        if not isinstance(default, TensorValue) or default.shape.dims != tuple(dims):
            found = default.describe() if isinstance(default, TensorValue) else "a scalar constant"
            raise binder.fail(
                "E-SHAPE",
                f"the default of '{out.name}' must be a tensor of shape "
                f"[{', '.join(map(str, dims))}], but '{stmt.default.name}' is {found}",
                stmt.default.span,
            )
        default_name = default.name
        inputs.append(default)

    result = index_bounds(ranges, index_names)
    if result.unbounded:
        names = ", ".join(f"'{n}'" for n in result.unbounded)
        plural = len(result.unbounded) > 1
        raise binder.fail(
            "E-UNBOUNDED",
            f"index variable{'s' if plural else ''} {names} of '{out.name}' "
            f"{'have' if plural else 'has'} no finite range: no access or constraint bounds "
            f"{'them' if plural else 'it'} from both sides; add a constraint such as "
            f"'{result.unbounded[0]} < N'",
            _first_span(stmt, result.unbounded[0]) or stmt.span,
        )
    if result.empty is not None:
        raise binder.fail(
            "E-EMPTY",
            f"contraction '{out.name}' has no valid index tuple: {result.empty}",
            stmt.span,
        )
    contraction = BoundContraction(
        stmt.agg,
        stmt.comb,
        tuple(accesses),
        tuple(user),
        index_names,
        default_name,
        stmt.no_defract,
    )
    return binder.emit(
        OpKind.CONTRACTION,
        "",
        inputs,
        TensorShape(dtype, tuple(dims)),
        span=stmt.span,
        target=out.name,
        text=out.name,
        contraction=contraction,
    )


def _operand(binder: Binder, ref: TensorRef) -> TensorValue:
    value = binder.values[ref.name]
    if isinstance(value, Poison):
        raise BindFailure
    plain = binder.plain(value, ref.name, ref.span)
    if isinstance(plain, Const):  # constants are read as 0-D tensors, `C[]` (spec 8.1)
        plain = TensorValue(binder.const_name(plain), TensorShape(plain.dtype, ()), ref.name)
    if len(ref.indices) != plain.shape.rank:
        raise binder.fail(
            "E-SHAPE",
            f"'{ref.name}' has {plain.shape.rank} dimension(s) ({plain.shape}) but is accessed "
            f"with {len(ref.indices)} index expression(s) in '{ref}'",
            ref.span,
        )
    return TensorValue(plain.name, plain.shape, ref.name)


def _result_type(binder: Binder, stmt: ContractionStmt, operands: list[TensorValue]) -> DType:
    types = [o.shape.dtype for o in operands]
    match stmt.comb:
        case CombOp.NONE:
            dtype = types[0]
        case CombOp.ADD | CombOp.MUL:
            if all(t.is_bool for t in types):
                raise binder.fail(
                    "E-TYPE",
                    f"cannot combine two bool values with '{stmt.comb.value}'",
                    stmt.agg_span,
                )
            dtype = promote(types)
        case CombOp.EQ:
            dtype = DType.BOOLEAN
        case _:
            dtype = promote(types)
    if dtype.is_bool and stmt.agg in _AGG_WORD:
        raise binder.fail(
            "E-TYPE",
            f"cannot {_AGG_WORD[stmt.agg]} bool values; aggregate them with '>' (any), "
            f"'<' (all) or '=', or convert first",
            stmt.agg_span,
        )
    return dtype


def _in_range(poly: Polynomial, size: int) -> bool:
    value = poly.const
    return value.denominator == 1 and 0 <= value < size


def _access_ranges(
    binder: Binder,
    name: str,
    polys: tuple[Polynomial, ...],
    dims: tuple[int, ...],
    span: Span | None,
    ranges: list[RangeConstraint],
) -> None:
    for axis, (poly, size) in enumerate(zip(polys, dims, strict=True)):
        if poly.is_constant:
            if not _in_range(poly, size):
                raise binder.fail(
                    "E-EMPTY",
                    f"index {poly} of dimension {axis} of '{name}' is outside [0, {size}), so "
                    f"no element is ever accessed",
                    span,
                )
            continue
        ranges.append(RangeConstraint(poly, size))


def _index_names(stmt: ContractionStmt) -> tuple[str, ...]:
    names: dict[str, None] = {}
    polys = [*stmt.out.indices]
    for ref in stmt.operands:
        polys.extend(ref.indices)
    polys.extend(c.poly for c in stmt.constraints)
    for poly in polys:
        for node in _walk(poly):
            if isinstance(node, PIndex):
                names.setdefault(node.name)
    return tuple(names)


def _first_span(stmt: ContractionStmt, name: str) -> Span | None:
    polys = [*stmt.out.indices, *(i for ref in stmt.operands for i in ref.indices)]
    for poly in polys:
        for node in _walk(poly):
            if isinstance(node, PIndex) and node.name == name:
                return node.span
    return None


def _walk(poly: PolyExpr) -> list[PolyExpr]:
    match poly:
        case PBinary(lhs=lhs, rhs=rhs):
            return [poly, *_walk(lhs), *_walk(rhs)]
        case PNeg(operand=operand):
            return [poly, *_walk(operand)]
        case _:
            return [poly]


class _PolyConverter:
    """Index-polynomial syntax to exact `Polynomial`s (spec 8.2), with E-INDEX/E-CONST."""

    def __init__(self, binder: Binder) -> None:
        self.binder = binder

    def convert(self, node: PolyExpr) -> Polynomial:
        binder = self.binder
        match node:
            case PIndex(name=name):
                return Polynomial.var(name)
            case PConst(value=value):
                return Polynomial.constant(value)
            case PSize(name=name, span=span):
                value = binder.values[name]
                if isinstance(value, Poison):
                    raise BindFailure
                if isinstance(value, Const) and value.is_integral:
                    return Polynomial.constant(int(value.value))
                if isinstance(value, TensorValue):
                    found = f"a tensor ({value.shape}); there is no indirect indexing"
                elif isinstance(value, Const):
                    found = f"the {value.dtype.short} constant {value.value!r}"
                else:
                    found = "not an integer constant"
                raise binder.fail(
                    "E-CONST", f"'{name}' is used in an index, but it is {found}", span
                )
            case PNeg(operand=operand):
                return -self.convert(operand)
            case PBinary(op=op, lhs=lhs, rhs=rhs, span=span):
                left, right = self.convert(lhs), self.convert(rhs)
                try:
                    match op:
                        case PolyOp.ADD:
                            return left + right
                        case PolyOp.SUB:
                            return left - right
                        case PolyOp.MUL:
                            return left * right
                        case _:
                            return left / right
                except NonLinearError:
                    message = (
                        f"'{source_text(node)}' multiplies index variables; index polynomials "
                        f"must be linear"
                    )
                except NonConstantDivisorError:
                    message = (
                        f"'{source_text(node)}' divides by an index variable; the divisor must "
                        f"be a constant"
                    )
                except ZeroDivisionError:
                    message = f"'{source_text(node)}' divides by zero"
                raise binder.fail("E-INDEX", message, span)
            case _:
                raise TypeError(f"unexpected polynomial node {node!r}")
