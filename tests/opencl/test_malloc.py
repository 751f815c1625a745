"""While PoCL builds, the C heap maps its 2 MiB + 1 program buffers on their own, even after
glibc's dynamic mmap threshold rose past them (hal_opencl.malloc, issue 10).

The check runs in a fresh interpreter: in a long-lived one (this test process, after thousands
of tests) the heap may hold a free chunk large enough for the buffer, and malloc serves it
from there whatever the threshold, so the count of mapped blocks says nothing."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHECK = """
import ctypes

from hal_opencl.malloc import mapped_large_allocations

POCL_READ_BUFFER = (2 << 20) + 1  # pocl_read_file's first allocation


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


def mapped_blocks_with(size):
    before = libc.mallinfo2().hblks
    pointer = libc.malloc(size)
    after = libc.mallinfo2().hblks
    libc.free(pointer)
    return after - before


libc.free(libc.malloc(16 << 20))  # freeing a large mapped block raises the threshold
with mapped_large_allocations():
    assert mapped_blocks_with(POCL_READ_BUFFER) == 1, "not mapped while building"
assert mapped_blocks_with(POCL_READ_BUFFER) == 0, "afterwards: the heap, as before"
print("ok")
"""


def _has_mallinfo2() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
@pytest.mark.skipif(platform.libc_ver()[0] == "glibc" and not _has_mallinfo2(),
                    reason="glibc older than 2.33 (no mallinfo2)")  # fmt: skip
def test_large_allocations_are_mapped_while_building() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
