"""Stand-ins for the API tests: a kernel generator and a HAL device written in Python.

- `FakeGenerator` replaces `tile.lower.generate.generate_program`. It turns each bound op into one
  kernel: `ident` of a tensor becomes a COPY kernel, `ident` of the constant 0 a ZERO kernel
  (both run on `llvm_cpu.0` without a renderer), anything else an ELEMENTWISE kernel with an
  empty semtree body whose meaning, a numpy function, is kept in `BODIES` for the fake device.
- `FakeDevice` implements the HAL in Python with host buffers. It executes *out of order*:
  every operation runs on its own thread as soon as its dependencies complete, so results
  are right only if the runtime passes the right dependencies. Tests can hold operations of
  one kind (`hold`) to control timing, make them fail (`failing`), and read which
  dependencies each operation received (`jobs`).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hal.errors import ExecutionError as HalExecutionError
from hal.events import CompletedEvent, SettableEvent, dependency_failure, wait_all
from hal.interfaces import (
    Buffer,
    Compiler,
    Device,
    DeviceKind,
    Event,
    Executor,
    Kernel,
    Library,
)
from semtree import builder as sb
from semtree.kernel import (
    Direction,
    HardwareSettings,
    KernelInfo,
    KernelKind,
    KernelList,
    KernelParam,
)
from semtree.types import Type
from tile.bind.program import ConstBinding, TensorBinding

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tile.bind.program import BoundOp, BoundProgram

# Body name -> numpy implementation over the parameters' arrays (outputs first).
BODIES: dict[str, Callable[[list[np.ndarray]], None]] = {}

NUMPY_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "ident": lambda value: value,
    "neg": np.negative,
    "exp": np.exp,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
}

_names = itertools.count()


class FakeGenerator:
    """`generate_program(bound, settings)`; counts its calls (one per compiled program)."""

    def __init__(self) -> None:
        self.calls: list[BoundProgram] = []
        self.settings: list[HardwareSettings] = []

    def __call__(self, bound: BoundProgram, settings: HardwareSettings) -> KernelList:
        self.calls.append(bound)
        self.settings.append(settings)
        tensors = {
            name: binding.shape
            for name, binding in bound.bindings.items()
            if isinstance(binding, TensorBinding)
        }
        kernels = [_kernel(op, bound, tensors) for op in bound.ops]
        used = {param.name for info in kernels for param in info.params}
        written = {name for info in kernels for name in info.outputs}
        inputs = [name for name in bound.inputs if name in used and name not in written]
        outputs = [name for name in bound.output_names if name in written]
        temporaries = [name for name in tensors if name in written and name not in outputs]
        shapes = {name: tensors[name] for name in used}
        return KernelList(tuple(kernels), shapes, tuple(inputs), tuple(outputs), tuple(temporaries))


def _param(name: str, bound: BoundProgram, direction: Direction) -> KernelParam:
    shape = bound.bindings[name].shape  # type: ignore[union-attr] (a tensor)
    return KernelParam(name, direction, shape.dtype, shape.dims)


def _kernel(op: BoundOp, bound: BoundProgram, tensors: dict) -> KernelInfo:
    out = _param(op.output, bound, Direction.OUT)
    name = f"fake_{op.fn}_{next(_names)}"
    operand = bound.bindings[op.inputs[0]] if op.inputs else None
    if op.fn == "ident" and op.inputs[0] in tensors and operand.shape.dtype is out.dtype:
        source = _param(op.inputs[0], bound, Direction.IN)
        return KernelInfo(name, KernelKind.COPY, (out, source), (1, 1, 1), (0, 0, 0), None, 0, 0)
    if op.fn == "ident" and isinstance(operand, ConstBinding) and operand.value == 0:
        return KernelInfo(name, KernelKind.ZERO, (out,), (1, 1, 1), (0, 0, 0), None, 0, 0)
    ins = tuple(_param(item, bound, Direction.IN) for item in op.inputs if item in tensors)
    params = (out, *ins)
    body = sb.function(
        name,
        [(p.name, Type.ptr(p.dtype, const=p.direction is Direction.IN)) for p in params],
        sb.block(),
    )
    constants = {
        item: binding.value
        for item in op.inputs
        if isinstance(binding := bound.bindings[item], ConstBinding)
    }
    function = NUMPY_FUNCTIONS[op.fn]
    positions = {param.name: index for index, param in enumerate(params)}

    def compute(arrays: list[np.ndarray]) -> None:
        args = [
            arrays[positions[item]] if item in positions else constants[item] for item in op.inputs
        ]
        with np.errstate(all="ignore"):
            np.copyto(arrays[0], function(*args), casting="unsafe")

    BODIES[name] = compute
    return KernelInfo(
        name, KernelKind.ELEMENTWISE, params, (1, 1, 1), (1, 1, 1), body, 1, 1, comments=op.fn
    )


# ---- the fake device ------------------------------------------------------------------------


class FakeBuffer(Buffer):
    def __init__(self, device: FakeDevice, size: int) -> None:
        self.device = device
        self.size = size
        self.storage = np.zeros(size, np.uint8)
        self.maps = 0

    def map_current(self, deps: Sequence[Event] = (), *, writable: bool = False) -> np.ndarray:
        wait_all(deps)
        self.maps += 1
        if writable:
            return self.storage
        view = self.storage.view()
        view.flags.writeable = False
        return view

    def map_discard(self, deps: Sequence[Event] = ()) -> np.ndarray:
        wait_all(deps)
        self.maps += 1
        self.storage.fill(0xCD)  # "undefined contents": never the old values
        return self.storage

    def unmap(self) -> Event:
        self.maps -= 1
        return CompletedEvent()

    def array(self, param: KernelParam) -> np.ndarray:
        nbytes = int(np.prod(param.shape)) * param.dtype.itemsize
        return self.storage[:nbytes].view(param.dtype.numpy).reshape(param.shape)


class FakeLibrary(Library):
    def __init__(self, kernel_list: KernelList) -> None:
        self.kernel_list = kernel_list

    def source(self, index: int) -> str:
        return str(self.kernel_list.kernels[index])


class FakeCompiler(Compiler):
    def __init__(self) -> None:
        self.builds = 0
        self.failure: BaseException | None = None  # raised by the next builds when set

    def build(self, kernel_list: KernelList, device: Device) -> Library:
        if self.failure is not None:
            raise self.failure
        self.builds += 1
        return FakeLibrary(kernel_list)


@dataclass
class Job:
    kind: str  # the op's fn for body kernels, "zero", "copy", "copy_buffer", "fill"
    label: str
    deps: tuple[Event, ...]
    event: SettableEvent


class FakeKernel(Kernel):
    def __init__(self, device: FakeDevice, info: KernelInfo) -> None:
        self.device = device
        self.info = info

    def run(
        self, params: Sequence[Buffer], deps: Sequence[Event] = (), *, profile: bool = False
    ) -> Event:
        info = self.info
        buffers: list[FakeBuffer] = list(params)  # type: ignore[arg-type]
        if info.kind is KernelKind.ZERO:
            kind = "zero"

            def action() -> None:
                buffers[0].array(info.params[0])[...] = 0

        elif info.kind is KernelKind.COPY:
            kind = "copy"

            def action() -> None:
                buffers[0].array(info.params[0])[...] = buffers[1].array(info.params[1])

        else:
            kind = info.comments
            body = BODIES[info.name]

            def action() -> None:
                body(
                    [
                        buffer.array(param)
                        for buffer, param in zip(buffers, info.params, strict=True)
                    ]
                )

        return self.device.submit(kind, info.name, action, deps, profile)


class FakeExecutor(Executor):
    buffer_alignment = 64

    def __init__(self, device: FakeDevice) -> None:
        self.device = device

    def allocate(self, size: int) -> FakeBuffer:
        return FakeBuffer(self.device, size)

    def make_arena(self, size: int):
        raise NotImplementedError

    def prepare(self, library: Library, index: int) -> FakeKernel:
        return FakeKernel(self.device, library.kernel_list.kernels[index])

    def copy(self, src, src_offset, dst, dst_offset, size, deps=()) -> Event:
        def action() -> None:
            dst.storage[dst_offset : dst_offset + size] = src.storage[
                src_offset : src_offset + size
            ]

        return self.device.submit("copy_buffer", f"copy of {size} bytes", action, deps)

    def fill_zero(self, dst, deps=()) -> Event:
        return self.device.submit("fill", "zero fill", lambda: dst.storage.fill(0), deps)


_ids = itertools.count()


class FakeDevice(Device):
    """An out-of-order Python device (module docstring)."""

    def __init__(self) -> None:
        self.id = f"fake.{next(_ids)}"
        self.description = "Python device for the API tests"
        self.kind = DeviceKind.OTHER
        self.settings = HardwareSettings.llvm_cpu(1)
        self.compiler = FakeCompiler()
        self.executor = FakeExecutor(self)
        self.gates: dict[str, threading.Event] = {}
        self.failing: dict[str, BaseException] = {}
        self.jobs: list[Job] = []

    def hold(self, kind: str) -> threading.Event:
        """Operations of `kind` wait until the returned event is set."""
        gate = self.gates[kind] = threading.Event()
        return gate

    def release(self) -> None:
        for gate in self.gates.values():
            gate.set()

    def jobs_of(self, kind: str) -> list[Job]:
        return [job for job in self.jobs if job.kind == kind]

    def submit(
        self,
        kind: str,
        label: str,
        action: Callable[[], None],
        deps: Sequence[Event],
        profile: bool = False,
    ) -> SettableEvent:
        event = SettableEvent(label)
        job = Job(kind, label, tuple(deps), event)
        self.jobs.append(job)

        def work() -> None:
            failure = dependency_failure(job.deps, label)
            if failure is None:
                gate = self.gates.get(kind)
                if gate is not None:
                    gate.wait(30)
                try:
                    if kind in self.failing:
                        raise self.failing[kind]
                    action()
                except BaseException as error:
                    failure = HalExecutionError(f"{label} failed: {error!r}")
                    failure.__cause__ = error
            if failure is None:
                event.set_result(1000 if profile else None)
            else:
                event.set_exception(failure)

        threading.Thread(target=work, name=label, daemon=True).start()
        return event
