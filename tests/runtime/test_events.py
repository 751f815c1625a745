"""Event ordering between invocations, tensors and host maps, on the out-of-order fake device.

The fake device runs every operation as soon as the dependencies it was given complete, so
a missing dependency shows up as a wrong value, not only as a wrong dependency list. Tests
hold one kind of operation (`fake_hal.hold("neg")`) to keep it pending while others are
scheduled.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal.errors import DependencyFailed
from hal.errors import ExecutionError as HalExecutionError

if TYPE_CHECKING:
    from tests.runtime.fakes import FakeDevice

NEGATE = tile.Function("function (A) -> (O) { O = -A; }", "negate")
ADD_ONE = tile.Function("function (X) -> (Y) { Y = X + 1; }", "add_one")
TWO_STEPS = tile.Function("function (A, B) -> (O) { T = -A; O = T + B; }", "two_steps")
SETTLE = 0.1  # seconds an operation that may run is given to run


def values(*items: float) -> np.ndarray:
    return np.array(items, np.float32)


def blocked(thread: threading.Thread) -> bool:
    thread.join(SETTLE)
    return thread.is_alive()


def test_read_after_write_across_invocations(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("neg")
    a = tile.Tensor.from_numpy(values(1, 2, 3), fake)
    first = NEGATE(A=a)
    second = ADD_ONE(X=first["O"])
    (neg,), (add,) = fake_hal.jobs_of("neg"), fake_hal.jobs_of("add")
    assert neg.event in add.deps  # the reader waits for the writer
    time.sleep(SETTLE)
    assert not add.event.is_complete
    gate.set()
    np.testing.assert_array_equal(second["Y"].to_numpy(), [0, -1, -2])


def test_write_after_read_across_invocations(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("add")
    shared = tile.Tensor.from_numpy(values(1, 2), fake)
    reader = tile.Invoker(ADD_ONE, {"X": shared}).invoke()
    writer = tile.Invoker(NEGATE, {"A": tile.Tensor.from_numpy(values(5, 6), fake)})
    writer.set_output("O", shared)  # overwrites what the reader still has to read
    written = writer.invoke()
    time.sleep(SETTLE)
    assert not written.done()
    gate.set()
    np.testing.assert_array_equal(reader.outputs["Y"].to_numpy(), [2, 3])
    written.wait()
    np.testing.assert_array_equal(shared.to_numpy(), [-5, -6])


def test_write_after_write_keeps_the_last(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("neg")
    target = tile.Tensor(fake, (2,))
    tile.Invoker(NEGATE, {"A": values(1, 1)}, {"O": target}).invoke()
    last = tile.Invoker(ADD_ONE, {"X": values(1, 1)}, {"Y": target}).invoke()
    time.sleep(SETTLE)
    assert not last.done()
    gate.set()
    last.wait()
    np.testing.assert_array_equal(target.to_numpy(), [2, 2])


def test_temporaries_of_overlapping_runs_are_ordered(
    fake: tile.Device, fake_hal: FakeDevice
) -> None:
    gate = fake_hal.hold("add")  # the reader of the temporary T
    b = tile.Tensor.from_numpy(values(10, 10), fake)
    first = TWO_STEPS(A=values(1, 2), B=b)
    second = TWO_STEPS(A=values(3, 4), B=b)
    time.sleep(SETTLE)
    assert len([job for job in fake_hal.jobs_of("neg") if job.event.is_complete]) == 1
    gate.set()
    np.testing.assert_array_equal(first["O"].to_numpy(), [9, 8])
    np.testing.assert_array_equal(second["O"].to_numpy(), [7, 6])


def test_mmap_current_waits_for_the_writer(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("neg")
    out = NEGATE(device=fake, A=values(4))["O"]
    seen: list[np.ndarray] = []
    thread = threading.Thread(target=lambda: seen.append(out.to_numpy()))
    thread.start()
    assert blocked(thread)
    gate.set()
    thread.join(10)
    np.testing.assert_array_equal(seen[0], [-4])


def test_readers_do_not_wait_for_readers(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("add")
    shared = tile.Tensor.from_numpy(values(1), fake)
    ADD_ONE(X=shared)
    with shared.mmap_current() as view:  # returns at once although a kernel still reads
        assert view[0] == 1
    gate.set()


def test_mmap_discard_waits_for_readers(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("add")
    shared = tile.Tensor.from_numpy(values(1, 2), fake)
    result = ADD_ONE(X=shared)["Y"]

    def overwrite() -> None:
        with shared.mmap_discard() as view:
            view[...] = 7

    thread = threading.Thread(target=overwrite)
    thread.start()
    assert blocked(thread)
    gate.set()
    thread.join(10)
    np.testing.assert_array_equal(result.to_numpy(), [2, 3])
    np.testing.assert_array_equal(shared.to_numpy(), [7, 7])


def test_writable_map_waits_for_readers(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("add")
    shared = tile.Tensor.from_numpy(values(1), fake)
    result = ADD_ONE(X=shared)["Y"]

    def overwrite() -> None:
        with shared.mmap_current(writable=True) as view:
            view[...] = view + 5

    thread = threading.Thread(target=overwrite)
    thread.start()
    assert blocked(thread)
    gate.set()
    thread.join(10)
    np.testing.assert_array_equal(result.to_numpy(), [2])
    np.testing.assert_array_equal(shared.to_numpy(), [6])


def test_kernels_wait_for_host_maps(fake: tile.Device, fake_hal: FakeDevice) -> None:
    shared = tile.Tensor.from_numpy(values(1), fake)
    with shared.mmap_current() as view:
        run = tile.Invoker(NEGATE, {"A": values(3)}, {"O": shared}).invoke()
        time.sleep(SETTLE)
        assert not run.done() and view[0] == 1
    run.wait(10)
    with shared.mmap_discard() as view:
        reader = ADD_ONE(X=shared)
        time.sleep(SETTLE)
        assert not fake_hal.jobs_of("add")[0].event.is_complete
        view[...] = 4
    np.testing.assert_array_equal(reader["Y"].to_numpy(), [5])


def test_failure_reaches_the_waiter_of_a_dependent(fake: tile.Device, fake_hal: FakeDevice) -> None:
    fake_hal.failing["neg"] = RuntimeError("kernel exploded")
    failed = NEGATE(device=fake, A=values(1))
    dependent = tile.Invoker(ADD_ONE, {"X": failed["O"]}).invoke()
    with pytest.raises(tile.ExecutionError) as caught:
        dependent.wait(10)
    error = caught.value
    assert "kernel exploded" in str(error) and "add_one" in str(error)
    assert isinstance(error.__cause__, DependencyFailed)
    assert isinstance(error.root_cause, HalExecutionError)  # the kernel's own failure
    assert isinstance(error.root_cause.__cause__, RuntimeError)
    assert dependent.done()
    with pytest.raises(tile.ExecutionError, match="kernel exploded"):
        dependent.outputs["Y"].to_numpy()
    with pytest.raises(tile.ExecutionError, match="kernel exploded"):
        failed["O"].to_numpy()


def test_failure_poisons_later_writers_until_discarded(
    fake: tile.Device, fake_hal: FakeDevice
) -> None:
    fake_hal.failing["neg"] = RuntimeError("broken")
    target = NEGATE(device=fake, A=values(1))["O"]
    again = tile.Invoker(ADD_ONE, {"X": values(1)}, {"Y": target}).invoke()
    with pytest.raises(tile.ExecutionError, match="broken"):
        again.wait(10)
    with target.mmap_discard() as view:  # overwrites everything: the failure is gone
        view[...] = 3
    np.testing.assert_array_equal(target.to_numpy(), [3])


def test_a_failed_reader_does_not_poison_the_next_writer(
    fake: tile.Device, fake_hal: FakeDevice
) -> None:
    fake_hal.failing["add"] = RuntimeError("reader broke")
    shared = tile.Tensor.from_numpy(values(1), fake)
    reader = ADD_ONE(X=shared)
    writer = tile.Invoker(NEGATE, {"A": values(2)}, {"O": shared}).invoke()
    writer.wait(10)
    np.testing.assert_array_equal(shared.to_numpy(), [-2])
    with pytest.raises(tile.ExecutionError, match="reader broke"):
        reader["Y"].to_numpy()


def test_wait_with_timeout_and_done(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("neg")
    run = tile.Invoker(NEGATE, {"A": values(1)}, device=fake).invoke()
    assert not run.done() and "running" in repr(run)
    with pytest.raises(TimeoutError):
        run.wait(timeout=0.05)
    gate.set()
    run.wait(10)
    assert run.done() and run.device is fake
    assert run.events and all(event.is_complete for event in run.events)


def test_profile_lists_every_launch(
    fake: tile.Device, fake_hal: FakeDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILE_PROFILE", "1")
    run = tile.Invoker(TWO_STEPS, {"A": values(1), "B": values(2)}, device=fake).invoke()
    profile = run.profile()
    assert [name.split("_")[1] for name, _ in profile] == ["neg", "add"]
    assert all(duration == 1000 for _, duration in profile)


def test_tensor_wait_waits_for_the_writer_only(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("neg")
    out = NEGATE(device=fake, A=values(1, 2))["O"]
    waiter = threading.Thread(target=out.wait)
    waiter.start()
    assert blocked(waiter)  # the writer is held
    with pytest.raises(TimeoutError):
        out.wait(SETTLE)
    gate.set()
    waiter.join(10)
    assert not waiter.is_alive()
    out.wait()  # done: returns at once
    np.testing.assert_array_equal(out.to_numpy(), [-1, -2])
    tile.Tensor.from_numpy(values(3), fake).wait()  # written by the host: nothing to wait for


def test_tensor_wait_raises_the_writer_failure(fake: tile.Device, fake_hal: FakeDevice) -> None:
    fake_hal.failing["neg"] = RuntimeError("kernel exploded")
    out = NEGATE(device=fake, A=values(1))["O"]
    with pytest.raises(tile.ExecutionError, match="kernel exploded"):
        out.wait(10)
    with pytest.raises(tile.ExecutionError, match="kernel exploded"):
        out.wait(10)  # still the last writer's failure
