"""The quick pass of the gradient fuzzer (tests.grad.fuzz): random programs of every family of
the differential fuzzer, their gradients checked against central differences, and a share of
them run on both shipped devices against the reference."""

from __future__ import annotations

import pytest

from tests.grad.fuzz import DEFAULT_SEED, run
from tests.shipped import SHIPPED, shipped_devices


@pytest.mark.parametrize("block", range(4))
def test_random_programs_against_central_differences(block: int) -> None:
    counts, failures = run(DEFAULT_SEED, range(50 * block, 50 * block + 50), ())
    assert not failures, "\n".join(failures)
    assert counts["checked"] >= 30, counts  # most programs have a float output to check


@pytest.mark.parametrize("device", SHIPPED)
def test_random_gradient_functions_on_the_devices(device: str) -> None:
    shipped_devices()
    counts, failures = run(DEFAULT_SEED + 1, range(40), (device,))
    assert not failures, "\n".join(failures)
    assert counts["checked"] >= 25, counts
