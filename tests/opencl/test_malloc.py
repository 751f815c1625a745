"""While PoCL builds, the C heap maps its 2 MiB + 1 program buffers on their own, even after
glibc's dynamic mmap threshold rose past them (hal_opencl.malloc, issue 10)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from hal_opencl.malloc import mapped_large_allocations

POCL_READ_BUFFER = (2 << 20) + 1  # pocl_read_file's first allocation


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_large_allocations_are_mapped_while_building() -> None:
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc older than 2.33 (no mallinfo2)")
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    def mapped_blocks_with(size: int) -> int:
        """How many more blocks are mapped while a block of `size` bytes is allocated."""
        before = libc.mallinfo2().hblks
        pointer = libc.malloc(size)
        after = libc.mallinfo2().hblks
        libc.free(pointer)
        return after - before

    libc.free(libc.malloc(16 << 20))  # freeing a large mapped block raises the threshold
    with mapped_large_allocations():
        assert mapped_blocks_with(POCL_READ_BUFFER) == 1
    assert mapped_blocks_with(POCL_READ_BUFFER) == 0  # afterwards: the heap, as before
