"""Out of memory on `opencl.0`: `tile.TileOutOfMemory` for a tensor beyond what the device
allows in one buffer (checked before the driver is asked: PoCL grants more buffers than it
has memory and allocates on first use), and for a call whose temporary does not fit, which
changes no bound tensor and keeps no buffer (issue 10). The driver's own refusals are in
test_memory.py; the same cases on llvm_cpu.0 in tests/runtime/test_out_of_memory.py."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tests.runtime.test_out_of_memory import (
    THREE_TEMPORARIES,
    assert_unchanged,
    check_error,
    snapshot,
    survivors,
)

if TYPE_CHECKING:
    import hal


@pytest.fixture
def opencl(device: hal.Device) -> tile.Device:
    found = tile.device(device.id)
    found.clear_cache()
    return found


def test_a_tensor_beyond_the_device_limit(opencl: tile.Device, device: hal.Device) -> None:
    limit = device.capabilities.max_allocation  # type: ignore[attr-defined]
    elements = limit // 4 + 1
    for shape in ((elements,), (10**6, 10**6), (2**62,)):
        with pytest.raises(tile.TileOutOfMemory, match="allows in one buffer") as caught:
            tile.Tensor(opencl, shape, "float32", name="X")
        check_error(caught.value, "X", shape, 4 * int(np.prod(shape, dtype=object)), opencl.id)


def test_a_temporary_beyond_the_device_limit_changes_nothing(
    opencl: tile.Device, device: hal.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = device.capabilities.max_allocation  # type: ignore[attr-defined]
    n = 1024
    m = limit // (4 * n) + 1  # T (n x m float32) is one buffer over the limit
    if n * m >= 2**31:
        pytest.skip(f"T would pass the element limit before the device's ({limit} bytes)")
    rng = np.random.default_rng(2)
    tensors = {
        "A": tile.Tensor.from_numpy(rng.random(n, np.float32), opencl),
        "B": tile.Tensor.from_numpy(rng.random(m, np.float32), opencl),
        "C": tile.Tensor.from_numpy(np.full(n, -1, np.float32), opencl),
        "D": tile.Tensor.from_numpy(np.full(n, -2, np.float32), opencl),
    }
    before = snapshot(tensors)
    executor = opencl.runtime.executor
    made: list[weakref.ref] = []
    allocate = executor.allocate

    def tracked(size: int) -> hal.Buffer:
        buffer = allocate(size)
        made.append(weakref.ref(buffer))
        return buffer

    monkeypatch.setattr(executor, "allocate", tracked)
    inputs = {"A": tensors["A"], "B": tensors["B"]}
    invoker = tile.Invoker(THREE_TEMPORARIES, inputs, {"C": tensors["C"], "D": tensors["D"]})
    with pytest.raises(tile.TileOutOfMemory) as caught:
        invoker.invoke()
    check_error(caught.value, "T", (n, m), 4 * n * m, opencl.id)
    del caught
    assert len(made) == 2 and survivors(made) == 0  # S and E, released
    (program,) = opencl.runtime.programs._entries.values()
    assert program.temporaries is None
    assert_unchanged(tensors, before)
