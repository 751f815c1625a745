"""Binding the function header to the caller's inputs (spec 6.1–6.3): E-BIND errors.

A numpy array of rank >= 1 (or a `TensorShape`) binds as a tensor; a 0-d array, a numpy
scalar or a Python bool/int/float binds as a scalar constant of its type (spec 6.3).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import numpy as np

from semtree.types import DType, TensorShape
from tile.bind.evaluate import Const, literal_int_type
from tile.bind.program import ConstBinding, TensorBinding

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tile.bind.binder import Binder
    from tile.lang.syntax import InputDecl, Span


def unknown_input(name: str, decls: Sequence[InputDecl]) -> tuple[str, Span | None]:
    """The message and place of E-BIND for an input `name` the header does not declare: at
    the declared input whose name is nearest (suggested: "did you mean 'B'?"), else at the
    first input."""
    by_lower = {decl.name.lower(): decl for decl in decls}
    near = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    message = f"there is no input named '{name}'"
    place = decls[0].span if decls else None
    if near:
        message += f"; did you mean '{by_lower[near[0]].name}'?"
        place = by_lower[near[0]].span
    listed = ", ".join(decl.name for decl in decls) or "none"
    return f"{message} (the inputs are: {listed})", place


def bind_inputs(binder: Binder, inputs: Mapping[str, object]) -> None:
    from tile.bind.values import TensorValue

    declared = {decl.name for decl in binder.function.inputs}
    for name in inputs:
        if name not in declared:
            binder.sink.error("E-BIND", *unknown_input(name, binder.function.inputs))
    sizes: dict[str, tuple[int, str]] = {}  # size name -> (value, input that fixed it)
    for decl in binder.function.inputs:
        if decl.name not in inputs:
            binder.sink.error("E-BIND", f"input '{decl.name}' is not bound", decl.span)
            continue
        value = _classify(binder, decl, inputs[decl.name])
        if value is None:
            continue
        if isinstance(value, Const):
            if decl.dims:
                binder.sink.error(
                    "E-BIND",
                    f"input '{decl}' is declared with sizes, but a scalar constant "
                    f"({value.dtype.short} {value.value!r}) was bound to it",
                    decl.span,
                )
                continue
            binder.values[decl.name] = value
            binder.bindings[decl.name] = ConstBinding(value.value, value.dtype)
            continue
        if decl.dims is not None and len(decl.dims) != value.rank:
            binder.sink.error(
                "E-BIND",
                f"input '{decl}' has {len(decl.dims)} dimension"
                f"{'s' if len(decl.dims) != 1 else ''}, but the bound tensor has "
                f"{value.rank} ({value})",
                decl.span,
            )
            continue
        for dim, size in zip(decl.dims or (), value.dims[: len(decl.dims or ())], strict=True):
            known = sizes.get(dim.name)
            if known is None:
                sizes[dim.name] = (size, decl.name)
                binder.values[dim.name] = Const.of(size, literal_int_type(size))
            elif known[0] != size:
                binder.sink.error(
                    "E-BIND",
                    f"size '{dim.name}' is {known[0]} in input '{known[1]}' but {size} in "
                    f"input '{decl.name}' ({value})",
                    dim.span,
                )
        binder.values[decl.name] = TensorValue(decl.name, value, decl.name)
        binder.bindings[decl.name] = TensorBinding(value)


def _classify(binder: Binder, decl: InputDecl, value: object) -> TensorShape | Const | None:
    """A tensor shape or a scalar constant for one input value; None after an error."""
    if isinstance(value, TensorShape):
        shape = value
    elif isinstance(value, bool | np.bool_):
        return Const.of(int(value), DType.BOOLEAN)
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            binder.sink.error(
                "E-BIND", f"input '{decl.name}': {value} does not fit in 64 bits", decl.span
            )
            return None
        return Const.of(value, literal_int_type(value))
    elif isinstance(value, float):
        return Const.of(value, binder.floatx)
    elif isinstance(value, np.ndarray | np.generic):
        try:
            dtype = DType.of(value.dtype)
        except TypeError:
            binder.sink.error(
                "E-BIND",
                f"input '{decl.name}' has element type {value.dtype}, which Tile does not "
                f"support (bool, int8-64, uint8-64, float16/32/64)",
                decl.span,
            )
            return None
        if value.ndim == 0:
            return Const.of(value.item(), dtype)
        shape = TensorShape(dtype, tuple(int(d) for d in value.shape))
    else:
        binder.sink.error(
            "E-BIND",
            f"input '{decl.name}' must be a numpy array or a number, not {type(value).__name__}",
            decl.span,
        )
        return None
    if any(d == 0 for d in shape.dims):
        binder.sink.error(
            "E-BIND",
            f"input '{decl.name}' has a zero-sized dimension ({shape}); Tile tensors have at "
            f"least one element in every dimension",
            decl.span,
        )
        return None
    return shape
