"""Fixtures of the HAL tests: a private llvm_cpu device per test module."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.hal.kernels import make_device

if TYPE_CHECKING:
    from collections.abc import Iterator

    from hal_llvm.device import LLVMDevice


@pytest.fixture(scope="module")
def cpu_device() -> Iterator[LLVMDevice]:
    """An llvm_cpu device with its own threads, closed after the module's tests."""
    device = make_device()
    yield device
    device.close()
