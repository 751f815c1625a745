"""Argument checks shared by the binding of builtin calls (tile.bind.calls, tile.bind.helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape, promote
from tile.bind.evaluate import Const
from tile.bind.values import BindFailure, TensorValue

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.bind.binder import Binder
    from tile.bind.values import Value
    from tile.lang.syntax import Span


def require_float(binder: Binder, fn: str, values: list[Value], span: Span | None) -> None:
    dtypes = [dtype_of(v) for v in values]
    if dtypes and not promote(dtypes).is_float:
        types = " and ".join(d.short for d in dtypes)
        raise binder.fail(
            "E-TYPE",
            f"'{fn}' needs a float argument, not {types}; convert first with as_float(X, 32)",
            span,
        )


def dtype_of(value: Value) -> DType:
    if isinstance(value, TensorValue):
        return value.shape.dtype
    if isinstance(value, Const):
        return value.dtype
    raise BindFailure


def tensor_arg(binder: Binder, value: Value, text: str, span: Span | None, fn: str) -> TensorValue:
    plain = binder.plain(value, text, span)
    if isinstance(plain, TensorValue):
        return plain
    raise binder.fail(
        "E-ARG", f"'{fn}' needs a tensor, but '{text}' is a {plain.dtype.short} constant", span
    )


def as_tensor(binder: Binder, value: Value, text: str, span: Span | None) -> TensorValue:
    """A tensor, or a constant read as a 0-D tensor (spec 6.3)."""
    plain = binder.plain(value, text, span)
    if isinstance(plain, TensorValue):
        return plain
    return TensorValue(binder.const_name(plain), TensorShape(plain.dtype, ()), text)


def sizes_arg(
    binder: Binder, values: Sequence[Value], texts: Sequence[str], span: Span | None, fn: str
) -> tuple[int, ...]:
    sizes = []
    for value, text in zip(values, texts, strict=True):
        size = binder.integer(value, text, span, "E-ARG", f"each size of '{fn}'")
        if size < 1:
            raise binder.fail("E-ARG", f"'{fn}' sizes must be at least 1, not {size}", span)
        sizes.append(size)
    return tuple(sizes)
