"""Recycled output buffers (design 8.8): the buffers of a device's dead call outputs, kept
for the outputs of later calls of the same size.

Buffers of at least POOL_MIN_BYTES that a call's outputs had are kept, up to POOL_BYTES per
device. A fresh buffer's pages are faulted in by the first kernel that writes them: 64 MB cost
13-20 ms on PoCL and llvm_cpu.0 (transpose 4096: 16 ms of kernel, 49 ms a call). Intel's CPU
OpenCL runtime maps every buffer of its own, small ones too: a 512 KB output cost 0.1-0.2 ms
of page faults, five times the conversion that wrote it (float32 to float16 of 512 x 512:
0.29 ms a call with a fresh output, 0.05 recycled; AMD Zen 5). Smaller buffers are not worth
keeping. `tile.runtime.device.BufferState` gives its buffer back when it dies, if nothing
else holds the buffer.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hal.interfaces import Buffer, Event

POOL_MIN_BYTES = 1 << 16
POOL_BYTES = 256 << 20


class BufferPool:
    """The buffers of dead output states of one device (`BufferState.__del__`), by size,
    with the events that last used them: one is handed out again only once they have all
    completed, so nothing queued before still touches its bytes. Thread-safe."""

    def __init__(self, capacity: int = POOL_BYTES) -> None:
        self.capacity = capacity
        self._lock = threading.RLock()  # `give` runs in __del__, maybe inside `take`
        # Kept buffers by size, each list oldest first, with serial numbers; `_order` maps the
        # serial of every kept buffer to its size, oldest first, for dropping the oldest.
        self._kept: dict[int, list[tuple[int, Buffer, list[Event]]]] = {}
        self._order: dict[int, int] = {}
        self._serial = 0
        self._bytes = 0

    def take(self, nbytes: int) -> Buffer | None:
        """A kept buffer of `nbytes` bytes that no command uses any more, or None."""
        with self._lock:
            kept = self._kept.get(nbytes, [])
            for at, (serial, buffer, pending) in enumerate(kept):
                if all(event.is_complete for event in pending):
                    self._drop(nbytes, at, serial)
                    return buffer
            return None

    def give(self, buffer: Buffer, nbytes: int, pending: Sequence[Event]) -> None:
        """Keep `buffer` (of `nbytes` bytes, last used by `pending`), dropping the oldest
        kept buffers while the pool holds more than its capacity."""
        if nbytes < POOL_MIN_BYTES or nbytes > self.capacity:
            return
        with self._lock:
            self._serial += 1
            self._kept.setdefault(nbytes, []).append((self._serial, buffer, list(pending)))
            self._order[self._serial] = nbytes
            self._bytes += nbytes
            while self._bytes > self.capacity:
                serial, size = next(iter(self._order.items()))
                self._drop(size, 0, serial)  # the oldest of its size too

    def _drop(self, nbytes: int, at: int, serial: int) -> None:
        """Forget entry `at` of the buffers of `nbytes` bytes, whose serial is `serial`."""
        kept = self._kept[nbytes]
        del kept[at]
        if not kept:
            del self._kept[nbytes]
        del self._order[serial]
        self._bytes -= nbytes

    def clear(self) -> None:
        """Release every kept buffer."""
        with self._lock:
            self._kept.clear()
            self._order.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        """The bytes kept."""
        return self._bytes
