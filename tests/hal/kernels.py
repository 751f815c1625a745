"""Hand-built kernels for the HAL tests: llvmlite IR following the `__grid` ABI, and stand-ins
for the semtree kernel-list classes (the runtime reads only the attributes below), so the
LLVM runtime is tested without the renderer or `semtree.kernel`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from hal_llvm.compiler import host
from hal_llvm.device import LLVMDevice
from hal_llvm.grid import emit_grid_entry, work_group_function_type
from semtree.types import DType

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hal.interfaces import Buffer, Event
    from hal_llvm.compiler import LLVMLibrary
    from hal_llvm.memory import CpuBuffer

I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()


class Kind(Enum):
    CONTRACTION = "contraction"
    ELEMENTWISE = "elementwise"
    ZERO = "zero"
    COPY = "copy"
    SPECIAL = "special"


@dataclass(frozen=True)
class Param:
    name: str
    direction: str
    dtype: DType
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Body:
    name: str


@dataclass(frozen=True)
class Info:
    name: str
    kind: Kind
    params: tuple[Param, ...]
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int] = (1, 1, 1)
    body: Body | None = None
    flops: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Program:
    kernels: tuple[Info, ...]
    shapes: dict[str, object] = field(default_factory=dict)


def make_device(threads: int | None = None, split_seconds: float | None = None) -> LLVMDevice:
    """A private llvm_cpu device (its own threads) whose settings need no semtree.kernel."""
    cpu = host()
    device = LLVMDevice(cpu, 0, settings=SimpleNamespace(vec_size=cpu.vec_size), threads=threads)
    if split_seconds is not None:
        device.runtime.split_seconds = split_seconds
    return device


def build(device: LLVMDevice, program: Program, module: ir.Module) -> LLVMLibrary:
    """Build `program` on `device` with a renderer that returns the hand-built `module`."""
    device.compiler.renderer = lambda kernel_list, settings: module
    return device.compiler.build(program, device)  # type: ignore[arg-type]


def new_module(name: str) -> ir.Module:
    return ir.Module(name=name)


def _work_group(
    module: ir.Module, name: str, pointers: list[ir.Type]
) -> tuple[ir.Function, ir.IRBuilder]:
    function = ir.Function(module, work_group_function_type(pointers), name)
    function.linkage = "internal"
    function.attributes.add("alwaysinline")
    for argument in function.args[: len(pointers)]:
        argument.add_attribute("noalias")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def _linear(builder: ir.IRBuilder, function: ir.Function, size: tuple[int, int, int]) -> ir.Value:
    g0, g1, g2 = function.args[-3:]
    inner = builder.add(g1, builder.mul(g2, ir.Constant(I64, size[1])))
    return builder.add(g0, builder.mul(inner, ir.Constant(I64, size[0])))


def _sleep(module: ir.Module, builder: ir.IRBuilder, microseconds: int) -> None:
    if microseconds <= 0:
        return
    usleep = module.globals.get("usleep") or ir.Function(
        module, ir.FunctionType(I32, [I32]), "usleep"
    )
    builder.call(usleep, [ir.Constant(I32, microseconds)])


def add_vector_add(module: ir.Module, name: str, size: tuple[int, int, int]) -> None:
    """out[i] = a[i] + b[i] (float32), one element per work-group, i the linear id."""
    pointer = F32.as_pointer()
    function, builder = _work_group(module, name, [pointer, pointer, pointer])
    out, left, right = function.args[:3]
    index = _linear(builder, function, size)
    total = builder.fadd(
        builder.load(builder.gep(left, [index])), builder.load(builder.gep(right, [index]))
    )
    builder.store(total, builder.gep(out, [index]))
    builder.ret_void()
    emit_grid_entry(module, function, size)


def add_id_recorder(module: ir.Module, name: str, size: tuple[int, int, int]) -> None:
    """out[linear] = g0 + (g1 << 16) + (g2 << 32) (int64): shows how ids were unravelled."""
    function, builder = _work_group(module, name, [I64.as_pointer()])
    g0, g1, g2 = function.args[-3:]
    code = builder.add(
        g0,
        builder.add(builder.shl(g1, ir.Constant(I64, 16)), builder.shl(g2, ir.Constant(I64, 32))),
    )
    builder.store(code, builder.gep(function.args[0], [_linear(builder, function, size)]))
    builder.ret_void()
    emit_grid_entry(module, function, size)


def add_thread_recorder(module: ir.Module, name: str, groups: int, microseconds: int) -> None:
    """Sleep, then out[g0] = pthread_self() (int64): which native thread ran each group."""
    function, builder = _work_group(module, name, [I64.as_pointer()])
    _sleep(module, builder, microseconds)
    pthread_self = ir.Function(module, ir.FunctionType(I64, []), "pthread_self")
    builder.store(builder.call(pthread_self, []), builder.gep(function.args[0], [function.args[1]]))
    builder.ret_void()
    emit_grid_entry(module, function, (groups, 1, 1))


def add_slow_increment(module: ir.Module, name: str, groups: int, microseconds: int) -> None:
    """Sleep, then out[g] = in[g] + 1 (int32): a slow kernel for ordering tests."""
    pointer = I32.as_pointer()
    function, builder = _work_group(module, name, [pointer, pointer])
    out, source = function.args[:2]
    index = function.args[2]
    _sleep(module, builder, microseconds)
    value = builder.add(builder.load(builder.gep(source, [index])), ir.Constant(I32, 1))
    builder.store(value, builder.gep(out, [index]))
    builder.ret_void()
    emit_grid_entry(module, function, (groups, 1, 1))


def vector(name: str, dtype: DType, shape: tuple[int, ...], direction: str = "in") -> Param:
    return Param(name, direction, dtype, shape)


def upload(device: LLVMDevice, values: np.ndarray) -> CpuBuffer:
    """A new buffer holding `values` (through map_discard / unmap)."""
    buffer = device.executor.allocate(values.nbytes)
    view = buffer.map_discard()
    view[:] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    buffer.unmap().wait()
    return buffer


def download(buffer: Buffer, dtype: type, deps: Sequence[Event] = ()) -> np.ndarray:
    """A copy of the buffer's contents as `dtype`, after `deps`."""
    view = buffer.map_current(deps)
    try:
        return view.view(dtype).copy()
    finally:
        buffer.unmap()


def slow_increment_library(
    device: LLVMDevice, groups: int, microseconds: int, name: str = "slow"
) -> LLVMLibrary:
    """A one-kernel library: `name(out, in)` with out[g] = in[g] + 1 after a sleep."""
    module = new_module(name)
    add_slow_increment(module, name, groups, microseconds)
    shape = (groups,)
    info = Info(
        name,
        Kind.ELEMENTWISE,
        (vector("out", DType.INT32, shape, "out"), vector("in", DType.INT32, shape)),
        (groups, 1, 1),
        body=Body(name),
    )
    return build(device, Program((info,)), module)
