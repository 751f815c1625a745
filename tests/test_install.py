"""`pip install .` ships every package (tile.grad and tile.ops were once left out of a list
written by hand), and the version has one source, pyproject.toml."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

import tile

REPO = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("tile", "semtree", "hal", "hal_llvm", "hal_opencl")


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_package_is_installed() -> None:
    include = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = [
        ".".join(init.parent.relative_to(REPO).parts)
        for top in TOP_LEVEL
        for init in (REPO / top).rglob("__init__.py")
    ]
    assert "tile.grad" in packages and "tile.lower.gpu" in packages
    missing = [name for name in packages if not any(fnmatch.fnmatch(name, p) for p in include)]
    assert missing == []


def test_the_version_is_pyproject_s() -> None:
    version = _pyproject()["project"]["version"]
    assert tile.__version__ == version
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", version)


def test_the_test_extra_builds_the_api_reference() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]["test"]
    assert any(item.startswith("pdoc") for item in extras)
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^docs: ", makefile, re.MULTILINE)
    suites = makefile.split("\nsuites:", 1)[1].split("\n\n", 1)[0]
    assert "docs" in suites  # `make test` builds it
