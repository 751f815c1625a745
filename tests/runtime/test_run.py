"""`tile.run` end to end with the fake generator: on `llvm_cpu.0` (ZERO and COPY kernels run
without a renderer) and on the fake device (elementwise kernels evaluated with numpy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tile.bind.program import BoundProgram

if TYPE_CHECKING:
    from tests.runtime.fakes import FakeGenerator


def test_run_copies_through_temporaries_on_the_cpu(cpu: tile.Device) -> None:
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    source = "function (A[N, M]) -> (O) { T = A; U = T; O = U; }"
    result = tile.run(source, {"A": values})
    assert set(result) == {"O"} and result["O"].dtype == np.int32
    np.testing.assert_array_equal(result["O"], values)
    program = next(iter(cpu.runtime.programs._entries.values()))
    assert [name for name, _ in program.schedule.inputs] == ["A"]
    assert len(program.schedule.temporaries) == 2  # T and U, owned by the program


def test_run_zero_kernel_and_constant_output(cpu: tile.Device) -> None:
    result = tile.run("function () -> (O) { O = 0; }", {}, device="llvm_cpu.0")
    assert result["O"].shape == () and result["O"].dtype == np.int32 and result["O"] == 0


def test_run_several_outputs_including_an_input(cpu: tile.Device) -> None:
    values = np.array([1.5, -2.0], np.float64)
    source = "function (A[N]) -> (A, O, P) { O = A; P = O; }"
    result = tile.run(source, {"A": values}, device=cpu)
    assert list(result) == ["A", "O", "P"]
    for name in result:
        np.testing.assert_array_equal(result[name], values)
    assert result["A"] is not values  # every output is a new array


def test_run_passes_the_bound_program_and_settings(
    cpu: tile.Device, generator: FakeGenerator
) -> None:
    tile.run("function (A, K) -> (O) { O = A; }", {"A": np.zeros(2, np.uint8), "K": 7})
    (bound,) = generator.calls
    assert isinstance(bound, BoundProgram)
    assert bound.input_bindings["K"].value == 7  # type: ignore[union-attr]
    assert generator.settings == [cpu.settings]


def test_run_computes_on_the_fake_device(fake: tile.Device) -> None:
    a = np.array([1, 2, 3], np.float32)
    b = np.array([10, 20, 30], np.float32)
    source = "function (A[N], B[N]) -> (O, P) { T = -A; O = T + B; P = exp(T); }"
    result = tile.run(source, {"A": a, "B": b}, device=fake)
    np.testing.assert_allclose(result["O"], b - a)
    np.testing.assert_allclose(result["P"], np.exp(-a), rtol=1e-6)


def test_run_accepts_a_function_and_broadcasts(fake: tile.Device) -> None:
    function = tile.Function("function (A, B) -> (O) { O = A * B; }")
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    result = tile.run(function, {"A": a, "B": np.array([1, 2, 3], np.int16)}, device=fake)
    np.testing.assert_array_equal(result["O"], a * [1, 2, 3])


def test_run_reports_front_end_errors(cpu: tile.Device) -> None:
    with pytest.raises(tile.TileSyntaxError):
        tile.run("function (A) -> (O) { O = A }", {"A": np.zeros(1)})
    with pytest.raises(tile.TileBindError, match="not bound"):
        tile.run("function (A, B) -> (O) { O = A; }", {"A": np.zeros(1)})
    with pytest.raises(tile.DeviceNotFound):
        tile.run("function (A) -> (O) { O = A; }", {"A": np.zeros(1)}, device="nowhere.0")


def test_run_reports_a_failed_kernel(fake: tile.Device, fake_hal: object) -> None:
    fake_hal.failing["neg"] = ZeroDivisionError("no")  # type: ignore[attr-defined]
    with pytest.raises(tile.ExecutionError, match="ZeroDivisionError"):
        tile.run("function (A) -> (O) { O = -A; }", {"A": np.ones(2)}, device=fake)


def test_function_call_on_the_cpu(cpu: tile.Device) -> None:
    copy = tile.Function("function (A) -> (O) { O = A; }")
    outputs = copy(A=tile.Tensor.from_numpy(np.arange(4, dtype=np.uint64), cpu))
    assert set(outputs) == {"O"} and outputs["O"].device is cpu
    with outputs["O"].mmap_current() as view:
        np.testing.assert_array_equal(view, np.arange(4))
