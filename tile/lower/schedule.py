"""The launch plan of a compiled program: which buffer each kernel parameter names (8.8).

Place in the pipeline: after `tile.lower.generate` has turned a `BoundProgram` into a `KernelList`,
`make_schedule` numbers every buffer the kernels touch (a *slot*), and records for each
launch the slots of its parameters and which of them it reads and writes. The runtime fills
the slots for one run (input tensors, output tensors, the program's temporaries) and walks
the steps; nothing here needs a device.

Each user-visible output comes from one of three places:

- `KERNEL`: a kernel writes it into its own buffer; the caller's output tensor takes that
  slot (or, for an output of another dtype, a scratch buffer that is converted on store);
- `COPY`: another output's buffer (or a temporary) already holds it (the generator renamed
  it through `var_rewrites`); it is copied into the output tensor after the kernels;
- `INPUT`: it is an input returned unchanged (`function (I) -> (I) {}`).

Slot order: program inputs, then kernel-written buffers that back outputs, then temporaries.
A kernel list that does not fit its bound program (a parameter naming an unknown buffer, a
kernel writing an input, an output of the wrong shape) is a generator bug: `ScheduleError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from semtree.kernel import Direction
from semtree.types import DType, TensorShape
from tile.bind.program import TensorBinding

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from semtree.kernel import KernelList
    from tile.bind.program import BoundProgram


class ScheduleError(RuntimeError):
    """A kernel list that does not fit the bound program it was generated from."""


class OutputSource(Enum):
    KERNEL = "kernel"
    COPY = "copy"
    INPUT = "input"


@dataclass(frozen=True, slots=True)
class OutputPlan:
    name: str  # the user-visible output name
    shape: TensorShape  # its dims and dtype, as binding inferred them
    source: OutputSource
    slot: int = -1  # KERNEL / COPY: the slot holding the value
    input: str = ""  # INPUT: the input returned
    dtype: np.dtype = field(init=False, compare=False)  # shape.dtype for numpy, at hand
    nbytes: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", self.shape.dtype.numpy)
        object.__setattr__(self, "nbytes", self.shape.nbytes)


@dataclass(frozen=True, slots=True)
class Step:
    kernel_index: int
    params: tuple[int, ...]  # one slot per kernel parameter, in parameter order
    reads: tuple[int, ...]  # distinct slots read
    writes: tuple[int, ...]  # distinct slots written


@dataclass(frozen=True, slots=True)
class Schedule:
    slot_names: tuple[str, ...]  # buffer name per slot
    inputs: tuple[tuple[str, int], ...]  # (program input, its slot), inputs kernels read
    outputs: tuple[OutputPlan, ...]  # in the function's output order
    temporaries: tuple[tuple[int, int], ...]  # (slot, bytes) of buffers the program owns
    steps: tuple[Step, ...]  # in launch order

    def __str__(self) -> str:
        lines = [f"slot {slot}: {name}" for slot, name in enumerate(self.slot_names)]
        for step in self.steps:
            lines.append(
                f"kernel {step.kernel_index}: params {step.params}, reads "
                f"{step.reads}, writes {step.writes}"
            )
        for plan in self.outputs:
            where = plan.input if plan.source is OutputSource.INPUT else f"slot {plan.slot}"
            lines.append(f"output {plan.name}: {plan.shape} from {plan.source.value} {where}")
        return "\n".join(lines)


def make_schedule(bound: BoundProgram, kernel_list: KernelList) -> Schedule:
    """The launch plan of `kernel_list`, generated from `bound` (module docstring)."""
    tensor_inputs = {
        name: binding.shape
        for name, binding in bound.input_bindings.items()
        if isinstance(binding, TensorBinding)
    }
    written: dict[str, None] = {}  # ordered set
    for info in kernel_list.kernels:
        for param in info.params:
            if param.direction is Direction.OUT:
                written[param.name] = None
    for name in kernel_list.inputs:
        if name not in tensor_inputs:
            raise ScheduleError(f"kernel list input {name!r} is not a tensor input")
        if name in written:
            raise ScheduleError(f"a kernel writes the program input {name!r}")
    names: list[str] = list(kernel_list.inputs)
    slots = {name: slot for slot, name in enumerate(names)}

    def slot_of(buffer: str) -> int:
        if buffer not in slots:
            slots[buffer] = len(names)
            names.append(buffer)
        return slots[buffer]

    outputs = _plan_outputs(bound, kernel_list, written, tensor_inputs, slot_of)
    owned = {plan.slot for plan in outputs if plan.source is OutputSource.KERNEL}
    steps = []
    for index, info in enumerate(kernel_list.kernels):
        params, reads, writes = [], {}, {}
        for param in info.params:
            if param.name not in kernel_list.shapes:
                raise ScheduleError(f"kernel {info.name} names the unknown buffer {param.name!r}")
            slot = slot_of(param.name)
            params.append(slot)
            (writes if param.direction is Direction.OUT else reads)[slot] = None
        for slot in reads:
            if slot >= len(kernel_list.inputs) and names[slot] not in written:
                raise ScheduleError(
                    f"kernel {info.name} reads {names[slot]!r}, which nothing writes"
                )
        steps.append(Step(index, tuple(params), tuple(reads), tuple(writes)))
    temporaries = tuple(
        (slot, kernel_list.shapes[name].nbytes)
        for slot, name in enumerate(names)
        if slot >= len(kernel_list.inputs) and slot not in owned
    )
    inputs = tuple((name, slots[name]) for name in kernel_list.inputs)
    return Schedule(tuple(names), inputs, tuple(outputs), temporaries, tuple(steps))


def launch_groups(steps: tuple[Step, ...]) -> tuple[tuple[Step, ...], ...]:
    """The steps in groups that may run side by side (design 7.4): a step joins the group
    after the last group holding a step it must follow (one that writes a slot it reads or
    writes, or reads a slot it writes). Groups run one after another; within a group, steps
    keep their order in `steps`. Launching the groups in order is a valid order of the steps.
    """
    after_write: dict[int, int] = {}  # slot -> the group after its last writer's
    after_reads: dict[int, int] = {}  # slot -> the group after its last reader's
    groups: list[list[Step]] = []
    for step in steps:
        group = max(
            [after_write.get(slot, 0) for slot in (*step.reads, *step.writes)]
            + [after_reads.get(slot, 0) for slot in step.writes],
            default=0,
        )
        if group == len(groups):
            groups.append([])
        groups[group].append(step)
        for slot in step.reads:
            after_reads[slot] = max(after_reads.get(slot, 0), group + 1)
        for slot in step.writes:
            after_write[slot] = group + 1
    return tuple(tuple(group) for group in groups)


def _plan_outputs(
    bound: BoundProgram,
    kernel_list: KernelList,
    written: dict[str, None],
    tensor_inputs: dict[str, TensorShape],
    slot_of: Callable[[str], int],
) -> list[OutputPlan]:
    shapes = {
        name: TensorShape(DType.of(dtype), tuple(dims))
        for name, (dims, dtype) in bound.outputs.items()
    }
    buffers = {name: kernel_list.var_rewrites.get(name, name) for name in bound.output_names}
    # The output named like its buffer owns it; otherwise the first output renamed to it.
    owners: dict[str, str] = {}
    for name in bound.output_names:
        if buffers[name] == name and name in written:
            owners[name] = name
    for name in bound.output_names:
        if buffers[name] in written:
            owners.setdefault(buffers[name], name)
    plans = []
    for name in bound.output_names:
        shape, buffer = shapes[name], buffers[name]
        if buffer in written:
            actual = kernel_list.shapes[buffer]
            source = OutputSource.KERNEL if owners[buffer] == name else OutputSource.COPY
            plans.append(OutputPlan(name, shape, source, slot=slot_of(buffer)))
        elif buffer in tensor_inputs:
            actual = tensor_inputs[buffer]
            plans.append(OutputPlan(name, shape, OutputSource.INPUT, input=buffer))
        else:
            raise ScheduleError(f"no kernel writes output {name!r} (buffer {buffer!r})")
        if actual.dtype is not shape.dtype or tuple(actual.dims) != shape.dims:
            raise ScheduleError(f"output {name!r} is {shape} but its buffer {buffer!r} is {actual}")
    return plans
