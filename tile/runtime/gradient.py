"""The public gradient API: `gradient(fn, of, wrt)` and `value_and_grad(fn, of, wrt)`.

Both return a `GradientFunction`: an ordinary `Function` whose source is the Tile text that
`tile.grad.derive` wrote (print `.source`), whose inputs are `fn`'s and the cotangent of `of`
(`.cotangent`, e.g. `DO`, with the shape of `of`), and whose outputs are the gradients
(`.gradients` maps each input to its output, e.g. `{"A": "DA"}`), each with its input's
shape and element type. Where `of` is 0-D whatever the binding, the cotangent may be left
out: it is then 1, and the outputs are the plain gradients of `of`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tile.grad import derive
from tile.runtime.invoke import Function

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tile.grad import Gradient
    from tile.runtime.api import InputValue, Tensor  # noqa: F401 (Tensor: for InputValue in the API reference)


class GradientFunction(Function):
    """A Function that computes gradients of another (module docstring)."""

    def __init__(self, gradient: Gradient, name: str, floatx: object) -> None:
        super().__init__(gradient.source, name, floatx=floatx)
        self.of = gradient.of
        self.cotangent = gradient.cotangent
        self.gradients = dict(gradient.gradients)
        self.scalar = gradient.scalar

    def named_inputs(
        self, args: tuple[InputValue, ...], inputs: Mapping[str, InputValue]
    ) -> dict[str, InputValue]:
        """Inputs by name as `Function.named_inputs` binds them (the cotangent last); a scalar
        cotangent left out is 1, in calls and in `compile`."""
        named = super().named_inputs(args, inputs)
        if self.scalar and self.cotangent not in named:
            named[self.cotangent] = 1.0
        return named


def _function(fn: Function | str) -> Function:
    if isinstance(fn, Function):
        return fn
    if isinstance(fn, str):
        return Function(fn)
    raise TypeError(f"a Tile function is a tile.Function or a str, not {type(fn).__name__}")


def _derive(
    fn: Function | str, of: str | None, wrt: str | Sequence[str] | None, with_value: bool
) -> GradientFunction:
    function = _function(fn)
    if of is None:
        if len(function.outputs) != 1:
            raise ValueError(
                f"the function has {len(function.outputs)} outputs "
                f"({', '.join(function.outputs)}): name one with of="
            )
        of = function.outputs[0]
    if wrt is None:
        wrt = function.inputs
    elif isinstance(wrt, str):
        wrt = (wrt,)
    gradient = derive(function.ast, function.source, of, tuple(wrt), with_value)
    return GradientFunction(gradient, f"grad_{function.name}", function.floatx)


def gradient(
    fn: Function | str, of: str | None = None, wrt: str | Sequence[str] | None = None
) -> GradientFunction:
    """The function computing the gradients of `fn`'s output `of` (default: its only output)
    with respect to the inputs `wrt` (default: all), by reverse-mode differentiation.
    Raises TileGradientError (E-GRAD) for a name that is not an output or input, or a
    statement on the way with no gradient rule."""
    return _derive(fn, of, wrt, with_value=False)


def value_and_grad(
    fn: Function | str, of: str | None = None, wrt: str | Sequence[str] | None = None
) -> GradientFunction:
    """Like `gradient`, but the function returns `of` too, computed in the same run."""
    return _derive(fn, of, wrt, with_value=True)
