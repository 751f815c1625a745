"""Every shared case binds to the output shapes and dtypes it records, and every program of
spec/errors.json raises a TileError with its code and a position (issue 2 acceptance)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tests.conftest import SHARED

if TYPE_CHECKING:
    from pathlib import Path


def _case_files(folder: str) -> list[Path]:
    return sorted((SHARED / folder).glob("*.json"))


def _load_inputs(path: Path, case: dict) -> dict[str, np.ndarray]:
    data_file = path.parent / case.get("data_file", case["name"] + ".npz")
    with np.load(data_file, allow_pickle=False) as arrays:
        return {name: arrays["input__" + name] for name in case["inputs"]}


CASES = _case_files("spec/cases") + _case_files("conformance/cases")


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case_binds_to_recorded_outputs(path: Path) -> None:
    case = json.loads(path.read_text())
    bound = tile.Function(case["source"]).bind(_load_inputs(path, case))
    outputs = bound.outputs
    for name, spec in case["outputs"].items():
        shape, dtype = outputs[name]
        assert list(shape) == spec["shape"], name
        assert dtype.name == spec["dtype"], name


def test_all_cases_are_found() -> None:
    assert len(CASES) >= 270


def _error_inputs(case: dict) -> dict[str, np.ndarray]:
    inputs = {}
    for name, spec in case["inputs"].items():
        if "data" in spec:
            array = np.array(spec["data"], dtype=spec["dtype"]).reshape(spec["shape"])
        else:
            array = np.zeros(spec["shape"], dtype=spec["dtype"])
        inputs[name] = array
    return inputs


ERRORS = json.loads((SHARED / "spec/errors.json").read_text())["cases"] if SHARED.is_dir() else []


@pytest.mark.parametrize(
    "case", ERRORS, ids=[f"{i:02d}-{c['error']}" for i, c in enumerate(ERRORS)]
)
def test_error_case_raises_its_code(case: dict) -> None:
    with pytest.raises(tile.TileError) as caught:
        tile.Function(case["source"]).bind(_error_inputs(case))
    error = caught.value
    assert error.code == case["error"], str(error)
    assert error.line >= 1
    assert error.column >= 1
    text = str(error)
    assert case["error"] in text
    assert "^" in text, text
