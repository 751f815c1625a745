"""The short form of the exit stress test (`tests/stress.py`; `make stress` runs the long one):
a few short processes per scenario on each shipped device, none of which may exit abnormally."""

from __future__ import annotations

import pytest

from tests.shipped import SHIPPED, require_opencl
from tests.stress import SCENARIOS, stress

PROCESSES_PER_DEVICE = 5 * len(SCENARIOS)


@pytest.mark.parametrize("device", SHIPPED)
def test_processes_exit_cleanly(device: str) -> None:
    if device.startswith("opencl"):
        require_opencl()  # skips only where the driver cannot compile for this processor
    outcomes = stress([device], PROCESSES_PER_DEVICE, report=lambda _: None)
    assert len(outcomes) == PROCESSES_PER_DEVICE
    failures = [outcome.describe() for outcome in outcomes if outcome.abnormal]
    assert not failures, "\n".join(failures)
