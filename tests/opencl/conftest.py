"""Fixtures of the OpenCL tests: the registry's first OpenCL device (PoCL in CI). OpenCL is a
shipped backend, so its absence fails the tests instead of skipping them (ARCHITECTURE 12).
Every test of this folder carries the `opencl` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

import hal

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.opencl)


@pytest.fixture(scope="session")
def device() -> hal.Device:
    try:
        return hal.get_driver("opencl").default_device()
    except hal.DeviceUnavailableError as error:
        pytest.fail(f"opencl must be available here: {error}")
