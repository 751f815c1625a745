"""One run of a compiled program over a call's values: `launch` uploads numpy inputs, makes the
output tensors, schedules the kernels (`tile.runtime.execute`) and returns an `Invocation`
(design 9.3). Shared by `Invoker.invoke` and `CompiledFunction.__call__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hal.environment import flag
from tile.lower.schedule import OutputSource
from tile.runtime import debug
from tile.runtime.api import Tensor
from tile.runtime.device import wait_events
from tile.runtime.execute import execute

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hal.interfaces import Event
    from tile.runtime.api import Device, InputValue
    from tile.runtime.device import BufferState
    from tile.runtime.execute import CompiledProgram, RunRecord


def launch(
    device: Device,
    program: CompiledProgram,
    values: Mapping[str, InputValue],
    given_outputs: Mapping[str, Tensor],
    label: str,
) -> Invocation:
    """Schedule one run of `program` on `device` and return at once. `values` are the call's
    inputs by name (tensors on `device`, numpy arrays, constants: only arrays of rank >= 1 are
    uploaded); outputs missing from `given_outputs` (whose shapes the caller checked) are new
    tensors."""
    tensors: dict[str, Tensor] = {}
    inputs: dict[str, BufferState] = {}
    for name, value in values.items():
        if isinstance(value, Tensor):
            tensors[name] = value
            inputs[name] = value._state
        elif isinstance(value, np.ndarray) and value.ndim:
            tensor = tensors[name] = Tensor.from_numpy(value, device, name=name)
            inputs[name] = tensor._state
    outputs: dict[str, Tensor] = {}
    states = {}
    for plan in program.schedule.outputs:
        tensor = given_outputs.get(plan.name)
        if tensor is None:
            if plan.source is OutputSource.INPUT:
                outputs[plan.name] = tensors[plan.input]  # returned unchanged
                continue
            contents, entry = program.output_parts[plan.name]
            state = device.runtime.allocate(plan.nbytes, contents, recycled=True)
            tensor = Tensor._over(device, plan.shape.dims, plan.dtype, state, entry)
        outputs[plan.name] = tensor
        states[plan.name] = (tensor._state, tensor.dtype)
    timed = debug.enabled(debug.TIMES)  # per-kernel times need profiling events
    profile = timed or flag("TILE_PROFILE")
    record = execute(device.runtime, program, inputs, states, profile=profile)
    if timed:
        debug.watch_launches(device.id, program.kernel_list, record.launches)
    return Invocation(device, outputs, record, label)


class Invocation:
    """One scheduled run: its outputs, its device, and the events that say when it is done."""

    __slots__ = ("_label", "_record", "device", "outputs")

    def __init__(
        self, device: Device, outputs: dict[str, Tensor], record: RunRecord, label: str
    ) -> None:
        self.device = device  # the device that runs it (never a silent fallback)
        self.outputs = outputs  # every output of this run, by name
        self._record = record
        self._label = label

    @property
    def events(self) -> list[Event]:
        """The terminal events: the last write of every buffer the run wrote."""
        return list(self._record.events)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the run is complete; raise ExecutionError (chaining the HAL failure)
        if anything it depends on failed, TimeoutError if `timeout` seconds pass first."""
        wait_events(self._record.events, timeout, f"running {self._label}")

    def done(self) -> bool:
        return all(event.is_complete for event in self._record.events)

    def profile(self) -> list[tuple[str, int | None]]:
        """(kernel name, duration in ns or None) per launch, in order; waits for the run.
        Durations are recorded when TILE_PROFILE=1."""
        self.wait()
        return [(name, event.duration_ns()) for name, event in self._record.launches]

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<Invocation of {self._label} on {self.device.id}, {state}>"
