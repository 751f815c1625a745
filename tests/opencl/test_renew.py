"""Renewing a device's OpenCL context (`DeviceQueue.renew`, issue 10 item 5): PoCL frees what
its compiles leave behind only once every OpenCL context of the process is released, so the
compiler lets go of the context now and then. Nothing a user holds may notice: buffers keep
their bytes (arena parts included), events their outcome and duration, programs run again
(built anew in the new context), tensors and compiled functions go on working, and no
object of tile holds the old context afterwards."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal_opencl import compiler as compiler_module
from hal_opencl.device import OpenCLDevice
from tests.opencl.harness import download, kernel_list, upload
from tests.opencl.test_compiler import N, add_one
from tile.runtime.api import device_of

if TYPE_CHECKING:
    import hal

POISON = np.full(N, np.nan, np.float32)


def private(device: hal.Device, *, profiling: bool | None = None) -> OpenCLDevice:
    """A second handle on the tests' OpenCL device, with a context of its own."""
    return OpenCLDevice(90, device.cl_device, profiling=profiling)  # type: ignore[attr-defined]


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def test_a_renewal_keeps_buffers_events_and_programs(device: hal.Device) -> None:
    own = private(device)
    try:
        library = own.compiler.build(kernel_list(add_one("renew_add")), own)
        x = values(1)
        source, out = upload(own, x), upload(own, POISON)
        arena = own.executor.make_arena(4096)
        part = arena.make_buffer(256, N * 4)
        view = part.map_discard()
        view[:] = (3 * x).view(np.uint8)
        del view
        part.unmap()
        empty = own.executor.allocate(0)
        launched = own.executor.prepare(library, 0).run([out, source])
        old = own.queue.context
        assert own.queue.renew()
        assert own.queue.context is not old and own.queue.generation == 1
        # Nothing else holds the old context: buffers, programs, kernels, events, the
        # queue all let go of it (our `old` is the one reference left).
        assert old.reference_count == 1
        assert launched.is_complete and launched.exception() is None
        launched.wait()
        np.testing.assert_array_equal(download(out, np.float32), x + 1)
        np.testing.assert_array_equal(download(part, np.float32), 3 * x)
        assert download(empty, np.uint8).size == 0
        # The program is built again in the new context; parts and copies still work.
        own.executor.prepare(library, 0).run([source, part]).wait()
        np.testing.assert_array_equal(download(source, np.float32), 3 * x + 1)
        own.executor.copy(part, 0, out, 0, N * 4).wait()
        np.testing.assert_array_equal(download(out, np.float32), 3 * x)
        inside = arena.make_buffer(0, N * 4)
        own.executor.copy(part, 0, inside, 0, N * 4).wait()  # another part of the arena
        np.testing.assert_array_equal(download(inside, np.float32), 3 * x)
    finally:
        own.close()


def test_events_keep_their_durations(device: hal.Device) -> None:
    own = private(device, profiling=True)
    try:
        library = own.compiler.build(kernel_list(add_one("renew_timed")), own)
        buffers = [upload(own, POISON), upload(own, values(2))]
        launched = own.executor.prepare(library, 0).run(buffers)
        launched.wait()
        before = launched.duration_ns()
        assert before is not None and before >= 0
        assert own.queue.renew()
        assert launched.duration_ns() == before
        assert "complete" in repr(launched)
        done: list[hal.Event] = []
        launched.add_done_callback(done.append)  # a complete event calls back at once
        assert done == [launched]
    finally:
        own.close()


def test_no_renewal_while_a_buffer_is_mapped(device: hal.Device) -> None:
    own = private(device)
    try:
        buffer = upload(own, values(3))
        view = buffer.map_current()
        assert not own.queue.renew()  # the view is the buffer's memory: it cannot move
        assert own.queue.generation == 0
        np.testing.assert_array_equal(view.view(np.float32), values(3))
        del view
        buffer.unmap().wait()
        assert own.queue.renew()
        np.testing.assert_array_equal(download(buffer, np.float32), values(3))
    finally:
        own.close()


def test_the_compiler_renews_after_so_many_builds(
    device: hal.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every program built before the renewals still runs; the renewals happen before a
    build once `RENEW_EVERY` programs were built, on a driver that needs them."""
    monkeypatch.setattr(compiler_module, "RENEW_EVERY", 3)
    monkeypatch.setattr(OpenCLDevice, "renews_context", property(lambda self: True))
    own = private(device)
    try:
        libraries = [
            own.compiler.build(kernel_list(add_one(f"renew_many_{index}")), own)
            for index in range(8)
        ]
        assert own.queue.generation == 2  # before the 4th and the 7th build
        x = np.round(values(4) * 100)  # integers: adding 1 eight times is exact
        buffers = [upload(own, POISON), upload(own, x)]
        for library in libraries:  # each adds one, in the context of the day
            own.executor.prepare(library, 0).run(buffers).wait()
            buffers.reverse()
        np.testing.assert_array_equal(download(buffers[1], np.float32), x + 8)
    finally:
        own.close()


def test_kernels_launched_from_threads_across_renewals(device: hal.Device) -> None:
    own = private(device)
    library = own.compiler.build(kernel_list(add_one("renew_threads")), own)
    failures: list[str] = []

    def work(seed: int) -> None:
        for round_ in range(25):
            x = values(100 * seed + round_)
            source, out = upload(own, x), upload(own, POISON)
            own.executor.prepare(library, 0).run([out, source])
            got = download(out, np.float32)  # ordered after the launch by the queue
            if not np.array_equal(got, x + 1):
                failures.append(f"thread {seed} round {round_}: {got[:4]}")

    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        renewed = 0
        while any(thread.is_alive() for thread in threads):
            renewed += own.queue.renew()
        for thread in threads:
            thread.join()
        assert failures == []
        assert renewed >= 1
    finally:
        own.close()


def test_tensors_and_functions_survive_a_renewal(device: hal.Device) -> None:
    """At tile's level, on the tests' own OpenCL device: a tensor made before, a compiled
    function called before and after, an output read after."""
    where = device_of(device)
    scale = tile.Function("function (A[N], B[N]) -> (C) { C = A * 2 + B; }")
    a, b = values(5), values(6)
    held = tile.Tensor.from_numpy(b, device=where)
    first = scale(a, held, device=where)["C"]
    assert device.queue.renew()  # type: ignore[attr-defined]
    np.testing.assert_allclose(first.numpy(), a * 2 + b, rtol=1e-6)
    np.testing.assert_array_equal(held.numpy(), b)
    again = scale(a, held, device=where)["C"]
    np.testing.assert_allclose(again.numpy(), a * 2 + b, rtol=1e-6)


def test_a_renewal_that_fails_leaves_everything_as_it_was(device: hal.Device) -> None:
    """The host short of memory to park a buffer in: the buffers parked before it go back,
    the context stays, and the error says why."""
    own = private(device)
    try:
        library = own.compiler.build(kernel_list(add_one("renew_failed")), own)
        x = values(7)
        arena = own.executor.make_arena(1024)
        part = arena.make_buffer(0, N * 4)
        own.executor.copy(upload(own, x), 0, part, 0, N * 4).wait()
        source, out = upload(own, x), upload(own, POISON)
        victim = upload(own, x)  # parked last: everything else is parked before it fails

        def refuse() -> None:
            raise MemoryError("no room on the host")

        victim.park = refuse  # type: ignore[method-assign]
        old = own.queue.context
        with pytest.raises(MemoryError, match="no room"):
            own.queue.renew()
        assert own.queue.context is old and own.queue.generation == 0
        np.testing.assert_array_equal(download(part, np.float32), x)
        own.executor.prepare(library, 0).run([out, source]).wait()
        np.testing.assert_array_equal(download(out, np.float32), x + 1)
        del victim.park
        assert own.queue.renew()
        np.testing.assert_array_equal(download(victim, np.float32), x)
        np.testing.assert_array_equal(download(part, np.float32), x)
    finally:
        own.close()


def test_a_build_goes_on_when_its_renewal_fails(
    device: hal.Device, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compiler_module, "RENEW_EVERY", 0)
    monkeypatch.setattr(OpenCLDevice, "renews_context", property(lambda self: True))
    own = private(device)

    def refuse() -> bool:
        raise MemoryError("no room on the host")

    try:
        monkeypatch.setattr(own.queue, "renew", refuse)
        library = own.compiler.build(kernel_list(add_one("renew_refused")), own)
        assert "renewing the OpenCL context of opencl.90 failed" in caplog.text
        buffers = [upload(own, POISON), upload(own, values(8))]
        own.executor.prepare(library, 0).run(buffers).wait()
        np.testing.assert_array_equal(download(buffers[0], np.float32), values(8) + 1)
    finally:
        own.close()
