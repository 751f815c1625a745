"""`python -m tile` as a user runs it: one subprocess per case (started together, conftest)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import tile

if TYPE_CHECKING:
    from pathlib import Path

    from tests.cli.conftest import Result


def _ok(result: Result) -> Result:
    assert result.returncode == 0, f"{result.args}: exit {result.returncode}\n{result.stderr}"
    return result


def test_devices_lists_every_loaded_device(cli: dict[str, Result]) -> None:
    out = _ok(cli["devices"]).stdout
    assert out.splitlines()[0].split() == ["ID", "KIND", "DESCRIPTION", "CAPABILITIES"]
    for item in tile.devices():
        (row,) = [line for line in out.splitlines() if line.startswith(item.id)]
        assert item.kind in row and item.description in row and "simd" in row
    assert re.search(r"^llvm_cpu\.0 \*", out, re.MULTILINE)  # the default device
    for item in tile.devices(include_unavailable=True):
        if not item.available:
            assert f"unavailable: {item.id}: {item.description}" in out


def test_info_has_what_a_bug_report_needs(cli: dict[str, Result]) -> None:
    out = _ok(cli["info"]).stdout
    assert out.startswith("tile-hal ")
    for needed in ("python 3.", "numpy ", "llvmlite ", "platforms:", "llvm: host: llvm_cpu.0"):
        assert needed in out
    assert re.search(r"^  llvm_cpu\.0 \(cpu\): ", out, re.MULTILINE)
    assert "vec_size=" in out  # the settings fingerprint


def test_run_check_times_and_compares_every_device(cli: dict[str, Result]) -> None:
    out = _ok(cli["run"]).stdout
    assert out.splitlines()[:2] == [f"{cli['run'].args[1]}: X f32[4, 8]", "output Y: f32[4, 8]"]
    assert re.search(r"^llvm_cpu\.0 +[\d.]+ +[\d.]+ +\(baseline\)", out, re.MULTILINE)
    others = [item.id for item in tile.devices() if item.id != "llvm_cpu.0"]
    for device_id in others:
        assert re.search(rf"^{re.escape(device_id)} +[\d.]+ +[\d.]+ +Y ", out, re.MULTILINE)
    if others:
        assert "every device agrees within tolerance" in out
    else:
        assert "llvm_cpu.0 agrees with the reference (Y max |diff| " in out


def test_dump_kernels(cli: dict[str, Result]) -> None:
    out = _ok(cli["dump"]).stdout
    assert out.startswith("// kernel list for llvm_cpu.0")
    assert "C[m, n: 16, 4] = +(A[m, k] * B[k, n])" in out and "void tile_0(" in out


def test_gradient_functions_are_dumped_and_run_like_any_other(cli: dict[str, Result]) -> None:
    source = _ok(cli["grad_source"]).stdout
    assert source.startswith("function (A[M, K], B[K, N], DC[M, N]) -> (DA) {")
    assert "G_A[m, k: M, K] = +(G_C[m, n] * B[k, n]);" in source
    run = _ok(cli["grad_run"]).stdout
    assert "output DX: f32[3, 5]" in run and "every device agrees" in run
    bad = cli["bad_grad"]
    assert bad.returncode == 2 and "E-GRAD" in bad.stderr and "'Z' is not an output" in bad.stderr


def test_error_in_the_file_prints_the_caret_and_exits_2(cli: dict[str, Result]) -> None:
    result = cli["bad_file"]
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert re.match(r".*syntax\.tile: error\[E-SYNTAX\] 3:3: ", lines[0])
    assert lines[1] == " 3 |   D = C;"
    assert lines[2] == "   |   ^"


def test_debug_levels_and_dump_directory(cli: dict[str, Result], dump_folder: Path) -> None:
    result = _ok(cli["debug"])
    err = result.stderr
    assert "tile: opened llvm_cpu.0 (cpu): " in err  # 1
    assert "tile: program cache miss, compiling: softmax on llvm_cpu.0" in err  # 2
    assert re.search(r"tile: compiled softmax for llvm_cpu\.0: \d+ kernels? in [\d.]+ ms", err)
    assert re.search(r"tile: kernel tile_\d on llvm_cpu\.0: [\d.]+ ms", err)
    assert re.search(r"tile: tiling tile_0 \(contraction, writes f32\[4, 1\]\): tile ", err)  # 3
    assert "tile: kernel list of softmax for llvm_cpu.0:" in err  # 4
    assert "tile: device code of softmax on llvm_cpu.0:" in err and "define void" in err
    names = sorted(path.name for path in dump_folder.iterdir())
    for suffix in (".tile", ".bound.txt", ".semtree.txt"):
        assert any(
            name.startswith("softmax.llvm_cpu.0.") and name.endswith(suffix) for name in names
        )
    assert any(name.endswith(".ll") for name in names)  # the LLVM backend's own dump
