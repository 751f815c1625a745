"""Host memory as device memory: 64-byte-aligned buffers and arenas for `llvm_cpu` (7.5).

Place in the pipeline: the executor allocates these; kernels receive their addresses through
the `__grid` parameter array; the device layer maps them to read inputs and outputs. The
CPU shares memory with the host, so mapping is zero-copy: a map waits for the given events
and returns the numpy array itself, and `unmap()` returns an already-completed event.

Alignment is 64 bytes (a cache line and an AVX-512 vector), so generated code may use
aligned vector loads; misaligned buffers cost 17 to 35% in the prototypes (PERFORMANCE.md 4.4).
Buffers of at most SMALL_BYTES share slabs (`_Slabs`), each starting on a cache line of its own.

An allocation larger than the machine's physical memory is refused before it is tried (with
overcommit, the kernel would grant it and kill the process when the pages are touched); one
the host refuses (numpy's MemoryError, or its ValueError for a size past the address space)
is `hal.OutOfMemoryError` too.
"""

from __future__ import annotations

import ctypes
import os
import threading
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from hal.errors import HalError, OutOfMemoryError
from hal.events import CompletedEvent, wait_all
from hal.interfaces import Arena, Buffer, read_only_view

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hal.interfaces import Device, Event

ALIGNMENT = 64


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None


# The largest allocation tried; read at each allocation, so tests can lower it.
HOST_MEMORY = physical_memory()


def host_bytes(device: str, size: int, alignment: int = ALIGNMENT) -> tuple[np.ndarray, int]:
    """A 1-D uint8 array of `size` bytes whose first byte is `alignment`-aligned, and that
    byte's address; OutOfMemoryError when the size is more than the machine's memory or the
    host cannot allocate it (module docstring).

    Over-allocate, then slice: the slice keeps the whole allocation alive. The address comes
    from ctypes' view of the fresh, writable, non-empty allocation: 4x quicker than
    `array.ctypes.data`, and every launch allocates outputs."""
    if size < 0:
        raise ValueError(f"a buffer size cannot be negative ({size})")
    limit = HOST_MEMORY
    if limit is not None and size > limit:
        raise OutOfMemoryError(device, size, f"more than the host's memory ({limit} bytes)")
    try:
        raw = np.empty(size + alignment, np.uint8)
    except (MemoryError, ValueError) as error:  # ValueError: more than numpy can address
        raise OutOfMemoryError(device, size, f"the host refused it ({error})") from error
    base = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    start = -base % alignment
    if size:
        return raw[start : start + size], base + start
    # Slice a non-empty range first: numpy gives an empty slice taken directly the base
    # pointer, which would make a zero-byte buffer misaligned.
    return raw[start : start + 1][:0], base + start


# Buffers of at most SMALL_BYTES are cut from shared slabs of SLAB_BYTES (`_Slabs`).
SMALL_BYTES = 512
SLAB_BYTES = 16 << 10


class _Slabs:
    """Small buffers cut one after another from a shared slab, each on its own cache lines:
    a cached call's outputs are mostly a few bytes, and a slice of a slab costs a third of a
    new allocation of its own (its address and its release included). A slab lives while any
    of its buffers does, so a buffer keeps at most SLAB_BYTES alive. Thread-safe."""

    def __init__(self) -> None:
        self._fresh()

    def _fresh(self) -> None:
        # Also a fork's child's start: a thread of the parent may have held the lock.
        self._lock = threading.Lock()
        self._slab = np.empty(0, np.uint8)
        self._base = 0
        self._next = SLAB_BYTES  # the first take makes a slab

    def cut(self, device: str, step: int) -> tuple[np.ndarray, int, int]:
        """The next `step` bytes (a multiple of ALIGNMENT, at most SMALL_BYTES) of a slab, as
        (slab, offset, address), without a view of them."""
        lock = self._lock
        lock.acquire()
        try:
            at = self._next
            if at + step > SLAB_BYTES:
                self._slab, self._base = host_bytes(device, SLAB_BYTES)
                at = 0
            self._next = at + step
            return self._slab, at, self._base + at
        finally:
            lock.release()


_slabs = _Slabs()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_slabs._fresh)

# Guards the map counts of every CpuBuffer: maps are rare, and a lock per buffer would cost
# every call's outputs its making.
_map_lock = threading.Lock()


class CpuBuffer(Buffer):
    """A buffer of `llvm_cpu`: a contiguous, aligned uint8 numpy array."""

    def __init__(self, device: Device, storage: np.ndarray) -> None:
        if storage.dtype != np.uint8 or storage.ndim != 1 or not storage.flags.c_contiguous:
            raise ValueError("a CpuBuffer needs a contiguous 1-D uint8 array")
        self._init(device, storage, int(storage.ctypes.data))

    @classmethod
    def allocate(cls, device: Device, size: int) -> CpuBuffer:
        """A new buffer of `size` bytes, 64-byte aligned (OutOfMemoryError: `host_bytes`)."""
        if 0 < size <= SMALL_BYTES:
            return cls._small(device, size, -(-size // ALIGNMENT) * ALIGNMENT)
        buffer = cls.__new__(cls)
        buffer._init(device, *host_bytes(device.id, size))
        return buffer

    @classmethod
    def allocator(cls, device: Device, size: int) -> Callable[[], CpuBuffer]:
        """`allocate(device, size)` as a function of no arguments (a cached call's outputs):
        for a small size, its aligned step worked out once."""
        if not 0 < size <= SMALL_BYTES:
            return partial(cls.allocate, device, size)
        return partial(cls._small, device, size, -(-size // ALIGNMENT) * ALIGNMENT)

    @classmethod
    def _small(cls, device: Device, size: int, step: int) -> CpuBuffer:
        # `step` bytes cut from a slab; the `storage` view is made when first asked.
        buffer = cls.__new__(cls)
        buffer._slab, buffer._at, buffer.address = _slabs.cut(device.id, step)
        buffer.device, buffer.size, buffer._maps = device, size, 0
        return buffer

    def __getattr__(self, name: str) -> np.ndarray:
        # Reached for `storage` only by a small buffer (`_small`), which makes its view of the
        # slab when first asked: most small outputs are only ever read by kernels.
        if name != "storage" or "_slab" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.storage = view = self._slab[self._at : self._at + self.size]
        return view

    def _init(self, device: Device, storage: np.ndarray, address: int) -> None:
        self.device = device
        self.size = storage.size
        self.storage = storage  # the bytes themselves; kernels write here directly
        self.address = address  # what the kernel parameter array holds
        self._maps = 0

    def _map(self, deps: Sequence[Event]) -> None:
        wait_all(deps)
        with _map_lock:
            self._maps += 1

    def read(self, size: int, deps: Sequence[Event] = ()) -> np.ndarray:
        """A copy of the first `size` bytes once `deps` complete (host memory: no map)."""
        wait_all(deps)
        return self.storage[:size].copy()

    def map_current(self, deps: Sequence[Event] = (), *, writable: bool = False) -> np.ndarray:
        self._map(deps)
        return self.storage if writable else read_only_view(self.storage)

    def map_discard(self, deps: Sequence[Event] = ()) -> np.ndarray:
        self._map(deps)
        return self.storage

    def unmap(self) -> Event:
        """End one mapping (maps nest, as in OpenCL). Raises HalError when not mapped."""
        with _map_lock:
            if self._maps == 0:
                raise HalError(f"{self!r} is not mapped")
            self._maps -= 1
        return CompletedEvent()

    @property
    def is_mapped(self) -> bool:
        return self._maps > 0

    def __repr__(self) -> str:
        return f"<CpuBuffer {self.size} bytes at {self.address:#x}>"


class CpuArena(Arena):
    """One aligned allocation; `make_buffer` places buffers in it without copying."""

    def __init__(self, device: Device, size: int, alignment: int = ALIGNMENT) -> None:
        self.device = device
        self.size = size
        self.alignment = alignment
        self.storage, _ = host_bytes(device.id, size, alignment)

    def make_buffer(self, offset: int, size: int) -> CpuBuffer:
        if offset % self.alignment:
            raise ValueError(f"arena offset {offset} is not a multiple of {self.alignment}")
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(
                f"bytes [{offset}, {offset + size}) do not fit an arena of {self.size} bytes"
            )
        return CpuBuffer(self.device, self.storage[offset : offset + size])

    def __repr__(self) -> str:
        return f"<CpuArena {self.size} bytes at {self.storage.ctypes.data:#x}>"
