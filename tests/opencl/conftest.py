"""Fixtures of the OpenCL tests: the registry's first OpenCL device (PoCL in CI). OpenCL is a
shipped backend, so its absence fails the tests instead of skipping them (ARCHITECTURE 12)."""

from __future__ import annotations

import pytest

import hal


@pytest.fixture(scope="session")
def device() -> hal.Device:
    try:
        return hal.get_driver("opencl").default_device()
    except hal.DeviceUnavailableError as error:
        pytest.fail(f"opencl must be available here: {error}")
