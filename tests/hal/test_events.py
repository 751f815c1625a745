"""Event helpers: exactly-once completion, callbacks, timeouts, wait_all, dependency failure."""

from __future__ import annotations

import threading

import pytest

from hal.errors import DependencyFailed
from hal.events import (
    CompletedEvent,
    FailedEvent,
    SettableEvent,
    dependency_failure,
    wait_all,
)


def test_completed_and_failed_events() -> None:
    done = CompletedEvent(duration_ns=5)
    done.wait(0)
    assert done.is_complete and done.exception() is None and done.duration_ns() == 5
    error = ValueError("bad")
    failed = FailedEvent(error)
    assert failed.is_complete and failed.exception() is error
    with pytest.raises(ValueError, match="bad"):
        failed.wait()


def test_settable_event_completes_exactly_once() -> None:
    event = SettableEvent("job")
    assert not event.is_complete
    with pytest.raises(RuntimeError, match="not complete"):
        event.exception()
    event.set_result(duration_ns=42)
    assert event.is_complete and event.exception() is None and event.duration_ns() == 42
    with pytest.raises(RuntimeError, match="completed twice"):
        event.set_result()
    with pytest.raises(RuntimeError, match="completed twice"):
        event.set_exception(ValueError())
    event.wait()


def test_waiting_on_a_failed_event_raises_its_exception() -> None:
    event = SettableEvent()
    error = KeyError("k")
    event.set_exception(error)
    with pytest.raises(KeyError) as caught:
        event.wait()
    assert caught.value is error
    assert "failed" in repr(event)


def test_timeout_then_completion_from_another_thread() -> None:
    event = SettableEvent("slow")
    with pytest.raises(TimeoutError, match="slow"):
        event.wait(timeout=0.01)
    threading.Timer(0.02, event.set_result).start()
    event.wait(timeout=10)
    assert event.is_complete


def test_callbacks_run_once_before_and_after_completion() -> None:
    event = SettableEvent()
    seen: list[tuple[str, object]] = []
    event.add_done_callback(lambda e: seen.append(("early", e)))
    event.add_done_callback(lambda e: 1 / 0)  # a failing callback does not stop the others
    event.add_done_callback(lambda e: seen.append(("second", e)))
    assert seen == []
    event.set_exception(RuntimeError("x"))
    assert seen == [("early", event), ("second", event)]
    event.add_done_callback(lambda e: seen.append(("late", e)))
    assert seen[-1] == ("late", event)
    fixed = CompletedEvent()
    fixed.add_done_callback(lambda e: seen.append(("fixed", e)))
    assert seen[-1] == ("fixed", fixed)


def test_wait_all_waits_for_everything_then_raises_the_first_failure() -> None:
    first, second, slow = SettableEvent(), SettableEvent(), SettableEvent()
    second.set_exception(ValueError("second"))
    first.set_exception(KeyError("first"))
    threading.Timer(0.02, slow.set_result).start()
    with pytest.raises(KeyError, match="first"):
        wait_all([CompletedEvent(), first, second, slow])
    assert slow.is_complete  # the failure did not cut the wait short
    wait_all([])


def test_wait_all_timeout_is_for_the_whole_wait() -> None:
    pending = SettableEvent()
    with pytest.raises(TimeoutError):
        wait_all([CompletedEvent(), pending], timeout=0.01)
    # An event that *failed* with TimeoutError is a failure, not a timeout of the wait.
    with pytest.raises(TimeoutError, match="inner"):
        wait_all([FailedEvent(TimeoutError("inner"))], timeout=0)


def test_dependency_failure_chains_the_first_failure() -> None:
    assert dependency_failure([CompletedEvent()], "k") is None
    cause = ValueError("root")
    failure = dependency_failure([CompletedEvent(), FailedEvent(cause)], "kernel k")
    assert isinstance(failure, DependencyFailed)
    assert failure.cause is cause and failure.__cause__ is cause
    assert "kernel k did not run" in str(failure)
    outer = DependencyFailed(failure, "kernel m")
    assert outer.root_cause is cause
