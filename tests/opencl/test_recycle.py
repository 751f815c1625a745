"""Replacing the device's OpenCL context (`hal_opencl.recycle`, issue 10): tensors, arenas,
events and compiled programs made before a replacement keep working after it, the old
context is referred to by nothing (so the driver frees it), a host map postpones the
replacement, deferred commands go to the new context, and replacements happen, every
`TILE_OPENCL_RECYCLE` programs, while several threads call functions."""

from __future__ import annotations

import gc
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

import tile
from hal.events import SettableEvent
from hal_opencl.recycle import VARIABLE, recycle_limit
from tests.opencl.harness import download, upload

if TYPE_CHECKING:
    from hal_opencl.device import OpenCLDevice

SOURCE = """
function (A[N, M], B[M]) -> (C, D) {
  C[n: N] = +(A[n, m] * B[m]);
  D = A * 2;
}"""


def released(context: cl.Context, seconds: float = 10.0) -> bool:
    """Whether nothing but `context` (our own handle) refers to the driver's context."""
    deadline = time.monotonic() + seconds
    while True:
        gc.collect()
        if context.get_info(cl.context_info.REFERENCE_COUNT) == 1:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # the watcher thread drops its old events once it saw them complete


def inputs(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    random = np.random.default_rng(seed)
    return random.random((n, m), dtype=np.float32), random.random(m, dtype=np.float32)


def check(outputs: dict[str, tile.Tensor], a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_allclose(outputs["C"].numpy(), a @ b, rtol=1e-5)
    np.testing.assert_array_equal(outputs["D"].numpy(), a * 2)


def test_tensors_and_programs_survive_a_replacement(device: OpenCLDevice) -> None:
    function = tile.Function(SOURCE)
    a, b = inputs(7, 5)
    kept = tile.Tensor.from_numpy(a, device.id)
    before = function(device=device.id, A=kept, B=b)  # compiled and run in the old context
    old, generation = device.queue.context, device.queue.generation
    assert device.recycler.recycle()
    assert device.queue.generation == generation + 1 and device.queue.context != old
    check(before, a, b)  # outputs written before the replacement
    np.testing.assert_array_equal(kept.numpy(), a)
    after = function(device=device.id, A=kept, B=b)  # the same program, built again
    check(after, a, b)
    with kept.mmap_current(writable=True) as view:  # a tensor written after it
        view[0, 0] = 100
    a[0, 0] = 100
    check(function(device=device.id, A=kept, B=b), a, b)
    assert released(old), "something still holds the replaced context"


def test_arenas_events_and_deferred_commands_move(device: OpenCLDevice) -> None:
    executor = device.executor
    alignment = executor.buffer_alignment
    arena = executor.make_arena(2 * alignment)
    first, second = arena.make_buffer(0, alignment), arena.make_buffer(alignment, alignment)
    for part, value in ((first, 1), (second, 2)):
        part.map_discard()[:] = value
        part.unmap().wait()
    source = upload(device, np.arange(64, dtype=np.uint8))
    target = executor.allocate(64)
    done = executor.copy(source, 0, target, 0, 64)
    done.wait()
    gate = SettableEvent("gate")
    deferred = executor.copy(target, 0, first, 0, 64, [gate])  # waits on the host
    old = device.queue.context
    assert device.recycler.recycle()
    assert done.is_complete and done.exception() is None  # settled, outcome kept
    gate.set_result()
    deferred.wait()  # enqueued in the new context, with the moved buffers
    assert download(first, np.uint8)[:64].tolist() == list(range(64))
    assert download(second, np.uint8).tolist() == [2] * alignment
    third = arena.make_buffer(alignment, alignment)  # the arena itself moved too
    assert download(third, np.uint8).tolist() == [2] * alignment
    del third
    assert released(old)


def test_a_host_map_postpones_the_replacement(device: OpenCLDevice, monkeypatch) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(8, dtype=np.float32), device.id)
    generation = device.queue.generation
    with tensor.mmap_current() as view:
        assert not device.recycler.recycle()
        monkeypatch.setenv(VARIABLE, "1")
        function = tile.Function(SOURCE)
        a, b = inputs(3, 11)  # a new program: a safe point, but the map is alive
        check(function(device=device.id, A=a, B=b), a, b)
        assert device.queue.generation == generation
        assert view.tolist() == list(range(8))
    a, b = inputs(3, 12)  # the next build replaces it
    check(function(device=device.id, A=a, B=b), a, b)
    assert device.queue.generation > generation
    assert tensor.numpy().tolist() == list(range(8))


def test_replaced_every_n_programs(device: OpenCLDevice, monkeypatch) -> None:
    monkeypatch.setenv(VARIABLE, "3")
    assert recycle_limit(device.capabilities.platform) == 3
    function = tile.Function(SOURCE)
    a0, b0 = inputs(4, 4)
    first = function(device=device.id, A=a0, B=b0)
    start = device.recycler.replacements
    for m in range(5, 15):
        a, b = inputs(4, m, m)
        check(function(device=device.id, A=a, B=b), a, b)
    assert device.recycler.replacements - start >= 3
    check(first, a0, b0)
    check(function(device=device.id, A=a0, B=b0), a0, b0)  # the first program, built again
    monkeypatch.setenv(VARIABLE, "0")
    start = device.recycler.replacements
    for m in range(15, 18):
        a, b = inputs(4, m, m)
        check(function(device=device.id, A=a, B=b), a, b)
    assert device.recycler.replacements == start  # turned off


def test_replacements_while_threads_call_functions(device: OpenCLDevice, monkeypatch) -> None:
    monkeypatch.setenv(VARIABLE, "2")
    function = tile.Function(SOURCE)
    shared = np.arange(40, dtype=np.float32).reshape(8, 5)
    kept = tile.Tensor.from_numpy(shared, device.id)
    start = device.recycler.replacements
    failures: list[BaseException] = []

    def caller(seed: int) -> None:
        try:
            for step in range(8):
                a, b = inputs(2 + seed, 3 + step % 5 + seed, seed * 100 + step)
                check(function(device=device.id, A=a, B=b), a, b)
                b = np.ones(5, np.float32)
                check(function(device=device.id, A=kept, B=b), shared, b)
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    def reader() -> None:  # holds maps now and then, which postpone replacements
        try:
            for _ in range(40):
                np.testing.assert_array_equal(kept.numpy(), shared)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=caller, args=(seed,)) for seed in range(4)]
    threads.append(threading.Thread(target=reader))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    if failures:
        raise failures[0]
    assert device.recycler.replacements - start >= 2
    np.testing.assert_array_equal(kept.numpy(), shared)


def test_only_platforms_that_need_it() -> None:
    assert recycle_limit("Portable Computing Language") > 0
    assert recycle_limit("Intel(R) OpenCL") == 0
