"""HAL contract tests (ARCHITECTURE.md 12) written against the abstract interface only, on
the registry's devices, so they can join the device-parametrised suite of tests/backends
unchanged. Kernels come from `semtree.kernel` ZERO/COPY infos when that module exists."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import hal
from hal.events import SettableEvent
from semtree.types import DType, TensorShape
from tests.shipped import require_opencl

BACKENDS = ["llvm", "opencl"]


@pytest.fixture(scope="module", params=BACKENDS)
def device(request: pytest.FixtureRequest) -> hal.Device:
    if request.param == "opencl":
        return require_opencl()  # a shipped backend: fails when missing (tests.shipped)
    return hal.get_driver(request.param).default_device()


def _put(device: hal.Device, values: np.ndarray) -> hal.Buffer:
    buffer = device.executor.allocate(values.nbytes)
    buffer.map_discard()[:] = values.view(np.uint8).reshape(-1)
    buffer.unmap().wait()
    return buffer


def _get(buffer: hal.Buffer, dtype: type, deps: list[hal.Event]) -> np.ndarray:
    try:
        return buffer.map_current(deps).view(dtype).copy()
    finally:
        buffer.unmap().wait()


def test_map_round_trip_and_alignment(device: hal.Device) -> None:
    values = np.linspace(0, 1, 37, dtype=np.float32)
    buffer = _put(device, values)
    assert buffer.size == values.nbytes and buffer.device is device
    np.testing.assert_array_equal(_get(buffer, np.float32, []), values)
    assert device.executor.buffer_alignment >= 64


def test_copy_after_fill_and_write_after_read(device: hal.Device) -> None:
    executor = device.executor
    source = _put(device, np.arange(8, dtype=np.int32))
    target = _put(device, np.full(8, -1, np.int32))
    gate = SettableEvent("gate")
    cleared = executor.fill_zero(target, [gate])
    read = executor.copy(target, 0, source, 0, 16, [cleared])  # reads target
    written = executor.copy(source, 16, target, 0, 16, [read])  # then overwrites it
    assert not written.is_complete
    gate.set_result()
    assert _get(source, np.int32, [read]).tolist() == [0, 0, 0, 0, 4, 5, 6, 7]
    assert _get(target, np.int32, [written]).tolist() == [4, 5, 6, 7, 0, 0, 0, 0]


def test_failure_propagates_through_dependencies(device: hal.Device) -> None:
    executor = device.executor
    buffer = _put(device, np.ones(4, np.int32))
    gate = SettableEvent("gate")
    first = executor.fill_zero(buffer, [gate])
    second = executor.copy(buffer, 0, buffer, 8, 8, [first])
    cause = ValueError("the producer failed")
    gate.set_exception(cause)
    with pytest.raises(hal.DependencyFailed) as caught:
        second.wait(timeout=10)
    assert caught.value.root_cause is cause
    assert _get(buffer, np.int32, []).tolist() == [1, 1, 1, 1]


def test_buffer_outlives_its_python_reference(device: hal.Device) -> None:
    source = _put(device, np.full(16, 7, np.uint8))
    target = device.executor.allocate(16)
    gate = SettableEvent("gate")
    copied = device.executor.copy(source, 0, target, 0, 16, [gate])
    watch = weakref.ref(source)
    del source
    gc.collect()
    gate.set_result()
    assert _get(target, np.uint8, [copied]).tolist() == [7] * 16
    gc.collect()
    assert watch() is None


def test_zero_and_copy_kernels_from_semtree(device: hal.Device) -> None:
    kernel = pytest.importorskip("semtree.kernel")
    shape = (5,)
    zero = kernel.KernelInfo(
        name="zero_t",
        kind=kernel.KernelKind.ZERO,
        params=(kernel.KernelParam("T", kernel.Direction.OUT, DType.FLOAT32, shape),),
        global_size=(1, 1, 1),
        local_size=(0, 0, 0),
        body=None,
        flops=0,
        bytes=20,
    )
    copy = kernel.KernelInfo(
        name="copy_u",
        kind=kernel.KernelKind.COPY,
        params=(
            kernel.KernelParam("U", kernel.Direction.OUT, DType.FLOAT32, shape),
            kernel.KernelParam("T", kernel.Direction.IN, DType.FLOAT32, shape),
        ),
        global_size=(1, 1, 1),
        local_size=(0, 0, 0),
        body=None,
        flops=0,
        bytes=40,
    )
    program = kernel.KernelList(
        kernels=(zero, copy),
        shapes={name: TensorShape(DType.FLOAT32, shape) for name in ("T", "U")},
        inputs=(),
        outputs=("U",),
        temporaries=("T",),
        var_rewrites={},
    )
    library = device.compiler.build(program, device)
    assert library.kernel_list is program and library.source(0)
    t = _put(device, np.full(5, 3, np.float32))
    u = _put(device, np.full(5, 9, np.float32))
    zeroed = device.executor.prepare(library, 0).run([t])
    copied = device.executor.prepare(library, 1).run([u, t], [zeroed])
    assert _get(u, np.float32, [copied]).tolist() == [0.0] * 5
