"""Buffers of the OpenCL device (design 6.5): maps (read-only, writable, discard,
nested, zero-copy on host-unified devices), arenas of sub-buffers, copies (offsets, overlap
inside one allocation, empty), zero fills of any size, zero-byte buffers, and the checks on
the buffers a kernel is given."""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl
import pytest

import hal
from hal.events import SettableEvent
from hal_llvm.memory import CpuBuffer
from hal_opencl.events import OpenCLEvent
from semtree.kernel import Direction, KernelInfo, KernelKind, KernelParam
from semtree.types import DType
from tests.opencl.harness import download, kernel_list, upload


def test_maps(device: hal.Device) -> None:
    buffer = upload(device, np.arange(16, dtype=np.uint8))
    view = buffer.map_current()
    assert not view.flags.writeable and view.tolist() == list(range(16))
    with pytest.raises(ValueError, match="WRITEABLE"):
        view.flags.writeable = True  # read-only for good, not just flagged (issue 10)
    inner = buffer.map_current(writable=True)  # maps nest
    inner[:4] = 99
    buffer.unmap().wait()
    buffer.unmap().wait()
    assert download(buffer, np.uint8)[:5].tolist() == [99, 99, 99, 99, 4]
    with pytest.raises(hal.HalError, match="not mapped"):
        buffer.unmap()
    discard = buffer.map_discard()
    assert discard.size == 16 and discard.flags.writeable
    discard[:] = 7
    buffer.unmap().wait()
    assert download(buffer, np.uint8).tolist() == [7] * 16


def test_zero_copy_on_host_unified_memory(device: hal.Device) -> None:
    if not device.capabilities.host_unified_memory:  # type: ignore[attr-defined]
        pytest.skip("a discrete device copies on map")
    buffer = device.executor.allocate(64)
    first = buffer.map_discard().ctypes.data
    buffer.unmap().wait()
    second = buffer.map_current().ctypes.data
    buffer.unmap().wait()
    assert first == second


def test_arena_buffers(device: hal.Device) -> None:
    executor = device.executor
    alignment = executor.buffer_alignment
    assert alignment >= 64 and alignment % 64 == 0
    arena = executor.make_arena(4 * alignment)
    assert arena.alignment == alignment
    parts = [arena.make_buffer(index * alignment, alignment) for index in range(4)]
    for index, part in enumerate(parts):
        view = part.map_discard()
        view[:] = index + 1
        part.unmap().wait()
    whole = arena.make_buffer(0, 4 * alignment)
    assert download(whole, np.uint8)[::alignment].tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="multiple"):
        arena.make_buffer(alignment // 2, 8)
    with pytest.raises(ValueError, match="fit"):
        arena.make_buffer(3 * alignment, 2 * alignment)
    assert arena.make_buffer(alignment, 0).size == 0


def test_copies(device: hal.Device) -> None:
    executor = device.executor
    source = upload(device, np.arange(32, dtype=np.int32))
    target = upload(device, np.zeros(32, np.int32))
    copied = executor.copy(source, 8, target, 16, 12)
    assert download(target, np.int32, [copied])[3:8].tolist() == [0, 2, 3, 4, 0]
    # Overlapping ranges of one buffer (memmove semantics, through a temporary).
    shifted = executor.copy(source, 0, source, 4, 64)
    assert download(source, np.int32, [shifted])[:18].tolist() == [0, *range(16), 17]
    empty = executor.copy(source, 0, target, 0, 0)
    empty.wait(timeout=30)
    with pytest.raises(ValueError, match="leaves"):
        executor.copy(source, 120, target, 0, 16)
    with pytest.raises(TypeError):
        executor.copy(CpuBuffer(device, np.zeros(4, np.uint8)), 0, target, 0, 4)


def test_overlapping_copy_between_arena_parts(device: hal.Device) -> None:
    alignment = device.executor.buffer_alignment
    arena = device.executor.make_arena(3 * alignment)
    low = arena.make_buffer(0, 2 * alignment)
    high = arena.make_buffer(alignment, 2 * alignment)
    view = low.map_discard()
    view[:] = np.arange(2 * alignment) % 251
    low.unmap().wait()
    event = device.executor.copy(low, 0, high, 0, 2 * alignment)  # the ranges overlap
    np.testing.assert_array_equal(download(high, np.uint8, [event]), np.arange(2 * alignment) % 251)


@pytest.mark.parametrize("size", [0, 1, 3, 4, 1000, 4099])
def test_zero_fills(device: hal.Device, size: int) -> None:
    buffer = upload(device, np.full(size, 0xEE, np.uint8))
    event = device.executor.fill_zero(buffer)
    assert download(buffer, np.uint8, [event]).tolist() == [0] * size


def test_zero_byte_buffer(device: hal.Device) -> None:
    buffer = device.executor.allocate(0)
    assert buffer.size == 0 and buffer.map_current().size == 0
    buffer.unmap().wait()


def test_zero_and_copy_kernels_touch_only_their_tensors(device: hal.Device) -> None:
    """A ZERO or COPY kernel on a buffer larger than its tensor leaves the rest alone."""
    shape = (3,)
    zero = KernelInfo(
        "zero_t",
        KernelKind.ZERO,
        (KernelParam("T", Direction.OUT, DType.INT32, shape),),
        (1, 1, 1),
        (0, 0, 0),
        None,
        0,
        12,
    )
    copy = KernelInfo(
        "copy_u",
        KernelKind.COPY,
        (
            KernelParam("U", Direction.OUT, DType.INT32, shape),
            KernelParam("T", Direction.IN, DType.INT32, shape),
        ),
        (1, 1, 1),
        (0, 0, 0),
        None,
        0,
        24,
    )
    program = kernel_list(zero, copy)
    library = device.compiler.build(program, device)
    assert "fill" in library.source(0) and "copy" in library.source(1)
    t, u = upload(device, np.full(5, 7, np.int32)), upload(device, np.full(5, 9, np.int32))
    zeroed = device.executor.prepare(library, 0).run([t])
    copied = device.executor.prepare(library, 1).run([u, t], [zeroed])
    assert download(u, np.int32, [copied]).tolist() == [0, 0, 0, 9, 9]
    assert download(t, np.int32).tolist() == [0, 0, 0, 7, 7]
    with pytest.raises(ValueError, match="needs 12 bytes"):
        device.executor.prepare(library, 0).run([device.executor.allocate(8)])
    with pytest.raises(ValueError, match="takes 2 buffers"):
        device.executor.prepare(library, 1).run([u])


def test_allocation_beyond_the_device_limit(device: hal.Device) -> None:
    limit = device.capabilities.max_allocation  # type: ignore[attr-defined]
    for size in (limit + 1, 2**62):  # refused before the driver is asked (PoCL overcommits)
        with pytest.raises(hal.OutOfMemoryError, match=f"cannot allocate {size} bytes") as caught:
            device.executor.allocate(size)
        assert caught.value.size == size and caught.value.device == device.id
        with pytest.raises(hal.OutOfMemoryError):
            device.executor.make_arena(size)


def _driver_error(code: int) -> cl.Error:
    return cl.MemoryError(cl._cl._ErrorRecord("clCreateBuffer", code, "refused"))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "code",
    [
        cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
        cl.status_code.OUT_OF_RESOURCES,
        cl.status_code.OUT_OF_HOST_MEMORY,
        cl.status_code.INVALID_BUFFER_SIZE,
    ],
)
def test_driver_refusals_are_out_of_memory(
    device: hal.Device, code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise _driver_error(code)

    buffer = upload(device, np.arange(8, dtype=np.uint8))
    monkeypatch.setattr(cl, "Buffer", refuse)
    with pytest.raises(hal.OutOfMemoryError, match="cannot allocate 64 bytes") as caught:
        device.executor.allocate(64)
    assert isinstance(caught.value.__cause__, cl.Error)
    monkeypatch.setattr(cl, "enqueue_map_buffer", refuse)
    with pytest.raises(hal.OutOfMemoryError, match="cannot allocate 8 bytes"):
        buffer.map_current()
    assert not buffer.is_mapped  # a refused map is no map


def test_other_driver_errors_pass_unchanged(
    device: hal.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise _driver_error(cl.status_code.INVALID_CONTEXT)

    monkeypatch.setattr(cl, "Buffer", refuse)
    with pytest.raises(cl.Error, match="INVALID_CONTEXT"):
        device.executor.allocate(64)


def test_reads_and_maps_after_commands_of_the_queue(device: hal.Device) -> None:
    """A read or map puts the commands of its own queue it depends on in its wait list
    (no host wait between them) and waits for anything else on the host first."""
    executor = device.executor
    source = upload(device, np.arange(64, dtype=np.uint8))
    target = executor.allocate(64)
    copied = executor.copy(source, 0, target, 0, 64)
    assert isinstance(copied, OpenCLEvent) and copied.queue is target.queue  # type: ignore[attr-defined]
    assert target.read(64, [copied]).tolist() == list(range(64))
    assert target.read(5).tolist() == list(range(5))  # the first bytes only
    gate = SettableEvent("gate")
    again = executor.copy(source, 0, target, 0, 64, [gate])  # deferred: not yet a command
    threading.Timer(0.05, gate.set_result).start()
    view = target.map_current([again])
    assert view.tolist() == list(range(64))
    target.unmap().wait()
    failed = SettableEvent("failed")
    failed.set_exception(hal.HalError("upstream"))
    with pytest.raises(hal.HalError, match="upstream"):
        target.read(64, [failed])
    empty = executor.allocate(0)
    assert empty.read(0, [executor.copy(source, 0, empty, 0, 0)]).size == 0


def test_a_failed_command_of_the_queue_fails_the_read_and_the_map(
    device: hal.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = upload(device, np.arange(16, dtype=np.uint8))
    target = device.executor.allocate(16)
    copied = device.executor.copy(source, 0, target, 0, 16)
    copied.wait()
    # As if the driver had reported the copy failed (status < 0): the map or read that
    # listed it raises, and leaves nothing mapped.
    monkeypatch.setattr(OpenCLEvent, "_status", lambda self: -5)
    with pytest.raises(hal.ExecutionError, match="status -5"):
        target.read(16, [copied])
    with pytest.raises(hal.ExecutionError, match="status -5"):
        target.map_current([copied])
    monkeypatch.undo()
    assert not target.is_mapped  # type: ignore[attr-defined]
    assert download(target, np.uint8).tolist() == list(range(16))
