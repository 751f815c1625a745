"""One run of a compiled program over a call's values: `launch` uploads numpy inputs, makes the
output tensors, schedules the kernels (`tile.runtime.execute`) and returns an `Invocation`
(design 9.3). Shared by `Invoker.invoke` and `CompiledFunction.__call__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hal.environment import flag, unset
from tile.lower.schedule import OutputSource
from tile.runtime import debug
from tile.runtime.api import Tensor
from tile.runtime.device import execution_error, wait_events
from tile.runtime.execute import execute, launch_order

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hal.interfaces import Event, Kernel
    from tile.runtime.api import Device, InputValue
    from tile.runtime.cache import SignatureEntry
    from tile.runtime.device import BufferState
    from tile.runtime.execute import CompiledProgram, RunRecord

    # (kernel, params, reads, writes, waits) in slots (`PreparedRun.__init__`)
    PreparedStep = tuple[Kernel | None, tuple, tuple[int, ...], tuple[int, ...], tuple[int, ...]]


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


# What takes a call off `PreparedRun.repeat` when set: logging, kernel times, profiles.
_HOT_PATH_OFF = (debug.DEBUG_VARIABLE, "TILE_PROFILE")


class PreparedRun:
    """A cached call reduced to what changes from call to call (`Function.__call__`): for a
    program run over tensors only, what `launch` and `execute` decide from the schedule
    (slots, output buffers, steps) is decided once here, so that a repeated call checks its
    inputs, allocates its outputs and launches the steps with their dependencies, as
    `execute` would. Only for programs whose outputs are all written by kernels into new
    tensors, and whose temporaries exist (after a first run): `of` returns None for others."""

    __slots__ = (
        "__weakref__",
        "_device",
        "_expected",
        "_inputs",
        "_key",
        "_outputs",
        "_slots",
        "_steps",
    )

    def __init__(
        self,
        device: Device,
        program: CompiledProgram,
        expected: tuple[tuple[str, SignatureEntry], ...],
    ) -> None:
        schedule = program.schedule
        assert program.temporaries is not None
        # The program's key when the device's cache holds it (a repeat checks it still does:
        # the cache alone holds the program, which holds this); None for one that its caller
        # holds (a CompiledFunction's, loaded from a bundle).
        self._key = program.key if device.runtime.programs.holds(program.key, program) else None
        self._device = device
        self._expected = expected  # (name, signature entry) of every input, all tensors
        self._inputs = schedule.inputs  # (name, slot) of the inputs kernels read
        make = device.runtime.output_maker
        self._outputs = tuple(  # (name, slot, maker of its state, dims, dtype, entry)
            (plan.name, plan.slot, make(plan.nbytes, contents), plan.shape.dims, plan.dtype, entry)
            for plan in schedule.outputs
            for contents, entry in [program.output_parts[plan.name]]
        )
        # (kernel, params, reads, writes, waits), in slots, in launch order (`launch_order`);
        # `waits`: the written slots whose earlier users a step must wait for, all but the
        # outputs no step has used yet (their buffers are new in every run). A group of steps
        # that run together is one entry (None, its steps, (), (), ()).
        fresh = {plan.slot for plan in schedule.outputs}
        steps: list[PreparedStep] = []
        for group in launch_order(program, device.runtime.executor):
            prepared = []
            for step in group:
                waits = tuple(slot for slot in step.writes if slot not in fresh)
                kernel = program.kernels[step.kernel_index]
                prepared.append((kernel, step.params, step.reads, step.writes, waits))
            for step in group:
                fresh.difference_update(step.reads, step.writes)
            steps.append(prepared[0] if len(group) == 1 else (None, tuple(prepared), (), (), ()))
        self._steps = tuple(steps)
        slots: list[BufferState | None] = [None] * len(schedule.slot_names)
        for (slot, _), state in zip(schedule.temporaries, program.temporaries, strict=True):
            slots[slot] = state
        self._slots = slots  # the temporaries in place; inputs and outputs filled per run

    @classmethod
    def of(
        cls,
        device: Device,
        program: CompiledProgram,
        expected: tuple[tuple[str, SignatureEntry], ...],
    ) -> PreparedRun | None:
        """The prepared run of `program` on `device` for tensor inputs of the `expected`
        names and signature entries, or None when the program needs `execute`'s general
        path (an output that is an input or a copy, no temporaries yet, an input written)."""
        schedule = program.schedule
        if program.temporaries is None or program.copied_outputs:
            return None
        if any(plan.source is not OutputSource.KERNEL for plan in schedule.outputs):
            return None
        read_only = {slot for _, slot in schedule.inputs}
        if any(slot in read_only for step in schedule.steps for slot in step.writes):
            return None
        return cls(device, program, expected)

    def repeat(self, named: Mapping[str, InputValue]) -> dict[str, Tensor] | None:
        """Schedule one run over `named` and return the new output tensors by name, without
        waiting; None (nothing done) unless `named` holds tensors of the expected names and
        entries on this device, the program is still the device's for its key, and nothing
        asks for logging or profiles: the call then takes the full path."""
        expected, device = self._expected, self._device
        if len(named) != len(expected):
            return None
        if not unset(_HOT_PATH_OFF) and (debug.level() or flag("TILE_PROFILE")):
            return None
        for name, entry in expected:
            value = named.get(name)
            if value.__class__ is not Tensor or value.device is not device:  # type: ignore[union-attr]
                return None
            if value._entry != entry:  # type: ignore[union-attr]
                return None
        runtime = device.runtime
        if self._key is not None:
            program = runtime.programs.get(self._key)  # a hit, in LRU order
            if program is None or program.prepared is not self:
                return None  # evicted, or built again: the full path finds the current one
        slots = self._slots.copy()
        for name, slot in self._inputs:
            slots[slot] = named[name]._state  # type: ignore[union-attr]
        outputs: dict[str, Tensor] = {}
        over = Tensor._over
        for name, slot, make, dims, dtype, entry in self._outputs:
            state = slots[slot] = make()
            outputs[name] = over(device, dims, dtype, state, entry)
        lock = runtime.lock  # taken without `with`: a third of its cost, on every call
        lock.acquire()
        try:
            for kernel, params, reads, writes, waits in self._steps:
                if kernel is None:
                    self._run_together(params, slots)  # type: ignore[arg-type]
                    continue
                deps: list[Event] = []
                for slot in reads:
                    deps += slots[slot].read_deps()  # type: ignore[union-attr]
                for slot in waits:
                    deps += slots[slot].write_deps()  # type: ignore[union-attr]
                buffers = [slots[slot].buffer for slot in params]  # type: ignore[union-attr]
                try:
                    event = kernel.run_fitted(buffers, deps)  # signatures matched above
                except Exception as error:
                    raise execution_error(error, f"launching {kernel.info.name}") from error
                for slot in reads:
                    slots[slot].note_read(event)  # type: ignore[union-attr]
                for slot in writes:
                    slots[slot].note_write(event)  # type: ignore[union-attr]
            runtime.executor.flush()
        finally:
            lock.release()

        return outputs

    def _run_together(
        self, group: tuple[PreparedStep, ...], slots: list[BufferState | None]
    ) -> None:
        """Launch a group of steps that run together (`hal.Executor.run_together`)."""
        deps: list[Event] = []
        for _, _, reads, _, waits in group:
            for slot in reads:
                deps += slots[slot].read_deps()  # type: ignore[union-attr]
            for slot in waits:
                deps += slots[slot].write_deps()  # type: ignore[union-attr]
        runs = [
            (kernel, [slots[slot].buffer for slot in params])  # type: ignore[union-attr]
            for kernel, params, *_ in group
        ]
        try:
            events = self._device.runtime.executor.run_together(runs, deps)
        except Exception as error:
            names = ", ".join(kernel.info.name for kernel, _ in runs)
            raise execution_error(error, f"launching {names}") from error
        for (_, _, reads, writes, _), event in zip(group, events, strict=True):
            for slot in reads:
                slots[slot].note_read(event)  # type: ignore[union-attr]
            for slot in writes:
                slots[slot].note_write(event)  # type: ignore[union-attr]


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
