"""Execution on an OpenCL device: the executor and prepared kernels (design 6.4).

Place in the pipeline: after `compiler.py` built an `OpenCLLibrary`, `OpenCLExecutor.prepare`
makes each kernel launchable; `OpenCLKernel.run` sets the buffer arguments and enqueues an
NDRange once the dependencies allow (`queue.DeviceQueue.submit`). ZERO and COPY kernels (no
body) run as `clEnqueueFillBuffer` / `clEnqueueCopyBuffer`.

Per launch: the buffers are checked (kind and size), then, under the kernel object's lock
(`set_args` and the enqueue must not interleave with another thread's), `kernel.set_args(...)`
and `cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size or None)`. A grid
with an empty dimension enqueues a marker, so its event still follows its dependencies.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from hal.errors import HalError, OutOfMemoryError
from hal.interfaces import Executor, Kernel
from hal_opencl.memory import OpenCLArena, OpenCLBuffer, allocating

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hal.interfaces import Buffer, Event, Library
    from hal_opencl.compiler import OpenCLLibrary
    from hal_opencl.device import OpenCLDevice
    from hal_opencl.events import OpenCLEvent
    from hal_opencl.queue import DeviceQueue
    from semtree.kernel import KernelParam


def param_bytes(param: KernelParam) -> int:
    """Bytes a kernel may touch through `param`: the whole tensor."""
    return math.prod(param.shape) * param.dtype.itemsize


class OpenCLExecutor(Executor):
    """Buffers, copies, fills and kernel preparation for one OpenCL device."""

    def __init__(self, device: OpenCLDevice) -> None:
        self.device = device
        self.buffer_alignment = max(64, device.capabilities.base_address_alignment)
        self._flags = cl.mem_flags.READ_WRITE
        if device.capabilities.host_unified_memory:
            self._flags |= cl.mem_flags.ALLOC_HOST_PTR  # maps are zero-copy on host memory

    @property
    def queue(self) -> DeviceQueue:
        return self.device.queue

    def _buffer(self, buffer: Buffer, role: str) -> OpenCLBuffer:
        if not isinstance(buffer, OpenCLBuffer) or buffer.queue is not self.queue:
            raise TypeError(f"{role} must be a buffer of {self.device.id}, not {buffer!r}")
        return buffer

    def _allocate(self, size: int) -> cl.Buffer:
        capabilities = self.device.capabilities
        if size < 0:
            raise ValueError(f"a buffer size cannot be negative ({size})")
        if size > capabilities.max_allocation:
            raise OutOfMemoryError(
                self.device.id,
                size,
                f"more than the device allows in one buffer ({capabilities.max_allocation} bytes)",
            )
        with allocating(self.device.id, size):
            return cl.Buffer(self.queue.context, self._flags, max(size, 1))

    def allocate(self, size: int) -> OpenCLBuffer:
        invalidate = self.device.capabilities.map_invalidate
        queue = self.queue
        with queue.guard:  # the buffer is of the context it registers with
            return OpenCLBuffer(
                self.device,
                queue,
                self._allocate(size),
                size,
                invalidate=invalidate,
                flags=self._flags,
            )

    def make_arena(self, size: int) -> OpenCLArena:
        invalidate = self.device.capabilities.map_invalidate
        queue = self.queue
        with queue.guard:
            return OpenCLArena(
                self.device,
                queue,
                self._allocate(size),
                size,
                self.buffer_alignment,
                invalidate=invalidate,
                flags=self._flags,
            )

    makes_views = True

    def view(self, buffer: Buffer, offset: int, size: int) -> OpenCLBuffer | None:
        """A sub-buffer (of the buffer's own arena where it is a part of one)."""
        source = self._buffer(buffer, "a view's buffer")
        owner = source.arena if source.arena is not None else source
        start = source.offset + offset
        if start % self.buffer_alignment or offset < 0 or size <= 0 or offset + size > source.size:
            return None
        queue = self.queue
        with queue.guard:  # of the context the owner's buffer is in now
            return OpenCLBuffer(
                self.device,
                queue,
                owner.cl_buffer.get_sub_region(start, size),
                size,
                arena=owner,  # type: ignore[arg-type] (remade from its owner, like a part)
                offset=start,
                invalidate=source._invalidate,
            )

    def prepare(self, library: Library, index: int) -> OpenCLKernel:
        # Checked by shape: importing the compiler here would import the kernel IR on listing.
        if not hasattr(library, "entry") or not hasattr(library, "program_source"):
            raise TypeError(f"{self.device.id} cannot run {library!r}")
        return OpenCLKernel(self, library, index)  # type: ignore[arg-type]

    def copy(
        self,
        src: Buffer,
        src_offset: int,
        dst: Buffer,
        dst_offset: int,
        size: int,
        deps: Sequence[Event] = (),
    ) -> OpenCLEvent:
        source = self._buffer(src, "the copy source")
        target = self._buffer(dst, "the copy destination")
        for buffer, offset, role in ((source, src_offset, "source"), (target, dst_offset, "dest")):
            if offset < 0 or size < 0 or offset + size > buffer.size:
                raise ValueError(
                    f"copy {role} range [{offset}, {offset + size}) leaves a buffer of "
                    f"{buffer.size} bytes"
                )
        queue = self.queue
        label = f"copy of {size} bytes"
        if size == 0:
            return queue.submit(label, lambda: cl.enqueue_marker(queue.queue), deps)
        start, end = source.offset + src_offset, target.offset + dst_offset
        if source.owner is target.owner and abs(start - end) < size:
            # OpenCL refuses overlapping copies (CL_MEM_COPY_OVERLAP): go through a temporary.
            def staged() -> cl.Event:
                with allocating(self.device.id, size):
                    temporary = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, size)
                cl.enqueue_copy(
                    queue.queue,
                    temporary,
                    source.cl_buffer,
                    byte_count=size,
                    src_offset=src_offset,
                )
                return cl.enqueue_copy(
                    queue.queue, target.cl_buffer, temporary, byte_count=size, dst_offset=dst_offset
                )

            return queue.submit(label, staged, deps)

        # Handles are read when the command is enqueued, under the queue's guard (renew).
        def direct() -> cl.Event:
            return cl.enqueue_copy(
                queue.queue,
                target.cl_buffer,
                source.cl_buffer,
                byte_count=size,
                src_offset=src_offset,
                dst_offset=dst_offset,
            )

        return queue.submit(label, direct, deps)

    def fill_zero(self, dst: Buffer, deps: Sequence[Event] = ()) -> OpenCLEvent:
        target = self._buffer(dst, "the fill destination")
        return self.fill_zero_bytes(target, target.size, deps, f"zero fill of {target.size} bytes")

    def fill_zero_bytes(
        self, target: OpenCLBuffer, size: int, deps: Sequence[Event], label: str
    ) -> OpenCLEvent:
        """Zero the first `size` bytes of `target` (4-byte pattern when the size allows)."""
        queue = self.queue
        if size == 0:
            return queue.submit(label, lambda: cl.enqueue_marker(queue.queue), deps)
        pattern = np.uint32(0) if size % 4 == 0 else np.uint8(0)
        return queue.submit(
            label,
            lambda: cl.enqueue_fill_buffer(queue.queue, target.cl_buffer, pattern, 0, size),
            deps,
        )

    def flush(self) -> None:
        self.device.flush()


class OpenCLKernel(Kernel):
    """One prepared kernel of an OpenCLLibrary: its kernel object and launch shape."""

    def __init__(self, executor: OpenCLExecutor, library: OpenCLLibrary, index: int) -> None:
        info = library.kernel_list.kernels[index]
        self.info = info
        self.library = library
        self._executor = executor
        self._sizes = tuple(param_bytes(param) for param in info.params)
        self._label = f"kernel {info.name}"
        # Compared by value, so the backend needs no import of semtree.kernel here.
        self._trivial = info.kind.value if info.body is None else None
        if self._trivial not in (None, "zero", "copy"):
            raise HalError(f"kernel {info.name!r} of kind {self._trivial!r} has no body")
        # Raises for a kernel without an entry point.
        self._entry = library.entry_point(index) if self._trivial is None else ""
        self._global = tuple(info.global_size)
        self._local = tuple(info.local_size) if any(info.local_size) else None
        self._empty = 0 in self._global

    def _check(self, params: Sequence[Buffer]) -> tuple[OpenCLBuffer, ...]:
        buffers = tuple(params)
        if len(buffers) != len(self._sizes):
            raise ValueError(
                f"{self._label} takes {len(self._sizes)} buffers, {len(buffers)} were given"
            )
        queue = self._executor.queue
        for index, buffer in enumerate(buffers):  # every launch: no formatting unless it fails
            if (
                not isinstance(buffer, OpenCLBuffer)
                or buffer.queue is not queue
                or buffer.size < self._sizes[index]
            ):
                self._reject(index, buffer)
        return buffers  # type: ignore[return-value] (checked above)

    def _reject(self, index: int, buffer: Buffer) -> None:
        role = f"parameter {self.info.params[index].name!r} of {self._label}"
        checked = self._executor._buffer(buffer, role)
        raise ValueError(f"{role} needs {self._sizes[index]} bytes; the buffer has {checked.size}")

    def run(
        self,
        params: Sequence[Buffer],
        deps: Sequence[Event] = (),
        *,
        profile: bool = False,
        batch: int = 1,
    ) -> OpenCLEvent:
        """Launch once `deps` complete. Durations come from the queue's profiling
        (`TILE_PROFILE=1`), not from `profile`, which OpenCL cannot enable per command."""
        buffers = self._check(params)
        executor = self._executor
        if self._trivial == "zero":
            return executor.fill_zero_bytes(buffers[0], self._sizes[0], deps, self._label)
        if self._trivial == "copy":
            size = min(self._sizes[0], self._sizes[1])
            return executor.copy(buffers[1], 0, buffers[0], 0, size, deps)
        queue = executor.queue
        enqueue: Callable[[], cl.Event]
        global_size, local_size = self._global, self._local
        if batch != 1:  # the third grid extent times `batch` (Kernel.run)
            if batch < 0:
                raise ValueError(f"{self._label}: a batch of {batch} blocks")
            global_size = (global_size[0], global_size[1], global_size[2] * batch)
        if self._empty or not batch:
            enqueue = lambda: cl.enqueue_marker(queue.queue)  # noqa: E731 (nothing to launch)
        else:
            built, name = self.library.built, self._entry
            assert built is not None

            def enqueue() -> cl.Event:  # under the queue's guard: handles of one context
                kernel, lock = built.kernel(name)
                with lock:
                    kernel.set_args(*[buffer.cl_buffer for buffer in buffers])
                    return cl.enqueue_nd_range_kernel(queue.queue, kernel, global_size, local_size)

        return queue.submit(self._label, enqueue, deps)

    def __repr__(self) -> str:
        return f"<OpenCLKernel {self.info.name} over {self._global}>"
