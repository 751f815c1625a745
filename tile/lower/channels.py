"""Channels last: a depthwise convolution in NCHW layout runs on transposed copies (issue 11,
"other layouts"; CPU devices).

In `O[n, c, y, x] = +(I[n, c, y + i - 1, x + j - 1] * K[c, i, j])` every access uses the
channel `c`, and the stride-1 coordinate `x` is guarded by the padding: the generic kernel ran
it on scalars (1.45 ms at 1 x 32 x 112 x 112 on llvm_cpu.0, 2.5x torch's time), and no vector
kernel applies (`tile.lower.relayout` needs a coordinate that one operand does not use).
`channels_last` rewrites such a contraction, before planning, into

    I' = I with the channel axis last            (a transposition, where it is not last)
    K' = K the same
    P[n, y, x, c] = +(I'[n, y + i - 1, x + j - 1, c] * K'[i, j, c])
    O[n, c, y, x] = =(P[n, y, x, c])

whose product runs in vectors along `c` like the channels-last depthwise convolution (0.52
ms, three transpositions included). Only a `+(A * B)` of float32 whose output indices are
plain variables is rewritten, where one variable is an output index that every access uses
as a whole axis (the channel: `MIN_CHANNELS` or more), and the output's last index enters an
operand shifted or scaled (a window over it, whose padding guards it).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from semtree.types import DType, TensorShape
from tile.bind.polynomial import Polynomial
from tile.bind.program import (
    BoundAccess,
    BoundContraction,
    BoundOp,
    BoundProgram,
    OpKind,
    TensorBinding,
)
from tile.lang.syntax import AggOp, CombOp
from tile.lower.kernel import product

MIN_CHANNELS = 8
MIN_OUTPUT = 1 << 14  # output elements below which three extra launches cost more


def channels_last(bound: BoundProgram) -> BoundProgram:
    """`bound` with each depthwise-like contraction rewritten (module docstring)."""
    ops: list[BoundOp] = []
    bindings = dict(bound.bindings)
    for op in bound.ops:
        channel = _channel(op, bindings)
        if channel is None:
            ops.append(op)
            continue
        contraction = op.contraction
        assert contraction is not None
        accesses, back = [], None
        for position, access in enumerate(contraction.access):
            axis = access.polys.index(Polynomial.var(channel))
            if axis == len(access.polys) - 1:
                accesses.append(access)
                continue
            order = [k for k in range(len(access.polys)) if k != axis] + [axis]
            name = _fresh(f"_cl{position}_{access.tensor}", bindings)
            binding = bindings[access.tensor]
            assert isinstance(binding, TensorBinding)
            dtype, dims = binding.shape.dtype, binding.shape.dims
            bindings[name] = TensorBinding(TensorShape(dtype, tuple(dims[k] for k in order)))
            accesses.append(BoundAccess(name, tuple(access.polys[k] for k in order)))
            if position == 0:  # the output: the result back in its layout last
                back = _assign(op, access.tensor, name, order, dtype, back=True)
            else:  # an operand: a transposed copy first
                ops.append(_assign(op, name, access.tensor, order, dtype, back=False))
        assert back is not None  # the channel is not the output's last axis (`_channel`)
        inner = replace(contraction, access=tuple(accesses))
        inputs = tuple(access.tensor for access in accesses[1:])
        ops += [replace(op, output=accesses[0].tensor, inputs=inputs, contraction=inner), back]
    if len(ops) == len(bound.ops):
        return bound
    return replace(bound, ops=tuple(ops), bindings=bindings)


def _channel(op: BoundOp, bindings: dict) -> str | None:
    """The channel variable of a depthwise-like contraction `op`, or None."""
    contraction = op.contraction
    if contraction is None or contraction.default is not None or contraction.no_defract:
        return None
    if contraction.agg is not AggOp.SUM or contraction.comb is not CombOp.MUL:
        return None
    if len(contraction.operands) != 2:
        return None
    shapes = [bindings.get(access.tensor) for access in contraction.access]
    if any(not isinstance(s, TensorBinding) or s.shape.dtype is not DType.FLOAT32 for s in shapes):
        return None
    output = contraction.output
    names = [_name(poly) for poly in output.polys]
    if None in names or len(set(names)) != len(names) or len(names) < 2:
        return None
    dims = shapes[0].shape.dims  # type: ignore[union-attr]
    if product(dims) < MIN_OUTPUT:
        return None
    last = names[-1]
    windowed = any(
        poly.coeff(last) and _name(poly) != last
        for access in contraction.operands
        for poly in access.polys
    )
    if not windowed:
        return None
    for axis, name in enumerate(names[:-1]):
        if dims[axis] < MIN_CHANNELS:
            continue
        whole = Polynomial.var(name)  # type: ignore[arg-type]
        if all(access.polys.count(whole) == 1 for access in contraction.operands):
            others = (p for access in contraction.operands for p in access.polys if p != whole)
            if all(not p.coeff(name) for p in others):
                return name
    return None


def _name(poly: Polynomial) -> str | None:
    """The variable `poly` is, if it is one variable alone."""
    if poly.const or len(poly.terms) != 1 or poly.terms[0][1] != Fraction(1):
        return None
    return poly.terms[0][0]


def _assign(
    op: BoundOp, target: str, source: str, order: list[int], dtype: DType, *, back: bool
) -> BoundOp:
    """`target = source` between a tensor and its channels-last form, whose axis m is axis
    `order[m]` of the other: the channels-last copy of an operand, or (`back`) the result
    in the output's layout."""
    variables = tuple(f"a{k}" for k in range(len(order)))
    plain = tuple(Polynomial.var(v) for v in variables)
    moved = tuple(plain[k] for k in order)
    polys = (plain, moved) if back else (moved, plain)
    contraction = BoundContraction(
        AggOp.ASSIGN,
        CombOp.NONE,
        (BoundAccess(target, polys[0]), BoundAccess(source, polys[1])),
        (),
        variables,
    )
    return BoundOp(
        OpKind.CONTRACTION, target, (source,), compute=dtype, contraction=contraction, span=op.span
    )


def _fresh(base: str, bindings: dict) -> str:
    name = base
    while name in bindings:
        name += "_"
    return name
