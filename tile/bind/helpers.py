"""Binding the frontend helpers (spec 9.8) and the builtins of automatic differentiation
(`dim`, `cotangent`, `reshape_like`: docs/GRADIENTS.md), which lower to other operations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape
from tile.bind.arguments import as_tensor, require_float, sizes_arg, tensor_arg
from tile.bind.evaluate import Const
from tile.bind.polynomial import Polynomial
from tile.bind.program import BoundAccess, BoundContraction, OpKind
from tile.bind.values import TensorValue
from tile.lang.syntax import AggOp, CombOp

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.bind.binder import Binder
    from tile.bind.values import Value
    from tile.lang.syntax import Span


# ---- spec 9.8: frontend helpers ----------------------------------------------------------------


def bind_helper(
    binder: Binder, fn: str, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    def apply(name: str, args: Sequence[Value], arg_texts: Sequence[str]) -> Value:
        return binder.apply(name, args, arg_texts, span, text)

    match fn:
        case "reverse_grad":
            return binder.plain(values[0], texts[0], span)
        case "builtin_binary_crossentropy":
            p, t = values[0], values[1]
            require_float(binder, fn, [p, t], span)
            one = Const.of(1, DType.INT32)
            first = apply(
                "mul", [apply("neg", [t], texts[1:2]), apply("log", [p], texts[:1])], [text, text]
            )
            rest = apply(
                "mul",
                [
                    apply("sub", [one, t], ["1", texts[1]]),
                    apply("log", [apply("sub", [one, p], ["1", texts[0]])], [text]),
                ],
                [text, text],
            )
            return apply("sub", [first, rest], [text, text])
        case "simple_reduce":
            return _simple_reduce(binder, values, texts, span, text)
        case "cotangent":
            return _cotangent(binder, values, texts, span, text)
        case "reshape_like":
            source = as_tensor(binder, values[0], texts[0], span)
            like = as_tensor(binder, values[1], texts[1], span)
            if source.shape.size != like.shape.size:
                raise binder.fail(
                    "E-SHAPE",
                    f"cannot reshape {source.describe()} with {source.shape.size} elements to "
                    f"the shape of {like.describe()} with {like.shape.size}",
                    span,
                )
            shape = TensorShape(source.shape.dtype, like.shape.dims)
            if source.shape.dims == like.shape.dims:
                return source
            return binder.emit(OpKind.SPECIAL, "reshape", [source], shape, span=span, text=text)
        case _:  # builtin_softmax, builtin_logsoftmax
            source = tensor_arg(binder, values[0], texts[0], span, fn)
            require_float(binder, fn, [source], span)
            rows = binder.integer(values[1], texts[1], span, "E-ARG", f"the rows of '{fn}'")
            cols = binder.integer(values[2], texts[2], span, "E-ARG", f"the columns of '{fn}'")
            if source.shape.dims != (rows, cols):
                raise binder.fail(
                    "E-SHAPE",
                    f"'{fn}' expects a [{rows}, {cols}] tensor, but {source.describe()} was given",
                    span,
                )
            peak = _row_reduce(binder, AggOp.MAX, source, span, text)
            shifted = apply("sub", [source, peak], [texts[0], text])
            powers = apply("exp", [shifted], [text])
            total = _row_reduce(binder, AggOp.SUM, powers, span, text)  # type: ignore[arg-type]
            if fn == "builtin_softmax":
                return apply("div", [powers, total], [text, text])
            return apply("sub", [shifted, apply("log", [total], [text])], [text, text])


def _row_reduce(
    binder: Binder, agg: AggOp, source: TensorValue, span: Span | None, text: str
) -> TensorValue:
    """`R[i, 0: rows, 1] = agg(X[i, j])`: a row reduction kept 2-D for broadcasting."""
    i, j = Polynomial.var("i"), Polynomial.var("j")
    zero = Polynomial.constant(0)
    rows = source.shape.dims[0]
    output = binder.temp_name()
    contraction = BoundContraction(
        agg,
        CombOp.NONE,
        (BoundAccess(output, (i, zero)), BoundAccess(source.name, (i, j))),
        (),
        ("i", "j"),
    )
    shape = TensorShape(source.shape.dtype, (rows, 1))
    return binder.emit(
        OpKind.CONTRACTION,
        "",
        [source],
        shape,
        span=span,
        target=output,
        text=text,
        contraction=contraction,
    )


def _simple_reduce(
    binder: Binder, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    source = as_tensor(binder, values[0], texts[0], span)
    target = sizes_arg(binder, values[1:], texts[1:], span, "simple_reduce")
    dims = source.shape.dims
    offset = len(dims) - len(target)
    if target == dims:
        return source
    names = [f"i{axis}" for axis in range(len(dims))]
    out_polys = []
    for position, size in enumerate(target):
        axis = offset + position
        own = dims[axis] if axis >= 0 else 1
        if size == own:
            out_polys.append(Polynomial.var(names[axis]) if axis >= 0 else Polynomial.constant(0))
        elif size == 1:
            out_polys.append(Polynomial.constant(0))
        else:
            raise binder.fail(
                "E-SHAPE",
                f"cannot reduce {source.describe()} to "
                f"[{', '.join(map(str, target))}]: size {size} is neither 1 nor {own}",
                span,
            )
    output = binder.temp_name()
    access = BoundAccess(source.name, tuple(Polynomial.var(n) for n in names))
    contraction = BoundContraction(
        AggOp.SUM, CombOp.NONE, (BoundAccess(output, tuple(out_polys)), access), (), tuple(names)
    )
    if source.shape.dtype.is_bool:
        raise binder.fail("E-TYPE", f"cannot sum the bool values of {source.describe()}", span)
    shape = TensorShape(source.shape.dtype, target)
    return binder.emit(
        OpKind.CONTRACTION,
        "",
        [source],
        shape,
        span=span,
        target=output,
        text=text,
        contraction=contraction,
    )


# ---- extensions for automatic differentiation (docs/GRADIENTS.md) -----------------------------


def bind_dim(binder: Binder, values: list[Value], texts: list[str], span: Span | None) -> Value:
    """`dim(T, k)`: the size of dimension k of T, an i32 constant."""
    source = as_tensor(binder, values[0], texts[0], span)
    axis = binder.integer(values[1], texts[1], span, "E-ARG", "the axis of 'dim'")
    if not 0 <= axis < source.shape.rank:
        raise binder.fail(
            "E-ARG",
            f"axis {axis} is out of range for {source.describe()}, which has "
            f"{source.shape.rank} dimension(s)",
            span,
        )
    return Const.of(source.shape.dims[axis], DType.INT32)


def _cotangent(
    binder: Binder, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    """`cotangent(X, T)`: X brought to T's shape (broadcast where X has size 1 or lacks a
    dimension, summed where T has size 1 or lacks one) and converted to T's element type;
    zeros where T's type is an integer or bool type, which carry no gradient."""
    like = as_tensor(binder, values[1], texts[1], span)
    source = as_tensor(binder, values[0], texts[0], span)
    target = like.shape.dims

    def apply(name: str, args: Sequence[Value], arg_texts: Sequence[str]) -> TensorValue:
        value = binder.apply(name, args, arg_texts, span, text)
        assert isinstance(value, TensorValue)
        return value

    if not like.shape.dtype.is_float:
        zero = Const.of(0, DType.INT32)
        zeros = apply("cond", [like, zero, zero], [texts[1], "0", "0"])
        return binder.convert(zeros, like.shape.dtype, span, text)
    if source.shape.dtype.is_bool:
        raise binder.fail("E-TYPE", f"a cotangent cannot be the bool {source.describe()}", span)
    dims = source.shape.dims
    rank = max(len(dims), len(target))
    padded = (1,) * (rank - len(dims)) + dims
    wanted = (1,) * (rank - len(target)) + target
    for axis, (own, size) in enumerate(zip(padded, wanted, strict=True)):
        if own != size and 1 not in (own, size):
            raise binder.fail(
                "E-SHAPE",
                f"cannot bring {source.describe()} to the shape of {like.describe()}: "
                f"sizes {own} and {size} differ in dimension {axis - rank + len(target)}",
                span,
            )
    if any(own == 1 and size != 1 for own, size in zip(padded, wanted, strict=True)):
        source = apply("cond", [like, source, source], [texts[1], texts[0], texts[0]])
    if source.shape.dims != target:
        sizes = [Const.of(size, DType.INT32) for size in target]
        reduced = _simple_reduce(
            binder, [source, *sizes], [texts[0], *map(str, target)], span, text
        )
        assert isinstance(reduced, TensorValue)
        source = reduced
    return binder.convert(source, like.shape.dtype, span, text)
