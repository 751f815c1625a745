"""Event-dependency scheduling on llvm_cpu: ordering, failure propagation, callbacks,
timeouts, buffer lifetimes and the use of every core (ARCHITECTURE.md 5.5, 7.4).

Ordering tests hold a launch back with a gate (a SettableEvent the test completes later),
so they assert on what can and cannot have happened, never on timing."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

from hal.errors import DependencyFailed, ExecutionError, HalError
from hal.events import SettableEvent, wait_all
from hal_llvm.host import usable_cores
from semtree.types import DType
from tests.hal.kernels import (
    Body,
    Info,
    Kind,
    Program,
    add_thread_recorder,
    build,
    download,
    make_device,
    new_module,
    slow_increment_library,
    upload,
    vector,
)

GROUPS = 4


@pytest.fixture(scope="module")
def increment(cpu_device):
    """out[g] = in[g] + 1 over four int32s, sleeping 1 ms per work-group."""
    return cpu_device.executor.prepare(slow_increment_library(cpu_device, GROUPS, 1000), 0)


def _ints(device, value: int):
    return upload(device, np.full(GROUPS, value, np.int32))


def test_read_after_write_waits_for_the_writer(cpu_device, increment) -> None:
    source, middle, result = _ints(cpu_device, 0), _ints(cpu_device, -1), _ints(cpu_device, -1)
    gate = SettableEvent("gate")
    write = increment.run([middle, source], [gate])
    read = increment.run([result, middle], [write])
    assert not write.is_complete and not read.is_complete
    # The writer has not started, so what the host writes now is what it will read.
    view = source.map_current(writable=True)
    view.view(np.int32)[:] = 10
    source.unmap()
    gate.set_result()
    assert download(result, np.int32, [read]).tolist() == [12] * GROUPS
    assert download(middle, np.int32).tolist() == [11] * GROUPS


def test_write_after_read_across_two_devices(cpu_device, increment) -> None:
    other = make_device()
    try:
        overwrite = other.executor.prepare(slow_increment_library(other, GROUPS, 0), 0)
        shared, copy, fresh = _ints(cpu_device, 5), _ints(cpu_device, -1), _ints(other, 100)
        gate = SettableEvent("gate")
        read = increment.run([copy, shared], [gate])  # reads `shared` once the gate opens
        write = overwrite.run([shared, fresh], [read])  # must not overwrite it before
        with pytest.raises(TimeoutError):
            write.wait(timeout=0.05)
        assert download(shared, np.int32).tolist() == [5] * GROUPS
        gate.set_result()
        write.wait(timeout=10)
        assert download(copy, np.int32, [read]).tolist() == [6] * GROUPS
        assert download(shared, np.int32).tolist() == [101] * GROUPS
    finally:
        other.close()


def test_a_chain_of_dependent_launches(cpu_device, increment) -> None:
    buffers = [_ints(cpu_device, 0), _ints(cpu_device, 0)]
    event = None
    for step in range(8):
        target, source = buffers[(step + 1) % 2], buffers[step % 2]
        event = increment.run([target, source], [] if event is None else [event])
    assert download(buffers[0], np.int32, [event]).tolist() == [8] * GROUPS


def test_a_failure_reaches_every_dependent(cpu_device, increment) -> None:
    first, second = _ints(cpu_device, 0), _ints(cpu_device, 0)
    gate = SettableEvent("upload")
    failed = increment.run([first, first], [gate])
    dependent = increment.run([second, first], [failed])
    copy = cpu_device.executor.copy(first, 0, second, 0, 4, [dependent])
    cause = RuntimeError("the upload broke")
    gate.set_exception(cause)
    with pytest.raises(DependencyFailed) as caught:
        copy.wait(timeout=10)
    assert caught.value.root_cause is cause
    assert isinstance(dependent.exception(), DependencyFailed)
    assert dependent.exception().cause is failed.exception()
    assert "kernel slow did not run" in str(dependent.exception())
    with pytest.raises(DependencyFailed):
        second.map_current([dependent])
    # Nothing ran, and the queue keeps working for independent work.
    assert download(second, np.int32).tolist() == [0] * GROUPS
    assert download(first, np.int32, [increment.run([first, first])]).tolist() == [1] * GROUPS


def test_an_exception_inside_a_slice_fails_the_launch(cpu_device) -> None:
    runtime = cpu_device.runtime

    def entry(params: int, begin: int, end: int) -> None:
        if begin <= 5 < end:
            raise MemoryError(f"slice [{begin}, {end}) broke")

    broken = runtime.launch(entry, 0, 40, label="kernel broken")
    after = runtime.submit(lambda: None, [broken], label="after")
    with pytest.raises(DependencyFailed) as caught:
        after.wait(timeout=10)
    error = broken.exception()
    assert isinstance(error, ExecutionError) and isinstance(error.__cause__, MemoryError)
    assert caught.value.cause is error
    assert "kernel broken failed" in str(error)
    # A HalError from a job is passed on as it is.
    refused = runtime.submit(lambda: (_ for _ in ()).throw(HalError("refused")))
    with pytest.raises(HalError, match="refused"):
        refused.wait(timeout=10)


def test_callbacks_timeouts_and_profiling(cpu_device, increment) -> None:
    source, target = _ints(cpu_device, 1), _ints(cpu_device, 0)
    gate = SettableEvent("gate")
    event = increment.run([target, source], [gate], profile=True)
    seen: list[object] = []
    event.add_done_callback(seen.append)
    with pytest.raises(TimeoutError):
        event.wait(timeout=0.02)
    assert seen == [] and event.duration_ns() is None
    gate.set_result()
    event.wait(timeout=10)
    assert seen == [event]
    duration = event.duration_ns()
    assert duration is not None and duration > 0
    assert increment.run([target, source]).duration_ns() is None  # not profiled
    event.add_done_callback(seen.append)
    assert seen == [event, event]


def test_the_queue_runs_jobs_in_submission_order(cpu_device) -> None:
    order: list[int] = []
    events = [
        cpu_device.runtime.submit(lambda number=number: order.append(number))
        for number in range(50)
    ]
    wait_all(events, timeout=10)
    assert order == list(range(50))


def test_submission_from_several_threads(cpu_device) -> None:
    executor = cpu_device.executor
    events = []
    lock = threading.Lock()

    def submit_chain() -> None:
        source, target = _ints(cpu_device, 3), _ints(cpu_device, 0)
        last = None
        for _ in range(30):
            last = executor.copy(source, 0, target, 0, 16, [] if last is None else [last])
        with lock:
            events.append((last, target))

    threads = [threading.Thread(target=submit_chain) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for event, target in events:
        assert download(target, np.int32, [event]).tolist() == [3] * GROUPS


def test_buffers_live_until_their_launch_completes(cpu_device, increment) -> None:
    source, target = _ints(cpu_device, 41), _ints(cpu_device, 0)
    gate = SettableEvent("gate")
    event = increment.run([target, source], [gate])
    watch = weakref.ref(source)
    del source
    gc.collect()
    assert watch() is not None  # the queued launch holds it
    gate.set_result()
    assert download(target, np.int32, [event]).tolist() == [42] * GROUPS
    gc.collect()
    assert watch() is None  # and lets go once complete


@pytest.mark.skipif(usable_cores() < 2, reason="needs at least two usable cores")
def test_a_large_launch_runs_on_several_threads() -> None:
    device = make_device(split_seconds=0.0)
    try:
        groups = 16
        module = new_module("who")
        add_thread_recorder(module, "who", groups, microseconds=5000)
        info = Info(
            "who",
            Kind.ELEMENTWISE,
            (vector("ids", DType.INT64, (groups,), "out"),),
            (groups, 1, 1),
            body=Body("who"),
        )
        kernel = device.executor.prepare(build(device, Program((info,)), module), 0)
        ids = upload(device, np.zeros(groups, np.int64))
        native = download(ids, np.int64, [kernel.run([ids])])
        assert np.all(native != 0)
        assert len(set(native.tolist())) >= 2  # slices claimed in the native loop (slices.py)
        assert device.runtime.runner is not None

        # The same from Python: which named threads ran slices.
        names: set[str] = set()

        def entry(params: int, begin: int, end: int) -> None:
            names.add(threading.current_thread().name)
            time.sleep(0.005)  # releases the GIL, like a native call

        device.runtime.launch(entry, 0, groups).wait(timeout=10)
        assert "llvm_cpu.0 scheduler" in names and "llvm_cpu.0 worker 1" in names
    finally:
        device.close()


def test_small_launches_are_not_split(cpu_device) -> None:
    runtime = cpu_device.runtime
    assert not runtime.should_split(1, 10**12, 10**12)
    assert not runtime.should_split(1000, 1000, 1000)  # far below the threshold
    assert runtime.should_split(1000, 10**9, 0) is (runtime.threads > 1)


def _recorder(names: list[str], seconds: float = 0.0):
    def record(params: int, begin: int, end: int) -> None:
        names.append(threading.current_thread().name)
        if seconds:
            time.sleep(seconds)  # releases the GIL, like a native call

    return record


def test_a_short_ready_launch_on_an_idle_queue_runs_on_the_caller(cpu_device) -> None:
    runtime, names = cpu_device.runtime, []
    assert runtime.may_inline(10**6, 10**6) and not runtime.may_inline(10**12, 0)
    event = runtime.launch(_recorder(names), 0, 64, split=False, inline=True)
    assert event.is_complete and names == [threading.current_thread().name]
    names.clear()
    # Slices that take a while: on a loaded machine a helper could otherwise claim them all
    # before the caller claims its first.
    split = runtime.launch(_recorder(names, 0.002), 0, 64, split=True, inline=True)
    assert split.is_complete and threading.current_thread().name in names  # takes part
    names.clear()
    runtime.launch(_recorder(names), 0, 64, split=False).wait(timeout=10)  # not short
    assert names == ["llvm_cpu.0 scheduler"]


def test_inline_launches_keep_submission_order(cpu_device) -> None:
    """A launch behind a queued one, or behind an incomplete event, goes to the scheduler."""
    runtime, names, order = cpu_device.runtime, [], []
    gate = SettableEvent("gate")
    held = runtime.submit(lambda: order.append("held"), [gate])
    after = runtime.launch(
        lambda params, begin, end: order.append("after"), 0, 1, split=False, inline=True
    )
    waiting = runtime.launch(_recorder(names), 0, 1, [gate], split=False, inline=True)
    assert not after.is_complete and not waiting.is_complete and order == []
    gate.set_result()
    wait_all([held, after, waiting], timeout=10)
    assert order == ["held", "after"] and names == ["llvm_cpu.0 scheduler"]


def test_an_inline_failure_fails_its_event_not_the_caller(cpu_device) -> None:
    def broken(params: int, begin: int, end: int) -> None:
        raise ValueError("broken kernel")

    event = cpu_device.runtime.launch(broken, 0, 1, split=False, inline=True)
    assert event.is_complete
    with pytest.raises(ExecutionError, match="broken kernel"):
        event.wait(timeout=10)


def test_an_inline_launch_reports_its_duration_and_a_failed_dependency(cpu_device) -> None:
    runtime, names = cpu_device.runtime, []
    timed = runtime.launch(_recorder(names), 0, 1, split=False, inline=True, profile=True)
    untimed = runtime.launch(_recorder(names), 0, 1, split=False, inline=True)
    assert timed.is_complete and untimed.is_complete and len(names) == 2
    duration = timed.duration_ns()
    assert duration is not None and duration > 0 and untimed.duration_ns() is None
    failed = SettableEvent("failed")
    failed.set_exception(HalError("upstream"))
    skipped = runtime.launch(_recorder(names), 0, 1, [failed], split=False, inline=True)
    assert skipped.is_complete and len(names) == 2  # complete, and never ran
    with pytest.raises(DependencyFailed) as caught:
        skipped.wait(timeout=10)
    assert caught.value.cause is failed.exception()
    seen: list[object] = []
    skipped.add_done_callback(seen.append)
    assert seen == [skipped]


def test_close_drains_the_queue_and_refuses_new_work() -> None:
    device = make_device()
    increment = device.executor.prepare(slow_increment_library(device, GROUPS, 500), 0)
    buffer = _ints(device, 0)
    events = [increment.run([buffer, buffer]) for _ in range(5)]
    device.close()
    assert all(event.is_complete for event in events)
    assert download(buffer, np.int32).tolist() == [5] * GROUPS
    with pytest.raises(HalError, match="closed"):
        increment.run([buffer, buffer])
    device.close()  # idempotent
