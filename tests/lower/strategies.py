"""Hypothesis strategies for random contractions, and a direct reference of their meaning.

`contractions()` draws a single-contraction Tile function: 1 to 4 index variables, an output
of rank 0 to 3, one to three operands of rank 1 to 3 (the `==`/`?` forms included), index
polynomials with small coefficients, constant offsets, occasional fractional coefficients
(`(i + j) / 2`), and 0 to 2 constraints. Every variable is anchored in at least one access,
so most draws are bounded; the rest are rejected by binding and filtered out.

`valid_tuples` enumerates the valid index tuples of a bound contraction straight from spec
8.4 (every polynomial an integer in range), over the exact box of `tile.bind.bounds`, and
`reference_contraction` aggregates them in float64 (or exact integers) by spec 8.5 to 8.9.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from hypothesis import strategies as st

from tile.bind.bounds import index_bounds
from tile.bind.polynomial import RangeConstraint
from tile.bind.program import ConstBinding
from tile.lang.syntax import AggOp, CombOp
from tile.lower.flatten import row_major

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from tile.bind.program import BoundOp, BoundProgram

VARIABLES = "ijkl"


@dataclass(frozen=True)
class ContractionCase:
    source: str
    shapes: dict[str, tuple[int, ...]]
    agg: str
    comb: str


def _poly_text(coefficients: dict[str, int], offset: int, divisor: int) -> str:
    parts = []
    for name, coefficient in coefficients.items():
        if coefficient == 0:
            continue
        term = name if abs(coefficient) == 1 else f"{abs(coefficient)}*{name}"
        sign = "-" if coefficient < 0 else "+"
        parts.append(f"{sign} {term}" if parts else (f"-{term}" if coefficient < 0 else term))
    if offset or not parts:
        if parts:
            parts.append(f"{'-' if offset < 0 else '+'} {abs(offset)}")
        else:
            parts.append(str(offset))
    text = " ".join(parts)
    return f"({text}) / {divisor}" if divisor != 1 else text


@st.composite
def _polynomial(draw: st.DrawFn, names: str, anchor: str | None) -> str:
    coefficients = {}
    for name in names:
        if name == anchor:
            coefficients[name] = draw(st.sampled_from([1, 1, 1, 2, -1]))
        else:
            coefficients[name] = draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1, -1, 2]))
    offset = draw(st.sampled_from([0, 0, 0, 1, -1, 2]))
    if not any(coefficients.values()):
        return "0"  # a constant subscript outside its dimension would be E-EMPTY
    divisor = 2 if draw(st.integers(0, 9)) == 0 else 1
    return _poly_text(coefficients, offset, divisor)


@st.composite
def contractions(draw: st.DrawFn, *, aggs: str = "+*><=") -> ContractionCase:
    names = VARIABLES[: draw(st.integers(1, 4))]
    comb = draw(st.sampled_from(["", "", "*", "+", "?"]))
    agg = draw(st.sampled_from(list(aggs)))
    operand_count = {"": 1, "*": 2, "+": 2, "?": 3}[comb]
    # Each variable is anchored (coefficient 1, 2 or -1) in one dimension of some access.
    ranks = [draw(st.integers(1, 3)) for _ in range(operand_count)]
    out_rank = draw(st.integers(0, 3))
    slots = [(-1, d) for d in range(out_rank)]
    slots += [(t, d) for t, rank in enumerate(ranks) for d in range(rank)]
    anchors: dict[tuple[int, int], str] = {}
    for name in names:
        anchors.setdefault(draw(st.sampled_from(slots)), name)
    if agg == "=":
        # '=' needs every variable in the output (spec 8.7); keep it to injective outputs.
        out_rank = len(names)
        out_polys = [name if draw(st.booleans()) else f"{name} + 1" for name in names]
    else:
        out_polys = [draw(_polynomial(names, anchors.get((-1, d)))) for d in range(out_rank)]
    out_sizes = [draw(st.integers(1, 5)) for _ in out_polys]
    accesses = []
    shapes: dict[str, tuple[int, ...]] = {}
    for t, rank in enumerate(ranks):
        tensor = "ABC"[t]
        polys = [draw(_polynomial(names, anchors.get((t, d)))) for d in range(rank)]
        shapes[tensor] = tuple(draw(st.sampled_from([1, 2, 3, 4, 5, 5])) for _ in range(rank))
        accesses.append(f"{tensor}[{', '.join(polys)}]")
    match comb:
        case "":
            body = accesses[0]
        case "?":
            body = f"{accesses[0]} == {accesses[1]} ? {accesses[2]}"
        case _:
            body = f" {comb} ".join(accesses)
    constraints = ""
    for _ in range(draw(st.integers(0, 2))):
        constraints += f", {draw(_polynomial(names, None))} < {draw(st.integers(2, 8))}"
    if out_polys and draw(st.integers(0, 3)) == 0:
        shapes["D"] = tuple(out_sizes)
        constraints += " default D"
    spec = f"[{', '.join(out_polys)}: {', '.join(map(str, out_sizes))}]" if out_polys else "[]"
    inputs = ", ".join(shapes)
    source = f"function ({inputs}) -> (O) {{ O{spec} = {agg}({body}){constraints}; }}"
    return ContractionCase(source, shapes, agg, comb)


# ---- the meaning of a contraction, straight from spec 8.4 ----------------------------------------


def _dims(bound: BoundProgram, name: str) -> tuple[int, ...]:
    binding = bound.bindings[name]
    return binding.shape.dims if hasattr(binding, "shape") else ()  # type: ignore[union-attr]


def valid_tuples(bound: BoundProgram, op: BoundOp) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(output offset, operand offsets) of every valid tuple, in row-major element offsets."""
    contraction = op.contraction
    assert contraction is not None
    variables = contraction.index_names
    accesses = [(op.output, contraction.output.polys)]
    accesses += [(a.tensor, a.polys) for a in contraction.operands]
    ranges = [
        RangeConstraint(poly, size)
        for tensor, polys in accesses
        for poly, size in zip(polys, _dims(bound, tensor), strict=True)
    ]
    ranges += list(contraction.constraints)
    box = index_bounds(ranges, variables).bounds
    if box is None:
        return
    axes = [range(box[v].lo, box[v].hi + 1) for v in variables]
    for point in itertools.product(*axes):
        values = dict(zip(variables, point, strict=True))
        offsets = []
        valid = True
        for tensor, polys in accesses:
            dims = _dims(bound, tensor)
            offset = 0
            for poly, size, stride in zip(polys, dims, row_major(dims), strict=True):
                value = poly.evaluate(values)
                if value.denominator != 1 or not 0 <= value < size:
                    valid = False
                    break
                offset += int(value) * stride
            if not valid:
                break
            offsets.append(offset)
        for constraint in contraction.constraints:
            value = constraint.poly.evaluate(values)
            valid = valid and value.denominator == 1 and 0 <= value < constraint.range
        if valid:
            yield offsets[0], tuple(offsets[1:])


def reference_contraction(
    bound: BoundProgram, op: BoundOp, inputs: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The contraction's result in float64 (exact Python ints for integer types), and how
    many tuples reached each element (for `=`, where collisions are unspecified). Elements
    without a tuple are 0 or the default's element (spec 8.6, 8.9)."""
    contraction = op.contraction
    assert contraction is not None
    dims = _dims(bound, op.output)
    size = math.prod(dims)
    flat = {name: np.asarray(array).reshape(-1) for name, array in inputs.items()}
    operands = [a.tensor for a in contraction.operands]
    contributions: list[list[object]] = [[] for _ in range(size)]
    for out, offsets in valid_tuples(bound, op):
        values = [_element(bound, flat, t, o) for t, o in zip(operands, offsets, strict=True)]
        match contraction.comb:
            case CombOp.NONE:
                value = values[0]
            case CombOp.MUL:
                value = values[0] * values[1]
            case CombOp.ADD:
                value = values[0] + values[1]
            case CombOp.EQ:
                value = values[0] == values[1]
            case _:
                value = values[2] if values[0] == values[1] else 0
        contributions[out].append(value)
    result = np.zeros(size, dtype=object)
    if contraction.default is not None:
        result[:] = [_element(bound, flat, contraction.default, k) for k in range(size)]
    for index, items in enumerate(contributions):
        if not items:
            continue
        match contraction.agg:
            case AggOp.SUM:
                result[index] = sum(items)
            case AggOp.PROD:
                result[index] = math.prod(items)
            case AggOp.MAX:
                result[index] = max(items)
            case AggOp.MIN:
                result[index] = min(items)
            case _:
                result[index] = items[0]
    counts = np.array([len(items) for items in contributions]).reshape(dims)
    return result.reshape(dims), counts


def _element(
    bound: BoundProgram, flat: Mapping[str, np.ndarray], tensor: str, offset: int
) -> object:
    binding = bound.bindings[tensor]
    if isinstance(binding, ConstBinding):
        value: object = binding.value
    else:
        value = flat[tensor][offset].item()
    if isinstance(value, float):
        return value
    return int(value)
