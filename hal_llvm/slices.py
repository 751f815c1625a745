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

The module is compiled once per process, on first use (a few milliseconds). Threads that
wait in Python share a launch through `hal_llvm.split.SplitLaunch`.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import TYPE_CHECKING

from hal_llvm.compiler import compile_module

if TYPE_CHECKING:
    from collections.abc import Callable

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
"""

# (grid entry address, params address, groups, slices, address of the int64 counter)
_PROTOTYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
)
_lock = threading.Lock()


@functools.cache
def _compiled() -> tuple[object, Callable[[int, int, int, int, int], None]]:
    module = compile_module(_SOURCE, name="tile_run_slices")
    return module, _PROTOTYPE(module.address("tile_run_slices"))


def slice_runner() -> Callable[[int, int, int, int, int], None]:
    """`tile_run_slices` (module docstring), compiled on the first call. The JIT module
    stays alive for the process (cached with it)."""
    with _lock:
        return _compiled()[1]
