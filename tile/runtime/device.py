"""The runtime's buffer states, host access and per-device bookkeeping (design 5.5, 8.8).

Place in the pipeline: every `tile.Tensor` and every temporary of a compiled program owns a
HAL buffer and a `BufferState`: the event of its last writer and the events of its readers
since. All ordering follows one rule (5.5):

- a reader waits for the last writer (read after write);
- a writer waits for the last writer and for every reader since (write after write, write
  after read), and then becomes the last writer, clearing the readers.

A writer waits for readers *in order only*: a reader that fails does not make the next
writer fail, because the reader did not change the buffer. A failed writer does: its
failure stays in `last_write` and poisons whatever reads or overwrites the buffer later,
until a `map_discard` (which replaces every byte) clears it.

Host access (`mapped`) follows the same rule, with a host-side marker event standing for the
mapping from the moment it is requested until the device's view is consistent again, so a
kernel launched while the host holds a mapping waits for it. State updates for one device
happen under its `DeviceRuntime.lock`; waiting never happens under it.

HAL failures reach the caller as `tile.ExecutionError` (run time) or `BackendCompileError` /
`TileUnsupported` (build time), with the HAL exception chained; an allocation (or a map) the
device cannot make is `tile.TileOutOfMemory`, naming the tensor from the buffer's `Contents`.
A run allocates every buffer it needs (temporaries, scratch buffers, private copies of
aliased inputs) before it changes any state or launches anything, so a failed allocation
leaves every tensor and the program as they were.
"""

from __future__ import annotations

import atexit
import sys
import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from queue import SimpleQueue
from typing import TYPE_CHECKING

import numpy as np

from hal.errors import BackendCompileError as HalCompileError
from hal.errors import DependencyFailed, HalError, OutOfMemoryError, UnsupportedOnDevice
from hal.errors import ExecutionError as HalExecutionError
from hal.events import SettableEvent, dependency_failure, wait_all
from hal.interfaces import read_only_view
from tile.errors import BackendCompileError, ExecutionError, TileOutOfMemory, TileUnsupported
from tile.runtime import debug
from tile.runtime.cache import PROGRAM_CACHE_SIZE, LRUCache
from tile.runtime.pool import POOL_MIN_BYTES, BufferPool

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from hal.interfaces import Buffer, Device, Event
    from semtree.types import TensorShape
    from tile.runtime.cache import ProgramKey
    from tile.runtime.execute import CompiledProgram

# Readers kept per buffer before completed ones are dropped (5.5).
READS_KEPT = 16


# ---- errors ---------------------------------------------------------------------------------


def execution_error(error: BaseException, operation: str) -> ExecutionError:
    """The `tile.ExecutionError` for a failure seen while waiting for `operation`; the
    message names the first failure of a dependency chain, the HAL error is chained."""
    root = error
    while isinstance(root, DependencyFailed):
        root = root.cause
    if isinstance(root, ExecutionError):
        detail = root.message
    else:
        detail = f"{type(root).__name__}: {root}" if str(root) else type(root).__name__
    translated = ExecutionError(f"{operation} failed: {detail}")
    translated.__cause__ = error
    return translated


def build_error(error: HalError, program: str) -> BackendCompileError | TileUnsupported:
    """The user-facing error for a HAL failure while building `program` for a device."""
    if isinstance(error, UnsupportedOnDevice):
        translated: BackendCompileError | TileUnsupported = TileUnsupported(f"{program}: {error}")
    elif isinstance(error, HalCompileError):
        translated = BackendCompileError(
            f"{program}: {error}", kernel=error.kernel, source=error.source, log=error.log
        )
    else:
        translated = BackendCompileError(f"{program}: {type(error).__name__}: {error}")
    translated.__cause__ = error
    return translated


def out_of_memory(error: OutOfMemoryError, contents: Contents, what: str = "") -> TileOutOfMemory:
    """The user-facing error for an allocation (or, `what`, a map) the device refused."""
    translated = TileOutOfMemory(
        what + error.reason,
        tensor=contents.name,
        shape=contents.shape,
        dtype=contents.dtype.name,
        nbytes=error.size,
        device=error.device,
    )
    translated.__cause__ = error
    return translated


# ---- buffer states --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Contents:
    """What a buffer holds, for messages: the tensor's name (None for a tensor made without
    one), its shape and numpy dtype."""

    name: str | None
    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def of(name: str, shape: TensorShape) -> Contents:
        return Contents(name, tuple(shape.dims), shape.dtype.numpy)

    @staticmethod
    def raw(nbytes: int) -> Contents:
        """An unnamed buffer of `nbytes` bytes."""
        return Contents(None, (nbytes,), np.dtype(np.uint8))


def order_only(event: Event) -> Event:
    """An event that completes, always successfully, when `event` completes: a dependency
    that orders without inheriting a failure."""
    marker = SettableEvent("after a reader")
    event.add_done_callback(lambda _: marker.set_result())
    return marker


class BufferState:
    """One buffer and the events that order access to it (module docstring). Mutated only
    under the owning device's lock."""

    __slots__ = ("buffer", "contents", "last_write", "nbytes", "prune_at", "reads")

    def __init__(self, buffer: Buffer, nbytes: int, contents: Contents | None = None) -> None:
        self.buffer = buffer
        self.nbytes = nbytes  # the bytes in use (the buffer may be larger)
        self.contents = contents or Contents.raw(nbytes)
        self.last_write: Event | None = None
        self.reads: list[Event] = []
        self.prune_at = READS_KEPT  # prune completed readers when there are more than this

    def read_deps(self) -> list[Event]:
        """What a reader must wait for: the last writer, unless it finished successfully."""
        last = self.last_write
        if last is None:
            return []
        if last.is_complete and last.exception() is None:
            self.last_write = None
            return []
        return [last]

    def write_deps(self) -> list[Event]:
        """What a writer must wait for: the last writer, and (in order only) pending readers."""
        deps = self.read_deps()
        for read in self.reads:
            if not read.is_complete:
                deps.append(order_only(read))
        return deps

    def note_read(self, event: Event) -> None:
        reads = self.reads
        reads.append(event)
        if len(reads) > self.prune_at:
            # Amortised: with many readers still pending, prune again only after as many
            # more have been added.
            self.reads = reads = [read for read in reads if not read.is_complete]
            self.prune_at = max(READS_KEPT, 2 * len(reads))

    def note_write(self, event: Event) -> None:
        self.last_write = event
        self.reads = []
        self.prune_at = READS_KEPT

    def __repr__(self) -> str:
        return f"<BufferState {self.nbytes} bytes, {len(self.reads)} readers>"


class PooledState(BufferState):
    """The state of a call's output whose buffer goes to `pool` when the state dies (a
    subclass, so that other states pay no `__del__`)."""

    __slots__ = ("pool",)

    def __init__(
        self, buffer: Buffer, nbytes: int, contents: Contents | None, pool: BufferPool
    ) -> None:
        super().__init__(buffer, nbytes, contents)
        self.pool = pool

    def __del__(self, getrefcount: Callable[[object], int] = sys.getrefcount) -> None:
        # Only a buffer that nothing else holds (no view, no launch): its references are
        # this slot and getrefcount's argument.
        if getrefcount(self.buffer) == 2:
            pending = [self.last_write, *self.reads] if self.last_write else self.reads
            with suppress(Exception):  # at interpreter exit: the buffer is simply released
                self.pool.give(self.buffer, self.nbytes, pending)


# ---- host jobs ------------------------------------------------------------------------------


class HostJob:
    """One host job: `action`, run once `deps` complete, and the event it completes."""

    __slots__ = ("action", "deps", "event")

    def __init__(self, action: Callable[[], None], deps: Sequence[Event], label: str) -> None:
        self.action: Callable[[], None] | None = action
        self.deps = tuple(deps)
        self.event = SettableEvent(label)

    def run(self) -> None:
        event = self.event
        failure: BaseException | None = dependency_failure(self.deps, event.label)
        if failure is None and self.action is not None:
            try:
                self.action()
            except BaseException as error:
                failure = HalExecutionError(f"{event.label} failed: {error!r}")
                failure.__cause__ = error
        self.action, self.deps = None, ()  # release buffers before completing
        if failure is None:
            event.set_result()
        else:
            event.set_exception(failure)


class HostQueue:
    """Host-side work ordered by events (dtype conversion of outputs): one daemon thread per
    device, started on first use; each job waits for its dependencies first.

    Its jobs wait in the driver (for an OpenCL event, a blocking map), where a daemon thread
    must not be when the interpreter finalizes (hal_opencl.queue, issue 10): the thread's
    start registers `close` with `atexit`, after the device's backend registered its own
    hooks, so the host jobs finish and the thread is joined before the devices close."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: SimpleQueue[HostJob | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, action: Callable[[], None], deps: Sequence[Event], label: str) -> Event:
        """Queue `action` to run once `deps` complete; never blocks, except on a closed queue,
        where it runs at once on this thread."""
        job = HostJob(action, deps, label)
        with self._lock:
            if not self._closed:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._serve, name=f"{self.name} host jobs", daemon=True
                    )
                    self._thread.start()
                    atexit.register(self.close)
                self._jobs.put(job)
                return job.event
        job.run()
        return job.event

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.run()
            del job

    def close(self) -> None:
        """Let the queued jobs finish and stop the thread; later jobs run on the submitter."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()


# ---- one device -----------------------------------------------------------------------------


# The largest read made under the device's lock (`DeviceRuntime.read`): a copy of host memory
# this size takes a few µs at most, so other threads' submissions hardly wait.
LOCKED_READ_BYTES = 1 << 16


class DeviceRuntime:
    """What the device layer keeps per HAL device: the lock that guards buffer states, the
    program cache and the host-job queue."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.executor = device.executor
        self.lock = threading.Lock()
        self.programs: LRUCache[ProgramKey, CompiledProgram] = LRUCache(PROGRAM_CACHE_SIZE)
        self.host = HostQueue(device.id)
        self.pool = BufferPool()
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """The device settings' fingerprint, part of every program key (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = self.device.settings.fingerprint()
        return self._fingerprint

    def allocate(
        self, nbytes: int, contents: Contents | None = None, *, recycled: bool = False
    ) -> BufferState:
        """A buffer of `nbytes` bytes (contents undefined) with an empty state; raises
        TileOutOfMemory, naming `contents`, when the device cannot allocate it, even after
        releasing the kept buffers. `recycled`: the buffer may be one a dead output left in
        the device's pool, and returns there when this state dies (a call's outputs)."""
        pooled = recycled and nbytes >= POOL_MIN_BYTES
        buffer = self.pool.take(nbytes) if pooled else None
        if buffer is None:
            try:
                try:
                    buffer = self.executor.allocate(nbytes)
                except OutOfMemoryError:
                    if not self.pool.nbytes:
                        raise
                    self.pool.clear()
                    buffer = self.executor.allocate(nbytes)
            except OutOfMemoryError as error:
                raise out_of_memory(error, contents or Contents.raw(nbytes)) from error
            except HalError as error:
                raise execution_error(
                    error, f"allocating {nbytes} bytes on {self.device.id}"
                ) from error
        if pooled:
            return PooledState(buffer, nbytes, contents, self.pool)
        return BufferState(buffer, nbytes, contents)

    def output_maker(self, nbytes: int, contents: Contents) -> Callable[[], BufferState]:
        """`allocate(nbytes, contents, recycled=True)` as a function of no arguments, for a
        cached call's outputs: under the pool's sizes, the executor's `allocator` and the
        state in two frames. A failure takes `allocate`, which retries and names `contents`."""
        if nbytes >= POOL_MIN_BYTES:
            return partial(self.allocate, nbytes, contents, recycled=True)
        make = self.executor.allocator(nbytes)

        def output() -> BufferState:
            try:
                return BufferState(make(), nbytes, contents)
            except HalError:  # OutOfMemoryError included
                return self.allocate(nbytes, contents, recycled=True)

        return output

    def read(self, state: BufferState) -> np.ndarray:
        """A copy of `state`'s bytes, as a new 1-D uint8 array, after its last writer (5.5).
        Errors as `mapped` raises them for a read.

        A small tensor of host memory (`Executor.host_memory`) whose last writer is done is
        copied under the lock, which no writer passes meanwhile: no marker for writers to
        wait on, which costs a cached call and its read a third more on llvm_cpu."""
        try:
            if state.nbytes <= LOCKED_READ_BYTES and self.executor.host_memory:
                with self.lock:
                    if not state.read_deps():
                        return state.buffer.read(state.nbytes)
            marker = SettableEvent("host read")
            with self.lock:
                deps = state.read_deps()
                state.note_read(marker)
            try:
                with debug.progress(_waiting_for(state)):
                    return state.buffer.read(state.nbytes, deps)
            finally:
                marker.set_result()
        except OutOfMemoryError as error:
            raise out_of_memory(error, state.contents, "reading it for the host: ") from error
        except Exception as error:
            raise execution_error(error, "reading a tensor") from error

    def wait_written(self, state: BufferState, timeout: float | None = None) -> None:
        """Return once `state`'s last writer so far has finished (5.5), mapping and copying
        nothing; its failure raises ExecutionError, a timeout TimeoutError."""
        last = state.last_write  # one read, without the lock: a writer that is done needs none
        if last is None or (last.is_complete and last.exception() is None):
            return
        with self.lock:
            deps = state.read_deps()
        if deps:
            wait_events(deps, timeout, _waiting_for(state))

    @contextmanager
    def mapped(
        self, state: BufferState, *, write: bool, discard: bool = False
    ) -> Iterator[np.ndarray]:
        """Map `state`'s bytes for the host as a 1-D uint8 array, ordered by 5.5.

        Reading waits for the last writer; writing also waits for the readers and becomes the
        last writer. `discard` maps for overwriting: it waits the same way but ignores a failed
        writer (nothing of the old contents survives) and transfers nothing in. The view is
        read-only unless `write`.
        """
        marker = SettableEvent("host write" if write else "host read")
        with self.lock:
            if write:
                deps = state.write_deps()
                state.note_write(marker)
            else:
                deps = state.read_deps()
                state.note_read(marker)
        buffer = state.buffer
        try:
            if discard:
                dependency_failure(deps, "overwriting a tensor")  # a failure is overwritten
                raw = buffer.map_discard()
            else:
                with debug.progress(_waiting_for(state)):
                    raw = buffer.map_current(deps, writable=write)
        except BaseException as error:
            refused = isinstance(error, OutOfMemoryError)  # nothing was mapped or written
            # A refused map leaves the tensor as its last writer did; another failure poisons it.
            failure = dependency_failure(deps, "a tensor") if refused else error
            if write and failure is not None:
                marker.set_exception(failure)
            else:
                marker.set_result()
            if refused:
                raise out_of_memory(error, state.contents, "mapping it for the host: ") from error
            if isinstance(error, Exception):
                raise execution_error(error, "mapping a tensor") from error
            raise
        view = raw[: state.nbytes] if write else read_only_view(raw[: state.nbytes])
        try:
            yield view
        finally:
            del view, raw
            self._unmap(state, buffer, marker)

    def _unmap(self, state: BufferState, buffer: Buffer, marker: SettableEvent) -> None:
        """End a map: the marker completes with the unmap. Work ordered after the map from
        now on waits for the unmap itself, which a device orders without the host where it is
        a command of its own queue (OpenCL), instead of waiting for the marker."""
        try:
            unmapped = buffer.unmap()
        except BaseException as error:
            marker.set_exception(error)
            raise
        if unmapped.is_complete:
            _finish(marker, unmapped)
            return
        with self.lock:
            if state.last_write is marker:
                state.last_write = unmapped
            elif marker in state.reads:
                state.reads = [unmapped if read is marker else read for read in state.reads]
        unmapped.add_done_callback(lambda event: _finish(marker, event))


def _waiting_for(state: BufferState) -> str:
    """What a host map or read of `state` shows while it waits (`debug.progress`)."""
    name = state.contents.name
    return f"waiting for tensor '{name}'" if name else "waiting for a tensor"


def _finish(marker: SettableEvent, unmapped: Event) -> None:
    """Complete `marker` as the complete event `unmapped` did."""
    failure = unmapped.exception()
    if failure is None:
        marker.set_result()
    else:
        marker.set_exception(failure)


def wait_events(events: Sequence[Event], timeout: float | None, operation: str) -> None:
    """Wait for every event (one deadline), then raise the first failure as ExecutionError.
    A timeout raises TimeoutError."""
    try:
        with debug.progress(operation):
            wait_all(events, timeout)
    except Exception as error:
        # wait_all raises TimeoutError both for a timeout and for an event that failed with
        # one; only a pending event means the former.
        if isinstance(error, TimeoutError) and not all(event.is_complete for event in events):
            raise
        raise execution_error(error, operation) from error
