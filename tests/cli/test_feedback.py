"""Feedback to a user (issue 16, item 4): warnings through Python's `warnings`, W-DEAD,
progress lines for long compiles and runs, errors for misspelled inputs, the version."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tile.cli.main import main
from tile.runtime import debug

if TYPE_CHECKING:
    from collections.abc import Callable

REPO = Path(__file__).resolve().parents[2]

DEAD = "function (A, B) -> (C) {\n  T = A * 2;\n  U = T + 1;\n  C = A + B;\n}"
PREC = "function (A, B, C) -> (O) {\n  O = A ^ B | C;\n}"


def caught(build: Callable[[], object]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        build()
    return [item for item in found if issubclass(item.category, tile.TileWarning)]


def test_dead_statements_are_w_dead_warnings() -> None:
    with pytest.warns(tile.TileWarning, match="W-DEAD"):
        function = tile.Function(DEAD)
    assert [(w.code, w.line, w.column) for w in function.warnings] == [
        ("W-DEAD", 2, 3),
        ("W-DEAD", 3, 3),
    ]
    assert "'T' contributes to no output" in function.warnings[0].message
    live = tile.Function("function (A) -> (C) {\n  T = A * 2;\n  C = T + 1;\n}")
    assert live.warnings == ()


def test_warnings_go_through_python_warnings_with_the_caret() -> None:
    found = caught(lambda: tile.Function(PREC))
    assert len(found) == 1
    text = str(found[0].message)
    assert text.startswith("warning[W-PREC] 2:9: '^' mixed with '|'")
    assert text.endswith(" 2 |   O = A ^ B | C;\n   |         ^")
    assert found[0].message.diagnostic.code == "W-PREC"
    assert found[0].filename == __file__  # attributed to the caller, not to tile's modules


def test_warnings_can_be_filtered_and_made_errors() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", tile.TileWarning)
        with pytest.raises(tile.TileWarning, match="W-DEAD"):
            tile.Function(DEAD + " ")  # a new text: the front end's cache is per text


def test_a_misspelled_input_points_at_the_signature_and_suggests() -> None:
    function = tile.Function("function (A[M, K], Bias[K]) -> (C) {\n  C = A + Bias;\n}")
    a, bias = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    with pytest.raises(tile.TileBindError) as info:
        function(A=a, bias=bias)
    error = info.value
    assert (error.code, error.line, error.column) == ("E-BIND", 1, 20)
    assert "there is no input named 'bias'; did you mean 'Bias'?" in error.message
    assert str(error).splitlines()[1:] == [
        " 1 | function (A[M, K], Bias[K]) -> (C) {",
        "   |                    ^",
    ]
    with pytest.raises(tile.TileBindError) as info:
        function.bind(A=a, b=bias)
    assert "there is no input named 'b'; did you mean 'Bias'?" not in str(info.value)
    assert (info.value.line, info.value.column) == (1, 11)  # no near name: the first input
    with pytest.raises(tile.TileBindError, match="did you mean 'Bias'") as info:
        function.bind(A=a, bais=bias)
    assert (info.value.line, info.value.column) == (1, 20)


def test_a_single_letter_in_the_wrong_case_is_suggested() -> None:
    function = tile.Function("function (A, B) -> (C) { C = A + B; }")
    with pytest.raises(tile.TileBindError, match="no input named 'b'; did you mean 'B'"):
        function(A=np.ones(2, np.float32), b=np.ones(2, np.float32))


def test_progress_lines_for_long_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TILE_DEBUG", raising=False)
    monkeypatch.setattr(debug, "PROGRESS_AFTER", 0.0)  # every compile and wait is "long"
    with debug.progress("quiet"):  # neither the command line nor TILE_DEBUG asks
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TILE_DEBUG", "1")
    with debug.progress("compiling x"):
        pass
    err = capsys.readouterr().err
    assert re.search(r"^tile: compiling x: \d+\.\d s$", err, re.MULTILINE), err
    monkeypatch.setattr(debug, "PROGRESS_AFTER", 3600.0)
    with debug.progress("short"):
        pass
    assert "short" not in capsys.readouterr().err


def test_the_command_line_shows_progress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    monkeypatch.setattr(debug, "PROGRESS_AFTER", 0.0)
    args = [str(tile_files / "matmul.tile"), "--shape", "A=6x5", "B=5x3", "--repeat", "1"]
    assert main(["run", *args]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^tile: compiling matmul for llvm_cpu\.0: \d+\.\d s$", err, re.MULTILINE)
    assert re.search(r"^tile: running matmul: \d+\.\d s$", err, re.MULTILINE), err
    assert not debug.progress_enabled()  # only while the command runs


def test_the_command_line_prints_each_warning_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "dead.tile"
    path.write_text(DEAD)
    assert main(["dump", str(path), "--stage", "ast"]) == 0
    err = capsys.readouterr().err
    assert err.count("W-DEAD") == 2 and f"{path}: warning[W-DEAD] 2:3:" in err
    assert "TileWarning" not in err


def test_versions_are_those_of_pyproject(capsys: pytest.CaptureFixture[str]) -> None:
    declared = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert declared is not None and tile.__version__ == declared.group(1)
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"tile-hal {declared.group(1)}\n"


def test_the_missing_shape_hint_fits_the_header(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "f.tile"
    path.write_text(
        "function (I[N, H, W, C], K[KH, KW, C, F], S[], X) -> (O) {\n"
        "  O[n, y, x, f: N, H - KH + 1, W - KW + 1, F] =\n"
        "      +(I[n, y + i, x + j, c] * K[i, j, c, f]);\n"
        "}\n"
    )
    assert main(["run", str(path), "--shape", "K=3x3x16x8", "--value", "X=1"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("missing: --shape I=4x5x6x16 S=")  # C from K, S is 0-d


def test_assertions_and_what_they_read_are_not_dead() -> None:
    source = "function (M[R, C]) -> (O) {\n  S = R == C;\n  Ok = assert_square(S);\n  O = M * 2;\n}"
    assert tile.Function(source).warnings == ()
