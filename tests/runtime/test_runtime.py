"""Buffer states and error translation in isolation, without a device."""

from __future__ import annotations

import numpy as np

import tile
from hal.errors import DependencyFailed
from hal.errors import ExecutionError as HalExecutionError
from hal.events import CompletedEvent, FailedEvent, SettableEvent
from tile.errors import Diagnostic
from tile.runtime.device import READS_KEPT, BufferState, execution_error, order_only


def state() -> BufferState:
    return BufferState(object(), 4)  # type: ignore[arg-type] (no buffer is touched)


def test_a_successful_writer_is_forgotten_a_failed_one_kept() -> None:
    buffer = state()
    assert buffer.read_deps() == [] and buffer.write_deps() == []
    pending = SettableEvent()
    buffer.note_write(pending)
    assert buffer.read_deps() == [pending]
    pending.set_result()
    assert buffer.read_deps() == [] and buffer.last_write is None
    failed = FailedEvent(RuntimeError("x"))
    buffer.note_write(failed)
    assert buffer.read_deps() == [failed] and buffer.write_deps() == [failed]


def test_writers_wait_for_pending_readers_in_order_only() -> None:
    buffer = state()
    reader, done = SettableEvent(), CompletedEvent()
    buffer.note_read(reader)
    buffer.note_read(done)
    (dep,) = buffer.write_deps()  # the completed reader is not waited for
    assert dep is not reader and not dep.is_complete
    reader.set_exception(RuntimeError("reader failed"))
    assert dep.is_complete and dep.exception() is None
    buffer.note_write(SettableEvent())
    assert buffer.reads == []


def test_completed_readers_are_pruned_amortised() -> None:
    buffer = state()
    pending = [SettableEvent() for _ in range(READS_KEPT + 1)]
    for event in pending:
        buffer.note_read(event)
    assert len(buffer.reads) == READS_KEPT + 1 and buffer.prune_at == 2 * (READS_KEPT + 1)
    for event in pending:
        event.set_result()
    for _ in range(READS_KEPT + 2):
        buffer.note_read(CompletedEvent())
    assert len(buffer.reads) <= READS_KEPT + 1


def test_order_only_of_a_completed_event() -> None:
    assert order_only(FailedEvent(ValueError())).exception() is None


def test_execution_errors_name_the_first_failure() -> None:
    root = HalExecutionError("kernel k failed: boom")
    chained = DependencyFailed(DependencyFailed(root))
    error = execution_error(chained, "running f")
    assert str(error) == "error[E-EXEC]: running f failed: ExecutionError: kernel k failed: boom"
    assert error.__cause__ is chained and error.root_cause is root
    assert (error.line, error.column) == (0, 0)


def test_device_errors_with_and_without_positions() -> None:
    plain = tile.TileUnsupported("float64 is not supported on this device")
    assert plain.code == "E-UNSUPPORTED"
    assert str(plain) == "error[E-UNSUPPORTED]: float64 is not supported on this device"
    placed = tile.TileUnsupported(Diagnostic("E-UNSUPPORTED", "no prng here", 2, 5, "  O = X;"))
    assert (placed.line, placed.column) == (2, 5) and "^" in str(placed)
    assert isinstance(tile.DeviceMismatch("x"), ValueError)
    assert tile.BackendCompileError("bad", source="s", log="l").source == "s"


def test_constant_outputs_and_binding_tensors(fake: tile.Device) -> None:
    result = tile.run("function (K) -> (K) { }", {"K": 5}, device=fake)
    assert result["K"].shape == () and result["K"].dtype == np.int32 and result["K"] == 5
    tensor = tile.Tensor(fake, (2, 3), "int8")
    bound = tile.Function("function (A) -> (O) { O = A + 1; }").bind({"A": tensor})
    assert bound.outputs == {"O": ((2, 3), np.dtype("int32"))}
