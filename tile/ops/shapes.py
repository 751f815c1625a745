"""Reductions, index arithmetic and layout ops: sum, mean, max, min, prod, argmax, argmin,
reshape, transpose, concatenate, pad, gather, broadcast_to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from tile.ops.graph import (
    Dim,
    Operand,
    OpsError,
    Value,
    Writer,
    apply,
    as_value,
    broadcast_shape,
    contraction,
    dim_op,
    dim_product,
    dim_text,
)

Axes = Union[int, Sequence[int], None]  # noqa: UP007 (evaluated at run time on 3.10)


def _axes(x: Value, axis: Axes) -> list[int]:
    if axis is None:
        return list(range(x.ndim))
    chosen = [x.axis(a) for a in ([axis] if isinstance(axis, int) else axis)]
    if len(set(chosen)) != len(chosen):
        raise OpsError(f"an axis is repeated in {axis}")
    return sorted(chosen)


def _indices(rank: int, prefix: str = "i") -> list[str]:
    return [f"{prefix}{axis}" for axis in range(rank)]


def _head(shape: Sequence[Dim], indices: Sequence[str]) -> str:
    return f"{{out}}[{', '.join(indices)}: {{sizes}}]" if shape else "{out}[]"


def _reduce(agg: str, x: Operand, axis: Axes, keepdims: bool) -> Value:
    x = as_value(x)
    axes = _axes(x, axis)
    indices = _indices(x.ndim)
    out_index, shape = [], []
    for k in range(x.ndim):
        if k not in axes:
            out_index.append(indices[k])
            shape.append(x.shape[k])
        elif keepdims:
            out_index.append("0")
            shape.append(1)
    body = f"{_head(shape, out_index)} = {agg}({{0}}[{', '.join(indices)}])"
    return contraction(shape, body, x, hint="R")


def sum(x: Operand, axis: Axes = None, keepdims: bool = False) -> Value:
    """The sum over `axis` (an int, a sequence, or None: every axis)."""
    return _reduce("+", x, axis, keepdims)


def prod(x: Operand, axis: Axes = None, keepdims: bool = False) -> Value:
    return _reduce("*", x, axis, keepdims)


def max(x: Operand, axis: Axes = None, keepdims: bool = False) -> Value:
    return _reduce(">", x, axis, keepdims)


def min(x: Operand, axis: Axes = None, keepdims: bool = False) -> Value:
    return _reduce("<", x, axis, keepdims)


def mean(x: Operand, axis: Axes = None, keepdims: bool = False) -> Value:
    x = as_value(x)
    count = dim_product([x.shape[k] for k in _axes(x, axis)])
    return apply(f"{{0}} / {dim_text(count)}", _reduce("+", x, axis, keepdims))


def _arg(agg: str, x: Operand, axis: int) -> Value:
    """The first index of the extreme along `axis` (i32), as numpy's argmax/argmin."""
    x = as_value(x)
    axis = x.axis(axis)
    extreme = _reduce(agg, x, axis, keepdims=True)
    size = x.shape[axis]
    indices = _indices(x.ndim)
    out_index = [i for k, i in enumerate(indices) if k != axis]
    keep_index = ["0" if k == axis else i for k, i in enumerate(indices)]
    shape = [s for k, s in enumerate(x.shape) if k != axis]
    # The largest reversed index among the elements equal to the extreme is the first one.
    reversed_index = apply(f"{dim_text(size)} - 1 - index({{0}}, {axis})", x)
    body = (
        f"{_head(shape, out_index)} = >({{0}}[{', '.join(indices)}] == "
        f"{{1}}[{', '.join(keep_index)}] ? {{2}}[{', '.join(indices)}])"
    )
    last = contraction(shape, body, x, extreme, reversed_index, hint="A")
    return apply(f"{dim_text(size)} - 1 - {{0}}", last)


def argmax(x: Operand, axis: int = -1) -> Value:
    return _arg(">", x, axis)


def argmin(x: Operand, axis: int = -1) -> Value:
    return _arg("<", x, axis)


def reshape(x: Operand, shape: Sequence[Dim]) -> Value:
    """x with another shape of the same element count; one size may be -1 when the others
    and x's sizes are ints."""
    x = as_value(x)
    shape = list(shape)
    if -1 in shape:
        known = [s for s in shape if s != -1]
        if shape.count(-1) > 1 or not all(isinstance(s, int) for s in (*known, *x.shape)):
            raise OpsError("reshape infers one -1 size, from int sizes only")
        total, rest = dim_product(x.shape), dim_product(known)
        assert isinstance(total, int) and isinstance(rest, int)
        shape[shape.index(-1)] = total // rest
    sizes = "".join(f", {dim_text(s)}" for s in shape)
    return Value(
        tuple(shape), lambda writer, names: writer.assign(f"reshape({names[0]}{sizes})", "RS"), (x,)
    )


def transpose(x: Operand, axes: Sequence[int] | None = None) -> Value:
    """x with its axes permuted (default: reversed), numpy's transpose."""
    x = as_value(x)
    order = list(reversed(range(x.ndim))) if axes is None else [x.axis(a) for a in axes]
    if sorted(order) != list(range(x.ndim)):
        raise OpsError(f"axes {axes} are not a permutation of 0..{x.ndim - 1}")
    indices = _indices(x.ndim)
    shape = [x.shape[k] for k in order]
    body = f"{_head(shape, [indices[k] for k in order])} = =({{0}}[{', '.join(indices)}])"
    return contraction(shape, body, x, hint="P")


def concatenate(values: Sequence[Operand], axis: int = 0) -> Value:
    """The values joined along `axis` (their other sizes must agree)."""
    parts = [as_value(v) for v in values]
    if not parts:
        raise OpsError("concatenate needs at least one value")
    first = parts[0]
    axis = first.axis(axis)
    if any(part.ndim != first.ndim for part in parts):
        raise OpsError("concatenate needs values of one rank")
    total: Dim = 0
    offsets = []
    for part in parts:
        offsets.append(total)
        total = dim_op(total, "+", part.shape[axis])
    shape = list(first.shape)
    shape[axis] = total
    indices = _indices(first.ndim)

    def emit(writer: Writer, names: list[str]) -> str:
        sizes = ", ".join(dim_text(s) for s in shape)
        previous = None
        for name, offset in zip(names, offsets, strict=True):
            out = list(indices)
            out[axis] = f"{indices[axis]} + {dim_text(offset)}" if offset != 0 else indices[axis]
            target = writer.name("CAT")
            default = f" default {previous}" if previous else ""
            writer.add(
                f"{target}[{', '.join(out)}: {sizes}] = =({name}[{', '.join(indices)}]){default};"
            )
            previous = target
        assert previous is not None
        return previous

    return Value(tuple(shape), emit, tuple(parts))


def pad(x: Operand, widths: Sequence[tuple[int, int]] | int) -> Value:
    """x with zeros added before and after each axis: `widths` is one (before, after) pair per
    axis, or one int for every side."""
    x = as_value(x)
    pairs = [(widths, widths)] * x.ndim if isinstance(widths, int) else list(widths)
    if len(pairs) != x.ndim or any(lo < 0 or hi < 0 for lo, hi in pairs):
        raise OpsError(f"pad needs one (before, after) pair of sizes >= 0 per axis: {widths}")
    indices = _indices(x.ndim)
    out = [f"{i} + {lo}" if lo else i for i, (lo, _) in zip(indices, pairs, strict=True)]
    shape = [
        dim_op(dim_op(s, "+", lo), "+", hi) for s, (lo, hi) in zip(x.shape, pairs, strict=True)
    ]
    return contraction(
        shape, f"{_head(shape, out)} = =({{0}}[{', '.join(indices)}])", x, hint="PAD"
    )


def broadcast_to(x: Operand, shape: Sequence[Dim]) -> Value:
    """x repeated to `shape` by NumPy's broadcasting rules."""
    x = as_value(x)
    shape = list(shape)
    if broadcast_shape([x.shape, tuple(shape)]) != tuple(shape):
        raise OpsError(f"{x.shape} does not broadcast to {tuple(shape)}")
    indices = _indices(len(shape))
    offset = len(shape) - x.ndim
    read = ["0" if size == 1 and shape[offset + k] != 1 else indices[offset + k]
            for k, size in enumerate(x.shape)]  # fmt: skip
    body = f"{_head(shape, indices)} = =({{0}}[{', '.join(read)}])"
    return contraction(shape, body, x, hint="B")


def gather(x: Operand, indices: Operand, axis: int = 0) -> Value:
    """x's slices along `axis` at the (int32) `indices`, clamped into range: the result has
    `indices`' shape in place of that axis."""
    x, index = as_value(x), as_value(indices)
    axis = x.axis(axis)
    if axis == 0:
        shape = (*index.shape, *x.shape[1:])
        return Value(
            shape,
            lambda writer, names: writer.assign(f"gather({names[0]}, {names[1]})", "G"),
            (x, index),
        )
    moved = transpose(x, [axis, *(k for k in range(x.ndim) if k != axis)])
    taken = gather(moved, index, 0)
    rank = index.ndim
    back = list(range(rank, rank + axis)) + list(range(rank)) + list(range(rank + axis, taken.ndim))
    return transpose(taken, back)
