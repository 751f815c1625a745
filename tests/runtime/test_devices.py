"""Device enumeration and selection: defaults, TILE_DEVICE, prefixes, unknown ids."""

from __future__ import annotations

import pytest

import tile
from semtree.kernel import HardwareSettings
from tile.runtime.api import device_of


def test_llvm_cpu_is_listed_first_and_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILE_DEVICE", raising=False)
    listed = tile.devices()
    assert listed[0].id == "llvm_cpu.0"
    assert all(item.available for item in listed)
    assert tile.device() is listed[0]


def test_device_attributes() -> None:
    cpu = tile.device("llvm_cpu.0")
    assert cpu.kind == "cpu"
    assert cpu.available
    assert cpu.description.startswith("CPU (via LLVM)")
    assert isinstance(cpu.settings, HardwareSettings)
    assert "llvm_cpu.0" in repr(cpu)


def test_unavailable_backends_are_listed_on_request() -> None:
    available = tile.devices()
    everything = tile.devices(include_unavailable=True)
    assert everything[: len(available)] == available
    for item in everything[len(available) :]:
        assert not item.available and item.description and item.settings is None
        with pytest.raises(tile.DeviceNotFound, match="unavailable"):
            tile.Tensor(item, (2,))


def test_devices_are_singletons_per_id_and_prefix() -> None:
    cpu = tile.device("llvm_cpu.0")
    assert tile.device("llvm_cpu") is cpu  # the driver's id prefix
    assert tile.device("llvm") is cpu  # the registry's backend name
    assert tile.devices()[0] is cpu


def test_tile_device_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILE_DEVICE", "llvm_cpu")
    assert tile.device().id == "llvm_cpu.0"
    monkeypatch.setenv("TILE_DEVICE", "tpu.3")
    with pytest.raises(tile.DeviceNotFound) as caught:
        tile.device()
    assert "TILE_DEVICE" in str(caught.value) and "'tpu.3'" in str(caught.value)
    # An explicit id wins over the environment.
    assert tile.device("llvm_cpu.0").id == "llvm_cpu.0"


def test_unknown_id_lists_the_available_ones() -> None:
    with pytest.raises(tile.DeviceNotFound) as caught:
        tile.device("llvm_cpu.7")
    error = caught.value
    assert isinstance(error, LookupError) and isinstance(error, tile.TileError)
    assert "llvm_cpu.0" in error.available
    assert "available devices: llvm_cpu.0" in str(error)
    assert error.code == "E-DEVICE"
    assert str(error).startswith("error[E-DEVICE]: no device 'llvm_cpu.7'")


def test_device_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="a device is"):
        tile.Tensor(3, (2,))  # type: ignore[arg-type]


def test_hal_devices_wrap_into_singletons(fake_hal: object) -> None:
    wrapped = device_of(fake_hal)  # type: ignore[arg-type]
    assert device_of(fake_hal) is wrapped  # type: ignore[arg-type]
    assert wrapped.kind == "other" and wrapped.available
