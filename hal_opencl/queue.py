"""The device's in-order queue and its events: how OpenCL work is ordered (design 5.5, 6.4).

Place in the pipeline: every kernel launch, copy, fill and unmap of an OpenCL device goes
through `DeviceQueue.submit`, which returns an `OpenCLEvent` at once. Each device has one
context and one in-order `cl.CommandQueue`, so commands of the same device are ordered by the
queue itself and their events are dropped from wait lists (the same-queue shortcut of 5.5).

Dependencies that are not commands already on this queue (an LLVM event, a `SettableEvent`,
another OpenCL device's event, a command of this queue still waiting for one of those) are
awaited on the host: the command is *deferred*, and a per-device submitter thread enqueues it
once they complete. This is the one place where we part from design 6.4, which bridges
foreign events with a `cl.UserEvent`: a user event cannot carry a failure, so a kernel gated by
one would run even when the foreign dependency failed, while the HAL contract says it must not
run and its event must fail with `DependencyFailed`. Deferral also keeps a gated command from
blocking unrelated later commands behind it in the in-order queue.

An `OpenCLEvent` therefore completes in two stages: *staged* (enqueued, or skipped with an
error) and *complete* (the device finished the command). Memory objects used by enqueued
commands are retained by OpenCL itself until the commands finish, so Python may drop buffers
right after submitting; a deferred command's closure holds them until it is enqueued.

Exit (issue 10): the submitter and the watcher are daemon threads, and the watcher spends its
time blocked in the driver (`cl.Event.wait`, with the GIL released). A daemon thread that wakes
from such a call after interpreter finalization began is ended by CPython with `pthread_exit`,
whose unwinding through pyopencl's C++ frames aborts the process ("terminate called without
an active exception"; CPython gh-87135, pybind11 #2215). So every queue is closed by an
`atexit` hook: it runs once the non-daemon threads are joined (unlike
`threading._register_atexit` hooks, which run while they may still submit work) and before
finalization; `close()` lets queued work finish, finishes the device queue and joins both
threads. Work that arrives at a closed queue from elsewhere (a deferred command whose
dependency completes later, a completion action) runs on the thread that brings it, so
closing in any order leaves no command unqueued and no action undone.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from queue import SimpleQueue
from typing import TYPE_CHECKING

import pyopencl as cl

from hal.environment import flag
from hal.errors import ExecutionError, HalError
from hal.events import SettableEvent, dependency_failure
from hal.interfaces import Event

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_log = logging.getLogger("hal_opencl.queue")
_COMPLETE = cl.command_execution_status.COMPLETE  # 0; errors are negative
_POLL_SECONDS = (0.0002, 0.02)  # first and longest sleep while polling with a timeout


def profiling_requested() -> bool:
    """`TILE_PROFILE=1`: queues record start and end times, so events report durations."""
    return flag("TILE_PROFILE")


def _run_callback(event: Event, callback: Callable[[Event], None]) -> None:
    try:
        callback(event)
    except Exception:  # bookkeeping must not hide the event's outcome (hal.events does the same)
        _log.exception("event callback %r failed", callback)


class OpenCLEvent(Event):
    """Completion of one command of a `DeviceQueue` (see the module docstring)."""

    __slots__ = ("_cl_event", "_stage", "label", "queue")

    def __init__(self, queue: DeviceQueue, label: str) -> None:
        self.queue = queue
        self.label = label
        self._stage = SettableEvent(label)  # set when enqueued; failed when skipped
        self._cl_event: cl.Event | None = None

    @classmethod
    def enqueued(cls, queue: DeviceQueue, label: str, cl_event: cl.Event) -> OpenCLEvent:
        event = cls(queue, label)
        event._set_enqueued(cl_event)
        return event

    def _set_enqueued(self, cl_event: cl.Event) -> None:
        self._cl_event = cl_event
        self._stage.set_result()

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
        assert self._cl_event is not None
        return int(self._cl_event.command_execution_status)

    def _device_error(self, status: int) -> ExecutionError:
        return ExecutionError(f"{self.label} failed on {self.queue.name} (status {status})")

    def wait(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stage.wait(timeout)  # raises the failure of a skipped command
        event = self._cl_event
        assert event is not None
        if deadline is None:
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
        return self._cl_event is None or self._status() <= _COMPLETE

    def exception(self) -> BaseException | None:
        if not self.is_complete:
            raise RuntimeError(f"{self!r} is not complete")
        if self._cl_event is None:
            return self._stage.exception()
        status = self._status()
        return self._device_error(status) if status < _COMPLETE else None

    def duration_ns(self) -> int | None:
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
        elif self._cl_event is None:
            state = f"skipped: {self._stage.exception()!r}"
        else:
            state = "complete" if self._status() <= _COMPLETE else "queued"
        return f"<OpenCLEvent {self.label} {state}>"


class DeviceQueue:
    """One device's context, in-order command queue and submitter thread."""

    def __init__(self, name: str, cl_device: cl.Device, *, profiling: bool | None = None) -> None:
        self.name = name
        self.profiling = profiling_requested() if profiling is None else profiling
        self.context = cl.Context([cl_device])
        properties = cl.command_queue_properties.PROFILING_ENABLE if self.profiling else 0
        self.queue = cl.CommandQueue(self.context, cl_device, properties=properties)
        self._lock = threading.Lock()
        self._jobs: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        self._submitter: threading.Thread | None = None
        self._watched: SimpleQueue[tuple[cl.Event, Callable[[], None]] | None] = SimpleQueue()
        self._watcher: threading.Thread | None = None
        self._closed = False
        _live_queues.add(self)

    # ---- submission -----------------------------------------------------------------------

    def submit(
        self, label: str, enqueue: Callable[[], cl.Event], deps: Sequence[Event] = ()
    ) -> OpenCLEvent:
        """Run `enqueue()` (which puts one command on `self.queue` and returns its event) once
        every dependency is ready; never blocks. A failed dependency skips the command."""
        if self._closed:
            raise HalError(f"{self.name} is closed")
        event = OpenCLEvent(self, label)
        dependencies = tuple(deps)
        pending = [dep for dep in dependencies if not self._ready(dep)]
        if not pending:
            self._start(event, enqueue, dependencies, on_submitter=False)
            return event
        count = [len(pending)]
        lock = threading.Lock()

        def arrived(_: Event) -> None:
            with lock:
                count[0] -= 1
                last = count[0] == 0
            if last:
                self._post(lambda: self._start(event, enqueue, dependencies, on_submitter=True))

        for dep in pending:
            if isinstance(dep, OpenCLEvent) and dep.queue is self:
                dep._stage.add_done_callback(arrived)
            else:
                dep.add_done_callback(arrived)
        return event

    def _ready(self, dep: Event) -> bool:
        """No host waiting needed: complete, or a command already on this in-order queue."""
        if isinstance(dep, OpenCLEvent) and dep.queue is self:
            return dep.staged
        return dep.is_complete

    def _start(
        self,
        event: OpenCLEvent,
        enqueue: Callable[[], cl.Event],
        deps: tuple[Event, ...],
        *,
        on_submitter: bool,
    ) -> None:
        if any(dep.is_complete and dep.exception() is not None for dep in deps):
            # Fail only after every dependency finished (hal.events.dependency_failure), on
            # the submitter thread so that the caller never blocks.
            def fail() -> None:
                failure = dependency_failure(deps, event.label)
                assert failure is not None
                event._set_failed(failure)

            if on_submitter:
                fail()
            else:
                self._post(fail)
            return
        try:
            cl_event = enqueue()
        except HalError as error:
            event._set_failed(error)
        except Exception as error:
            failure = ExecutionError(f"{event.label} could not be queued on {self.name}: {error}")
            failure.__cause__ = error
            event._set_failed(failure)
        else:
            event._set_enqueued(cl_event)

    def _post(self, job: Callable[[], None]) -> None:
        with self._lock:
            if not self._closed:
                if self._submitter is None:
                    self._submitter = threading.Thread(
                        target=self._serve, name=f"{self.name} submitter", daemon=True
                    )
                    self._submitter.start()
                self._jobs.put(job)
                return
        _run_job(job, self.name)  # closed: on this thread (module docstring)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            _run_job(job, self.name)
            del job

    # ---- completion ----------------------------------------------------------------------

    def when_complete(self, cl_event: cl.Event, action: Callable[[], None]) -> None:
        """Call `action` once `cl_event` completes, on this queue's watcher thread.

        Not `Event.set_callback`: with PoCL, a process that ever registered a completion
        callback aborts at exit ("terminate called without an active exception"). One
        watcher per queue waits on the events in the order they were enqueued, which on an
        in-order queue is the order they complete. Once the queue is closed, `action` runs
        on this thread after waiting (module docstring)."""
        with self._lock:
            if not self._closed:
                if self._watcher is None:
                    self._watcher = threading.Thread(
                        target=self._watch, name=f"{self.name} watcher", daemon=True
                    )
                    self._watcher.start()
                self._watched.put((cl_event, action))
                return
        self._complete(cl_event, action)

    def _watch(self) -> None:
        while True:
            item = self._watched.get()
            if item is None:
                return
            self._complete(*item)
            del item

    def _complete(self, cl_event: cl.Event, action: Callable[[], None]) -> None:
        with contextlib.suppress(cl.Error):
            cl_event.wait()
        try:
            action()
        except Exception:
            _log.exception("completion action on %s failed", self.name)

    def flush(self) -> None:
        self.queue.flush()

    def finish(self) -> None:
        self.queue.finish()

    def close(self) -> None:
        """Let queued work finish, finish the device queue and stop both threads (waiting
        for them: nothing of this queue is left in the driver); later submissions raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True  # from here on, _post and when_complete put nothing
            submitter, watcher = self._submitter, self._watcher
        self._jobs.put(None)
        self._watched.put(None)
        current = threading.current_thread()
        if submitter is not None and submitter is not current:
            submitter.join()  # its jobs only enqueue, or wait for finite work
        self.queue.finish()
        if watcher is not None and watcher is not current:
            watcher.join()  # every command it waits for is now complete


def _run_job(job: Callable[[], None], name: str) -> None:
    try:
        job()
    except Exception:
        _log.exception("deferred command on %s failed", name)


_live_queues: weakref.WeakSet[DeviceQueue] = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    for queue in list(_live_queues):
        queue.close()
