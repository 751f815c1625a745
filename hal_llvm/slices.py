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

The module is compiled once per process, on first use (a few milliseconds). `SplitLaunch`
is one launch shared this way by threads that wait in Python: where the native pool
(`hal_llvm.pool`) is not available, and for grid entry points that are Python functions
(tests) everywhere.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import TYPE_CHECKING

from hal_llvm.compiler import compile_module

if TYPE_CHECKING:
    from collections.abc import Callable

    GridEntry = Callable[[int, int, int], None]  # (params address, begin, end)
    # () -> the native loop (grid entry address, params, groups, slices, counter address)
    SliceRunner = Callable[[], Callable[[int, int, int, int, int], None]]

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


class SplitLaunch:
    """One launch shared between compute threads: slices are claimed from a counter, in
    native code where the entry point is a native function (`hal_llvm.slices`), else here."""

    __slots__ = (
        "active",
        "address",
        "counter",
        "done",
        "entry",
        "error",
        "groups",
        "lock",
        "params",
        "released",
        "runner",
        "slices",
    )

    def __init__(
        self,
        entry: GridEntry,
        params: int,
        groups: int,
        slices: int,
        runner: SliceRunner | None,
    ) -> None:
        self.entry = entry
        self.runner = runner
        self.address = None if runner is None else native_address(entry)
        self.params = params
        self.groups = groups
        self.slices = slices
        self.lock = threading.Lock()
        self.counter = ctypes.c_int64(0)  # the next slice; the native loop adds to it
        self.active = 0  # threads inside `participate`
        self.released = False
        self.error: BaseException | None = None
        # Held until the last slice finishes; the launching thread waits by acquiring it
        # (a lock costs 0.1 µs to create, a threading.Event several µs).
        self.done = threading.Lock()
        self.done.acquire()

    def participate(self) -> None:
        """Run slices until none is left (or one failed); the last thread out once every
        slice is claimed releases `done`."""
        with self.lock:
            self.active += 1
        try:
            if self.runner is not None and self.address is not None:
                self.runner()(
                    self.address,
                    self.params,
                    self.groups,
                    self.slices,
                    ctypes.addressof(self.counter),
                )
            else:
                self._run_here()
        except BaseException as error:
            with self.lock:
                if self.error is None:
                    self.error = error
                self.counter.value = self.slices  # nobody claims further slices
        with self.lock:
            self.active -= 1
            if self.active == 0 and not self.released:
                self.released = True
                self.done.release()

    def _run_here(self) -> None:
        entry, params, groups, slices = self.entry, self.params, self.groups, self.slices
        while True:
            with self.lock:
                index = self.counter.value
                if index >= slices:
                    return
                self.counter.value = index + 1
            entry(params, index * groups // slices, (index + 1) * groups // slices)


def native_address(entry: object) -> int | None:
    """The machine address of a ctypes grid entry point; None for any other callable (tests
    launch Python functions, which run slice by slice from Python)."""
    if not isinstance(entry, ctypes._CFuncPtr):  # ctypes function pointers
        return None
    return ctypes.cast(entry, ctypes.c_void_p).value
