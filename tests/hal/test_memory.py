"""CpuBuffer and CpuArena: alignment, zero-copy maps, copies and fills (ARCHITECTURE.md 7.5)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from hal.errors import HalError
from hal.events import FailedEvent, SettableEvent
from tests.hal.kernels import download, upload


def allocate(executor: object, size: int, way: str) -> object:
    """A buffer by `executor.allocate(size)`, or by the function `executor.allocator(size)`
    returns (what a cached call's outputs use)."""
    return executor.allocate(size) if way == "allocate" else executor.allocator(size)()


WAYS = ["allocate", "allocator"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("size", [0, 1, 63, 64, 511, 512, 513, 1000, 4096])
def test_buffers_are_64_byte_aligned(cpu_device, size: int, way: str) -> None:
    buffer = allocate(cpu_device.executor, size, way)
    assert buffer.size == buffer.storage.size == size
    assert buffer.address % 64 == 0
    assert cpu_device.executor.buffer_alignment == 64
    assert buffer.device is cpu_device
    assert not buffer.is_mapped


def test_an_allocators_small_buffer_makes_its_view_when_asked(cpu_device) -> None:
    buffer = cpu_device.executor.allocator(100)()
    assert "storage" not in vars(buffer)  # a cached call's output: kernels use the address
    buffer.storage[:] = 7
    assert "storage" in vars(buffer) and buffer.storage.ctypes.data == buffer.address
    assert buffer.read(100).tolist() == [7] * 100
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        buffer.missing  # noqa: B018 (the lookup is the test)


@pytest.mark.parametrize("way", WAYS)
def test_small_buffers_share_slabs_without_overlapping(cpu_device, way: str) -> None:
    """Buffers of at most SMALL_BYTES are cut from shared slabs (a cached call's outputs): each
    on its own cache lines, apart from every other, and alive after its neighbours die."""
    from hal_llvm.memory import SLAB_BYTES, SMALL_BYTES

    sizes = [1, 3, 63, 64, 65, 127, SMALL_BYTES - 1, SMALL_BYTES] * (4 * SLAB_BYTES // SMALL_BYTES)
    buffers = [allocate(cpu_device.executor, size, way) for size in sizes]  # several slabs
    lines = set()
    for number, buffer in enumerate(buffers):
        assert buffer.size == buffer.storage.size == sizes[number]
        assert buffer.address % 64 == 0
        assert buffer.address == buffer.storage.ctypes.data  # the address is the bytes'
        first = buffer.address // 64
        own = set(range(first, first + -(-buffer.size // 64)))
        assert not own & lines  # no cache line of another buffer
        lines |= own
        buffer.storage[:] = number % 251
    survivors = buffers[::7]
    del buffers
    for size in sizes:  # new buffers while the dead ones' slabs may go
        allocate(cpu_device.executor, size, way).storage[:] = 255
    for number, buffer in zip(range(0, len(sizes), 7), survivors, strict=True):
        assert (buffer.storage == number % 251).all()


def test_a_forked_child_allocates_small_buffers_while_a_parent_thread_held_the_slabs(
    cpu_device,
) -> None:
    from hal_llvm import memory

    memory._slabs._lock.acquire()  # as a thread of the parent allocating at the fork
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 once a small buffer is allocated and written
            buffer = cpu_device.executor.allocate(8)
            buffer.storage[:] = 7
            os._exit(0 if (buffer.storage == 7).all() else 1)
    finally:
        memory._slabs._lock.release()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the child hung allocating a small buffer")


def test_map_round_trip(cpu_device) -> None:
    values = np.arange(100, dtype=np.float32)
    buffer = upload(cpu_device, values)
    np.testing.assert_array_equal(download(buffer, np.float32), values)
    view = buffer.map_current(writable=True)
    view.view(np.float32)[:3] = (7, 8, 9)
    buffer.unmap().wait()
    assert download(buffer, np.float32)[:4].tolist() == [7, 8, 9, 3]


def test_read_only_map_cannot_be_written(cpu_device) -> None:
    buffer = upload(cpu_device, np.ones(4, np.int32))
    view = buffer.map_current()
    assert view.dtype == np.uint8 and view.shape == (16,)
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 3
    buffer.unmap()


def test_map_discard_gives_a_writable_view_that_the_device_sees(cpu_device) -> None:
    buffer = cpu_device.executor.allocate(16)
    view = buffer.map_discard()
    assert view.flags.writeable and view.size == 16
    view[:] = 5
    event = buffer.unmap()
    assert event.is_complete
    target = cpu_device.executor.allocate(16)
    copied = cpu_device.executor.copy(buffer, 0, target, 0, 16, [event])
    assert download(target, np.uint8, [copied]).tolist() == [5] * 16


def test_maps_nest_and_unmap_without_map_fails(cpu_device) -> None:
    buffer = cpu_device.executor.allocate(8)
    with pytest.raises(HalError, match="not mapped"):
        buffer.unmap()
    buffer.map_current()
    buffer.map_current()
    assert buffer.is_mapped
    buffer.unmap()
    buffer.unmap()
    assert not buffer.is_mapped


def test_map_waits_for_its_dependencies(cpu_device) -> None:
    buffer = cpu_device.executor.allocate(4)
    gate = SettableEvent("gate")
    fill = cpu_device.executor.fill_zero(buffer, [gate])
    view = buffer.map_discard()
    view[:] = 9
    buffer.unmap()
    gate.set_result()
    assert download(buffer, np.uint8, [fill]).tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="poisoned"):
        buffer.map_current([FailedEvent(ValueError("poisoned"))])
    assert not buffer.is_mapped


def test_copy_and_fill_with_offsets(cpu_device) -> None:
    executor = cpu_device.executor
    source = upload(cpu_device, np.arange(16, dtype=np.uint8))
    target = upload(cpu_device, np.full(16, 255, np.uint8))
    first = executor.copy(source, 4, target, 8, 6)
    assert download(target, np.uint8, [first]).tolist() == [255] * 8 + list(range(4, 10)) + [
        255,
        255,
    ]
    cleared = executor.fill_zero(target, [first])
    assert download(target, np.uint8, [cleared]).tolist() == [0] * 16


def test_copy_outside_a_buffer_is_refused_at_submission(cpu_device) -> None:
    executor = cpu_device.executor
    source, target = executor.allocate(8), executor.allocate(8)
    with pytest.raises(ValueError, match="leaves a buffer"):
        executor.copy(source, 4, target, 0, 8)
    with pytest.raises(ValueError, match="leaves a buffer"):
        executor.copy(source, 0, target, -1, 2)
    with pytest.raises(TypeError, match="llvm_cpu"):
        executor.fill_zero(np.zeros(3))  # type: ignore[arg-type]


def test_arena_buffers_share_memory_at_aligned_offsets(cpu_device) -> None:
    arena = cpu_device.executor.make_arena(256)
    assert arena.size == 256 and arena.alignment == 64
    whole = arena.make_buffer(0, 256)
    part = arena.make_buffer(128, 64)
    assert part.address == whole.address + 128 and part.address % 64 == 0
    view = part.map_discard()
    view[:] = 3
    part.unmap()
    assert download(whole, np.uint8)[128:192].tolist() == [3] * 64
    with pytest.raises(ValueError, match="multiple of 64"):
        arena.make_buffer(8, 8)
    with pytest.raises(ValueError, match="do not fit"):
        arena.make_buffer(192, 128)
