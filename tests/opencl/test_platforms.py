"""Platform order, hidden platforms and selectors (`hal_opencl.platforms`, issue 10): device
ids do not move when a driver is installed, whatever order the ICD loader returns. The driver
tests use fake platforms, so they run without Intel's runtime or Oclgrind installed."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import hal
import tile
from hal_opencl import device as opencl_device
from hal_opencl.platforms import matches, order_platforms, platform_key
from tests import shipped
from tests.shipped import require_opencl

POCL = "Portable Computing Language"
INTEL = "Intel(R) OpenCL"
OCLGRIND = "Oclgrind"
NVIDIA = "NVIDIA CUDA"


def test_platform_keys() -> None:
    assert platform_key(POCL) == "pocl" and platform_key(INTEL) == "intel"
    assert platform_key(OCLGRIND) == "oclgrind"
    assert platform_key("Intel(R) FPGA Emulation Platform for OpenCL(TM)") == "intel-fpga"
    assert platform_key("Intel(R) OpenCL Graphics") == "intel-gpu"
    assert platform_key(NVIDIA) == "nvidia-cuda"
    assert platform_key("The AMD platform (1.2)") == "the-amd-platform-1-2"


def test_order_is_pocl_intel_others_and_debugging_platforms_are_hidden() -> None:
    for loader_order in ([OCLGRIND, NVIDIA, INTEL, POCL], [INTEL, POCL, OCLGRIND, NVIDIA]):
        listed, hidden = order_platforms(loader_order, str)
        assert listed == [POCL, INTEL, NVIDIA] and hidden == [OCLGRIND]


def test_selectors_match_keys_or_their_first_words() -> None:
    keys = ["pocl", "intel", "intel-gpu", "nvidia-cuda"]
    assert matches("intel", keys) == [1]  # exact wins over intel-gpu
    assert matches("INTEL-GPU", keys) == [2] and matches("nvidia", keys) == [3]
    assert matches("nvid", keys) == [] and matches("amd", keys) == []


@dataclass
class FakeDevice:
    name: str


@dataclass
class FakePlatform:
    name: str
    devices: int = 1
    cl_devices: list[FakeDevice] = field(init=False)

    def __post_init__(self) -> None:
        self.cl_devices = [FakeDevice(f"{self.name} device {n}") for n in range(self.devices)]

    def get_devices(self) -> list[FakeDevice]:
        return self.cl_devices


class FakeHalDevice:
    """Stands in for OpenCLDevice, which queries a real cl.Device."""

    def __init__(self, index: int, cl_device: FakeDevice, *, profiling: bool | None) -> None:
        self.id, self.cl_device = f"opencl.{index}", cl_device

    def close(self) -> None:
        pass


def fake_driver(
    monkeypatch: pytest.MonkeyPatch, platforms: list[FakePlatform], broken: tuple[str, ...] = ()
) -> tuple[opencl_device.OpenCLDriver, list[str]]:
    """A driver over fake platforms; devices of `broken` platforms fail the probe as PoCL 3.0
    does on a processor its LLVM does not know. Also returns the names probed so far."""
    probed: list[str] = []

    def problem(cl_device: FakeDevice) -> str | None:
        probed.append(cl_device.name)
        broke = any(cl_device.name.startswith(name) for name in broken)
        return "its compiler rejects every program: unknown target CPU 'generic'" if broke else None

    monkeypatch.setattr(opencl_device.cl, "get_platforms", lambda: platforms)
    monkeypatch.setattr(opencl_device, "compile_problem", problem)
    monkeypatch.setattr(opencl_device, "OpenCLDevice", FakeHalDevice)
    return opencl_device.OpenCLDriver(), probed


def ids(driver: opencl_device.OpenCLDriver) -> dict[str, str]:
    return {device.id: device.cl_device.name for device in driver.devices()}  # type: ignore[attr-defined]


def test_ids_stay_when_drivers_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    before, _ = fake_driver(monkeypatch, [FakePlatform(POCL)])
    assert ids(before) == {"opencl.0": f"{POCL} device 0"}
    loader_order = [FakePlatform(OCLGRIND), FakePlatform(INTEL, 2), FakePlatform(POCL)]
    after, probed = fake_driver(monkeypatch, loader_order)
    assert ids(after) == {
        "opencl.0": f"{POCL} device 0",
        "opencl.1": f"{INTEL} device 0",
        "opencl.2": f"{INTEL} device 1",
    }
    assert not [name for name in probed if name.startswith(OCLGRIND)]  # hidden: not probed
    assert after.platform_keys() == {"pocl": False, "intel": False, "oclgrind": True}
    assert [device_set.key for device_set in after.device_sets()] == ["pocl", "intel"]


def test_selectors_pick_platforms_and_bring_in_hidden_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    platforms = [FakePlatform(OCLGRIND), FakePlatform(INTEL), FakePlatform(POCL)]
    driver, _ = fake_driver(monkeypatch, platforms)
    assert driver.select("pocl").id == "opencl.0" and driver.select("intel").id == "opencl.1"
    grind = driver.select("oclgrind")
    assert grind.id == "opencl.2" and driver.select("oclgrind") is grind
    assert [device.id for device in driver.devices()] == ["opencl.0", "opencl.1", "opencl.2"]
    with pytest.raises(hal.DeviceUnavailableError, match="only pocl, intel, oclgrind"):
        driver.select("nvidia")


def test_pocl_on_an_unknown_processor_leaves_intel_first(monkeypatch: pytest.MonkeyPatch) -> None:
    driver, _ = fake_driver(monkeypatch, [FakePlatform(INTEL), FakePlatform(POCL)], (POCL,))
    assert ids(driver) == {"opencl.0": f"{INTEL} device 0"}
    with pytest.raises(hal.DeviceUnavailableError) as caught:
        driver.select("pocl")
    assert caught.value.unsupported_host and "unknown target CPU" in caught.value.reason


def test_only_a_hidden_platform_lists_nothing_but_can_be_selected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver, _ = fake_driver(monkeypatch, [FakePlatform(OCLGRIND), FakePlatform(POCL)], (POCL,))
    with pytest.raises(hal.DeviceUnavailableError, match="no usable OpenCL device") as caught:
        driver.devices()  # the registry reports this, with the unknown processor
    assert caught.value.unsupported_host
    assert driver.select("oclgrind").id == "opencl.0"
    assert [device.id for device in driver.devices()] == ["opencl.0"]
    with pytest.raises(hal.DeviceUnavailableError, match="the platforms list no devices"):
        fake_driver(monkeypatch, [FakePlatform(POCL, devices=0)])


def test_tile_resolves_backend_selectors(monkeypatch: pytest.MonkeyPatch) -> None:
    first = require_opencl()  # the tested device (tests.shipped), and its platform's key
    sets = hal.get_driver("opencl").device_sets()
    key = next(s.key for s in sets if first in s.devices)  # type: ignore[attr-defined]
    assert tile.device(f"opencl:{key}").id == first.id
    monkeypatch.setenv("TILE_DEVICE", f"opencl:{key}")
    assert tile.device().id == first.id
    with pytest.raises(tile.DeviceNotFound, match="no OpenCL platform 'nowhere' here"):
        tile.device("opencl:nowhere")
    with pytest.raises(tile.DeviceNotFound, match="has no selector"):
        tile.device("llvm:intel")


def test_the_tested_device_is_chosen_by_id_or_selector(monkeypatch: pytest.MonkeyPatch) -> None:
    driver, _ = fake_driver(monkeypatch, [FakePlatform(INTEL), FakePlatform(POCL)])
    chosen = {"opencl.0": "opencl.0", "opencl": "opencl.0", "opencl:intel": "opencl.1"}
    for name, wanted in chosen.items():
        monkeypatch.setattr(shipped, "OPENCL", name)  # as TILE_TEST_OPENCL sets it
        assert shipped.pick(driver).id == wanted
    monkeypatch.setattr(shipped, "OPENCL", "opencl.7")
    with pytest.raises(hal.DeviceUnavailableError, match="TILE_TEST_OPENCL"):
        shipped.pick(driver)
