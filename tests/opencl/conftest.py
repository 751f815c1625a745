"""Fixtures of the OpenCL tests: the registry's first OpenCL device (PoCL in CI). OpenCL is a
shipped backend, so its absence fails the tests instead of skipping them (design 12;
the one exception is in `tests.shipped`).
Every test of this folder carries the `opencl` marker."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.shipped import require_opencl

if TYPE_CHECKING:
    import hal

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.opencl)


@pytest.fixture(scope="session")
def device() -> hal.Device:
    return require_opencl()
