"""Replacing a device's OpenCL context now and then, so that memory plateaus (issue 10).

Why: PoCL keeps one LLVM context per `cl_context`, and every kernel it compiles (at the build,
and at the first launch of each work-group size) leaves metadata and constants there that
releasing the program does not free; releasing the context does. A process that keeps
compiling new programs (one function called with ever new shapes while the program cache
evicts) grew without bound: +24 MB over 800 new shapes in one context. Programs that PoCL
loads from its cache on disk run no LLVM and leave almost nothing.

What: once `limit` programs were built in a context (the compiler's `builds`), the next safe
point replaces it (`ContextRecycler.recycle`), invisibly to the holders of buffers, libraries
and events. With the queue's `driver` lock held throughout (no command is enqueued and no
memory object made meanwhile, `hal_opencl.queue`):

1. every queued command is finished;
2. each live allocation (a tensor's buffer, a program's temporary, an arena) is copied through
   the host into a new buffer of a new context, and its `OpenCLBuffer`s and `OpenCLArena`
   point at the copy; should any allocation fail, nothing changes and replacing stops;
3. every event of the old context is settled (`DeviceQueue.renew`);
4. every library releases its built program, and builds it again in the new context on its
   next launch (`OpenCLLibrary.release`, `OpenCLCompiler.rebuild`), from the driver's cache
   in this process's directory (`driver_cache`): no LLVM compile, no growth.

The old context is then referred to by nothing, and the driver frees it with its LLVM memory.

Safe point: right after a program is built (`OpenCLExecutor.prepare`), unless the host holds
a map of some buffer of the device (`DeviceQueue.mappings`): then the next build tries again.
Commands deferred on the host (waiting for foreign events) are not in the driver yet; they read
their queue, buffers and kernel objects when they are enqueued, so they go to the new context.

Which devices: those whose platform is in `platforms.RECYCLE_AFTER` (PoCL: every 100
programs). `TILE_OPENCL_RECYCLE=N` (read at every safe point) sets N for every OpenCL device;
0 turns replacing off.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from hal_opencl.memory import OpenCLArena, OpenCLBuffer
from hal_opencl.platforms import RECYCLE_AFTER, platform_key

if TYPE_CHECKING:
    from hal_opencl.compiler import OpenCLLibrary
    from hal_opencl.device import OpenCLDevice

VARIABLE = "TILE_OPENCL_RECYCLE"

log = logging.getLogger("tile")


def recycle_limit(platform: str) -> int:
    """Programs built per context on `platform` before it is replaced (0: never): the
    environment's `TILE_OPENCL_RECYCLE`, else the platform's default."""
    default = RECYCLE_AFTER.get(platform_key(platform), 0)
    text = os.environ.get(VARIABLE, "").strip()
    if not text:
        return default
    try:
        return max(0, int(text))
    except ValueError:
        log.warning("%s=%r is not a number of programs; using %d", VARIABLE, text, default)
        return default


class ContextRecycler:
    """What lives in one device's context, and its replacement (module docstring)."""

    def __init__(self, device: OpenCLDevice, builds: int = 0) -> None:
        self.device = device
        self.replacements = 0  # contexts replaced so far
        self.failed = False  # a replacement could not allocate: no more are tried
        self._memory: weakref.WeakSet[OpenCLBuffer | OpenCLArena] = weakref.WeakSet()
        self._libraries: weakref.WeakSet[OpenCLLibrary] = weakref.WeakSet()
        self._builds_before = builds  # the compiler's `builds` when the context was made

    @property
    def limit(self) -> int:
        return 0 if self.failed else recycle_limit(self.device.capabilities.platform)

    def track_memory(self, owner: OpenCLBuffer | OpenCLArena) -> None:
        """Note a new allocation; called with the queue's `driver` lock held."""
        self._memory.add(owner)

    def prepared(self, library: OpenCLLibrary) -> None:
        """A library is about to run here: note it (a library built in a context replaced
        meanwhile is released at once), and replace the context if that is due."""
        queue, compiler = self.device.queue, self.device.compiler
        with queue.driver:
            self._libraries.add(library)
            built = library.built
            if built is not None and built.program.context != queue.context:
                library.release(lambda: compiler.rebuild(library, self.device))
            limit = self.limit
            if limit and compiler.builds - self._builds_before >= limit:
                self.recycle()

    def recycle(self) -> bool:
        """Replace the context now unless a map is alive (then False); see the module
        docstring."""
        queue, compiler = self.device.queue, self.device.compiler
        with queue.driver:
            if queue.mappings or queue.closed or self.failed:
                return False
            try:
                queue.renew(self._move)
            except (cl.Error, MemoryError) as error:
                self.failed = True
                log.warning(
                    "%s: cannot copy its buffers into a new OpenCL context (%s); the context "
                    "is kept from now on",
                    self.device.id,
                    error,
                )
                return False
            for library in list(self._libraries):
                library.release(lambda library=library: compiler.rebuild(library, self.device))
            self._builds_before = compiler.builds
            self.replacements += 1
        log.debug("%s: OpenCL context replaced (%d)", self.device.id, self.replacements)
        return True

    def _move(self, context: cl.Context, old: cl.CommandQueue, new: cl.CommandQueue) -> None:
        """Copy every live allocation into `context`, then point its owners at the copies."""
        owners = list(self._memory)
        copies: dict[int, cl.Buffer] = {}
        for owner in owners:
            allocation = owner.allocation if isinstance(owner, OpenCLBuffer) else owner.cl_buffer
            if allocation.int_ptr not in copies:
                host = np.empty(allocation.size, np.uint8)
                cl.enqueue_copy(old, host, allocation)
                copy = cl.Buffer(context, allocation.flags, allocation.size)
                cl.enqueue_copy(new, copy, host)
                copies[allocation.int_ptr] = copy
        moved: list[tuple[OpenCLBuffer | OpenCLArena, cl.Buffer, cl.Buffer]] = []
        for owner in owners:  # every new handle first: a failure leaves the owners as they were
            if isinstance(owner, OpenCLArena):
                copy = copies[owner.cl_buffer.int_ptr]
                moved.append((owner, copy, copy))
                continue
            copy = copies[owner.allocation.int_ptr]
            whole = owner.cl_buffer is owner.allocation
            part = copy if whole else copy.get_sub_region(owner.offset, owner.size)
            moved.append((owner, part, copy))
        for owner, handle, copy in moved:
            owner.cl_buffer = handle
            if isinstance(owner, OpenCLBuffer):
                owner.allocation = copy
