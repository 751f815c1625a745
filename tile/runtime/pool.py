"""Recycled output buffers (design 8.8): the buffers of a device's dead call outputs, kept
for the outputs of later calls of the same size.

Buffers of at least POOL_MIN_BYTES that a call's outputs had are kept, up to POOL_BYTES per
device. A fresh buffer's pages are faulted in by the first kernel that writes them: 64 MB cost
13-20 ms on PoCL and llvm_cpu.0 (transpose 4096: 16 ms of kernel, 49 ms a call). Smaller
buffers come from the allocator's heap, already mapped. `tile.runtime.device.BufferState`
gives its buffer back when it dies, if nothing else holds the buffer.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hal.interfaces import Buffer, Event

POOL_MIN_BYTES = 1 << 20
POOL_BYTES = 256 << 20


class BufferPool:
    """The buffers of dead output states of one device (`BufferState.__del__`), by size,
    with the events that last used them: one is handed out again only once they have all
    completed, so nothing queued before still touches its bytes. Thread-safe."""

    def __init__(self, capacity: int = POOL_BYTES) -> None:
        self.capacity = capacity
        self._lock = threading.RLock()  # `give` runs in __del__, maybe inside `take`
        self._kept: list[tuple[int, Buffer, list[Event]]] = []  # oldest first
        self._bytes = 0

    def take(self, nbytes: int) -> Buffer | None:
        """A kept buffer of `nbytes` bytes that no command uses any more, or None."""
        with self._lock:
            for at, (size, buffer, pending) in enumerate(self._kept):
                if size == nbytes and all(event.is_complete for event in pending):
                    del self._kept[at]
                    self._bytes -= nbytes
                    return buffer
            return None

    def give(self, buffer: Buffer, nbytes: int, pending: Sequence[Event]) -> None:
        """Keep `buffer` (of `nbytes` bytes, last used by `pending`), dropping the oldest
        kept buffers while the pool holds more than its capacity."""
        if nbytes < POOL_MIN_BYTES or nbytes > self.capacity:
            return
        with self._lock:
            self._kept.append((nbytes, buffer, list(pending)))
            self._bytes += nbytes
            while self._bytes > self.capacity:
                self._bytes -= self._kept.pop(0)[0]

    def clear(self) -> None:
        """Release every kept buffer."""
        with self._lock:
            self._kept.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        """The bytes kept."""
        return self._bytes
