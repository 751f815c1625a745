"""The native loop that runs slices of a split launch on one compute thread (7.4).

Place in the pipeline: the device hands `slice_runner` to its runtime;
`runtime.CpuRuntime.run_grid` splits a large launch into slices of
the work-group range that every compute thread claims from one shared counter. Claiming them
from Python cost a trip through the GIL per slice: each thread came back from the kernel,
waited for the interpreter lock (which the other thread held while it claimed its own
slice), and each hand-over woke a sleeping thread, tens of microseconds on a virtual machine.
A matmul 256 took longer on two threads than on one (Intel Xeon). Here each thread makes
one ctypes call, `tile_run_slices(grid, params, groups, slices, next)`, which claims slices
with an atomic add on `next` and calls the grid entry point for each, until none is left:

    loop: index = atomic next += 1; if index >= slices: return
          grid(params, index * groups / slices, (index + 1) * groups / slices)

Independent launches run together (`LLVMExecutor.run_together`) as one grid of
`tile_run_group`, whose work-group `i` is row `i` of a table (grid entry, params, begin,
end): a slice of one of the launches, or the whole of one too small to split. The runtime
splits that grid like any other, so a launch too small to fill the compute threads runs
beside the others, and no thread waits at a barrier between them.

The module is compiled once per process, on first use (a few milliseconds). Threads that
wait in Python share a launch through `hal_llvm.split.SplitLaunch`.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import TYPE_CHECKING

from hal_llvm.compiler import compile_module
from hal_llvm.grid import GRID_PROTOTYPE

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_SOURCE = """
define void @tile_run_slices(ptr %grid, ptr %params, i64 %groups, i64 %slices, ptr %next) {
entry:
  br label %claim
claim:
  %index = atomicrmw add ptr %next, i64 1 seq_cst
  %more = icmp ult i64 %index, %slices
  br i1 %more, label %run, label %done
run:
  %first = mul i64 %index, %groups
  %begin = udiv i64 %first, %slices
  %following = add i64 %index, 1
  %last = mul i64 %following, %groups
  %end = udiv i64 %last, %slices
  call void %grid(ptr %params, i64 %begin, i64 %end)
  br label %claim
done:
  ret void
}

define void @tile_run_group(ptr %table, i64 %first, i64 %last) {
entry:
  br label %check
check:
  %row = phi i64 [ %first, %entry ], [ %following, %run ]
  %more = icmp ult i64 %row, %last
  br i1 %more, label %run, label %done
run:
  %at = getelementptr [4 x i64], ptr %table, i64 %row
  %grid = load ptr, ptr %at
  %at.params = getelementptr i64, ptr %at, i64 1
  %params = load ptr, ptr %at.params
  %at.begin = getelementptr i64, ptr %at, i64 2
  %begin = load i64, ptr %at.begin
  %at.end = getelementptr i64, ptr %at, i64 3
  %end = load i64, ptr %at.end
  call void %grid(ptr %params, i64 %begin, i64 %end)
  %following = add i64 %row, 1
  br label %check
done:
  ret void
}
"""

# (grid entry address, params address, groups, slices, address of the int64 counter)
_PROTOTYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
)
_lock = threading.Lock()


@functools.cache
def _compiled() -> tuple[
    object, Callable[[int, int, int, int, int], None], Callable[[int, int, int], None]
]:
    module = compile_module(_SOURCE, name="tile_run_slices")
    runner = _PROTOTYPE(module.address("tile_run_slices"))
    return module, runner, GRID_PROTOTYPE(module.address("tile_run_group"))


def slice_runner() -> Callable[[int, int, int, int, int], None]:
    """`tile_run_slices` (module docstring), compiled on the first call. The JIT module
    stays alive for the process (cached with it)."""
    with _lock:
        return _compiled()[1]


def group_entry() -> Callable[[int, int, int], None]:
    """`tile_run_group` (module docstring) as a grid entry point: (table address, first
    row, end row)."""
    with _lock:
        return _compiled()[2]


def group_table(grids: Sequence[tuple[int, int, int, int]]) -> ctypes.Array[ctypes.c_int64]:
    """The rows of `tile_run_group` for launches (grid entry address, params address,
    work-groups, slices): each launch's work-groups cut into that many contiguous slices."""
    rows: list[int] = []
    for address, params, groups, slices in grids:
        for index in range(slices):
            rows += (address, params, index * groups // slices, (index + 1) * groups // slices)
    return (ctypes.c_int64 * len(rows))(*rows)
