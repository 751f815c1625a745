"""Events on the OpenCL device (design 5.5, 6.4): kernels ordered by events only, read
after write and write after read, commands deferred behind foreign events (a `SettableEvent`,
an `llvm_cpu` event), failures that skip dependants with `DependencyFailed`, timeouts, done
callbacks, and durations when the queue profiles (`TILE_PROFILE=1`)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import hal
from hal.events import SettableEvent
from hal_opencl.device import OpenCLDevice
from hal_opencl.events import OpenCLEvent
from semtree import builder as sb
from semtree.types import DType, Type
from tests.opencl.harness import download, kernel, kernel_list, upload

if TYPE_CHECKING:
    from collections.abc import Callable

N = 256


@pytest.fixture(scope="module")
def increment(device: hal.Device) -> hal.Kernel:
    """out[i] = in[i] + 1 (int32) with a little work per item, prepared once."""
    i, out, source = sb.global_id(0), sb.var("out"), sb.var("in")
    function = sb.function(
        "increment",
        [("out", Type.ptr(DType.INT32)), ("in", Type.ptr(DType.INT32, const=True))],
        sb.assign(out[i], source[i] + 1),
    )
    program = kernel_list(kernel(function, N, (N,)))
    return device.executor.prepare(device.compiler.build(program, device), 0)


def ints(device: hal.Device, value: int) -> hal.Buffer:
    return upload(device, np.full(N, value, np.int32))


def test_read_after_write_chain(device: hal.Device, increment: hal.Kernel) -> None:
    """Twenty launches ping-ponging between two buffers, each waiting for the previous."""
    first, second = ints(device, 0), ints(device, -1)
    event: hal.Event | None = None
    for step in range(20):
        source, target = (first, second) if step % 2 == 0 else (second, first)
        event = increment.run([target, source], [event] if event else [])
    assert event is not None
    assert download(first, np.int32, [event]).tolist() == [20] * N


def test_write_after_read(device: hal.Device, increment: hal.Kernel) -> None:
    """A fill of the input waits for the kernel still reading it."""
    source, target = ints(device, 41), ints(device, 0)
    gate = SettableEvent("gate")
    read = increment.run([target, source], [gate])
    cleared = device.executor.fill_zero(source, [read])
    assert not read.is_complete and not cleared.is_complete
    gate.set_result()
    assert download(target, np.int32, [read]).tolist() == [42] * N
    assert download(source, np.int32, [cleared]).tolist() == [0] * N


def test_deferred_command_does_not_block_later_ones(
    device: hal.Device, increment: hal.Kernel
) -> None:
    """A command held back by a foreign event leaves the queue free for independent work."""
    gate = SettableEvent("gate")
    held = increment.run([ints(device, 0), ints(device, 1)], [gate])
    free_target = ints(device, 0)
    free = increment.run([free_target, ints(device, 5)])
    free.wait(timeout=30)
    assert download(free_target, np.int32, [free])[0] == 6
    assert not held.is_complete
    with pytest.raises(TimeoutError):
        held.wait(timeout=0.05)
    gate.set_result()
    held.wait(timeout=30)


def test_llvm_event_as_dependency(device: hal.Device, increment: hal.Kernel) -> None:
    cpu = hal.get_driver("llvm").default_device()
    started = threading.Event()

    def slow() -> None:
        started.set()
        time.sleep(0.05)

    foreign = cpu.executor.runtime.submit(slow, label="slow host job")  # type: ignore[attr-defined]
    target = ints(device, 0)
    event = increment.run([target, ints(device, 9)], [foreign])
    assert download(target, np.int32, [event])[0] == 10
    assert started.is_set() and foreign.is_complete


def test_failure_skips_dependants(device: hal.Device, increment: hal.Kernel) -> None:
    target, later = ints(device, 3), ints(device, 4)
    gate = SettableEvent("gate")
    first = increment.run([target, ints(device, 100)], [gate])
    second = increment.run([later, target], [first])  # depends on a deferred command
    cause = RuntimeError("the producer failed")
    gate.set_exception(cause)
    for event in (first, second):
        with pytest.raises(hal.DependencyFailed) as caught:
            event.wait(timeout=30)
        assert caught.value.root_cause is cause
        assert event.is_complete and isinstance(event.exception(), hal.DependencyFailed)
    assert download(target, np.int32).tolist() == [3] * N  # neither kernel ran
    assert download(later, np.int32).tolist() == [4] * N
    # A dependency known to have failed at submission skips the command as well.
    third = increment.run([later, target], [second])
    with pytest.raises(hal.DependencyFailed):
        third.wait(timeout=30)
    with pytest.raises(hal.DependencyFailed):
        download(target, np.int32, [first])  # a map after a failed writer raises its failure


def test_done_callbacks(device: hal.Device, increment: hal.Kernel) -> None:
    seen: list[tuple[str, bool]] = []
    done = threading.Event()

    def note(label: str) -> Callable[[hal.Event], None]:
        def callback(event: hal.Event) -> None:
            seen.append((label, event.is_complete))
            if len(seen) == 3:
                done.set()

        return callback

    gate = SettableEvent("gate")
    ran = increment.run([ints(device, 0), ints(device, 1)], [gate])
    ran.add_done_callback(note("ran"))
    failing = SettableEvent("failing")
    skipped = increment.run([ints(device, 0), ints(device, 1)], [failing])
    skipped.add_done_callback(note("skipped"))
    gate.set_result()
    failing.set_exception(ValueError("no"))
    ran.wait(timeout=30)
    ran.add_done_callback(note("late"))  # already complete: runs at once
    assert done.wait(timeout=30)
    assert sorted(seen) == [("late", True), ("ran", True), ("skipped", True)]


def test_durations_with_profiling(device: hal.Device, increment: hal.Kernel) -> None:
    assert isinstance(increment.run([ints(device, 0), ints(device, 1)]), OpenCLEvent)
    profiled = OpenCLDevice(98, device.cl_device, profiling=True)  # type: ignore[attr-defined]
    try:
        program = increment.library.kernel_list  # type: ignore[attr-defined]
        library = profiled.compiler.build(program, profiled)
        prepared = profiled.executor.prepare(library, 0)
        buffers = [upload(profiled, np.zeros(N, np.int32)) for _ in range(2)]
        event = prepared.run(buffers)
        event.wait()
        duration = event.duration_ns()
        assert duration is not None and 0 < duration < 10**10
        unprofiled = increment.run([ints(device, 0), ints(device, 1)])
        unprofiled.wait()
        assert unprofiled.duration_ns() is None or device.queue.profiling  # type: ignore[attr-defined]
    finally:
        profiled.close()


def test_profiling_follows_the_environment(
    device: hal.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILE_PROFILE", "1")
    fresh = OpenCLDevice(97, device.cl_device)  # type: ignore[attr-defined]
    try:
        assert fresh.queue.profiling
    finally:
        fresh.close()
    monkeypatch.setenv("TILE_PROFILE", "0")
    fresh = OpenCLDevice(96, device.cl_device)  # type: ignore[attr-defined]
    try:
        assert not fresh.queue.profiling
    finally:
        fresh.close()
