"""The events of an OpenCL device's queue (design 5.5, 6.4): `OpenCLEvent`.

Place in the pipeline: `queue.DeviceQueue.submit` returns one per command at once; kernels,
copies, fills and unmaps hand them to tile, which orders later work and host reads after
them.

An event completes in two stages: *staged* (enqueued, or skipped with an error: a command
whose dependency failed is never enqueued) and *complete* (the device finished the command).
A renewal of the queue's context (`DeviceQueue.renew`) lets go of the driver's event of every
complete command, which would keep the old context alive, and keeps its status and duration
instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

import pyopencl as cl

from hal.errors import ExecutionError
from hal.events import SettableEvent
from hal.interfaces import Event

if TYPE_CHECKING:
    from collections.abc import Callable

    from hal_opencl.queue import DeviceQueue

_log = logging.getLogger("hal_opencl.events")
_COMPLETE = cl.command_execution_status.COMPLETE  # 0; errors are negative
_POLL_SECONDS = (0.0002, 0.02)  # first and longest sleep while polling with a timeout


def _run_callback(event: Event, callback: Callable[[Event], None]) -> None:
    try:
        callback(event)
    except Exception:  # bookkeeping must not hide the event's outcome (hal.events does the same)
        _log.exception("event callback %r failed", callback)


class OpenCLEvent(Event):
    """Completion of one command of a `DeviceQueue` (see the module docstring)."""

    __slots__ = ("_cl_event", "_final", "_stage", "label", "queue")

    def __init__(self, queue: DeviceQueue, label: str) -> None:
        self.queue = queue
        self.label = label
        self._stage = SettableEvent(label)  # set when enqueued; failed when skipped
        self._cl_event: cl.Event | None = None
        # Once the queue renewed its context: the command's status and duration, kept when
        # the driver's event was let go (DeviceQueue.renew).
        self._final: tuple[int, int | None] | None = None

    @classmethod
    def enqueued(cls, queue: DeviceQueue, label: str, cl_event: cl.Event) -> OpenCLEvent:
        """The event of a command just put on `queue` (under its guard)."""
        event = cls(queue, label)
        event._hold(cl_event)
        event._stage.set_result()
        return event

    def _hold(self, cl_event: cl.Event) -> None:
        """Take the driver's event (under the queue's guard, so that a renewal lets go of it)."""
        self._cl_event = cl_event
        self.queue._events.add(self)

    def _let_go(self) -> None:
        """Keep the (complete) command's status and duration, and drop the driver's event,
        which holds the queue's context (DeviceQueue.renew)."""
        event = self._cl_event
        if event is None:
            return
        duration = None
        if self.queue.profiling:
            with contextlib.suppress(cl.Error):
                duration = int(event.profile.end - event.profile.start)
        self._final = (int(event.command_execution_status), duration)
        self._cl_event = None

    def _set_failed(self, error: BaseException) -> None:
        self._stage.set_exception(error)

    @property
    def staged(self) -> bool:
        """True once the command was enqueued or skipped."""
        return self._stage.is_complete

    @property
    def cl_event(self) -> cl.Event | None:
        """The driver's event, once the command is enqueued."""
        return self._cl_event

    def _status(self) -> int:
        event = self._cl_event
        if event is None:
            assert self._final is not None
            return self._final[0]
        return int(event.command_execution_status)

    def _device_error(self, status: int) -> ExecutionError:
        return ExecutionError(f"{self.label} failed on {self.queue.name} (status {status})")

    def wait(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stage.wait(timeout)  # raises the failure of a skipped command
        event = self._cl_event
        if event is None:  # let go of: complete
            pass
        elif deadline is None:
            try:
                event.wait()
            except cl.Error as error:
                raise self._device_error(self._status()) from error
        else:
            pause = _POLL_SECONDS[0]
            while self._status() > _COMPLETE:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self!r} did not complete within {timeout} s")
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, _POLL_SECONDS[1])
        status = self._status()
        if status < _COMPLETE:
            raise self._device_error(status)

    @property
    def is_complete(self) -> bool:
        if not self._stage.is_complete:
            return False
        return self._skipped or self._status() <= _COMPLETE

    @property
    def _skipped(self) -> bool:
        return self._cl_event is None and self._final is None

    def exception(self) -> BaseException | None:
        if not self.is_complete:
            raise RuntimeError(f"{self!r} is not complete")
        if self._skipped:
            return self._stage.exception()
        status = self._status()
        return self._device_error(status) if status < _COMPLETE else None

    def duration_ns(self) -> int | None:
        if self._final is not None:
            return self._final[1]
        event = self._cl_event
        if event is None or not self.queue.profiling or not self.is_complete:
            return None
        try:
            return int(event.profile.end - event.profile.start)
        except cl.Error:
            return None

    def add_done_callback(self, fn: Callable[[Event], None]) -> None:
        def staged(_: Event) -> None:
            event = self._cl_event
            if event is None:
                _run_callback(self, fn)
            else:
                self.queue.when_complete(event, lambda: _run_callback(self, fn))

        self._stage.add_done_callback(staged)

    def __repr__(self) -> str:
        if not self._stage.is_complete:
            state = "deferred"
        elif self._skipped:
            state = f"skipped: {self._stage.exception()!r}"
        else:
            state = "complete" if self._status() <= _COMPLETE else "queued"
        return f"<OpenCLEvent {self.label} {state}>"
