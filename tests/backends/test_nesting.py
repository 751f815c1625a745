"""Expressions nested up to the parser's limit compile and run on both shipped devices, and
give numpy's answer (issue 9); beyond it the parser stops them (tests/lang/test_nesting)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.lang.test_nesting import ELEMENTWISE, polynomial_program, program
from tests.shipped import SHIPPED, shipped_devices
from tile.lang.parse import MAX_NESTING

A = np.array([0.5, -1.5, 2.0], np.float32)
DEPTH = MAX_NESTING


def expected(build) -> np.ndarray:
    match build.__name__:
        case "chained_add" | "right_add":
            return A * DEPTH
        case "nested_calls" | "nested_negations":
            return A * (-1) ** (DEPTH - 1)
        case _:  # every condition A is true: the innermost A
            return A


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("build", ELEMENTWISE, ids=lambda f: f.__name__)
def test_nesting_at_the_limit_runs(build, device_id: str, devices: dict) -> None:
    out = tile.run(program(build(DEPTH)), {"A": A}, device=devices[device_id])
    np.testing.assert_allclose(np.asarray(out["O"]), expected(build), rtol=1e-6)


@pytest.mark.parametrize("device_id", SHIPPED)
def test_deep_math_at_the_limit_runs(device_id: str, devices: dict) -> None:
    """Alternating `exp` and `log`: every level is a real math call in the kernel."""
    expression = "exp(log(" * (DEPTH // 2 - 1) + "A" + "))" * (DEPTH // 2 - 1)
    x = np.abs(A) + 0.25
    out = tile.run(program(expression), {"A": x}, device=devices[device_id])
    np.testing.assert_allclose(np.asarray(out["O"]), x, rtol=1e-4)


@pytest.mark.parametrize("device_id", SHIPPED)
def test_deep_polynomials_at_the_limit_run(device_id: str, devices: dict) -> None:
    out = tile.run(polynomial_program(DEPTH), {"A": A}, device=devices[device_id])
    np.testing.assert_array_equal(np.asarray(out["O"]), A)
    np.testing.assert_array_equal(np.asarray(out["P"]), np.r_[A, np.zeros(DEPTH - 3, A.dtype)])
