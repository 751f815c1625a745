"""Run one case on one device and compare it with the reference evaluator.

Outputs are poisoned before the run (NaN for floats, a byte pattern for integers and
booleans), so an element a kernel forgets to write cannot match by luck. The reference is
`tile.reference.evaluate`: numpy in float64 (exact integers), written from the spec and
independent of the kernel generators and the back ends.

Tolerances: integers and booleans are exact; floats pass when
`|got - want| <= rtol * |want| + atol * max(1, max |want|)` with (rtol, atol) of the
narrowest float type among the output, the float inputs and the float conversions (a float64 output
may hold a float32 subexpression) from the table below, which covers rounding every intermediate to
its type (float16 chains round at every operation) and summation in a different order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import tile
from tile.reference import evaluate

if TYPE_CHECKING:
    from tests.fuzz.programs import Case

TOLERANCES = {
    np.dtype("float16"): (2e-2, 1e-2),
    np.dtype("float32"): (2e-4, 2e-4),
    np.dtype("float64"): (1e-9, 1e-9),
}


@dataclass(frozen=True)
class Outcome:
    """`ok`, or what went wrong: `kind` is mismatch, error (an exception on the device, or
    none where the reference failed), reference (the reference could not evaluate) or skip
    (the case is outside what the fuzzer judges: a non-finite or huge reference)."""

    kind: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("ok", "skip")


def poison(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, 0xA5, np.uint8).repeat(dtype.itemsize).view(dtype).reshape(shape)


def precisions(case: Case) -> tuple[np.dtype, ...]:
    """The element types a case computes in besides its outputs': its inputs' and those of
    its float conversions (`as_float(X, 32)` makes float32 values inside a float64 program)."""
    widths = re.findall(r"as_float\([^;]*?,\s*(16|32|64)\s*\)", case.source)
    converted = tuple(np.dtype(f"float{width}") for width in widths)
    return tuple(np.asarray(value).dtype for value in case.inputs.values()) + converted


def reference(case: Case) -> dict[str, np.ndarray]:
    bound = tile.Function(case.source).bind(case.inputs)
    return evaluate(bound, case.inputs)


def judge(case: Case, want: dict[str, np.ndarray]) -> str:
    """Why a reference is outside what the fuzzer compares ('' when it is not): a value that
    is not finite or huge, or an ill-conditioned program, whose outputs move beyond the
    tolerance when every float input is scaled by 1 + 2 ulp (a float32 `sin` of a huge
    argument, say: no device can be judged on it). Scaling every input by one factor keeps
    every comparison and every tie between inputs as it was."""
    for name, value in want.items():
        if value.dtype.kind == "f":
            if not np.all(np.isfinite(value)):
                return f"{name} is not finite"
            limit = 1e3 if value.dtype == np.float16 else 1e6
            if value.size and np.abs(value).max() > limit:
                return f"{name} exceeds {limit:g}"
    floats = {n: v for n, v in case.inputs.items() if v.ndim and v.dtype.kind == "f"}
    if not floats:
        return ""
    bound = tile.Function(case.source).bind(case.inputs)
    scaled = dict(case.inputs)
    for name, value in floats.items():
        scaled[name] = value.astype(np.float64) * (1 + 2 * float(np.finfo(value.dtype).eps))
    moved = evaluate(bound, scaled)
    types = precisions(case)
    for name, value in want.items():
        output = np.dtype(bound.outputs[name][1])
        if compare(moved[name].astype(output), value, output, types):
            return f"{name} is ill-conditioned"
    return ""


def compare(
    got: np.ndarray, want: np.ndarray, dtype: np.dtype, inputs: tuple[np.dtype, ...] = ()
) -> str:
    """'' when `got` (of the output's `dtype`) matches the float64 or exact `want`;
    `inputs` are the element types of the program's inputs."""
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    if got.dtype != dtype:
        return f"dtype {got.dtype}, want {dtype}"
    if dtype.kind != "f":
        bad = got != want.astype(dtype)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            count = f"{int(bad.sum())} of {bad.size} differ"
            return f"{count}; at {where} got {got[where]}, want {want[where]}"
        return ""
    narrowest = min((t for t in (dtype, *inputs) if t.kind == "f"), key=lambda t: t.itemsize)
    rtol, atol = TOLERANCES[narrowest]
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(g - w) <= rtol * np.abs(w) + atol * scale)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        return (
            f"{int(bad.sum())} of {bad.size} differ; at {where} got {g[where]!r}, "
            f"want {w[where]!r} (max |diff| {np.nanmax(np.abs(g - w)):.3g})"
        )
    return ""


def check(case: Case, device: tile.Device | str) -> Outcome:
    """Run `case` on `device` and compare every output with the reference."""
    try:
        want = reference(case)
    except Exception as error:  # the reference's own failure: reported, not the device's
        return Outcome("reference", f"{type(error).__name__}: {error}")
    reason = judge(case, want)
    if reason:
        return Outcome("skip", reason)
    try:
        invoker = tile.Invoker(case.source, case.inputs, device=device)
        outputs = {}
        for name in invoker.function.outputs:
            shape, dtype = invoker.get_output_shape(name)
            outputs[name] = tile.Tensor.from_numpy(poison(shape, np.dtype(dtype)), device)
        invoker.set_outputs(outputs)
        invoker.invoke().wait()
        got = {name: tensor.to_numpy() for name, tensor in outputs.items()}
        repeated = _called_twice(case, device)
    except Exception as error:
        return Outcome("error", f"{type(error).__name__}: {error}")
    problems = []
    for name, value in want.items():
        dtype = np.dtype(outputs[name].dtype)
        problem = compare(got[name], value, dtype, precisions(case))
        if problem:
            problems.append(f"{name}: {problem}")
        problem = compare(repeated[name], value, dtype, precisions(case))
        if problem:
            problems.append(f"{name}, called again: {problem}")
    return Outcome("mismatch", "; ".join(problems)) if problems else Outcome("ok")


def _called_twice(case: Case, device: tile.Device | str) -> dict[str, np.ndarray]:
    """The outputs of the second of two calls of `case`'s function over tensors, which
    repeats the first (`PreparedRun` when every input is a tensor): the path of a program
    called in a loop. The first call's outputs stay alive, so that the second's are new
    buffers (and the pool's recycled ones hold another case's values)."""
    on = tile.device(device) if isinstance(device, str) else device
    function = tile.Function(case.source)
    values = {
        name: tile.Tensor.from_numpy(value, on)
        if isinstance(value, np.ndarray) and value.ndim
        else value
        for name, value in case.inputs.items()
    }
    first = function(device=on, **values)
    again = function(device=on, **values)
    result = {name: tensor.to_numpy() for name, tensor in again.items()}
    del first
    return result
