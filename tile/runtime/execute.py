"""Compiled programs and their runs: `compile_program` builds a bound program's kernels for a
device, `execute` launches them over tensors' buffers (design 5.5, 8.8).

A run allocates every buffer it needs (temporaries, scratch buffers, private copies of
aliased inputs) before it changes any state or launches anything, so a failed allocation
leaves every tensor and the program as they were; each launch waits for what the buffer
states of `tile.runtime.device` say it must, and outputs of another element type are converted on
the host queue.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hal.errors import HalError
from tile.lower.schedule import OutputSource, launch_groups, make_schedule
from tile.runtime import debug, store, tune
from tile.runtime.cache import tensor_entry

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hal.interfaces import Event, Executor, Kernel, Library
    from semtree.kernel import KernelList
    from tile.bind.program import BoundProgram
    from tile.lower.schedule import OutputPlan, Schedule, Step
    from tile.runtime.cache import ProgramKey, SignatureEntry
    from tile.runtime.launch import PreparedRun

from tile.runtime.device import BufferState, Contents, DeviceRuntime, build_error, execution_error


@dataclass(slots=True)
class CompiledProgram:
    """One program-cache entry: the kernels of one signature on one device, ready to launch."""

    key: ProgramKey
    kernel_list: KernelList
    library: Library
    kernels: list[Kernel]  # prepared, index-aligned with kernel_list.kernels
    schedule: Schedule
    compile_seconds: float
    storable: bool = True  # False: not for the disk cache (tile.runtime.tune ran out of time)
    # Buffers the program owns, allocated on the first run and reused by every run (their
    # states order overlapping runs, 8.8): temporaries, then scratch buffers by slot for
    # outputs bound to tensors of another dtype.
    temporaries: list[BufferState] | None = None
    scratch: dict[int, BufferState] = field(default_factory=dict)
    # Every output's dims and numpy dtype, by user-visible name (what get_output_shape says).
    output_shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = field(init=False)
    # What a new output tensor is made of, by name: its buffer's description and its
    # signature entry (computed once: every call makes its outputs).
    output_parts: dict[str, tuple[Contents, SignatureEntry]] = field(init=False)
    copied_outputs: tuple[OutputPlan, ...] = field(init=False)  # those of source COPY
    # How a call over tensors repeats this program (tile.runtime.launch), once one has.
    prepared: PreparedRun | None = field(default=None, init=False)
    # The steps in groups in launch order (`launch_order`), once a run has asked.
    order: tuple[tuple[Step, ...], ...] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        outputs = self.schedule.outputs
        self.output_shapes = {plan.name: (plan.shape.dims, plan.dtype) for plan in outputs}
        self.copied_outputs = tuple(p for p in outputs if p.source is OutputSource.COPY)
        self.output_parts = {
            plan.name: (
                Contents.of(plan.name, plan.shape),
                tensor_entry(plan.dtype, plan.shape.dims),
            )
            for plan in outputs
        }


@dataclass(slots=True)
class RunRecord:
    """What one run scheduled: its terminal events and every launch, in order."""

    events: list[Event]  # the last write of every buffer the run wrote
    launches: list[tuple[str, Event]]  # (kernel name, event)


def compile_program(
    runtime: DeviceRuntime, key: ProgramKey, bound: BoundProgram, label: str
) -> CompiledProgram:
    """Generate the kernels of `bound` for the runtime's device, build and prepare them."""
    from tile.lower.generate import generate_program

    start = time.perf_counter()
    device = runtime.device
    complete = True  # False: a search of register tiles ran out of time (tile.runtime.tune)
    if tune.enabled():
        kernel_list, complete = tune.generate(runtime, bound, label)
    else:
        kernel_list = generate_program(bound, device.settings)
    schedule = make_schedule(bound, kernel_list)
    generated = time.perf_counter()
    try:
        library = device.compiler.build(kernel_list, device)
        kernels = [
            device.executor.prepare(library, index) for index in range(len(kernel_list.kernels))
        ]
    except HalError as error:
        raise build_error(error, f"{label} on {device.id}") from error
    seconds = time.perf_counter() - start
    if debug.level() or debug.dump_directory() is not None:
        stem = debug.file_stem(label, device.id, key_digest(key))
        debug.program_compiled(
            device.id, label, stem, bound, kernel_list, library, generated - start, seconds
        )
    program = CompiledProgram(key, kernel_list, library, kernels, schedule, seconds)
    program.storable = complete
    return program


def load_program(runtime: DeviceRuntime, key: ProgramKey, label: str) -> CompiledProgram | None:
    """The program of `key` from tile's disk cache (`tile.runtime.store`), ready to launch, or
    None when it holds none that this device can run."""
    if debug.dump_directory() is not None:
        return None  # TILE_DUMP_DIR asks for the generated code: compile, so it is written
    start = time.perf_counter()
    device = runtime.device
    stored = store.load_program(key, device)
    if stored is None:
        return None
    kernel_list, schedule, library = stored
    try:
        kernels = [device.executor.prepare(library, i) for i in range(len(kernel_list.kernels))]
    except HalError as error:
        raise build_error(error, f"{label} on {device.id}") from error
    seconds = time.perf_counter() - start
    debug.emit(
        debug.TIMES,
        "loaded %s for %s from the disk cache in %.1f ms",
        label,
        device.id,
        1000 * seconds,
    )
    return CompiledProgram(key, kernel_list, library, kernels, schedule, seconds)


def save_program(runtime: DeviceRuntime, program: CompiledProgram) -> None:
    """Store a program just compiled in tile's disk cache (never raises for the disk's sake),
    unless its search of register tiles is to go on in the next process."""
    if not program.storable:
        return
    store.save_program(
        program.key, runtime.device, program.kernel_list, program.schedule, program.library
    )


def key_digest(key: ProgramKey) -> str:
    """A short stable name for a program key (dump file names, log lines)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:12]


def execute(
    runtime: DeviceRuntime,
    program: CompiledProgram,
    inputs: Mapping[str, BufferState],
    outputs: Mapping[str, tuple[BufferState, np.dtype]],
    *,
    profile: bool = False,
) -> RunRecord:
    """Schedule one run of `program` without waiting for anything.

    `inputs` gives the state of every input tensor by name; `outputs` the state and dtype of
    every output tensor (an `INPUT` output left out is simply not copied anywhere). Launch
    dependencies follow 5.5 slot by slot; an output of another dtype is written to a scratch
    buffer and converted on store; an output tensor that is also an input kernels read is
    first copied, so no kernel reads what it overwrites. Every buffer is allocated before
    anything changes: TileOutOfMemory leaves the tensors and the program as they were.
    """
    schedule = program.schedule
    with runtime.lock:
        slots: list[BufferState] = [None] * len(schedule.slot_names)  # type: ignore[list-item]
        for name, slot in schedule.inputs:
            slots[slot] = inputs[name]
        temporaries = program.temporaries
        if temporaries is None:
            shapes, names = program.kernel_list.shapes, schedule.slot_names
            temporaries = [
                runtime.allocate(nbytes, Contents.of(names[slot], shapes[names[slot]]))
                for slot, nbytes in schedule.temporaries
            ]
        for (slot, _), state in zip(schedule.temporaries, temporaries, strict=True):
            slots[slot] = state
        scratch: dict[int, BufferState] = {}  # scratch buffers new in this run
        written: dict[int, Event] = {}  # id(state) -> its last write in this run
        after: list[tuple[BufferState, BufferState, np.dtype, OutputPlan]] = []
        placed: list[BufferState] = []  # output tensors that kernels write directly
        for plan in schedule.outputs:
            bound = outputs.get(plan.name)
            if bound is None:
                continue
            target, dtype = bound
            if plan.source is OutputSource.KERNEL:
                if dtype == plan.dtype:
                    slots[plan.slot] = target
                    placed.append(target)
                    continue
                state = program.scratch.get(plan.slot) or scratch.get(plan.slot)
                if state is None:
                    contents = Contents.of(plan.name, plan.shape)
                    state = scratch[plan.slot] = runtime.allocate(plan.nbytes, contents)
                slots[plan.slot] = state
                after.append((state, target, dtype, plan))
            elif plan.source is OutputSource.INPUT and inputs[plan.input] is not target:
                after.append((inputs[plan.input], target, dtype, plan))
        for plan in program.copied_outputs:  # copied from slots, which are all filled now
            if plan.name in outputs:
                target, dtype = outputs[plan.name]
                after.append((slots[plan.slot], target, dtype, plan))
        copies: list[tuple[BufferState, BufferState]] = []
        if placed and _overwrites_an_input(placed, inputs, schedule):
            copies = _private_copies(runtime, schedule, slots)
        # Every allocation succeeded: the program keeps its buffers, and the run starts.
        program.temporaries = temporaries
        if scratch:
            program.scratch.update(scratch)
        for state, copy in copies:
            _separate(runtime, schedule, slots, state, copy)
        launches = _launch(runtime, program, slots, written, profile)
        for source, target, dtype, plan in after:
            _store(runtime, source, target, dtype, plan, written)
        runtime.executor.flush()
    return RunRecord(list({id(event): event for event in written.values()}.values()), launches)


def launch_order(program: CompiledProgram, executor: Executor) -> tuple[tuple[Step, ...], ...]:
    """The program's steps in groups, in launch order: where the executor runs the kernels
    of a group of independent steps (`launch_groups`) together, that group, else one step at
    a time in the schedule's order. Decided on the first run, then kept."""
    if program.order is not None:
        return program.order
    kernels = program.kernels
    order: list[tuple[Step, ...]] = []
    for group in launch_groups(program.schedule.steps):
        if len(group) > 1 and executor.together([kernels[step.kernel_index] for step in group]):
            order.append(group)
        else:
            order.extend((step,) for step in group)
    if all(len(group) == 1 for group in order):
        order = [(step,) for step in program.schedule.steps]  # nothing together: as scheduled
    program.order = tuple(order)
    return program.order


def _launch(
    runtime: DeviceRuntime,
    program: CompiledProgram,
    slots: list[BufferState],
    written: dict[int, Event],
    profile: bool,
) -> list[tuple[str, Event]]:
    launches = []
    kernels, executor = program.kernels, runtime.executor
    for group in launch_order(program, executor):
        deps: list[Event] = []
        for step in group:
            for slot in step.reads:
                deps += slots[slot].read_deps()
            for slot in step.writes:
                deps += slots[slot].write_deps()
        runs = [
            (kernels[step.kernel_index], [slots[slot].buffer for slot in step.params])
            for step in group
        ]
        try:
            if len(runs) == 1:
                events = [runs[0][0].run(runs[0][1], deps, profile=profile)]
            else:
                events = executor.run_together(runs, deps, profile=profile)
        except Exception as error:
            names = ", ".join(kernel.info.name for kernel, _ in runs)
            raise execution_error(error, f"launching {names}") from error
        for step, (kernel, _), event in zip(group, runs, events, strict=True):
            for slot in step.reads:
                slots[slot].note_read(event)
            for slot in step.writes:
                state = slots[slot]
                state.note_write(event)
                written[id(state)] = event
            launches.append((kernel.info.name, event))
    return launches


def _overwrites_an_input(
    placed: list[BufferState], inputs: Mapping[str, BufferState], schedule: Schedule
) -> bool:
    """Whether an output tensor that kernels write is also an input that they read."""
    for name, _ in schedule.inputs:
        state = inputs[name]
        for target in placed:
            if target is state:
                return True
    return False


def _private_copies(
    runtime: DeviceRuntime, schedule: Schedule, slots: list[BufferState]
) -> list[tuple[BufferState, BufferState]]:
    """A new buffer for each input tensor that is also written in this run (its private
    copy, filled by `_separate`), all allocated before any is filled."""
    inputs = {id(slots[slot]): slots[slot] for _, slot in schedule.inputs}
    aliased = {
        id(slots[slot]): slots[slot]
        for step in schedule.steps
        for slot in step.writes
        if id(slots[slot]) in inputs
    }
    return [(state, runtime.allocate(state.nbytes, state.contents)) for state in aliased.values()]


def _separate(
    runtime: DeviceRuntime,
    schedule: Schedule,
    slots: list[BufferState],
    state: BufferState,
    copy: BufferState,
) -> None:
    """Copy input tensor `state` into `copy` and give the kernels that read it the copy."""
    event = runtime.executor.copy(state.buffer, 0, copy.buffer, 0, state.nbytes, state.read_deps())
    state.note_read(event)
    copy.note_write(event)
    for _, input_slot in schedule.inputs:
        if slots[input_slot] is state:
            slots[input_slot] = copy


def _store(
    runtime: DeviceRuntime,
    source: BufferState,
    target: BufferState,
    dtype: np.dtype,
    plan: OutputPlan,
    written: dict[int, Event],
) -> None:
    """Copy an output's value into its tensor after the kernels, converting the dtype on
    store (spec 6.4) on the host when it differs."""
    deps = source.read_deps() + target.write_deps()
    if dtype == plan.dtype:
        event = runtime.executor.copy(source.buffer, 0, target.buffer, 0, plan.nbytes, deps)
    else:

        def convert() -> None:
            _convert(source, target, plan.dtype, dtype, plan.shape.dims)

        event = runtime.host.submit(convert, deps, f"storing output {plan.name} as {dtype}")
    source.note_read(event)
    target.note_write(event)
    written[id(target)] = event


def _convert(
    source: BufferState,
    target: BufferState,
    source_dtype: np.dtype,
    dtype: np.dtype,
    dims: tuple[int, ...],
) -> None:
    # Runs on the host queue once both buffers are free: map, convert (spec 5.4), unmap.
    raw = source.buffer.map_current()
    try:
        out = target.buffer.map_discard()
        try:
            values = raw[: source.nbytes].view(source_dtype).reshape(dims)
            with np.errstate(all="ignore"):  # out-of-range float -> int is defined loosely
                np.copyto(out[: target.nbytes].view(dtype).reshape(dims), values, casting="unsafe")
        finally:
            target.buffer.unmap().wait()
    finally:
        source.buffer.unmap().wait()
