"""On/off environment switches (`hal.environment.flag`): one spelling rule for every variable."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tile
from hal import registry
from hal.environment import flag, lookup, unset
from hal.errors import DeviceUnavailableError

NEGATE = "function (A[N]) -> (B) { B = -A; }"
ON = ["1", "true", "TRUE", "True", "yes", "YES", "on", "On", " 1 ", "yes\n"]
OFF = ["", "0", "false", "FALSE", "no", "No", "off", "OFF", " 0 ", "  "]


@pytest.mark.parametrize("value", ON)
def test_on_spellings(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILE_TEST_SWITCH", value)
    assert flag("TILE_TEST_SWITCH")


@pytest.mark.parametrize("value", OFF)
def test_off_spellings(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILE_TEST_SWITCH", value)
    assert not flag("TILE_TEST_SWITCH")


def test_unset_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILE_TEST_SWITCH", raising=False)
    assert not flag("TILE_TEST_SWITCH")


@pytest.mark.parametrize("value", ["1", "yes", "true", "On"])
def test_every_on_spelling_disables_opencl(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_drivers", {})
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setenv("TILE_DISABLE_OPENCL", value)
    with pytest.raises(DeviceUnavailableError, match=f"disabled by TILE_DISABLE_OPENCL={value}"):
        registry.get_driver("opencl")
    devices, failures = registry.enumerate()
    assert [device.id for device in devices] == ["llvm_cpu.0"]
    assert [failure.backend for failure in failures] == ["opencl"]


def test_off_spellings_leave_opencl_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the switch off the registry loads the backend as usual (the process's own driver,
    # or the reason it is unavailable here, which is never the variable).
    monkeypatch.setenv("TILE_DISABLE_OPENCL", "no")
    try:
        registry.get_driver("opencl")
    except DeviceUnavailableError as error:
        assert "TILE_DISABLE_OPENCL" not in error.reason


@pytest.mark.parametrize("value", ["true", "yes", "on"])
def test_profile_switch(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kernel times on llvm_cpu.0 are recorded only when the invocation asks for profiling.
    monkeypatch.setenv("TILE_PROFILE", value)
    run = tile.Invoker(NEGATE, {"A": np.ones(4, np.float32)}, device="llvm_cpu.0").invoke()
    assert all(duration is not None for _, duration in run.profile())
    monkeypatch.setenv("TILE_PROFILE", "off")
    run = tile.Invoker(NEGATE, {"A": np.ones(4, np.float32)}, device="llvm_cpu.0").invoke()
    assert all(duration is None for _, duration in run.profile())


def test_lookup_sees_every_change_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """`lookup` reads os.environ's own storage: it agrees with os.environ.get through
    setting, changing, deleting, non-ASCII values and a replaced os.environ."""
    name = "TILE_TEST_LOOKUP"
    monkeypatch.delenv(name, raising=False)
    assert lookup(name) == ""
    for value in ("1", "", " on ", "é ü"):
        monkeypatch.setenv(name, value)
        assert lookup(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert lookup(name) == ""
    monkeypatch.setattr(os, "environ", {name: "plain"})
    assert lookup(name) == "plain"


def test_unset_sees_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("TILE_TEST_UNSET_A", "TILE_TEST_UNSET_B")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    assert unset(names)
    monkeypatch.setenv(names[1], "")  # empty counts as unset
    assert unset(names)
    monkeypatch.setenv(names[1], "0")  # set, even to an off value: read it properly
    assert not unset(names)
    monkeypatch.delenv(names[1])
    monkeypatch.setenv(names[0], "1")
    assert not unset(names) and unset(names[1:])
