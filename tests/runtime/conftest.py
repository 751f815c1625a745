"""Fixtures of the API tests: the fake kernel generator, the CPU device and a fake device."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

import pytest

import tile
from tests.runtime.fakes import FakeDevice, FakeGenerator
from tile.runtime.api import device_of

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def generator(monkeypatch: pytest.MonkeyPatch) -> FakeGenerator:
    """Stands in for `tile.lower.generate.generate_program` for the duration of a test."""
    fake = FakeGenerator()
    module = types.ModuleType("tile.lower.generate")
    module.generate_program = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tile.lower.generate", module)
    return fake


@pytest.fixture
def cpu(generator: FakeGenerator) -> Iterator[tile.Device]:
    """`llvm_cpu.0` with an empty program cache (programs of other tests' fakes are gone)."""
    device = tile.device("llvm_cpu.0")
    device.clear_cache()
    yield device
    device.clear_cache()


@pytest.fixture
def fake_hal(generator: FakeGenerator) -> Iterator[FakeDevice]:
    """A fresh out-of-order fake HAL device; its held operations are released afterwards."""
    device = FakeDevice()
    yield device
    device.release()


@pytest.fixture
def fake(fake_hal: FakeDevice) -> tile.Device:
    """The API device of `fake_hal`."""
    return device_of(fake_hal)
