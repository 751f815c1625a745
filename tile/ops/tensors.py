"""Arithmetic on `tile.Tensor`s (issue 16): `a + b`, `a @ b`, `-a`, `a < b`, ... run at once on
the tensors' device, each as a one-op function written by tile.ops (so the same broadcasting,
typing and kernels apply). Python numbers and numpy arrays mix in; the result is a new Tensor.

`install()` (called when tile is imported) gives `tile.Tensor` these operators: `tile.runtime`
cannot import `tile.ops`, which is written on top of it. `==` and `!=` keep their meaning of
identity (tensors are used as keys); use `ops.equal` in a function for elementwise equality.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tile.ops.graph import Value, input, matmul
from tile.ops.graph import function as make_function
from tile.runtime.api import Tensor

Operation = Callable[..., Value]

_OPERATIONS: dict[str, tuple[Operation, bool]] = {
    "__add__": (lambda a, b: a + b, False),
    "__radd__": (lambda a, b: a + b, True),
    "__sub__": (lambda a, b: a - b, False),
    "__rsub__": (lambda a, b: a - b, True),
    "__mul__": (lambda a, b: a * b, False),
    "__rmul__": (lambda a, b: a * b, True),
    "__truediv__": (lambda a, b: a / b, False),
    "__rtruediv__": (lambda a, b: a / b, True),
    "__pow__": (lambda a, b: a**b, False),
    "__matmul__": (matmul, False),
    "__rmatmul__": (matmul, True),
    "__lt__": (lambda a, b: a < b, False),
    "__le__": (lambda a, b: a <= b, False),
    "__gt__": (lambda a, b: a > b, False),
    "__ge__": (lambda a, b: a >= b, False),
}


def _operand(name: str, value: object) -> tuple[Value | int | float, dict[str, object]]:
    """A value for the expression and what to bind: tensors and arrays become inputs of their
    shape, Python numbers stay literals."""
    if isinstance(value, Tensor):
        return input(name, value.shape), {name: value}
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a bool does not mix with tile.Tensor arithmetic")
    if isinstance(value, (int, float)):
        return value, {}
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"a tile.Tensor does not mix with {type(value).__name__}")
    return input(name, array.shape), {name: array if array.ndim else array[()]}


def _run(operation: Operation, tensor: Tensor, *others: object, reflected: bool = False) -> Tensor:
    names = ["A", "B"]
    items = [tensor, *others]
    if reflected:
        items.reverse()
    values, inputs = [], {}
    for name, item in zip(names, items, strict=False):
        value, bound = _operand(name, item)
        values.append(value)
        inputs.update(bound)
    function = make_function(name="tensor_op", C=operation(*values))
    # a 0-d array binds as a constant; its input was declared 0-D, which accepts one
    return function(device=tensor.device, **inputs)["C"]  # type: ignore[arg-type]


def _binary(
    method: str, operation: Operation, reflected: bool
) -> Callable[[Tensor, object], Tensor]:
    def apply(self: Tensor, other: object) -> Tensor:
        if not isinstance(other, (Tensor, int, float, np.ndarray, np.number)):
            return NotImplemented
        return _run(operation, self, other, reflected=reflected)

    apply.__name__ = method
    apply.__doc__ = f"Tensor arithmetic ({method}), run on the tensor's device (tile.ops.tensors)."
    return apply


def _negative(self: Tensor) -> Tensor:
    """-tensor, run on the tensor's device (tile.ops.tensors)."""
    return _run(lambda a: -a, self)


def install() -> None:
    """Give tile.Tensor its arithmetic operators (module docstring)."""
    for method, (operation, reflected) in _OPERATIONS.items():
        setattr(Tensor, method, _binary(method, operation, reflected))
    Tensor.__neg__ = _negative  # type: ignore[attr-defined]
