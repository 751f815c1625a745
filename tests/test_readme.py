"""README.md cannot rot: its Python blocks run (in order, in one namespace, as a reader would
paste them) and each `python -m tile` command of its shell blocks runs from the repository
root and exits 0; every example script in examples/ runs too."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import tile

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
PYTHON = [code for language, code in BLOCKS if language == "python"]
COMMANDS = [
    line.split("#")[0].strip()
    for language, code in BLOCKS
    if language == "sh"
    for line in code.splitlines()
    if "python -m tile " in line
]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))


def test_the_readme_has_what_this_file_runs() -> None:
    assert len(PYTHON) >= 2 and len(COMMANDS) >= 5
    for name in ("matmul.tile", "conv.tile", "softmax.tile", "quick_start.py"):
        assert (REPO / "examples" / name).is_file(), name
        assert name in README, name


def test_python_blocks_run_and_the_quick_start_prints_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    printed = []
    for index, code in enumerate(PYTHON):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"README.md python block {index + 1}", "exec"), namespace)
        printed.append(out.getvalue())
    quick_start = printed[0]
    # numpy pads the columns to one width: "[[0.9287656 , 0.9630059 ],"
    assert re.match(r"Tensor\(\[\[\d\.\d* *, +\d\.\d* *\],\n", quick_start), quick_start
    assert "dtype=float32, device=" in quick_start
    difference = float(quick_start.splitlines()[-1])
    assert difference < 1e-5


def _opencl_ids() -> set[str]:
    return {item.id for item in tile.devices() if item.id.startswith("opencl")}


@pytest.mark.parametrize("command", COMMANDS)
def test_command_runs(command: str) -> None:
    words = shlex.split(command)
    assert words[0].endswith("python") and words[1:3] == ["-m", "tile"], command
    wanted = [word for word in words if word.startswith("opencl.")]
    if wanted and not set(wanted) <= _opencl_ids():
        pytest.skip(f"no {wanted[0]} here")
    result = subprocess.run(
        [sys.executable, *words[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stderr}"
    assert result.stdout.strip(), command


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda path: path.name)
def test_example_script_runs(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, f"{script.name}: exit {result.returncode}\n{result.stderr}"
    assert "matches" in result.stdout, result.stdout
