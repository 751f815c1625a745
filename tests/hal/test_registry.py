"""The driver registry: lazy backends, recorded failures, one broken backend never breaks
another (ARCHITECTURE.md 5.4)."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import hal
from hal import registry
from hal.errors import DeviceUnavailableError, UnknownBackendError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch):
    """A registry with empty caches, restored (caches and backend table) afterwards."""
    monkeypatch.setattr(registry, "_drivers", {})
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    return registry


def test_llvm_loads_and_lists_its_device() -> None:
    driver = hal.get_driver("llvm")
    assert driver.name == "llvm" and driver.id_prefix == "llvm_cpu"
    device = driver.default_device()
    assert device.id == "llvm_cpu.0"
    assert device.kind is hal.DeviceKind.CPU
    assert device.description.startswith("CPU (via LLVM): ")
    assert hal.get_driver("llvm") is driver  # cached for the process


def test_enumerate_lists_llvm_first_and_explains_missing_backends() -> None:
    devices, failures = registry.enumerate()
    assert devices[0].id == "llvm_cpu.0"
    listed = {device.id.split(".")[0] for device in devices}
    failed = {failure.backend for failure in failures}
    # Every backend either contributed devices or says why it did not.
    assert {"llvm_cpu"} <= listed
    assert "opencl" in failed or "opencl" in listed
    for failure in failures:
        assert failure.reason
        assert str(failure).startswith(f"{failure.backend}: ")


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(UnknownBackendError, match="known backends: llvm, opencl"):
        hal.get_driver("cuda")


def test_backend_without_make_driver_is_unavailable_with_a_reason(fresh_registry) -> None:
    module = types.ModuleType("hal_fake_without_driver")
    sys.modules["hal_fake_without_driver"] = module
    try:
        fresh_registry._BACKENDS["fake"] = "hal_fake_without_driver"
        with pytest.raises(DeviceUnavailableError, match="no make_driver") as caught:
            fresh_registry.get_driver("fake")
        assert caught.value.backend == "fake"
        # Cached: the same failure again, and the llvm backend is unaffected.
        with pytest.raises(DeviceUnavailableError) as again:
            fresh_registry.get_driver("fake")
        assert again.value is caught.value
        devices, failures = fresh_registry.enumerate()
        assert devices[0].id == "llvm_cpu.0"
        assert any(f.backend == "fake" and "make_driver" in f.reason for f in failures)
    finally:
        del sys.modules["hal_fake_without_driver"]


def test_backend_that_fails_to_import_does_not_break_llvm(fresh_registry) -> None:
    fresh_registry._BACKENDS = {"broken": "hal_no_such_backend", **fresh_registry._BACKENDS}
    devices, failures = fresh_registry.enumerate()
    assert [d.id for d in devices][:1] == ["llvm_cpu.0"]
    (broken,) = [f for f in failures if f.backend == "broken"]
    assert "cannot import hal_no_such_backend" in broken.reason
    assert isinstance(broken.error.__cause__, ModuleNotFoundError)


def test_make_driver_errors_are_wrapped(fresh_registry) -> None:
    module = types.ModuleType("hal_fake_crashing")

    def make_driver():
        raise OSError("no platform found")

    module.make_driver = make_driver  # type: ignore[attr-defined]
    sys.modules["hal_fake_crashing"] = module
    try:
        fresh_registry._BACKENDS["crash"] = "hal_fake_crashing"
        with pytest.raises(DeviceUnavailableError, match="no platform found") as caught:
            fresh_registry.get_driver("crash")
        assert isinstance(caught.value.__cause__, OSError)
    finally:
        del sys.modules["hal_fake_crashing"]


def test_opencl_can_be_disabled(fresh_registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILE_DISABLE_OPENCL", "1")
    with pytest.raises(DeviceUnavailableError, match="TILE_DISABLE_OPENCL"):
        fresh_registry.get_driver("opencl")
    devices, failures = fresh_registry.enumerate()
    assert devices[0].id == "llvm_cpu.0"
    assert [f.backend for f in failures] == ["opencl"]


def test_find_device(fresh_registry) -> None:
    assert fresh_registry.find_device("llvm_cpu.0").id == "llvm_cpu.0"
    with pytest.raises(DeviceUnavailableError, match=r"llvm_cpu\.7"):
        fresh_registry.find_device("llvm_cpu.7")


def test_listing_devices_does_not_import_the_kernel_ir() -> None:
    code = (
        "import sys, hal; devices, _ = hal.registry.enumerate(); "
        "print(devices[0].id, 'semtree.kernel' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.split() == ["llvm_cpu.0", "False"]


def test_semtree_names_are_reexported_lazily() -> None:
    with pytest.raises(AttributeError):
        hal.NoSuchName  # noqa: B018 (the attribute access is the test)
    kernel = pytest.importorskip("semtree.kernel")
    assert hal.KernelList is kernel.KernelList
    assert hal.HardwareSettings is kernel.HardwareSettings
