"""Keep PoCL's program buffers out of the C heap, where they fragmented it (issue 10).

PoCL reads each cached program file into a buffer of 2 MiB + 1 byte, shrinks it with
`realloc` and keeps it while the program lives (`pocl_read_file`). glibc's malloc maps a
block that large on its own, unless its dynamic mmap threshold has risen past it, which it
does once a larger mapped block is freed (a big numpy array, say). Then the buffers come from
the heap, and each shrunk one pins the heap around it: about 1.2 MB of resident memory per
live program, growing with every new one after the program cache started to evict
(+24 MB over 800 new shapes, and 140 MB more than needed at any time).

`mapped_large_allocations()` sets the threshold to 1 MiB while PoCL builds, so that those
buffers are mapped on their own and unmapped with their program. Setting it fixes the
threshold, which ends glibc's dynamic adjustment, so afterwards it is set where that
adjustment ends: 32 MiB (`DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit systems), with the trim
threshold at twice that. Without glibc this does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
WHILE_BUILDING = 1 << 20
AFTERWARDS = 32 << 20

_lock = threading.Lock()


def _find_mallopt() -> Callable[[int, int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


_mallopt = _find_mallopt()


@contextlib.contextmanager
def mapped_large_allocations() -> Iterator[None]:
    """Within the block, the C heap maps every allocation of 1 MiB or more on its own."""
    if _mallopt is None:
        yield
        return
    with _lock:
        _mallopt(M_MMAP_THRESHOLD, WHILE_BUILDING)
        try:
            yield
        finally:
            _mallopt(M_MMAP_THRESHOLD, AFTERWARDS)
            _mallopt(M_TRIM_THRESHOLD, 2 * AFTERWARDS)
