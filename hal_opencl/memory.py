"""Device memory of the OpenCL back end: buffers, host maps and arenas (design 6.5).

Place in the pipeline: the executor allocates `OpenCLBuffer`s; kernels receive their
`cl_buffer`s as arguments; the device layer of `tile` maps them to write inputs and read
outputs. Memory is allocated with `ALLOC_HOST_PTR` on host-unified devices (CPUs such as PoCL,
integrated GPUs), where a map is the same host memory every time (zero copy), and as plain
device memory on discrete GPUs, where a map makes the driver transfer.

Maps are blocking `clEnqueueMapBuffer`s after the given events: those already on the buffer's
queue are the map's wait list, the others are waited for on the host first; a failed
dependency raises. `unmap()` enqueues the unmap and returns its event. Maps
nest, as in OpenCL: each `unmap()` ends the most recent one. A zero-byte buffer holds a
one-byte allocation (OpenCL has no empty buffers) and maps to an empty array.

A renewal of the device's context (`queue.DeviceQueue.renew`) parks every buffer's bytes on
the host and remakes the buffer (an arena's parts: the sub-buffer) in the new context, so
`cl_buffer` is read only under the queue's guard, where commands are enqueued.

An `OpenCLArena` is one buffer whose parts are sub-buffers (`get_sub_region`) at offsets that
are multiples of the device's base address alignment (`mem_base_addr_align`, 128 bytes on PoCL).

Running out of memory is `hal.OutOfMemoryError`: a buffer larger than the device allows in one
allocation (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`) is refused before the driver is asked, and the
driver's own refusals (`out_of_memory`: CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
CL_OUT_OF_HOST_MEMORY, CL_INVALID_BUFFER_SIZE) at `clCreateBuffer` or at a map are translated
(`allocating`).
Drivers may allocate lazily (PoCL grants any number of buffers up to the limit each and
allocates host memory on first use), so a device short of memory can also fail later, at a
launch, as an `ExecutionError`.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from hal.errors import HalError, OutOfMemoryError
from hal.events import CompletedEvent, wait_all
from hal.interfaces import Arena, Buffer, read_only_view
from hal_opencl.events import OpenCLEvent

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from hal.interfaces import Device, Event
    from hal_opencl.queue import DeviceQueue

# The status codes with which drivers refuse an allocation (or a map that needs one).
_OUT_OF_MEMORY = {
    cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE: "the device ran out of memory",
    cl.status_code.OUT_OF_RESOURCES: "the device ran out of resources",
    cl.status_code.OUT_OF_HOST_MEMORY: "the host ran out of memory",
    cl.status_code.INVALID_BUFFER_SIZE: "the driver refused the size",
}


@contextmanager
def allocating(device: str, size: int) -> Iterator[None]:
    """Raise a driver's refusal to allocate `size` bytes as OutOfMemoryError; other errors
    pass unchanged."""
    try:
        yield
    except cl.Error as error:
        reason = _OUT_OF_MEMORY.get(getattr(error, "code", None))  # type: ignore[call-overload]
        if reason is None:
            raise
        raise OutOfMemoryError(device, size, f"{reason} ({error})") from error


class OpenCLBuffer(Buffer):
    """`size` bytes of device memory: a `cl.Buffer`, or a sub-buffer of an arena's.

    `owner` is what the bytes live in (the buffer itself, or its arena), `offset` where they
    start in it (copies between overlapping ranges of one owner are staged through a
    temporary). Read `cl_buffer` only under the queue's guard (`DeviceQueue.renew` replaces
    it)."""

    def __init__(
        self,
        device: Device,
        queue: DeviceQueue,
        cl_buffer: cl.Buffer,
        size: int,
        *,
        arena: OpenCLArena | None = None,
        offset: int = 0,
        invalidate: bool = True,
        flags: int = 0,
    ) -> None:
        self.device = device
        self.queue = queue
        self.cl_buffer = cl_buffer
        self.size = size
        self.arena = arena
        self.offset = offset
        self._invalidate = invalidate  # WRITE_INVALIDATE_REGION exists (OpenCL 1.2 and later)
        self._flags = flags  # those it was made with (kept to remake it)
        self._lock = threading.Lock()
        self._maps: list[np.ndarray] = []
        self._parked: np.ndarray | None = None
        self.park_order = 0 if arena is not None else 1
        queue.hold(self)

    @property
    def owner(self) -> object:
        """What the bytes live in: the buffer itself, or its arena (a property, not a
        reference to itself: that cycle would leave the buffer to the cyclic collector)."""
        return self if self.arena is None else self.arena

    # ---- a renewed context (DeviceQueue.renew) -------------------------------------------

    def park(self) -> None:
        if self.arena is None:
            self._parked = _bytes_of(self.queue.queue, self.cl_buffer, self.size)
        self.cl_buffer = None

    def unpark(self, context: cl.Context) -> None:
        if self.arena is None:
            self.cl_buffer = _remake(context, self._flags, self._parked, self.size)
            self._parked = None
        else:
            whole = self.arena.cl_buffer
            part = whole if self.size == 0 else whole.get_sub_region(self.offset, self.size)
            self.cl_buffer = part

    # ---- host access ---------------------------------------------------------------------

    def _queued_first(self, deps: Sequence[Event]) -> list[OpenCLEvent]:
        """Wait for those of `deps` that are not commands already on this buffer's queue, and
        return those that are: they go in the wait list of the command that maps or reads,
        and one host wait covers both (a host wait for a kernel, then one for the map, cost
        twice as long on PoCL). Once that command is done, they are complete, and the
        caller raises the failure of any of them as waiting for it would have."""
        queued = [
            dep
            for dep in deps
            if isinstance(dep, OpenCLEvent) and dep.queue is self.queue and dep.cl_event
        ]
        wait_all([dep for dep in deps if dep not in queued] if queued else deps)
        return queued

    def _map(self, deps: Sequence[Event], flags: int) -> np.ndarray:
        queued = self._queued_first(deps)
        if self.size == 0:
            wait_all(queued)
            array = np.empty(0, np.uint8)
            with self._lock:
                self._maps.append(array)
            return array
        with self.queue.blocking() as queue:
            with allocating(self.device.id, self.size):
                array, _ = cl.enqueue_map_buffer(
                    queue,
                    self.cl_buffer,
                    flags,
                    0,
                    (self.size,),
                    np.uint8,
                    wait_for=_wait_list(queued),
                    is_blocking=True,
                )
            with self._lock:  # mapped before a renewal may look
                self._maps.append(array)
        if queued:
            try:
                wait_all(queued)
            except BaseException:
                with self.queue.guard, self._lock:
                    self._maps[:] = [mapped for mapped in self._maps if mapped is not array]
                    array.base.release(self.queue.queue)
                raise
        return array

    def read(self, size: int, deps: Sequence[Event] = ()) -> np.ndarray:
        """One blocking `clEnqueueReadBuffer` (no map and unmap: one command instead of two),
        ordered after `deps` as a map is (`_queued_first`)."""
        queued = self._queued_first(deps)
        array = np.empty(size, np.uint8)
        if size:
            with self.queue.blocking() as queue, allocating(self.device.id, size):
                cl.enqueue_copy(
                    queue, array, self.cl_buffer, wait_for=_wait_list(queued), is_blocking=True
                )
        wait_all(queued)  # complete by now: raises the failure of one
        return array

    def map_current(self, deps: Sequence[Event] = (), *, writable: bool = False) -> np.ndarray:
        flags = cl.map_flags.READ | (cl.map_flags.WRITE if writable else 0)
        array = self._map(deps, flags)
        return array if writable else read_only_view(array)

    def map_discard(self, deps: Sequence[Event] = ()) -> np.ndarray:
        invalidate = cl.map_flags.WRITE_INVALIDATE_REGION if self._invalidate else 0
        return self._map(deps, invalidate or cl.map_flags.WRITE)

    def unmap(self) -> Event:
        """End the most recent map. Raises HalError when the buffer is not mapped."""
        with self.queue.guard:  # mapped until unmapped: no renewal between (renew)
            with self._lock:
                if not self._maps:
                    raise HalError(f"{self!r} is not mapped")
                array = self._maps.pop()
            if array.size == 0:
                return CompletedEvent()
            cl_event = array.base.release(self.queue.queue)
            return OpenCLEvent.enqueued(self.queue, f"unmap of {self.size} bytes", cl_event)

    @property
    def is_mapped(self) -> bool:
        return bool(self._maps)

    def __repr__(self) -> str:
        where = f" at offset {self.offset}" if self.arena is not None else ""
        return f"<OpenCLBuffer {self.size} bytes{where} on {self.device.id}>"


class OpenCLArena(Arena):
    """One allocation; `make_buffer` places sub-buffers in it without copying."""

    park_order = 1

    def __init__(
        self,
        device: Device,
        queue: DeviceQueue,
        cl_buffer: cl.Buffer,
        size: int,
        alignment: int,
        *,
        invalidate: bool = True,
        flags: int = 0,
    ) -> None:
        self.device = device
        self.queue = queue
        self.cl_buffer = cl_buffer
        self.size = size
        self.alignment = alignment
        self._invalidate = invalidate
        self._flags = flags
        self._parked: np.ndarray | None = None
        queue.hold(self)

    is_mapped = False  # its parts are mapped, not the arena

    def park(self) -> None:
        self._parked = _bytes_of(self.queue.queue, self.cl_buffer, self.size)
        self.cl_buffer = None

    def unpark(self, context: cl.Context) -> None:
        self.cl_buffer = _remake(context, self._flags, self._parked, self.size)
        self._parked = None

    def make_buffer(self, offset: int, size: int) -> OpenCLBuffer:
        if offset % self.alignment:
            raise ValueError(f"arena offset {offset} is not a multiple of {self.alignment}")
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(
                f"bytes [{offset}, {offset + size}) do not fit an arena of {self.size} bytes"
            )
        with self.queue.guard:
            whole = self.cl_buffer
            part = whole if size == 0 else whole.get_sub_region(offset, size)
            return OpenCLBuffer(
                self.device,
                self.queue,
                part,
                size,
                arena=self,
                offset=offset,
                invalidate=self._invalidate,
            )

    def __repr__(self) -> str:
        return f"<OpenCLArena {self.size} bytes on {self.device.id}>"


def _wait_list(queued: list[OpenCLEvent]) -> list[cl.Event] | None:
    """The driver events of `queued` (under the queue's guard), for a command's wait list."""
    events = [event for event in (dep.cl_event for dep in queued) if event is not None]
    return events or None


def _bytes_of(queue: cl.CommandQueue, cl_buffer: cl.Buffer, size: int) -> np.ndarray | None:
    """A host copy of a buffer's bytes (None for an empty one)."""
    if size == 0:
        return None
    parked = np.empty(size, np.uint8)
    cl.enqueue_copy(queue, parked, cl_buffer, is_blocking=True)
    return parked


def _remake(context: cl.Context, flags: int, parked: np.ndarray | None, size: int) -> cl.Buffer:
    """A buffer of `context` holding `parked` (one byte for an empty buffer)."""
    if parked is None:
        return cl.Buffer(context, flags or cl.mem_flags.READ_WRITE, max(size, 1))
    flags = (flags or cl.mem_flags.READ_WRITE) | cl.mem_flags.COPY_HOST_PTR
    return cl.Buffer(context, flags, hostbuf=parked)
