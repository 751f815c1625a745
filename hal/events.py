"""Event helpers shared by the device layer and every backend.

Events (ARCHITECTURE.md 5.5) are the only ordering mechanism of the HAL: each asynchronous
operation returns one, and later operations name the events they depend on. This module
gives the ready-made events a backend needs:

- `CompletedEvent`: an operation that finished synchronously (a CPU unmap);
- `FailedEvent`: an operation that failed before it could be queued;
- `SettableEvent`: a thread-safe event that its owner completes later, exactly once, from
  any thread (the LLVM scheduler's launches; bridging foreign events into OpenCL);
- `wait_all` to wait for several events with one deadline, and `dependency_failure` to turn
  the first failed dependency into the `DependencyFailed` that skips an operation.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from hal.errors import DependencyFailed
from hal.interfaces import Event

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_log = logging.getLogger("hal.events")


def _run_callback(event: Event, callback: Callable[[Event], None]) -> None:
    # A callback is bookkeeping (dropping buffer references); its failure must neither
    # hide the event's own outcome nor stop the other callbacks, so it is only logged.
    try:
        callback(event)
    except Exception:
        _log.exception("event callback %r failed", callback)


class CompletedEvent(Event):
    """An event that completed successfully when it was created."""

    __slots__ = ("_duration_ns",)

    def __init__(self, duration_ns: int | None = None) -> None:
        self._duration_ns = duration_ns

    def wait(self, timeout: float | None = None) -> None:
        return None

    @property
    def is_complete(self) -> bool:
        return True

    def exception(self) -> BaseException | None:
        return None

    def duration_ns(self) -> int | None:
        return self._duration_ns

    def add_done_callback(self, fn: Callable[[Event], None]) -> None:
        _run_callback(self, fn)

    def __repr__(self) -> str:
        return "<CompletedEvent>"


class FailedEvent(Event):
    """An event that failed with `error` when it was created."""

    __slots__ = ("_error",)

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def wait(self, timeout: float | None = None) -> None:
        raise self._error

    @property
    def is_complete(self) -> bool:
        return True

    def exception(self) -> BaseException | None:
        return self._error

    def duration_ns(self) -> int | None:
        return None

    def add_done_callback(self, fn: Callable[[Event], None]) -> None:
        _run_callback(self, fn)

    def __repr__(self) -> str:
        return f"<FailedEvent {self._error!r}>"


class SettableEvent(Event):
    """An event completed by its owner with `set_result` or `set_exception`, exactly once.

    Safe to wait on, poll and complete from any thread. Callbacks run on the completing
    thread (or at once on the registering thread when already complete), after waiters
    have been released, in registration order.
    """

    # Waiting uses a latch: a plain lock held from creation until completion, which each
    # waiter acquires and passes on at once. (A threading.Event costs 3 to 9 µs to create,
    # a lock 0.1 µs, and every launch creates an event.)
    __slots__ = ("_callbacks", "_complete", "_duration_ns", "_error", "_latch", "_lock", "label")

    def __init__(self, label: str = "") -> None:
        self.label = label  # what the operation was, for repr and error messages
        self._lock = threading.Lock()  # guards completion against callback registration
        self._latch = threading.Lock()
        self._latch.acquire()
        self._complete = False
        self._error: BaseException | None = None
        self._duration_ns: int | None = None
        self._callbacks: list[Callable[[Event], None]] | None = None

    def set_result(self, duration_ns: int | None = None) -> None:
        """Complete successfully. Raises RuntimeError if the event is already complete."""
        self._finish(None, duration_ns)

    def set_exception(self, error: BaseException) -> None:
        """Complete with a failure. Raises RuntimeError if the event is already complete."""
        self._finish(error, None)

    def _finish(self, error: BaseException | None, duration_ns: int | None) -> None:
        with self._lock:
            if self._complete:
                raise RuntimeError(f"event {self!r} completed twice")
            self._error = error
            self._duration_ns = duration_ns
            self._complete = True
            callbacks, self._callbacks = self._callbacks, None
        self._latch.release()
        if callbacks:
            for callback in callbacks:
                _run_callback(self, callback)

    def wait(self, timeout: float | None = None) -> None:
        if not self._complete:
            if not self._latch.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
                raise TimeoutError(f"{self!r} did not complete within {timeout} s")
            self._latch.release()
        if self._error is not None:
            raise self._error

    @property
    def is_complete(self) -> bool:
        return self._complete

    def exception(self) -> BaseException | None:
        if not self._complete:
            raise RuntimeError(f"{self!r} is not complete")
        return self._error

    def duration_ns(self) -> int | None:
        return self._duration_ns

    def add_done_callback(self, fn: Callable[[Event], None]) -> None:
        with self._lock:
            if not self._complete:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        _run_callback(self, fn)

    def __repr__(self) -> str:
        if not self._complete:
            state = "pending"
        elif self._error is not None:
            state = f"failed: {self._error!r}"
        else:
            state = "complete"
        label = f" {self.label}" if self.label else ""
        return f"<{type(self).__name__}{label} {state}>"


def wait_all(events: Iterable[Event], timeout: float | None = None) -> None:
    """Wait until every event completes, then raise the first failure in `events` order.

    Failures do not cut the wait short, so no operation is still running when this
    returns or raises (except on timeout). `timeout` bounds the whole wait, not each
    event; TimeoutError is raised when it passes first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    first_failure: BaseException | None = None
    for event in events:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            event.wait(remaining)
        except BaseException as error:
            # wait() raises both the event's own failure (which may itself be a
            # TimeoutError) and a timeout; only the event's state tells them apart.
            if not event.is_complete:
                raise
            if first_failure is None:
                first_failure = error
    if first_failure is not None:
        raise first_failure


def dependency_failure(deps: Iterable[Event], operation: str) -> DependencyFailed | None:
    """Wait for every dependency; return the `DependencyFailed` the operation must fail
    with if one of them failed (chaining the first failure in `deps` order), else None.

    All dependencies are waited for even after a failure, so the skipped operation's
    event never completes while something it was ordered after is still running.
    """
    first_failure: BaseException | None = None
    for dep in deps:
        if not dep.is_complete:
            try:
                dep.wait()
            except BaseException:
                if not dep.is_complete:
                    raise  # interrupted while waiting, not a failure of the dependency
        error = dep.exception()
        if error is not None and first_failure is None:
            first_failure = error
    return None if first_failure is None else DependencyFailed(first_failure, operation)
