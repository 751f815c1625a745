"""Calling a Function: positional inputs in declaration order, the device by keyword only, and
a Tensor's numpy(), shape, dtype and repr with values (issue 16, item 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal.events import SettableEvent
from tests.shipped import SHIPPED, shipped_devices

if TYPE_CHECKING:
    from tests.runtime.fakes import FakeDevice

SUB = tile.Function("function (A, B) -> (O) { O = A - B; }", "sub")
NEGATE = tile.Function("function (A) -> (O) { O = -A; }", "negate")


def f32(*items: float) -> np.ndarray:
    return np.array(items, np.float32)


def test_positional_inputs_bind_in_declaration_order(fake: tile.Device) -> None:
    out = SUB(f32(5, 7), f32(1, 2), device=fake)["O"]
    np.testing.assert_array_equal(out.numpy(), [4, 5])
    mixed = SUB(f32(5, 7), B=f32(1, 2), device=fake)["O"]
    np.testing.assert_array_equal(mixed.numpy(), [4, 5])
    assert out.device is fake


def test_a_positional_array_is_never_the_device(fake: tile.Device) -> None:
    # Before, `fn(a)` took `a` as the device argument.
    out = NEGATE(tile.Tensor.from_numpy(f32(3), fake))["O"]
    assert out.device is fake
    np.testing.assert_array_equal(out.numpy(), [-3])


def test_bad_positional_calls_are_type_errors(fake: tile.Device) -> None:
    with pytest.raises(TypeError, match=r"takes 2 inputs \(A, B\), but 3 were given"):
        SUB(f32(1), f32(2), f32(3), device=fake)
    with pytest.raises(TypeError, match="two values for input 'A'"):
        SUB(f32(1), A=f32(2), device=fake)
    with pytest.raises(TypeError, match="device is given by keyword"):
        NEGATE(fake, A=f32(1))
    with pytest.raises(TypeError, match="device is given by keyword"):
        NEGATE("llvm_cpu.0")


def test_gradient_functions_take_positional_inputs(cpu: tile.Device) -> None:
    # The fake generator stands in for lowering in this package, so the call is checked
    # through its named inputs; tests/grad runs gradient functions for real.
    square_sum = tile.Function("function (X[N]) -> (S) { S[] = +(X[i] * X[i]); }")
    grad = tile.gradient(square_sum)
    assert grad.inputs == ("X", "DS")
    x = f32(1, 2)
    assert grad.named_inputs((x,), {}) == {"X": x, "DS": 1.0}  # a scalar cotangent: 1
    with pytest.raises(TypeError, match="two values for input 'X'"):
        grad(x, X=x, device=cpu)
    with pytest.raises(TypeError, match="but 3 were given"):
        grad(x, x, x, device=cpu)


def test_repr_shows_values_numpy_style(cpu: tile.Device) -> None:
    small = tile.Tensor.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3), cpu)
    assert repr(small) == "Tensor([[0, 1, 2],\n        [3, 4, 5]], dtype=int32, device=llvm_cpu.0)"
    assert small.shape == (2, 3) and small.dtype == np.int32
    scalar = tile.Tensor.from_numpy(np.float32(2.5), cpu)
    assert repr(scalar) == "Tensor(2.5, dtype=float32, device=llvm_cpu.0)"
    empty = tile.Tensor(cpu, (0, 3))
    assert repr(empty) == "Tensor([], shape=(0, 3), dtype=float32, device=llvm_cpu.0)"


def test_repr_of_a_large_tensor_is_truncated(cpu: tile.Device) -> None:
    big = tile.Tensor.from_numpy(np.arange(100_000, dtype=np.float64).reshape(1000, 100), cpu)
    text = repr(big)
    assert "..." in text and len(text) < 2000
    assert text.startswith("Tensor([[0.0000e+00, 1.0000e+00,")
    assert text.endswith("dtype=float64, device=llvm_cpu.0)")


def test_repr_of_a_tensor_whose_writer_failed(fake: tile.Device, fake_hal: FakeDevice) -> None:
    fake_hal.failing["neg"] = RuntimeError("kernel exploded")
    failed = NEGATE(f32(1), device=fake)["O"]
    text = repr(failed)  # waits for the writer, and does not raise
    assert text.startswith("<Tensor float32[1] on fake") and "kernel exploded" in text
    with pytest.raises(tile.ExecutionError):
        failed.numpy()


def test_repeated_calls_reuse_the_program_and_stay_checked() -> None:
    """A call with the last call's signature skips the Invoker (Function._last) but still
    finds its program in the device's cache (a hit, LRU order kept), recompiles once the
    cache is cleared, and leaves device mismatches to the full path."""
    devices = shipped_devices()
    cpu, other = (devices[name] for name in SHIPPED)
    function = tile.Function("function (A, B) -> (O) { O = A - B; }", "repeat")
    programs = cpu.runtime.programs
    cpu.clear_cache()
    for round_ in range(3):
        for n in (2, 3):
            a = tile.Tensor.from_numpy(f32(*range(n)) + round_, cpu)
            b = tile.Tensor.from_numpy(f32(*([1] * n)), cpu)
            out = function(a, b)["O"]
            np.testing.assert_array_equal(out.numpy(), np.arange(n) + round_ - 1)
    assert programs.misses == 2 and programs.hits == 4
    out = function(B=b, A=a)["O"]  # keywords in another order: the same signature
    np.testing.assert_array_equal(out.numpy(), np.arange(3) + 1)
    assert programs.misses == 2 and programs.hits == 5 and function._last is not None
    cpu.clear_cache()
    out = function(a, b)["O"]  # the last signature, its program gone: compiled again
    np.testing.assert_array_equal(out.numpy(), np.arange(3) + 1)
    assert programs.misses == 1
    elsewhere = tile.Tensor.from_numpy(f32(1, 1, 1), other)
    with pytest.raises(tile.DeviceMismatch):
        function(a, elsewhere)
    with pytest.raises(tile.DeviceMismatch):
        function(a, b, device=other)


def test_an_upload_hands_its_order_to_the_unmap() -> None:
    """After a host write, what comes next waits for the unmap itself, not for a marker that
    a helper thread completes: on OpenCL, a kernel that reads an uploaded tensor is enqueued
    at once (behind the unmap on the in-order queue), not deferred."""
    function = tile.Function("function (A) -> (O) { O = A * 2; }", "double")
    for device in shipped_devices().values():
        for round_ in range(20):
            a = tile.Tensor.from_numpy(f32(1, 2, 3) + round_, device)
            last = a._state.last_write
            assert last is None or last.is_complete or not isinstance(last, SettableEvent)
            out = function(a)["O"]
            written = out._state.last_write
            assert written is not None and getattr(written, "staged", True)
            np.testing.assert_array_equal(out.numpy(), (f32(1, 2, 3) + round_) * 2)
            with a.mmap_current() as view:  # a host read: the same for its readers
                assert view.tolist() == [1 + round_, 2 + round_, 3 + round_]
            assert all(
                read.is_complete or not isinstance(read, SettableEvent) for read in a._state.reads
            )


@pytest.mark.parametrize("device_id", SHIPPED)
def test_wait_on_the_shipped_devices(device_id: str) -> None:
    """`Tensor.wait()` returns once the output is written, then a map sees it (poisoned
    first, so that an early return shows)."""
    device = tile.device(device_id)
    n = 1 << 20
    a = tile.Tensor.from_numpy(np.arange(n, dtype=np.float32), device)
    out = tile.Tensor.from_numpy(np.full(n, np.nan, np.float32), device)
    invocation = tile.Invoker(NEGATE, {"A": a}, {"O": out}).invoke()
    out.wait()
    assert invocation.done()
    with out.mmap_current() as view:
        np.testing.assert_array_equal(view, -np.arange(n, dtype=np.float32))
