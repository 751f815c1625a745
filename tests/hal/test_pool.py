"""The native pool of llvm_cpu's compute threads (hal_llvm.pool): every slice of every launch
runs exactly once, whatever the helpers are doing (spinning, asleep, late, absent), and the
helpers stop when told.

The grid entry point here is hand-written IR that adds 1 to a counter per work-group, so a
work-group run twice, or a slice of one launch run with another's parameters, shows in the
counts; launches of random sizes follow each other with no pause, so helpers that wake late
meet later launches."""

from __future__ import annotations

import ctypes
import random
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from hal_llvm.compiler import compile_module
from hal_llvm.host import usable_cores
from hal_llvm.pool import MAX_SLICES, NativePool, available
from hal_llvm.runtime import spin_seconds
from tests.hal.kernels import make_device

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.skipif(not available(), reason="the native pool needs Linux futexes")

# count(params, begin, end): params holds the address of an int64 array; each work-group g in
# [begin, end) adds 1 to element g.
_COUNT = """
define void @count(ptr %params, i64 %begin, i64 %end) {
entry:
  %array = load ptr, ptr %params, align 8
  %empty = icmp uge i64 %begin, %end
  br i1 %empty, label %done, label %loop
loop:
  %g = phi i64 [ %begin, %entry ], [ %next, %loop ]
  %slot = getelementptr i64, ptr %array, i64 %g
  %old = atomicrmw add ptr %slot, i64 1 monotonic
  %next = add i64 %g, 1
  %more = icmp ult i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


@contextmanager
def counting_device(*, inline: bool = True) -> Iterator[tuple[Any, np.ndarray, Callable[[], None]]]:
    """A device that splits every launch, its counts (one per work-group) and a launch that
    adds 1 to each (with `inline`, on the calling thread where the queue is idle)."""
    device = make_device(split_seconds=0.0)
    try:
        runtime = device.runtime
        counts = np.zeros(64, np.int64)
        params = (ctypes.c_void_p * 1)(counts.ctypes.data)
        module = compile_module(_COUNT, name="test_pool_device")
        entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            module.address("count")
        )

        def launch() -> None:
            runtime.launch(entry, ctypes.addressof(params), 64, inline=inline).wait(timeout=10)

        yield runtime, counts, launch
    finally:
        device.close()


@pytest.fixture(scope="module")
def count_entry() -> tuple[object, int]:
    module = compile_module(_COUNT, name="test_pool_count")
    return module, module.address("count")  # the module is kept alive with the address


def _helpers(pool: NativePool, number: int) -> list[threading.Thread]:
    def serve() -> None:
        seen = pool.bell()
        while True:
            python, seen = pool.work(seen)
            if not python:
                return

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(number)]
    for thread in threads:
        thread.start()
    return threads


def _run_launches(pool: NativePool, entry: int, launches: int, seed: int) -> None:
    rng = random.Random(seed)
    counts = np.zeros(4096, np.int64)
    expected = np.zeros(4096, np.int64)
    params = (ctypes.c_void_p * 1)(counts.ctypes.data)
    for _ in range(launches):
        groups = rng.choice([1, 2, 3, 7, 8, 64, 1000, 4096])
        slices = min(groups, rng.choice([1, 2, 8, 16, 64]))
        pool.launch(entry, ctypes.addressof(params), groups, slices)
        expected[:groups] += 1
    assert np.array_equal(counts, expected)


@pytest.mark.parametrize(("helpers", "spin_seconds"), [(1, 1e-4), (1, 0.0), (3, 1e-4), (3, 0.0)])
def test_every_work_group_runs_once_per_launch(count_entry, helpers, spin_seconds) -> None:
    """Spinning or asleep, one helper or more than the cores: the counts are exact."""
    pool = NativePool(spin_seconds)
    threads = _helpers(pool, helpers)
    try:
        _run_launches(pool, count_entry[1], 3000, seed=helpers)
    finally:
        pool.stop()
        for thread in threads:
            thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)


def test_a_launch_needs_no_helper(count_entry) -> None:
    """The launching thread claims every slice nobody else does (a pool whose helpers never
    started, as in a forked child)."""
    _run_launches(NativePool(1e-4), count_entry[1], 50, seed=7)


def test_helpers_that_start_late_and_a_python_launch(count_entry) -> None:
    """A helper that starts after launches were posted, and one sent back to Python, both go
    on serving later launches."""
    pool = NativePool(1e-4)
    _run_launches(pool, count_entry[1], 20, seed=1)
    threads = _helpers(pool, 2)
    pool.post_python()  # the helpers come back to Python, then wait again
    _run_launches(pool, count_entry[1], 500, seed=2)
    pool.stop()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)


def test_more_slices_than_the_claim_word_counts(count_entry) -> None:
    """Slices beyond what the claim word can count are merged, not lost."""
    pool = NativePool(1e-4)
    groups = MAX_SLICES + 1000
    counts = np.zeros(groups, np.int64)
    params = (ctypes.c_void_p * 1)(counts.ctypes.data)
    pool.launch(count_entry[1], ctypes.addressof(params), groups, groups)
    assert np.all(counts == 1)


def test_the_spin_time_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("TILE_CPU_SPIN_US", raising=False)
    assert spin_seconds() == pytest.approx(100e-6)
    monkeypatch.setenv("TILE_CPU_SPIN_US", "0")
    assert spin_seconds() == 0.0
    monkeypatch.setenv("TILE_CPU_SPIN_US", " 250 ")
    assert spin_seconds() == pytest.approx(250e-6)
    for bad in ("-1", "fast", "nan", "inf"):
        monkeypatch.setenv("TILE_CPU_SPIN_US", bad)
        with pytest.raises(ValueError, match="TILE_CPU_SPIN_US must be a number"):
            spin_seconds()


@pytest.mark.skipif(usable_cores() < 2, reason="needs at least two usable cores")
def test_the_device_runs_split_launches_in_its_pool(monkeypatch) -> None:
    """llvm_cpu's helpers live in the pool, spinning or not, and stop with the device."""
    for spin in ("0", "100"):
        monkeypatch.setenv("TILE_CPU_SPIN_US", spin)
        with counting_device(inline=False) as (runtime, counts, launch):
            for _ in range(200):
                launch()
            assert runtime._pool is not None and np.all(counts == 200)
            helpers = list(runtime._helpers)
        assert helpers and not any(helper.is_alive() for helper in helpers)


@pytest.mark.skipif(usable_cores() < 2, reason="needs at least two usable cores")
@pytest.mark.parametrize("attempt", range(5))
def test_closing_while_another_thread_launches_inline(count_entry, attempt) -> None:
    """The helpers' stop waits for a launch running on another thread: it never cuts one
    short (whose launcher would then wait for slices nobody claims). Each attempt closes
    at a different moment; without that wait, about one in five hung."""
    from hal.errors import HalError

    device = make_device(split_seconds=0.0)
    runtime = device.runtime
    counts = np.zeros(1000, np.int64)
    params = (ctypes.c_void_p * 1)(counts.ctypes.data)
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(count_entry[1])
    launched = []

    def launch_until_closed() -> None:
        while True:
            try:
                runtime.launch(entry, ctypes.addressof(params), 1000, inline=True).wait(10)
            except HalError:
                return
            launched.append(1)

    thread = threading.Thread(target=launch_until_closed, daemon=True)
    thread.start()
    while len(launched) < 50:
        thread.join(timeout=0.001)
    device.close()
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert np.all(counts == len(launched)) or np.all(counts == len(launched) + 1)
