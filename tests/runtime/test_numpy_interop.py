"""numpy interop of tensors: `__array__` with NumPy 2 semantics, DLPack export."""

from __future__ import annotations

import numpy as np
import pytest

import tile

NUMPY_2 = int(np.__version__.split(".")[0]) >= 2


@pytest.fixture
def tensor() -> tile.Tensor:
    return tile.Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), "llvm_cpu.0")


def test_array_is_a_copy_of_the_current_contents(tensor: tile.Tensor) -> None:
    first = np.asarray(tensor)
    assert first.shape == (2, 3) and first.dtype == np.float32 and first.flags.writeable
    first[0, 0] = 99  # the tensor is not changed through the copy
    np.testing.assert_array_equal(np.asarray(tensor), np.arange(6).reshape(2, 3))
    assert np.asarray(tensor, dtype=np.float64).dtype == np.float64
    assert np.array(tensor, copy=True) is not np.array(tensor, copy=True)


@pytest.mark.skipif(not NUMPY_2, reason="copy=False means 'never copy' from NumPy 2 on")
def test_array_without_a_copy_raises(tensor: tile.Tensor) -> None:
    with pytest.raises(ValueError, match="mmap_current"):
        np.asarray(tensor, copy=False)
    with pytest.raises(ValueError):
        tensor.__array__(copy=False)


def test_dlpack_device_of_a_cpu_tensor(tensor: tile.Tensor) -> None:
    assert tensor.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "float64"])
def test_from_dlpack_round_trip(dtype: str) -> None:
    values = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    tensor = tile.Tensor.from_numpy(values, "llvm_cpu.0")
    back = np.from_dlpack(tensor)
    assert back.dtype == values.dtype
    np.testing.assert_array_equal(back, values)


def test_from_dlpack_of_empty_and_0d_tensors() -> None:
    empty = tile.Tensor.from_numpy(np.zeros((0, 3), np.int32), "llvm_cpu.0")
    assert np.from_dlpack(empty).shape == (0, 3)
    scalar = tile.Tensor.from_numpy(np.array(2.5, np.float32), "llvm_cpu.0")
    assert np.from_dlpack(scalar)[()] == 2.5


def test_dlpack_export_waits_for_the_writer() -> None:
    source = "function (A[N]) -> (B) { B = A * 2; }"
    out = tile.Function(source)(A=np.arange(4, dtype=np.float32))["B"]
    np.testing.assert_array_equal(np.from_dlpack(out), [0, 2, 4, 6])


def test_dlpack_requests_that_cannot_be_met(tensor: tile.Tensor) -> None:
    with pytest.raises(BufferError, match="copy"):
        tensor.__dlpack__(copy=False)
    with pytest.raises(BufferError, match="stream"):
        tensor.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="only to the host"):
        tensor.__dlpack__(dl_device=(4, 0))
    assert tensor.__dlpack__(dl_device=(1, 0), copy=True) is not None


@pytest.mark.skipif(not NUMPY_2, reason="np.from_dlpack(copy=...) is NumPy 2")
def test_from_dlpack_copy_keyword(tensor: tile.Tensor) -> None:
    np.testing.assert_array_equal(np.from_dlpack(tensor, copy=True), np.asarray(tensor))
    with pytest.raises(BufferError):
        np.from_dlpack(tensor, copy=False)


def test_a_tensor_off_the_host_exports_only_a_host_copy(fake: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(3, dtype=np.int32), fake)
    assert tensor.__dlpack_device__() == (12, 0)  # not host memory: kDLExtDev
    with pytest.raises(BufferError, match="host-visible"):
        np.from_dlpack(tensor)
    np.testing.assert_array_equal(np.from_dlpack(tensor, device="cpu"), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(tensor), [0, 1, 2])
