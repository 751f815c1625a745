"""Where llvm_cpu's helpers run (hal_llvm.placement): before a split launch they are allowed
every core of the process but the launcher's, so that a helper woken by the launch never
shares the launcher's core (a 3x3 convolution after 3 ms of work on the main thread: 0.86 ->
0.58 ms on a 2-core VM). The launching thread is pinned to one core and then another here,
and each helper's affinity mask is read back after each launch."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import hal_llvm.placement as placement
from hal_llvm.host import usable_cores
from hal_llvm.placement import HelperPlacement
from tests.hal.test_pool import counting_device

two_cores = pytest.mark.skipif(usable_cores() < 2, reason="needs at least two usable cores")


def _launch_from(cpu: int, launch) -> frozenset[int]:
    """Run `launch()` on a new thread pinned to `cpu`; the cores it ran on (one)."""
    seen: list[int] = []

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
        launch()
        seen.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    return frozenset(*seen)


@two_cores
def test_helpers_are_kept_off_the_launching_threads_core() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    with counting_device() as (runtime, counts, launch):
        launch()  # starts the threads
        helpers = [h.native_id for h in runtime._helpers]
        assert helpers and runtime._placement.active
        for cpu in (cpus[0], cpus[-1], cpus[0]):
            assert _launch_from(cpu, launch) == {cpu}
            for helper in helpers:
                assert os.sched_getaffinity(helper) == set(cpus) - {cpu}
        assert np.all(counts == 4)


@two_cores
def test_a_refused_affinity_stops_the_placing_and_nothing_else(monkeypatch) -> None:
    def refuse(pid: int, mask: object) -> None:
        raise PermissionError("not here")

    monkeypatch.setattr(placement.os, "sched_setaffinity", refuse)
    with counting_device() as (runtime, counts, launch):
        for _ in range(5):
            launch()
        assert not runtime._placement.active
        assert np.all(counts == 5)


def test_one_core_or_no_helper_places_nothing(monkeypatch) -> None:
    monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {3})
    assert not HelperPlacement([os.getpid()]).active
    monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {0, 1})
    assert not HelperPlacement([]).active
    calls = []
    monkeypatch.setattr(placement.os, "sched_setaffinity", lambda pid, mask: calls.append(mask))
    monkeypatch.setattr(placement, "_current_cpu_function", lambda: lambda: 1)
    placed = HelperPlacement([11, 12])
    assert placed.active
    placed.before_launch()
    placed.before_launch()  # the same core: no change to make
    assert calls == [frozenset({0}), frozenset({0})]
    placed._current_cpu = lambda: 0
    placed.before_launch()
    assert calls[2:] == [frozenset({1}), frozenset({1})]
