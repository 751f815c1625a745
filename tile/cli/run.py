"""`python -m tile run FILE.tile --shape A=64x32 ...`: run a Tile file on random inputs.

Place in the pipeline: a user of the public API (`tile.Invoker`). The first `invoke()` binds,
generates and builds the program, then schedules the run without waiting: its time is the
compile time printed. Then `--repeat` runs are timed from `invoke()` to the end of `wait()`,
with the inputs already on the device, and their median is printed.

`--check` runs the same inputs on every device that loaded and compares every output with
the chosen device's, within a tolerance fitting the element type (exact for integers and
booleans). When the devices disagree, or only one device ran, no device is taken to be right:
each is compared with the reference evaluator (`tile.reference`, the spec in numpy) on the
same inputs, and the verdict names the devices that agree with it and those that differ. The
exit status is 1 when a device fails or differs (from the reference, or from the others when
the reference cannot judge: a feature it lacks, or more than REFERENCE_WORK tuples to visit).
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
from tile.cli.inputs import (
    EXIT_FAILED,
    EXIT_OK,
    describe_inputs,
    load_function,
    make_inputs,
    pick_device,
)
from tile.errors import DeviceError
from tile.reference import ReferenceUnsupported, evaluate, work
from tile.runtime.api import Tensor
from tile.runtime.api import devices as list_devices
from tile.runtime.invoke import Invoker

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from tile.runtime.api import Device
    from tile.runtime.invoke import Function

# (rtol, atol) per element type for --check; integers and booleans compare exactly.
TOLERANCES = {
    DType.FLOAT16: (1e-2, 1e-3),
    DType.FLOAT32: (1e-3, 1e-5),
    DType.FLOAT64: (1e-9, 1e-12),
}
# The most index tuples and elements the reference evaluator visits for --check (~10 s).
REFERENCE_WORK = 100_000_000


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
    function = load_function(args.file, args.grad)
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
    return _report_check(timings, lambda: reference_outputs(function, inputs))


def reference_outputs(function: Function, inputs: dict[str, object]) -> dict[str, np.ndarray]:
    """The outputs of the reference evaluator for `inputs` (float outputs in float64);
    ReferenceUnsupported when it cannot evaluate the program or it would take too long."""
    bound = function.bind(inputs)
    if (count := work(bound)) > REFERENCE_WORK:
        raise ReferenceUnsupported(
            f"it would visit {count:,} index tuples and elements (more than {REFERENCE_WORK:,})"
        )
    return evaluate(bound, {name: np.asarray(value) for name, value in inputs.items()})


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
    element type (NaN where the other has NaN counts as equal). `expected` may hold the
    values of a float output more precisely (the reference evaluator's float64)."""
    same_type = got.dtype == expected.dtype or got.dtype.kind == expected.dtype.kind == "f"
    if got.shape != expected.shape or not same_type:
        return float("inf"), False
    if got.size == 0:
        return 0.0, True
    dtype = DType.of(got.dtype)
    wide, want = got.astype(np.float64), expected.astype(np.float64)
    with np.errstate(all="ignore"):
        delta = np.abs(wide - want)
        same = (np.isnan(wide) & np.isnan(want)) | (wide == want)  # equal infinities too
        delta = np.where(same, 0.0, np.where(np.isnan(delta), np.inf, delta))
    largest = float(delta.max())
    if dtype not in TOLERANCES:
        return largest, largest == 0.0
    rtol, atol = TOLERANCES[dtype]
    close = np.allclose(wide, want, rtol=rtol, atol=atol, equal_nan=True)
    return largest, bool(close)


def _report_check(timings: list[Timing], reference: Callable[[], dict[str, np.ndarray]]) -> int:
    """Print the devices' comparison and verdict; 1 when a device failed or is wrong."""
    baseline = timings[0]
    print(
        f"{'device':14s} {'compile ms':>10s} {'median ms':>10s}  "
        f"max |difference| vs {baseline.device.id}"
    )
    worst: tuple[float, str, str] = (0.0, "", "")
    failed = disagree = False
    for timing in timings:
        if timing.error is not None:
            failed = True
            print(f"{timing.device.id:14s} {'-':>10s} {'-':>10s}  failed: {timing.error}")
            continue
        if timing is baseline:
            note = "(baseline)"
        else:
            parts = []
            for name, expected in baseline.outputs.items():
                largest, close = difference(timing.outputs[name], expected)
                disagree |= not close
                parts.append(f"{name} {largest:.3g}{'' if close else ' MISMATCH'}")
                if largest >= worst[0]:
                    worst = (largest, name, timing.device.id)
            note = ", ".join(parts)
        print(
            f"{timing.device.id:14s} {1000 * timing.compile_seconds:10.1f} "
            f"{timing.median_ms:10.3f}  {note}"
        )
    ran = [timing for timing in timings if timing.error is None]
    if len(ran) > 1 and not disagree:
        largest, name, device_id = worst
        print(
            f"largest difference: {largest:.3g} ({name} on {device_id}); "
            f"every device agrees within tolerance"
        )
    else:
        if len(ran) == 1:
            print(f"only {baseline.device.id} ran: checking it against the reference evaluator")
            for failure in registry.failures():
                print(f"unavailable: {failure}")
        else:
            print("the devices disagree: checking each against the reference evaluator")
        wrong = _judge(ran, reference)
        failed |= disagree if wrong is None else wrong
    if failed:
        print("check failed", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _judge(timings: list[Timing], reference: Callable[[], dict[str, np.ndarray]]) -> bool | None:
    """Print which devices agree with the reference evaluator and which differ; whether any
    differs, or None when the reference cannot evaluate the program."""
    try:
        expected = reference()
    except ReferenceUnsupported as error:
        print(f"the reference evaluator cannot check this program: {error}")
        return None
    verdicts, wrong = [], False
    for timing in timings:
        agree, differ = [], []
        for name, want in expected.items():
            largest, close = difference(timing.outputs[name], want)
            (agree if close else differ).append(f"{name} max |diff| {largest:.3g}")
        wrong |= bool(differ)
        if differ:
            verdicts.append(f"{timing.device.id} differs: {', '.join(differ)}")
        else:
            verdicts.append(f"{timing.device.id} agrees with the reference ({', '.join(agree)})")
    print("; ".join(verdicts))
    return wrong
