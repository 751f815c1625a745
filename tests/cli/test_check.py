"""`tile run --check` judges disagreeing devices by the reference evaluator (issue 9): the
device that is wrong is named, whichever device runs first. A fake second device re-labels
llvm_cpu.0's results, so these tests need no OpenCL; `corrupt` makes one device wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tile.cli import run as cli_run
from tile.cli.main import main
from tile.reference import ReferenceUnsupported

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class FakeDevice:
    id: str


def install(monkeypatch: pytest.MonkeyPatch, *, devices: int = 2, corrupt: str = "") -> None:
    """`devices` devices: llvm_cpu.0 and a fake `other.0` computing on llvm_cpu.0; the
    outputs of the device named `corrupt` get 1 added to their first element."""
    real_time_on = cli_run.time_on
    cpu = tile.device("llvm_cpu.0")
    others = [FakeDevice("other.0")] if devices > 1 else []
    monkeypatch.setattr(cli_run, "list_devices", lambda: [cpu, *others])

    def time_on(
        function: tile.Function, inputs: dict[str, object], device: object, repeat: int
    ) -> cli_run.Timing:
        timing = real_time_on(function, inputs, cpu, repeat)
        timing.device = device
        if device.id == corrupt:
            for array in timing.outputs.values():
                array.reshape(-1)[0] += 1
        return timing

    monkeypatch.setattr(cli_run, "time_on", time_on)


def check(capsys: pytest.CaptureFixture[str], tile_files: Path) -> tuple[int, str]:
    args = [str(tile_files / "matmul.tile"), "--shape", "A=6x5", "B=5x3"]
    status = main(["run", *args, "--check", "--repeat", "0"])
    return status, capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "right"), [("other.0", "llvm_cpu.0"), ("llvm_cpu.0", "other.0")])
def test_the_wrong_device_is_named_whichever_runs_first(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tile_files: Path,
    wrong: str,
    right: str,
) -> None:
    install(monkeypatch, corrupt=wrong)
    status, out = check(capsys, tile_files)
    assert status == 1
    assert "the devices disagree: checking each against the reference evaluator" in out
    verdict = out.splitlines()[-1]
    assert f"{right} agrees with the reference (C max |diff| " in verdict
    assert f"{wrong} differs: C max |diff| 1" in verdict
    assert f"{right} differs" not in verdict and f"{wrong} agrees" not in verdict


def test_agreeing_devices_need_no_reference(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    install(monkeypatch)

    def no_reference(*_: object) -> dict[str, np.ndarray]:
        raise AssertionError("the reference is only asked when the devices disagree")

    monkeypatch.setattr(cli_run, "reference_outputs", no_reference)
    status, out = check(capsys, tile_files)
    assert status == 0
    assert "(baseline)" in out and "every device agrees within tolerance" in out


@pytest.mark.parametrize(("corrupt", "status"), [("", 0), ("llvm_cpu.0", 1)])
def test_a_single_device_is_checked_against_the_reference(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tile_files: Path,
    corrupt: str,
    status: int,
) -> None:
    install(monkeypatch, devices=1, corrupt=corrupt)
    got, out = check(capsys, tile_files)
    assert got == status
    assert "only llvm_cpu.0 ran: checking it against the reference evaluator" in out
    verdict = "differs: C max |diff| 1" if corrupt else "agrees with the reference"
    assert f"llvm_cpu.0 {verdict}" in out.splitlines()[-1]


def test_without_a_reference_disagreement_still_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tile_files: Path
) -> None:
    install(monkeypatch, corrupt="other.0")
    monkeypatch.setattr(cli_run, "REFERENCE_WORK", 10)
    status, out = check(capsys, tile_files)
    assert status == 1
    assert "the reference evaluator cannot check this program: it would visit 108 " in out
    install(monkeypatch, devices=1)
    status, out = check(capsys, tile_files)
    assert status == 0 and "cannot check this program" in out  # nothing to disagree with


def test_reference_outputs_are_the_evaluators(monkeypatch: pytest.MonkeyPatch) -> None:
    function = tile.Function("function (A, K) -> (O) { O = A * K; }")
    a = np.array([1.5, -2.0], np.float32)
    out = cli_run.reference_outputs(function, {"A": a, "K": 3})
    assert out["O"].dtype == np.float64 and out["O"].tolist() == [4.5, -6.0]
    monkeypatch.setattr(cli_run, "REFERENCE_WORK", 1)
    with pytest.raises(ReferenceUnsupported, match="more than 1"):
        cli_run.reference_outputs(function, {"A": a, "K": 3})


def test_difference_accepts_the_references_float64() -> None:
    got = np.array([1.0, np.inf, np.nan], np.float32)
    assert cli_run.difference(got, got.astype(np.float64)) == (0.0, True)
    largest, close = cli_run.difference(np.float32([1.0]), np.float64([1.0 + 1e-7]))
    assert close and largest < 1e-6
    assert cli_run.difference(np.int32([1]), np.float64([1.0]))[1] is False
