"""Where a split launch's helpers run: on any core the process may use but the launching
thread's own (7.4).

Why: a helper that sleeps (after `TILE_CPU_SPIN_US` idle) is woken by the launcher, and
Linux places a woken thread near its waker when the other cores look busy. On a 2-core VM,
after a call that kept one core busy (numpy, torch, or Python work on the main thread), the
scheduler thread woke on the idle core, woke the helper onto that same core, and both then
shared it for the whole launch: the other core fell idle, but the kernel does not move a
thread that ran within the last half millisecond. A 3x3 convolution took 0.86 ms instead of
0.45 (AMD EPYC Zen 5, llvm_cpu.0), every time it followed 1-10 ms of work on the main thread.

So before a split launch, the launcher looks up the core it runs on, and, when that core
changed since the last launch, allows each helper every core of the process's affinity mask
but that one. A helper then always wakes on another core. Nothing is pinned to one core, so
the kernel still balances the helpers among the rest. Where the host cannot tell the
current core, or refuses a change of affinity, helpers are left where the kernel puts them.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def _current_cpu_function() -> Callable[[], int] | None:
    """libc's `sched_getcpu` (a vDSO read on Linux), or None where there is none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = []
    return function


class HelperPlacement:
    """Keeps the helper threads `helper_ids` (native thread ids) off the launcher's core."""

    __slots__ = ("_away_from", "_cpus", "_current_cpu", "_helpers")

    def __init__(self, helper_ids: Sequence[int]) -> None:
        self._helpers = tuple(helper_ids)
        try:
            self._cpus = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # no affinity masks on this platform
            self._cpus = frozenset()
        usable = len(self._cpus) > 1 and bool(self._helpers)
        self._current_cpu = _current_cpu_function() if usable else None
        self._away_from = -1  # the core the helpers were last kept off

    @property
    def active(self) -> bool:
        """Whether helpers are placed at all (a current core, two cores, some helpers)."""
        return self._current_cpu is not None

    def before_launch(self) -> None:
        """Called on the launching thread just before it posts a split launch."""
        current_cpu = self._current_cpu
        if current_cpu is None:
            return
        cpu = current_cpu()
        if cpu == self._away_from or cpu < 0:
            return
        self._away_from = cpu
        allowed = self._cpus - {cpu}
        try:
            for helper in self._helpers:
                os.sched_setaffinity(helper, allowed)
        except OSError:  # a mask changed under us, or a sandbox forbids it: stop placing
            self._current_cpu = None
