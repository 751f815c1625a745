"""The notebooks are committed without outputs, and `make test` executes every one of them
(with nbmake, under `MPLBACKEND=Agg`); here only what can be checked without running them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_the_walkthroughs_are_there() -> None:
    names = [path.name for path in NOTEBOOKS]
    assert names == [
        "01_quick_start.ipynb",
        "02_life_of_a_tile_function.ipynb",
        "03_performance.ipynb",
        "04_training.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_without_outputs(path: Path) -> None:
    notebook = json.loads(path.read_text())
    assert notebook["nbformat"] == 4
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code, "a notebook without code"
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, cell["source"][:2]


def test_make_test_executes_the_notebooks() -> None:
    makefile = (REPO / "Makefile").read_text()

    def recipe(target: str) -> str:
        return makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]

    assert "$(MAKE) --no-print-directory suites" in recipe("test")  # after choosing OpenCL
    assert "MPLBACKEND=Agg $(PY) -m pytest --nbmake notebooks" in recipe("suites")
