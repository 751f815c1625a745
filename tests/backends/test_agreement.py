"""Every conformance case gives the same result on llvm_cpu.0 and opencl.0, within the case's
tolerance (issue 4: the two shipped devices agree). Each device is also checked against the
case's expected outputs by the conformance runner's own `compare_output`, as `run.py` checks
them (so `make test` need not run `run.py` too: `make conformance` does), and agreement on a
wrong answer cannot pass."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tests.conftest import SHARED
from tests.lower.test_conformance import RUNNER
from tests.shipped import SHIPPED as DEVICES
from tests.shipped import shipped_devices

if TYPE_CHECKING:
    from pathlib import Path

CASES = sorted((SHARED / "conformance/cases").glob("*.json")) + sorted(
    (SHARED / "spec/cases").glob("*.json")
)


def close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """Elementwise agreement as the conformance runner judges it (NaN matches NaN, an infinity
    matches the same infinity, integers and bools exactly)."""
    if want.dtype == np.bool_ or not np.issubdtype(want.dtype, np.floating):
        return got == want
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        same = (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & (g == w))
        return same | (np.abs(g - w) <= atol + rtol * np.where(np.isinf(w), 0.0, np.abs(w)))


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()  # the shipped devices are required (tests.shipped)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_devices_agree(path: Path, devices: dict[str, tile.Device]) -> None:
    case = json.loads(path.read_text())
    with np.load(path.parent / case.get("data_file", case["name"] + ".npz")) as arrays:
        inputs = {name: arrays["input__" + name] for name in case["inputs"]}
        expected = {name: arrays["expected__" + name] for name in case["outputs"]}
    tolerance = case.get("tolerance", {})
    rtol, atol = float(tolerance.get("rtol", 0.0)), float(tolerance.get("atol", 0.0))
    results = {d: tile.run(case["source"], inputs, device=devices[d]) for d in DEVICES}
    assert RUNNER is not None
    for name, want in expected.items():
        for device in DEVICES:
            assert name in results[device], f"{device} did not return {name}"
            ok, message, _ = RUNNER.compare_output(
                name, results[device][name], want, case["outputs"][name], tolerance, False
            )
            assert ok, f"{device}: {message}"
        first, second = (np.asarray(results[d][name]) for d in DEVICES)
        assert first.dtype == second.dtype == want.dtype, name
        assert first.shape == second.shape == want.shape, name
        assert np.all(close(second, first, rtol, atol)), f"the devices disagree on {name}"
