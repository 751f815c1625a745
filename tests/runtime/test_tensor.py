"""Tensors: allocation, numpy round trips, and the semantics of mmap_current / mmap_discard."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.types import DType

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64"]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(cpu: tile.Device, dtype: str) -> None:
    values = (np.arange(12) % 5).astype(dtype).reshape(3, 4)
    tensor = tile.Tensor.from_numpy(values, cpu)
    assert tensor.shape == (3, 4) and tensor.dtype == np.dtype(dtype)
    assert tensor.nbytes == values.nbytes and tensor.ndim == 2 and tensor.size == 12
    back = tensor.to_numpy()
    assert back.dtype == values.dtype
    np.testing.assert_array_equal(back, values)


def test_round_trip_of_awkward_arrays(cpu: tile.Device) -> None:
    strided = np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(tile.Tensor.from_numpy(strided, cpu).to_numpy(), strided)
    swapped = np.arange(6, dtype=">i4")
    back = tile.Tensor.from_numpy(swapped, cpu).to_numpy()
    assert back.dtype == np.int32
    np.testing.assert_array_equal(back, swapped)
    scalar = tile.Tensor.from_numpy(np.float64(2.5), cpu)
    assert scalar.shape == ()
    assert tile.Tensor.from_numpy(np.array(2.5), cpu).to_numpy() == 2.5


def test_default_device_and_dtype_spellings(cpu: tile.Device) -> None:
    assert tile.Tensor(None, (2,)).device is tile.device()
    assert tile.Tensor("llvm_cpu.0", [2, 3]).dtype == np.float32
    for spelling in ("int16", "i16", np.int16, np.dtype("int16"), DType.INT16):
        assert tile.Tensor(cpu, (1,), spelling).dtype == np.int16
    with pytest.raises(TypeError):
        tile.Tensor(cpu, (1,), "complex64")
    with pytest.raises(ValueError, match="negative"):
        tile.Tensor(cpu, (2, -1))


def test_to_numpy_returns_a_copy(cpu: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(np.ones(3, np.float32), cpu)
    copy = tensor.to_numpy()
    copy[0] = 9
    np.testing.assert_array_equal(tensor.to_numpy(), np.ones(3))


def test_mmap_current_is_read_only_unless_writable(cpu: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3), cpu)
    with tensor.mmap_current() as view:
        assert view.shape == (2, 3) and view.dtype == np.int32
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[0, 0] = 5
        np.testing.assert_array_equal(view, np.arange(6).reshape(2, 3))
    with tensor.mmap_current(writable=True) as view:
        assert view.flags.writeable
        view[1, :] = -1
    np.testing.assert_array_equal(tensor.to_numpy(), [[0, 1, 2], [-1, -1, -1]])


@pytest.mark.parametrize("where", ["cpu", "fake"])
def test_a_read_only_view_cannot_be_made_writeable(
    where: str, request: pytest.FixtureRequest
) -> None:
    # Clearing the flag on a view of writable memory can be undone; a write through such a
    # view would reach the tensor unordered (issue 10). Neither the view nor any view of it
    # can be switched back.
    device = request.getfixturevalue(where)
    tensor = tile.Tensor.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3), device)
    with tensor.mmap_current() as view:
        for derived in (view, view[1:], view.reshape(-1), view.view(np.uint8), view.T):
            with pytest.raises(ValueError, match="WRITEABLE"):
                derived.flags.writeable = True
    np.testing.assert_array_equal(tensor.to_numpy(), np.arange(6).reshape(2, 3))


def test_hal_read_maps_cannot_be_made_writeable(cpu: tile.Device) -> None:
    buffer = cpu.runtime.executor.allocate(8)
    view = buffer.map_current()
    with pytest.raises(ValueError, match="WRITEABLE"):
        view.flags.writeable = True
    buffer.unmap()


def test_mmap_discard_transfers_nothing_in(fake: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(4, dtype=np.int8), fake)
    with tensor.mmap_discard() as view:
        assert view.shape == (4,) and view.flags.writeable
        assert not np.any(view == np.arange(4))  # the fake device fills discarded maps
        view[...] = 7
    np.testing.assert_array_equal(tensor.to_numpy(), [7, 7, 7, 7])


def test_numpy_interop(cpu: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(3, dtype=np.float32), cpu)
    np.testing.assert_array_equal(np.asarray(tensor), [0, 1, 2])
    assert np.asarray(tensor, dtype=np.int64).dtype == np.int64
    with pytest.raises(ValueError, match="without a copy"):
        np.array(tensor, copy=False)
    assert repr(tensor) == "Tensor([0., 1., 2.], dtype=float32, device=llvm_cpu.0)"
    np.testing.assert_array_equal(tensor.numpy(), [0, 1, 2])


def test_copy_to_another_device(cpu: tile.Device, fake: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(5, dtype=np.uint16), cpu)
    moved = tensor.to(fake)
    assert moved.device is fake and moved.dtype == np.uint16
    np.testing.assert_array_equal(moved.to_numpy(), np.arange(5))
