"""Arithmetic operators on tile.Tensor (tile.ops.tensors) on both shipped devices, against
numpy: tensors, Python numbers and numpy arrays mix; results are new tensors on the same
device."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.shipped import SHIPPED, shipped_devices


@pytest.mark.parametrize("device", SHIPPED)
def test_operators_run_on_the_tensors_device(device: str) -> None:
    shipped_devices()
    random = np.random.default_rng(3)
    x = random.standard_normal((3, 5)).astype(np.float32)
    y = random.standard_normal(5).astype(np.float32)
    a, b = tile.Tensor.from_numpy(x, device), tile.Tensor.from_numpy(y, device)
    cases = {
        "a + b": (a + b, x + y),
        "2 * a - 1": (2 * a - 1, 2 * x - 1),
        "1 - a": (1 - a, 1 - x),
        "a / (b * b + 1)": (a / (b * b + 1), x / (y * y + 1)),
        "3 / (a * a + 1)": (3 / (a * a + 1), 3 / (x * x + 1)),
        "-a": (-a, -x),
        "a ** 2": (a**2, x**2),
        "a @ a.T": (a @ np.ascontiguousarray(x.T), x @ x.T),
        "a @ b": (a @ b, x @ y),
        "a + numpy": (a + y, x + y),
    }
    for text, (got, want) in cases.items():
        assert isinstance(got, tile.Tensor) and got.device.id == a.device.id, text
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=text)
    for text, got, want in [("a < b", a < b, x < y), ("a >= 0", a >= 0, x >= 0)]:
        assert got.dtype == np.bool_ and np.array_equal(got.numpy(), want), text


def test_tensors_keep_identity_equality_and_reject_other_operands() -> None:
    a = tile.Tensor.from_numpy(np.ones(3, np.float32))
    assert a == a and a != tile.Tensor.from_numpy(np.ones(3, np.float32))  # identity
    assert {a: 1}[a] == 1
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError, match="bool"):
        a + True
    with pytest.raises(tile.ops.OpsError, match="do not broadcast"):
        a + np.ones(4, np.float32)
