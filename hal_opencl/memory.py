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
from hal_opencl.queue import OpenCLEvent

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

    `allocation` is the `cl.Buffer` the bytes live in and `offset` where they start in it
    (copies between overlapping ranges of one allocation are staged through a temporary)."""

    def __init__(
        self,
        device: Device,
        queue: DeviceQueue,
        cl_buffer: cl.Buffer,
        size: int,
        *,
        allocation: cl.Buffer | None = None,
        offset: int = 0,
        invalidate: bool = True,
    ) -> None:
        self.device = device
        self.queue = queue
        self.cl_buffer = cl_buffer
        self.size = size
        self.allocation = cl_buffer if allocation is None else allocation
        self.offset = offset
        self._invalidate = invalidate  # WRITE_INVALIDATE_REGION exists (OpenCL 1.2 and later)
        self._lock = threading.Lock()
        self._maps: list[np.ndarray] = []

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
        else:
            queue, handle = self.queue.queue, self.cl_buffer
            after = [dep.cl_event for dep in queued] or None
            with allocating(self.device.id, self.size):
                array, _ = cl.enqueue_map_buffer(
                    queue,
                    handle,
                    flags,
                    0,
                    (self.size,),
                    np.uint8,
                    wait_for=after,
                    is_blocking=True,
                )
            if queued:
                try:
                    wait_all(queued)
                except BaseException:
                    array.base.release(queue)
                    raise
        with self._lock:
            self._maps.append(array)
        return array

    def read(self, size: int, deps: Sequence[Event] = ()) -> np.ndarray:
        """One blocking `clEnqueueReadBuffer` (no map and unmap: one command instead of two),
        ordered after `deps` as a map is (`_queued_first`)."""
        queued = self._queued_first(deps)
        array = np.empty(size, np.uint8)
        if size:
            after = [dep.cl_event for dep in queued] or None
            with allocating(self.device.id, size):
                cl.enqueue_copy(
                    self.queue.queue, array, self.cl_buffer, wait_for=after, is_blocking=True
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
        where = f" at offset {self.offset}" if self.allocation is not self.cl_buffer else ""
        return f"<OpenCLBuffer {self.size} bytes{where} on {self.device.id}>"


class OpenCLArena(Arena):
    """One allocation; `make_buffer` places sub-buffers in it without copying."""

    def __init__(
        self,
        device: Device,
        queue: DeviceQueue,
        cl_buffer: cl.Buffer,
        size: int,
        alignment: int,
        *,
        invalidate: bool = True,
    ) -> None:
        self.device = device
        self.queue = queue
        self.cl_buffer = cl_buffer
        self.size = size
        self.alignment = alignment
        self._invalidate = invalidate

    def make_buffer(self, offset: int, size: int) -> OpenCLBuffer:
        if offset % self.alignment:
            raise ValueError(f"arena offset {offset} is not a multiple of {self.alignment}")
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(
                f"bytes [{offset}, {offset + size}) do not fit an arena of {self.size} bytes"
            )
        part = self.cl_buffer if size == 0 else self.cl_buffer.get_sub_region(offset, size)
        return OpenCLBuffer(
            self.device,
            self.queue,
            part,
            size,
            allocation=self.cl_buffer,
            offset=offset,
            invalidate=self._invalidate,
        )

    def __repr__(self) -> str:
        return f"<OpenCLArena {self.size} bytes on {self.device.id}>"
