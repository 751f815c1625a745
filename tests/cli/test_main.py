"""The command line in process (`tile.cli.main.main`): every dump stage, options, usage errors."""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from semtree.types import DType
from tile.cli.inputs import make_inputs, parse_dtypes, parse_shapes, parse_values
from tile.cli.main import main
from tile.cli.run import difference

if TYPE_CHECKING:
    from pathlib import Path


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def matmul(tile_files: Path, *extra: str) -> list[str]:
    return [str(tile_files / "matmul.tile"), "--shape", "A=6x5", "B=5x3", *extra]


# ---- dump -------------------------------------------------------------------------------------


def test_dump_ast_needs_no_shapes(capsys: pytest.CaptureFixture[str], tile_files: Path) -> None:
    status, out, _ = run_main(capsys, "dump", str(tile_files / "softmax.tile"), "--stage", "ast")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "FunctionDef"
    assert "  - InputDecl@1:11(name='X', dims=(Name@1:13(name='R'), Name@1:16(name='C')))" in lines
    assert any(line.strip().startswith("- ContractionStmt@2:3") for line in lines)
    assert "      agg: AggOp.MAX" in lines


def test_dump_bound(capsys: pytest.CaptureFixture[str], tile_files: Path) -> None:
    status, out, _ = run_main(capsys, "dump", *matmul(tile_files, "--stage", "bound"))
    assert status == 0
    assert out.splitlines() == [
        "in    A: f32[6, 5]",
        "in    B: f32[5, 3]",
        "f32[6, 3]  C[m, n] = +(A[m, k] * B[k, n])",
        "out   C: f32[6, 3]",
    ]


def test_dump_flat(capsys: pytest.CaptureFixture[str], tile_files: Path) -> None:
    status, out, _ = run_main(capsys, "dump", *matmul(tile_files, "--stage", "flat"))
    assert status == 0
    assert out.startswith("// kernel 0\nC[m, n: 6, 3] = +(A[m, k] * B[k, n])\n")
    assert "reduce  k: 5" in out and "A  offset 0  strides m: 5  k: 1" in out
    file = str(tile_files / "scale.tile")
    status, out, _ = run_main(capsys, "dump", file, "--shape", "X=4", "F=", "--stage", "flat")
    assert status == 0 and out.startswith("// no contractions")


def test_dump_kernels_for_a_chosen_device(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    args = matmul(tile_files, "--stage", "kernels", "--device", "llvm_cpu")
    status, out, _ = run_main(capsys, "dump", *args)
    assert status == 0
    assert out.startswith("// kernel list for llvm_cpu.0 (")
    assert "// tile_0: contraction, global " in out and "void tile_0(" in out


def test_dump_llvm(capsys: pytest.CaptureFixture[str], tile_files: Path) -> None:
    status, out, _ = run_main(capsys, "dump", *matmul(tile_files, "--stage", "llvm"))
    assert status == 0
    assert out.startswith("// LLVM IR, optimised (O3) as it is JIT-compiled: matmul on llvm_cpu.0")
    assert "define void @tile_0__grid(" in out


def test_dump_opencl_shows_code_or_says_why_not(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    status, out, err = run_main(capsys, "dump", *matmul(tile_files, "--stage", "opencl"))
    if any(item.id.startswith("opencl.") for item in tile.devices()):
        assert status == 0
        assert out.startswith("// OpenCL C: matmul on opencl.") and "__kernel" in out
    else:
        assert status == 1 and out == ""
        assert err.startswith("error: no opencl device is available (")


def test_dump_backend_stage_refuses_another_backend_device(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    args = matmul(tile_files, "--stage", "opencl", "--device", "llvm_cpu.0")
    status, _, err = run_main(capsys, "dump", *args)
    assert status == 2 and "--stage opencl needs a opencl device, not llvm_cpu.0" in err


# ---- devices and run -----------------------------------------------------------------------------


def test_devices_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_main(capsys, "devices", "--json")
    assert status == 0
    rows = json.loads(out)
    available = [row["id"] for row in rows if row["available"]]
    assert available == [item.id for item in tile.devices()]
    (cpu,) = [row for row in rows if row.get("id") == "llvm_cpu.0"]
    assert cpu["kind"] == "cpu" and cpu["default"] and cpu["capabilities"].startswith("simd ")


def test_run_prints_compile_and_median_times(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    status, out, _ = run_main(capsys, "run", *matmul(tile_files, "--repeat", "3"))
    assert status == 0
    assert "matmul.tile: A f32[6, 5], B f32[5, 3]\noutput C: f32[6, 3]\n" in out
    assert re.search(
        r"^llvm_cpu\.0: compile [\d.]+ ms, run median [\d.]+ ms over 3 runs \(min [\d.]+ ms\), "
        r"1 kernel launch per run$",
        out,
        re.MULTILINE,
    )


def test_run_prints_values(capsys: pytest.CaptureFixture[str], tile_files: Path) -> None:
    file = str(tile_files / "scale.tile")
    args = ["run", file, "--shape", "X=3", "--dtype", "X=int32", "--value", "F=2"]
    status, out, _ = run_main(capsys, *args, "--print", "--repeat", "0", "--seed", "4")
    assert status == 0
    expected = 2 * np.random.default_rng(4).integers(-8, 9, 3)
    assert "X i32[3], F = 2" in out and "output Y: i32[3]" in out
    assert f"\n{np.array2string(expected)}\n" in out
    assert re.search(r"llvm_cpu\.0: compile [\d.]+ ms, no timed runs", out)


def test_difference_tolerances() -> None:
    base = np.array([1.0, 2.0, np.nan], np.float32)
    assert difference(base, base.copy()) == (0.0, True)
    largest, close = difference(base + np.float32(1e-6), base)
    assert close and 0 < largest < 2e-6
    assert difference(base + np.float32(0.1), base)[1] is False
    assert difference(np.array([1, 2]), np.array([1, 3])) == (1.0, False)
    assert difference(np.zeros(2, np.float32), np.zeros(3, np.float32))[1] is False
    assert difference(np.array([np.nan], np.float32), np.array([1.0], np.float32))[0] == np.inf


# ---- inputs and usage errors -------------------------------------------------------------------


def test_parsing_of_shapes_dtypes_and_values() -> None:
    assert parse_shapes(["A=2x3", "B=4,5,6", "C=", "D=7"]) == {
        "A": (2, 3),
        "B": (4, 5, 6),
        "C": (),
        "D": (7,),
    }
    assert parse_dtypes(["int8", "B=f16"]) == (DType.INT8, {"B": DType.FLOAT16})
    assert parse_values(["N=3", "S=0.5"]) == {"N": 3, "S": 0.5}


def test_inputs_are_random_of_the_asked_types(tile_files: Path) -> None:
    function = tile.Function("function (A, B, C, D) -> (O) { O = A; }")
    args = argparse.Namespace(
        file="f.tile",
        shape=["A=2x3", "B=4", "C="],
        dtype=["uint8", "B=bool"],
        value=["D=1.5"],
        seed=1,
    )
    inputs = make_inputs(function, args)
    assert inputs["A"].dtype == np.uint8 and inputs["A"].shape == (2, 3)  # type: ignore[union-attr]
    assert inputs["B"].dtype == np.bool_ and inputs["C"].shape == ()  # type: ignore[union-attr]
    assert inputs["D"] == 1.5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "missing: --shape B=5x4"),  # B[K, N] after A[M, K]=6x5: K is 5
        (["--shape", "B=5x3", "Q=2"], "has no input named 'Q' (inputs: A, B)"),
        (["--shape", "B=5by3"], "sizes are whole numbers"),
        (["--shape", "B=5x3", "--dtype", "complex64"], "element types are bool, int8"),
        (["--shape", "B=5x3", "--value", "A=x"], "'x' is not a number"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tile_files: Path, extra: list[str], message: str
) -> None:
    args = ["run", str(tile_files / "matmul.tile"), "--shape", "A=6x5", *extra]
    status, out, err = run_main(capsys, *args)
    assert status == 2 and out == ""
    assert message in err


def test_type_error_prints_the_caret_and_exits_2(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    file = str(tile_files / "types.tile")
    status, out, err = run_main(capsys, "dump", file, "--shape", "A=2x2", "--stage", "bound")
    assert status == 2 and out == ""
    assert re.match(r".*types\.tile: error\[E-\w+\] 2:\d+: ", err)
    assert "\n 2 |   P = A & 1;\n   |" in err and "^" in err


def test_tile_device_names_a_missing_device(
    capsys: pytest.CaptureFixture[str], tile_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILE_DEVICE", "nosuch.3")
    status, out, err = run_main(capsys, "run", *matmul(tile_files))
    assert status == 2 and out == ""  # nothing ran anywhere else
    assert "no device 'nosuch.3' (from TILE_DEVICE); available devices: llvm_cpu.0" in err


def test_unknown_device_and_missing_file_exit_2(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    status, _, err = run_main(capsys, "run", *matmul(tile_files, "--device", "nosuch.0"))
    assert status == 2 and "no device 'nosuch.0'; available devices: llvm_cpu.0" in err
    status, _, err = run_main(capsys, "dump", str(tile_files / "none.tile"), "--stage", "ast")
    assert status == 2 and err.startswith("error: cannot read ")


def test_a_bad_stage_is_an_argparse_error(
    capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dump", *matmul(tile_files, "--stage", "ptx")])
    assert exit_info.value.code == 2
    assert "invalid choice: 'ptx'" in capsys.readouterr().err
