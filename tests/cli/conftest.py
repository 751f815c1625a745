"""Fixtures of the command-line tests: Tile files, and every subprocess run started at once.

Each `python -m tile` process spends most of its time importing and compiling, so the
subprocess cases are started together (`COMMANDS`) on first use and collected by name; the
tests then only read their results.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FILES = {
    "matmul.tile": (
        "function (A[M, K], B[K, N]) -> (C) {\n  C[m, n: M, N] = +(A[m, k] * B[k, n]);\n}\n"
    ),
    "softmax.tile": (
        "function (X[R, C]) -> (Y) {\n"
        "  M[r, 0: R, 1] = >(X[r, c]);\n"
        "  E = exp(X - M);\n"
        "  S[r, 0: R, 1] = +(E[r, c]);\n"
        "  Y = E / S;\n"
        "}\n"
    ),
    "scale.tile": "function (X, F) -> (Y) {\n  Y = X * F;\n}\n",
    # A missing semicolon after the contraction: the parser stops at line 3, column 3.
    "syntax.tile": (
        "function (A[M, K], B[K, N]) -> (C) {\n"
        "  C[m, n: M, N] = +(A[m, k] * B[k, n])\n"
        "  D = C;\n"
        "}\n"
    ),
    # A bitwise operator on floats: a type error found when binding.
    "types.tile": "function (A) -> (P) {\n  P = A & 1;\n}\n",
}


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def _no_tile_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process tests see no TILE_ variables of the caller's (a test sets its own)."""
    for key in [key for key in os.environ if key.startswith("TILE_")]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def tile_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiles")
    for name, text in FILES.items():
        (folder / name).write_text(text)
    return folder


def _environment(**extra: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TILE_")}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    environment.update(extra)
    return environment


# name -> (arguments after `python -m tile`, extra environment); {dir} is the files' folder,
# {dump} a fresh dump folder.
COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "devices": (["devices"], {}),
    "info": (["info"], {}),
    "run": (
        ["run", "{dir}/softmax.tile", "--shape", "X=4x8", "--repeat", "3", "--check"],
        {},
    ),
    "dump": (
        ["dump", "{dir}/matmul.tile", "--shape", "A=16x8", "B=8x4", "--stage", "kernels"],
        {},
    ),
    "grad_source": (["dump", "{dir}/matmul.tile", "--grad", "C:A", "--stage", "source"], {}),
    "grad_run": (
        ["run", "{dir}/softmax.tile", "--grad", "Y", "--shape", "X=3x5", "DY=3x5", "--check"],
        {},
    ),
    "bad_grad": (["dump", "{dir}/matmul.tile", "--grad", "Z:A", "--stage", "source"], {}),
    "bad_file": (["run", "{dir}/syntax.tile", "--shape", "A=2x2", "B=2x2"], {}),
    "debug": (
        ["run", "{dir}/softmax.tile", "--shape", "X=4x8", "--repeat", "1"],
        {"TILE_DEBUG": "4", "TILE_DUMP_DIR": "{dump}"},
    ),
}


@pytest.fixture(scope="session")
def dump_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dump")


@pytest.fixture(scope="session")
def cli(
    tile_files: Path, dump_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Result]:
    """Every command of COMMANDS, run in parallel, by name. Output goes to files, so that
    no process waits on a full pipe while another is read."""
    logs = tmp_path_factory.mktemp("logs")
    started = {}
    for name, (arguments, extra) in COMMANDS.items():
        args = [item.format(dir=tile_files) for item in arguments]
        environment = _environment(
            **{key: value.format(dump=dump_folder) for key, value in extra.items()}
        )
        with open(logs / f"{name}.out", "w") as out, open(logs / f"{name}.err", "w") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "tile", *args],
                stdout=out,
                stderr=err,
                env=environment,
                cwd=tile_files,
            )
        started[name] = (args, process)
    results = {}
    for name, (args, process) in started.items():
        process.wait(timeout=300)
        results[name] = Result(
            tuple(args),
            process.returncode,
            (logs / f"{name}.out").read_text(),
            (logs / f"{name}.err").read_text(),
        )
    return results
