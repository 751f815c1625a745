"""The gradient check: `tile.gradient`'s answers against central differences in float64.

`check(source, inputs, of)` differentiates `of` with respect to every float tensor input and
compares, along random directions V, the directional derivative of the loss
`L = sum(of * DO)` (DO random) computed two ways, both in float64 on the reference evaluator
(`tile.reference`, which holds every float in float64):

* from the gradient function: `sum_A sum(DA * V_A)`;
* by central differences: `(L(x + hV) - L(x - hV)) / 2h`, extrapolated from h and h/2.

They agree within `RTOL` of the sum of the magnitudes of the terms. Float inputs are first
moved by a small random amount, so no element sits on a kink (relu at 0, a tie of a maximum)
where the function has no derivative; outputs that are not finite get a zero cotangent and input
elements whose gradient is not finite stay where they are. `on_device` then runs the gradient
function on a device, outputs poisoned first, against the reference's gradient for the same
inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tile
from tests.fuzz.check import precisions
from tests.fuzz.programs import Case
from tile.reference import evaluate_function

RTOL = 1e-5
STEP = 1e-5  # relative to the largest input magnitude
# float16 gradients sum hundreds of float16 products (a convolution's transpose): an error of a
# few percent of the largest element is rounding, not a wrong kernel.
DEVICE_TOLERANCE = {
    np.dtype("float16"): (5e-2, 1e-1),
    np.dtype("float32"): (1e-3, 1e-3),
    np.dtype("float64"): (1e-9, 1e-9),
}


class Skip(Exception):  # noqa: N818 (not an error: a reason to skip)
    """The case has nothing to differentiate (the reason says why)."""


@dataclass
class Prepared:
    function: tile.Function
    gradient: tile.GradientFunction
    inputs: dict[str, object]  # float inputs moved off kinks, in their own dtypes
    wide: dict[str, object]  # the same in float64, before rounding to their dtypes
    cotangent: np.ndarray
    wrt: tuple[str, ...]


def prepare(
    source: str, inputs: dict[str, object], of: str | None = None, seed: int = 0
) -> Prepared:
    function = tile.Function(source)
    of = of or function.outputs[0]
    bound = function.bind(inputs)
    shape, dtype = bound.outputs[of]
    if np.dtype(dtype).kind != "f":
        raise Skip(f"the output {of} is {np.dtype(dtype).name}: no gradient")
    random = np.random.default_rng(seed)
    moved: dict[str, object] = {}
    wide: dict[str, object] = {}
    wrt = []
    for name, value in inputs.items():
        if isinstance(value, np.ndarray) and value.ndim >= 1 and value.dtype.kind == "f":
            scale = max(float(np.max(np.abs(value), initial=0.0)), 1e-3)
            jitter = random.uniform(-1, 1, value.shape) * 1e-3 * scale
            wide[name] = value.astype(np.float64) + jitter  # float16 would round ties back
            moved[name] = wide[name].astype(value.dtype)
            wrt.append(name)
        else:
            moved[name] = wide[name] = value
    if not wrt:
        raise Skip("no float tensor input")
    gradient = tile.gradient(function, of=of, wrt=tuple(wrt))
    cotangent = random.standard_normal(shape).astype(dtype)
    # Outputs outside the function's domain (log of a negative number) take no part.
    values = np.asarray(evaluate_function(source, wide)[of])
    cotangent[~np.isfinite(values)] = 0
    return Prepared(function, gradient, moved, wide, cotangent, tuple(wrt))


def reference_gradients(prepared: Prepared, wide: bool) -> dict[str, np.ndarray]:
    inputs = dict(prepared.wide if wide else prepared.inputs)
    inputs[prepared.gradient.cotangent] = (
        prepared.cotangent.astype(np.float64) if wide else prepared.cotangent
    )
    results = evaluate_function(prepared.gradient.source, inputs)
    return {name: results[out] for name, out in prepared.gradient.gradients.items()}


def numeric_check(
    prepared: Prepared, directions: int = 2, seed: int = 1, scale: float = 1.0
) -> str | None:
    """None when the gradients agree with `scale` times central differences (`scale` is
    -S for a function that is `reverse_grad(X, S)` of its inputs), else what differs."""
    grads = reference_gradients(prepared, wide=True)
    of = prepared.gradient.of
    base = dict(prepared.wide)
    cotangent = prepared.cotangent.astype(np.float64)
    random = np.random.default_rng(seed)

    def loss(values: dict[str, object]) -> float:
        result = np.asarray(evaluate_function(prepared.function.source, values)[of], np.float64)
        with np.errstate(invalid="ignore"):
            return float(np.sum(np.where(cotangent == 0, 0.0, result * cotangent)))

    if not np.isfinite(loss(base)):
        raise Skip("the loss is not finite at these inputs")
    # Elements whose gradient is not finite (sqrt at 0) are left where they are.
    finite = {name: np.isfinite(np.asarray(grads[name], np.float64)) for name in prepared.wrt}
    if not any(mask.any() for mask in finite.values()):
        raise Skip("no gradient element is finite at these inputs")
    for _ in range(directions):
        vectors = {
            name: random.standard_normal(np.shape(base[name])) * finite[name]
            for name in prepared.wrt
        }
        largest = max(float(np.max(np.abs(base[name]), initial=0.0)) for name in prepared.wrt)
        step = STEP * max(largest, 1.0)

        def central(h: float, vectors: dict[str, np.ndarray] = vectors) -> float:
            plus = {**base, **{n: base[n] + h * v for n, v in vectors.items()}}
            minus = {**base, **{n: base[n] - h * v for n, v in vectors.items()}}
            return (loss(plus) - loss(minus)) / (2 * h)

        terms = [
            np.where(finite[n], np.asarray(grads[n], np.float64), 0.0) * vectors[n]
            for n in prepared.wrt
        ]
        analytic = float(sum(np.sum(t) for t in terms))
        if not np.isfinite(analytic):
            return f"the directional derivative from the gradient is {analytic!r}"
        # Richardson extrapolation: the error of central differences falls from h^2 to h^4.
        # A step that crosses a kink (two elements of a large maximum swapping places) gives
        # a wrong difference, so a step 1000 times smaller is tried too.
        numbers = []
        for h in (step, step * 1e-3):
            numeric = scale * (4 * central(h / 2) - central(h)) / 3
            size = float(sum(np.sum(np.abs(t)) for t in terms)) + abs(numeric)
            if abs(numeric - analytic) <= RTOL * max(size, 1e-6):
                break
            numbers.append(repr(numeric))
        else:
            return (
                f"directional derivative {analytic!r} from the gradient, "
                f"{' or '.join(numbers)} numerically"
            )
    return None


def _narrowest(prepared: Prepared, dtype: np.dtype) -> np.dtype:
    """The narrowest float type the gradient is computed in: a float64 gradient of a function
    with float16 inputs or `as_float(X, 32)` inside holds float16 or float32 roundings."""
    case = Case("gradient", prepared.function.source, prepared.inputs)  # type: ignore[arg-type]
    floats = [item for item in (np.dtype(dtype), *precisions(case)) if item.kind == "f"]
    return min(floats, key=lambda item: item.itemsize, default=np.dtype("float64"))


def on_device(prepared: Prepared, device: str) -> str | None:
    """None when the device's gradients match the reference's for the same inputs."""
    want = reference_gradients(prepared, wide=False)
    inputs = dict(prepared.inputs)
    inputs[prepared.gradient.cotangent] = prepared.cotangent
    invoker = tile.Invoker(prepared.gradient, inputs, device=device)
    outputs = {}
    for name in prepared.gradient.outputs:
        dims, dtype = invoker.get_output_shape(name)
        tensor = tile.Tensor(device, dims, dtype)
        with tensor.mmap_discard() as view:
            view[...] = np.nan if np.dtype(dtype).kind == "f" else 0
        outputs[name] = tensor
    invoker.set_outputs(outputs)
    invoker.invoke().wait()
    for name, out in prepared.gradient.gradients.items():
        got = np.asarray(outputs[out])
        expected = np.asarray(want[name])
        value = prepared.inputs[name]
        if got.shape != np.shape(value) or got.dtype != np.asarray(value).dtype:
            return f"{out}: {got.dtype}{list(got.shape)}, not like {name}"
        narrowest = _narrowest(prepared, got.dtype)
        rtol, atol = DEVICE_TOLERANCE[narrowest]
        with np.errstate(invalid="ignore"):
            if np.any(np.abs(expected.astype(np.float64)) > np.finfo(narrowest).max / 4):
                raise Skip(f"the reference gradient overflows {narrowest} (devices round)")
        expected = expected.astype(np.float64)
        bound = rtol * np.abs(expected) + atol * max(
            1.0, float(np.max(np.abs(expected), initial=0))
        )
        wide = got.astype(np.float64)
        with np.errstate(invalid="ignore"):
            same = (np.isnan(wide) & np.isnan(expected)) | (wide == expected)
            bad = ~(same | (np.abs(wide - expected) <= bound))
        if np.any(bad):
            return f"{out} differs from the reference in {int(bad.sum())} of {bad.size} elements"
    return None
