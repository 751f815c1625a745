"""`python -m tile run FILE.tile --shape A=64x32 ...`: run a Tile file on random inputs.

Place in the pipeline: a user of the public API (`tile.Invoker`). The first `invoke()` binds,
generates and builds the program, then schedules the run without waiting: its time is the
compile time printed. Then `--repeat` runs are timed from `invoke()` to the end of `wait()`,
with the inputs already on the device, and their median is printed.

`--check` runs the same inputs on every device that loaded, compares every output with the
chosen device's and prints the largest difference; beyond a tolerance fitting the element
type (exact for integers and booleans), or if a device fails, the exit status is 1.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hal import registry
from semtree.types import DType
from tile.api import Tensor
from tile.api import devices as list_devices
from tile.cli_inputs import (
    EXIT_FAILED,
    EXIT_OK,
    describe_inputs,
    load_function,
    make_inputs,
    pick_device,
)
from tile.errors import DeviceError
from tile.invoke import Invoker

if TYPE_CHECKING:
    import argparse

    from tile.api import Device
    from tile.invoke import Function

# (rtol, atol) per element type for --check; integers and booleans compare exactly.
TOLERANCES = {
    DType.FLOAT16: (1e-2, 1e-3),
    DType.FLOAT32: (1e-3, 1e-5),
    DType.FLOAT64: (1e-9, 1e-12),
}


@dataclass
class Timing:
    """One device's run: compile time, run times, outputs, or the error that stopped it."""

    device: Device
    compile_seconds: float = 0.0
    run_seconds: list[float] = field(default_factory=list)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    kernels: int = 0
    error: DeviceError | None = None

    @property
    def median_ms(self) -> float:
        return 1000 * statistics.median(self.run_seconds) if self.run_seconds else 0.0


def time_on(function: Function, inputs: dict[str, object], device: Device, repeat: int) -> Timing:
    """Compile and run `function` on `device`: the first call, then `repeat` timed calls."""
    timing = Timing(device)
    values = {
        name: Tensor.from_numpy(value, device)
        if isinstance(value, np.ndarray) and value.ndim
        else value
        for name, value in inputs.items()
    }
    invoker = Invoker(function, values, device=device)
    start = time.perf_counter()
    invocation = invoker.invoke()  # binds, generates, builds, schedules; does not wait
    timing.compile_seconds = time.perf_counter() - start
    invocation.wait()
    assert invocation.device is device  # the device asked for ran it: never a fallback
    for _ in range(repeat):
        start = time.perf_counter()
        invocation = invoker.invoke()
        invocation.wait()
        timing.run_seconds.append(time.perf_counter() - start)
    timing.kernels = len(invocation.profile())
    timing.outputs = {name: tensor.to_numpy() for name, tensor in invocation.outputs.items()}
    return timing


def run_command(args: argparse.Namespace) -> int:
    function = load_function(args.file)
    inputs = make_inputs(function, args)
    chosen = pick_device(args.device)
    repeat = max(0, args.repeat)
    print(f"{args.file}: {describe_inputs(inputs)}")
    if not args.check:
        timing = time_on(function, inputs, chosen, repeat)
        _print_outputs(timing, args.print)
        print(_timing_line(timing, repeat))
        return EXIT_OK
    others = [item for item in list_devices() if item is not chosen]
    timings = []
    for item in [chosen, *others]:
        try:
            timings.append(time_on(function, inputs, item, repeat))
        except DeviceError as error:
            if item is chosen:
                raise
            timings.append(Timing(item, error=error))
    _print_outputs(timings[0], args.print)
    return _report_check(timings)


def _timing_line(timing: Timing, repeat: int) -> str:
    runs = (
        f"run median {timing.median_ms:.3f} ms over {repeat} runs (min "
        f"{1000 * min(timing.run_seconds):.3f} ms)"
        if timing.run_seconds
        else "no timed runs"
    )
    return (
        f"{timing.device.id}: compile {1000 * timing.compile_seconds:.1f} ms, {runs}, "
        f"{timing.kernels} kernel launch{'es' if timing.kernels != 1 else ''} per run"
    )


def _print_outputs(timing: Timing, values: bool) -> None:
    for name, array in timing.outputs.items():
        print(f"output {name}: {DType.of(array.dtype).short}{list(array.shape)}")
        if values:
            print(np.array2string(array, threshold=200, edgeitems=3))


def difference(got: np.ndarray, expected: np.ndarray) -> tuple[float, bool]:
    """The largest absolute difference, and whether `got` is within the tolerance of its
    element type (NaN where the other has NaN counts as equal)."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return float("inf"), False
    if got.size == 0:
        return 0.0, True
    dtype = DType.of(got.dtype)
    with np.errstate(all="ignore"):
        delta = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        same_nan = np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
        delta = np.where(same_nan, 0.0, np.where(np.isnan(delta), np.inf, delta))
    largest = float(delta.max())
    if dtype not in TOLERANCES:
        return largest, largest == 0.0
    rtol, atol = TOLERANCES[dtype]
    close = np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    return largest, bool(close)


def _report_check(timings: list[Timing]) -> int:
    reference = timings[0]
    print(
        f"{'device':14s} {'compile ms':>10s} {'median ms':>10s}  "
        f"max |difference| vs {reference.device.id}"
    )
    worst: tuple[float, str, str] = (0.0, "", "")
    failed = False
    for timing in timings:
        if timing.error is not None:
            failed = True
            print(f"{timing.device.id:14s} {'-':>10s} {'-':>10s}  failed: {timing.error}")
            continue
        if timing is reference:
            note = "(reference)"
        else:
            parts = []
            for name, expected in reference.outputs.items():
                largest, close = difference(timing.outputs[name], expected)
                failed |= not close
                parts.append(f"{name} {largest:.3g}{'' if close else ' MISMATCH'}")
                if largest >= worst[0]:
                    worst = (largest, name, timing.device.id)
            note = ", ".join(parts)
        print(
            f"{timing.device.id:14s} {1000 * timing.compile_seconds:10.1f} "
            f"{timing.median_ms:10.3f}  {note}"
        )
    if len(timings) == 1:
        print(f"only {reference.device.id} is available: nothing to compare")
        for failure in registry.failures():
            print(f"unavailable: {failure}")
    elif worst[1]:
        largest, name, device_id = worst
        verdict = "devices disagree" if failed else "every device agrees within tolerance"
        print(f"largest difference: {largest:.3g} ({name} on {device_id}); {verdict}")
    if failed:
        print("check failed", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
