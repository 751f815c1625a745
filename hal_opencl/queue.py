"""The device's in-order queue: how OpenCL work is ordered (design 5.5, 6.4).

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

An `OpenCLEvent` (`events.py`) therefore completes in two stages. Memory objects used by
enqueued commands are retained by OpenCL itself until the commands finish, so Python may drop
buffers right after submitting; a deferred command's closure holds them until it is enqueued.

Renewal (issue 10): `renew()` replaces the queue's context and command queue with new ones,
for a driver that frees what its compiles leave only when its last context is released
(PoCL; `compiler.RENEW_EVERY`). The objects that keep driver objects of the context register
with the queue (`hold`: buffers, arenas, built programs) and park them: a buffer's bytes wait
on the host, a program is built again when next used. Every handle is therefore read at the
moment a command is enqueued, under the queue's `guard`, which a renewal holds throughout;
a host map or read marks the queue `blocking` while it is in the driver, and a renewal does
nothing while one is, or while a buffer is mapped (the view is the buffer's memory).

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

Fork: a driver's threads stay in the parent of a `fork`, and PoCL then waits forever in the
child for the first command or build (even when the parent only listed the platforms).
OpenCL leaves a child's use of its parent's driver undefined, so in the child of a fork made
after a driver was loaded (`driver_loaded`), every device refuses work with a HalError that
says so (`check_not_forked`: `OpenCLDevice.queue`, submitting, a host map or read); a
child that only exits is fine.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import threading
import weakref
from queue import SimpleQueue
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import pyopencl as cl

from hal.environment import flag
from hal.errors import ExecutionError, HalError
from hal.events import dependency_failure
from hal_opencl.events import OpenCLEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hal.interfaces import Event

T = TypeVar("T")
_log = logging.getLogger("hal_opencl.queue")
_DRAIN_SECONDS = 5.0  # how long a renewal waits for the watcher to catch up


def profiling_requested() -> bool:
    """`TILE_PROFILE=1`: queues record start and end times, so events report durations."""
    return flag("TILE_PROFILE")


class ContextHolder(Protocol):
    """What `DeviceQueue.renew` asks of an object that keeps driver objects of the queue's
    context: holders of lower `park_order` park first and are remade last (sub-buffers
    before the arenas they are cut from)."""

    park_order: int

    @property
    def is_mapped(self) -> bool: ...

    def park(self) -> None: ...

    def unpark(self, context: cl.Context) -> None: ...


_driver_loaded = False  # an OpenCL driver was loaded in this process (before any fork)
_forked = False  # this process is the child of a fork made after that


def driver_loaded() -> None:
    """Note that this process has loaded an OpenCL driver (listed its platforms)."""
    global _driver_loaded
    _driver_loaded = True


def check_not_forked(name: str) -> None:
    """HalError if this process is the child of a fork made after the driver was loaded."""
    if _forked:
        raise HalError(
            f"{name} cannot be used in this process: it was forked after the OpenCL driver "
            "was loaded, and the driver's threads stayed in the parent. Start worker "
            "processes with multiprocessing's 'spawn' or 'forkserver' method, or use OpenCL "
            "only after forking"
        )


def _after_fork_in_child() -> None:
    global _forked
    _forked = _forked or _driver_loaded


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DeviceQueue:
    """One device's context, in-order command queue and submitter thread."""

    def __init__(self, name: str, cl_device: cl.Device, *, profiling: bool | None = None) -> None:
        self.name = name
        self.cl_device = cl_device
        self.profiling = profiling_requested() if profiling is None else profiling
        self.context, self.queue = self._open()
        # Held while a command is put on the queue (and while the context is renewed), so
        # that no command is enqueued with handles of a context being let go.
        self.guard = threading.RLock()
        self.generation = 0  # how many times the context was renewed
        self._holders = _Refs[ContextHolder]()
        self._events = _Refs[OpenCLEvent]()
        self._blocking = 0  # host maps and reads in the driver now (no renewal meanwhile)
        self._lock = threading.Lock()
        self._jobs: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        self._submitter: threading.Thread | None = None
        self._watched: SimpleQueue[tuple[cl.Event | None, Callable[[], None]] | None]
        self._watched = SimpleQueue()
        self._watcher: threading.Thread | None = None
        self._closed = False
        _live_queues.add(self)

    def _open(self) -> tuple[cl.Context, cl.CommandQueue]:
        context = cl.Context([self.cl_device])
        properties = cl.command_queue_properties.PROFILING_ENABLE if self.profiling else 0
        return context, cl.CommandQueue(context, self.cl_device, properties=properties)

    # ---- the context's objects -------------------------------------------------------------

    def hold(self, holder: ContextHolder) -> None:
        """Register an object that keeps driver objects of this queue's context (a buffer, an
        arena, a built program): `renew` lets go of them and remakes them."""
        self._holders.add(holder)

    def blocking(self) -> _Blocking:
        """For a blocking host call (a map, a read): `with queue.blocking() as cl_queue:`
        gives the command queue, and no renewal happens until the block ends, so the handles
        the caller reads in it stay those of the queue's context."""
        check_not_forked(self.name)
        return _Blocking(self)

    def renew(self) -> bool:
        """Let go of this queue's OpenCL context and make a new one; False (nothing done)
        while a host map or read is open, a buffer is mapped, or the watcher is held up.
        Every registered holder parks what it keeps (a
        buffer its bytes, on the host) and drops its driver objects; every event keeps its
        status and drops its driver event; queued work finishes first. Only once nothing of
        the old context is left is the new one made, and the holders remake their objects
        in it (programs when they are next used).

        Why: PoCL compiles the programs of every OpenCL context in one LLVM context that it
        frees only when the last OpenCL context is released, and LLVM never frees what a
        compile leaves there; so a process that compiles programs without end grows without
        end unless, now and then, every context is released (benchmarks/memory.py, issue 10).
        """
        if not self._drain_watcher():
            return False
        gc.collect()  # driver objects kept only by reference cycles (not under the guard:
        # finalisers may need it)
        with self.guard:
            holders = self._holders.alive()
            if self._blocking or any(holder.is_mapped for holder in holders):
                return False
            self.queue.finish()
            for event in self._events.alive():
                event._let_go()
            self._events = _Refs()
            parked: list[ContextHolder] = []
            try:
                for holder in sorted(holders, key=lambda holder: holder.park_order):
                    holder.park()
                    parked.append(holder)
            except BaseException:  # (the host short of memory): back as they were
                for holder in reversed(parked):
                    holder.unpark(self.context)
                raise
            self.context = self.queue = None  # type: ignore[assignment]
            self.context, self.queue = self._open()
            self.generation += 1
            for holder in sorted(holders, key=lambda holder: -holder.park_order):
                holder.unpark(self.context)
        return True

    def _drain_watcher(self) -> bool:
        """Wait until the watcher has handled every event given to it so far (and dropped
        them); not under `guard`, since completion actions may submit work. False when it
        is still busy after `_DRAIN_SECONDS` (an action waiting for this thread)."""
        with self._lock:
            watcher = self._watcher
        if watcher is None or watcher is threading.current_thread():
            return True
        drained = threading.Event()
        self.when_complete(None, drained.set)
        return drained.wait(_DRAIN_SECONDS)

    # ---- submission -----------------------------------------------------------------------

    def submit(
        self, label: str, enqueue: Callable[[], cl.Event], deps: Sequence[Event] = ()
    ) -> OpenCLEvent:
        """Run `enqueue()` (which puts one command on `self.queue` and returns its event) once
        every dependency is ready; never blocks. A failed dependency skips the command."""
        if self._closed:
            raise HalError(f"{self.name} is closed")
        check_not_forked(self.name)
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
            with self.guard:  # the handles enqueue() reads and the event are of one context
                event._hold(enqueue())
        except HalError as error:
            event._set_failed(error)
        except Exception as error:
            failure = ExecutionError(f"{event.label} could not be queued on {self.name}: {error}")
            failure.__cause__ = error
            event._set_failed(failure)
        else:
            event._stage.set_result()  # not under the guard: callbacks may submit work

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

    def when_complete(self, cl_event: cl.Event | None, action: Callable[[], None]) -> None:
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

    def _complete(self, cl_event: cl.Event | None, action: Callable[[], None]) -> None:
        if cl_event is not None:
            with contextlib.suppress(cl.Error):
                cl_event.wait()
        try:
            action()
        except Exception:
            _log.exception("completion action on %s failed", self.name)

    def flush(self) -> None:
        with self.guard:
            self.queue.flush()

    def finish(self) -> None:
        with self.guard:
            queue = self.queue
        queue.finish()

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
        self.finish()
        if watcher is not None and watcher is not current:
            watcher.join()  # every command it waits for is now complete


class _Blocking:
    """`DeviceQueue.blocking()`: counts the queue as blocking while the block runs."""

    __slots__ = ("queue",)

    def __init__(self, queue: DeviceQueue) -> None:
        self.queue = queue

    def __enter__(self) -> cl.CommandQueue:
        queue = self.queue
        with queue.guard:
            queue._blocking += 1
            return queue.queue

    def __exit__(self, *exception: object) -> None:
        queue = self.queue
        with queue.guard:
            queue._blocking -= 1


class _Refs(Generic[T]):
    """Weak references to objects, cheap to add (a list append; dead ones are dropped now
    and then): what `DeviceQueue.renew` walks."""

    __slots__ = ("_limit", "_refs")

    def __init__(self) -> None:
        self._refs: list[weakref.ref[T]] = []
        self._limit = 1024

    def add(self, item: T) -> None:
        refs = self._refs
        refs.append(weakref.ref(item))
        if len(refs) > self._limit:
            refs[:] = [ref for ref in refs if ref() is not None]
            self._limit = max(1024, 2 * len(refs))

    def alive(self) -> list[T]:
        return [item for item in (ref() for ref in self._refs) if item is not None]


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
