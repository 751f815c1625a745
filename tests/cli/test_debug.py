"""TILE_DEBUG, TILE_DUMP_DIR and the `tile` logger (tile.runtime.debug), in process."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from semtree.kernel import HardwareSettings
from tile.runtime import debug

if TYPE_CHECKING:
    from pathlib import Path

SOURCE = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="tile")
    return caplog


def test_the_tile_logger_is_silent_by_default() -> None:
    logger = logging.getLogger("tile")
    assert any(isinstance(handler, logging.NullHandler) for handler in logger.handlers)


@pytest.mark.parametrize(
    ("raw", "level"), [("", 0), ("0", 0), ("2", 2), (" 3 ", 3), ("9", 4), ("-1", 0), ("x", 0)]
)
def test_level(monkeypatch: pytest.MonkeyPatch, raw: str, level: int) -> None:
    monkeypatch.setenv("TILE_DEBUG", raw)
    assert debug.level() == level
    assert debug.enabled(level) and (level == 4 or not debug.enabled(level + 1))


def test_emit_only_at_the_asked_level(
    monkeypatch: pytest.MonkeyPatch, records: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TILE_DEBUG", "2")
    debug.emit(debug.DEVICES, "one %d", 1)
    debug.emit(debug.TIMES, "two")
    debug.emit(debug.TILING, "three")
    assert [(r.levelno, r.getMessage()) for r in records.records] == [
        (logging.INFO, "one 1"),
        (logging.DEBUG, "two"),
    ]
    assert {record.name for record in records.records} == {"tile"}


def test_capabilities() -> None:
    cpu = HardwareSettings.llvm_cpu(2, ["avx512f"])
    assert debug.capabilities(cpu) == "simd 16, work-group 1, f32+f64"
    gpu = HardwareSettings.opencl_gpu(
        max_work_group_size=1024,
        max_work_item_sizes=(1024, 1024, 64),
        local_mem_size=65536,
        max_compute_units=40,
        extensions=["cl_khr_fp16"],
    )
    assert debug.capabilities(gpu) == "simd 1, work-group 1024, local memory 64 KiB, f32+f16"


def test_compile_events_tiling_and_code(
    monkeypatch: pytest.MonkeyPatch, records: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setenv("TILE_DEBUG", "4")
    monkeypatch.setenv("TILE_DUMP_DIR", str(tmp_path))
    device = tile.device("llvm_cpu.0")
    device.clear_cache()
    function = tile.Function(SOURCE, name="debugged")
    a, b = np.ones((5, 3), np.float32), np.ones((3, 2), np.float32)
    invocation = tile.Invoker(function, {"A": a, "B": b}).invoke()
    invocation.wait()
    tile.Invoker(function, {"A": a, "B": b}).invoke().wait()
    text = "\n".join(record.getMessage() for record in records.records)
    assert "program cache miss, compiling: debugged on llvm_cpu.0" in text
    assert "compiled debugged for llvm_cpu.0: 1 kernel in " in text
    assert "tiling tile_0 (contraction, writes f32[5, 2]): tile " in text
    assert "kernel list of debugged for llvm_cpu.0:\n// inputs: A, B" in text
    assert "device code of debugged on llvm_cpu.0:\n" in text
    assert "program cache hit: debugged on llvm_cpu.0" in text
    stems = {path.name.split(".")[0] for path in tmp_path.iterdir()}
    assert "debugged" in stems
    (bound,) = tmp_path.glob("debugged.llvm_cpu.0.*.bound.txt")
    assert bound.read_text() == f"{function.bind(A=a, B=b)}\n"


def test_kernel_times_at_level_2(
    monkeypatch: pytest.MonkeyPatch, records: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TILE_DEBUG", "2")
    result = tile.run(SOURCE, {"A": np.ones((4, 4), np.float32), "B": np.ones((4, 4), np.float32)})
    np.testing.assert_array_equal(result["C"], np.full((4, 4), 4, np.float32))
    deadline = time.monotonic() + 5  # the time is logged by a callback on a device thread
    while True:
        messages = [record.getMessage() for record in records.records]
        timed = [m for m in messages if m.startswith("kernel tile_0 on llvm_cpu.0: ")]
        if timed or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert timed and timed[0].endswith(" GB/s") and "GFLOP/s" in timed[0]
    assert not any(m.startswith("tiling") for m in messages)  # level 3 only


def test_dump_without_a_directory_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILE_DUMP_DIR", raising=False)
    assert debug.dump("x", {".txt": "text"}) == []


def test_dump_failure_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, records: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TILE_DUMP_DIR", str(blocker / "below"))
    assert debug.dump("x", {".txt": "text"}) == []
    assert "cannot write to TILE_DUMP_DIR=" in records.text


def test_file_stem() -> None:
    assert debug.file_stem("my fn", "opencl.0", "") == "my_fn.opencl.0"
