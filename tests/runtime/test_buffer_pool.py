"""The buffers of dead call outputs are handed to later calls' outputs of the same size
(tile.runtime.pool.BufferPool): never while a command still uses them, never while anything
else holds them, and the reused bytes never show through in a result."""

from __future__ import annotations

import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import tile
from hal.events import SettableEvent
from tests.conftest import REPO
from tests.shipped import SHIPPED, require_opencl
from tile.runtime.pool import POOL_MIN_BYTES, BufferPool

BIG = POOL_MIN_BYTES


class Bytes:
    """A stand-in for a HAL buffer."""


def test_a_buffer_comes_back_only_for_its_size() -> None:
    pool = BufferPool()
    buffer = Bytes()
    pool.give(buffer, BIG, [])
    assert pool.nbytes == BIG
    assert pool.take(BIG + 4) is None
    assert pool.take(BIG) is buffer
    assert pool.take(BIG) is None and pool.nbytes == 0


def test_small_and_oversized_buffers_are_not_kept() -> None:
    pool = BufferPool(capacity=4 * BIG)
    pool.give(Bytes(), BIG - 1, [])
    pool.give(Bytes(), 5 * BIG, [])
    assert pool.nbytes == 0
    assert pool.take(BIG - 1) is None and pool.take(5 * BIG) is None


def test_a_buffer_waits_for_the_commands_that_last_used_it() -> None:
    pool = BufferPool()
    writer, reader = SettableEvent("writer"), SettableEvent("reader")
    busy, idle = Bytes(), Bytes()
    pool.give(busy, BIG, [writer, reader])
    assert pool.take(BIG) is None
    writer.set_result()
    assert pool.take(BIG) is None  # the reader still runs
    pool.give(idle, BIG, [])
    assert pool.take(BIG) is idle  # a later, idle buffer goes first
    reader.set_exception(RuntimeError("a failed reader is done too"))
    assert pool.take(BIG) is busy


def test_the_oldest_buffers_go_when_the_pool_is_full() -> None:
    pool = BufferPool(capacity=3 * BIG)
    buffers = [Bytes() for _ in range(4)]
    for buffer in buffers:
        pool.give(buffer, BIG, [])
    assert pool.nbytes == 3 * BIG
    taken = {id(pool.take(BIG)) for _ in range(3)}
    assert taken == {id(buffer) for buffer in buffers[1:]}
    pool.give(Bytes(), BIG, [])
    pool.clear()
    assert pool.nbytes == 0 and pool.take(BIG) is None


def test_the_oldest_go_first_across_sizes_and_buffers_taken_are_not_counted() -> None:
    pool = BufferPool(capacity=3 * BIG)
    first, double, second, third = Bytes(), Bytes(), Bytes(), Bytes()
    pool.give(first, BIG, [])
    pool.give(double, 2 * BIG, [])
    assert pool.take(BIG) is first  # out again: no longer among the oldest
    pool.give(second, BIG, [])
    pool.give(third, BIG, [])  # 4 x BIG kept: the oldest still kept, `double`, goes
    assert pool.nbytes == 2 * BIG and pool.take(2 * BIG) is None
    assert pool.take(BIG) is second and pool.take(BIG) is third


def test_the_pool_stays_small_over_many_calls() -> None:
    """Buffers given and taken back ten thousand times leave no trace; a full pool of two sizes
    keeps dropping its oldest buffer, of either size."""
    pool = BufferPool(capacity=4 * BIG)
    for _ in range(10_000):
        buffer = Bytes()
        pool.give(buffer, BIG, [])
        assert pool.take(BIG) is buffer
    assert pool.nbytes == 0 and len(pool._order) <= 64 + 2
    given = [(Bytes(), BIG + (n % 2)) for n in range(1000)]
    for buffer, size in given:
        pool.give(buffer, size, [])
    assert pool.nbytes == 3 * BIG + 2  # the last three, of sizes BIG + 1, BIG, BIG + 1
    kept = [pool.take(BIG + 1), pool.take(BIG), pool.take(BIG + 1)]
    assert {id(buffer) for buffer in kept} == {id(buffer) for buffer, _ in given[-3:]}
    assert len(pool._order) <= 2 * 3 + 64


# An output with unwritten elements (the odd ones), which must read 0 whatever the buffer
# held before: a reused buffer is full of the previous call's values (COPY's, none 0).
STRIDED = "function (I[N]) -> (O) { O[2 * i: 2 * N] = =(I[i]); }"
COPY = "function (I[N]) -> (O) { O[i: N] = =(I[i]); }"
N = BIG // 4 // 2 + 7  # O: just over POOL_MIN_BYTES


def _expected(values: np.ndarray) -> np.ndarray:
    out = np.zeros(2 * values.size, np.float64)
    out[::2] = values
    return out


@pytest.mark.parametrize("device_id", SHIPPED)
def test_calls_reuse_dead_outputs_and_write_every_element(device_id: str) -> None:
    if device_id.startswith("opencl"):
        require_opencl()
    device = tile.device(device_id)
    device.clear_cache()
    function, copy = tile.Function(STRIDED), tile.Function(COPY)
    random = np.random.default_rng(7)
    first = random.random(2 * N, dtype=np.float32) + 1
    result = copy(device=device, I=first)["O"]
    np.testing.assert_array_equal(np.asarray(result), first)
    buffer = weakref.ref(result._state.buffer)
    del result  # the output dies: its buffer goes to the pool
    assert buffer() is not None and device.runtime.pool.nbytes >= 8 * N
    for _ in range(2):
        second = random.random(N, dtype=np.float32) + 1
        again = function(device=device, I=second)["O"]
        assert again._state.buffer is buffer()
        np.testing.assert_array_equal(np.asarray(again), _expected(second))
        del again
    device.clear_cache()
    assert device.runtime.pool.nbytes == 0


@pytest.mark.parametrize("device_id", SHIPPED)
def test_live_outputs_and_held_buffers_are_never_reused(device_id: str) -> None:
    if device_id.startswith("opencl"):
        require_opencl()
    device = tile.device(device_id)
    device.clear_cache()
    function = tile.Function(STRIDED)
    ones, twos = np.ones(N, np.float32), np.full(N, 2, np.float32)
    kept = function(device=device, I=ones)["O"]
    other = function(device=device, I=twos)["O"]
    assert other._state.buffer is not kept._state.buffer
    held = other._state.buffer  # something besides the output holds its buffer
    del other
    assert device.runtime.pool.nbytes == 0
    third = function(device=device, I=twos)["O"]
    assert third._state.buffer is not held and third._state.buffer is not kept._state.buffer
    np.testing.assert_array_equal(np.asarray(kept), _expected(ones))
    np.testing.assert_array_equal(np.asarray(third), _expected(twos))
    device.clear_cache()


EXIT_SCRIPT = """
import sys
import numpy as np
import tile
device = tile.device(sys.argv[1])
function = tile.Function("function (I[M, N]) -> (O) { O[n, m: N, M] = =(I[m, n]); }")
x = np.ones((700, 600), np.float32)
first = function(device=device, I=x)["O"]
second = function(device=device, I=x)["O"]  # still running, maybe, at exit
first.wait()
del first
assert device.runtime.pool.nbytes > 0
"""


@pytest.mark.parametrize("device_id", SHIPPED)
def test_a_process_exits_cleanly_with_buffers_in_the_pool(device_id: str) -> None:
    if device_id.startswith("opencl"):
        require_opencl()
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT, device_id],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert (done.returncode, done.stderr) == (0, "")
