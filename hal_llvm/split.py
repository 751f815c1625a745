"""One split launch shared by compute threads that wait in Python (7.4): where the native
pool (`hal_llvm.pool`) is not available, and everywhere for grid entry points that are
Python functions (tests). Each thread that takes part claims slices from one counter: in
one ctypes call of the native loop of `hal_llvm.slices` where the entry point is a native
function, else here, slice by slice.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    GridEntry = Callable[[int, int, int], None]  # (params address, begin, end)
    # () -> the native loop (grid entry address, params, groups, slices, counter address)
    SliceRunner = Callable[[], Callable[[int, int, int, int, int], None]]


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
