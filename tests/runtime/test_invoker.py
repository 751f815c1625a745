"""Invoker and Function calls: binding inputs and outputs, E-BIND errors that change nothing,
dtype conversion on store, outputs that are inputs, aliasing, constants and devices."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile

if TYPE_CHECKING:
    from tests.runtime.fakes import FakeDevice, FakeGenerator

COPY = "function (A[N]) -> (O) { O = A; }"
NEGATE = "function (A[N]) -> (O) { O = -A; }"
SCALE = "function (A[N], K) -> (O) { O = A * K; }"
PASS_THROUGH = "function (I) -> (I) { }"


def f32(*items: float) -> np.ndarray:
    return np.array(items, np.float32)


def test_output_shape_without_compiling(cpu: tile.Device, generator: FakeGenerator) -> None:
    invoker = tile.Invoker(COPY, {"A": tile.Tensor.from_numpy(f32(1, 2, 3), cpu)})
    assert invoker.get_output_shape("O") == ((3,), np.dtype("float32"))
    assert generator.calls == []
    with pytest.raises(tile.TileBindError, match="no output named 'P'"):
        invoker.get_output_shape("P")


def test_output_shape_needs_every_input(cpu: tile.Device) -> None:
    invoker = tile.Invoker(SCALE, {"A": f32(1)})
    with pytest.raises(tile.TileBindError, match="input 'K' is not bound") as caught:
        invoker.get_output_shape("O")
    assert caught.value.code == "E-BIND"


def test_explicit_output_and_invocation(cpu: tile.Device) -> None:
    a = tile.Tensor.from_numpy(f32(1, 2, 3), cpu)
    invoker = tile.Invoker(COPY, {"A": a})
    out = tile.Tensor(cpu, *invoker.get_output_shape("O"))
    invoker.set_output("O", out)
    invocation = invoker.invoke()
    assert invocation.outputs == {"O": out} and invocation.device is cpu
    invocation.wait()
    np.testing.assert_array_equal(out.to_numpy(), [1, 2, 3])


def test_unset_outputs_are_new_tensors_per_invoke(cpu: tile.Device) -> None:
    invoker = tile.Invoker(COPY, {"A": f32(1)}, device=cpu)
    first, second = invoker.invoke().outputs["O"], invoker.invoke().outputs["O"]
    assert first is not second
    np.testing.assert_array_equal(second.to_numpy(), [1])


def test_numpy_inputs_are_uploaded_on_every_invoke(cpu: tile.Device) -> None:
    values = f32(1, 2)
    invoker = tile.Invoker(COPY, {"A": values})
    np.testing.assert_array_equal(invoker.invoke().outputs["O"].to_numpy(), [1, 2])
    values[0] = 5
    np.testing.assert_array_equal(invoker.invoke().outputs["O"].to_numpy(), [5, 2])


def test_wrong_output_shape_is_e_bind_and_changes_nothing(cpu: tile.Device) -> None:
    a = tile.Tensor.from_numpy(f32(1, 2, 3), cpu)
    out = tile.Tensor.from_numpy(f32(9, 9), cpu)
    invoker = tile.Invoker(COPY, {"A": a})
    with pytest.raises(tile.TileBindError) as caught:
        invoker.set_output("O", out)
    error = caught.value
    assert error.code == "E-BIND" and "shape [3]" in str(error) and "[2]" in str(error)
    assert (error.line, error.column) == (1, 21)  # the output's name in the header
    invocation = invoker.invoke()  # the bad output was not kept
    assert invocation.outputs["O"] is not out
    np.testing.assert_array_equal(out.to_numpy(), [9, 9])


def test_late_shape_errors_leave_every_tensor_untouched(
    fake: tile.Device, fake_hal: FakeDevice
) -> None:
    out = tile.Tensor.from_numpy(f32(9, 9), fake)
    invoker = tile.Invoker(NEGATE, outputs={"O": out})  # no inputs yet: checked by invoke
    a = tile.Tensor.from_numpy(f32(1, 2, 3), fake)
    invoker.set_input("A", a)
    launched = len(fake_hal.jobs)
    with pytest.raises(tile.TileBindError, match="output 'O' has shape"):
        invoker.invoke()
    assert len(fake_hal.jobs) == launched  # nothing was scheduled
    np.testing.assert_array_equal(out.to_numpy(), [9, 9])
    np.testing.assert_array_equal(a.to_numpy(), [1, 2, 3])


def test_binding_errors_schedule_nothing(fake: tile.Device, fake_hal: FakeDevice) -> None:
    a = tile.Tensor.from_numpy(np.ones((2, 2), np.float32), fake)
    out = tile.Tensor.from_numpy(f32(4, 4), fake)
    with pytest.raises(tile.TileBindError, match="has 1 dimension"):
        tile.Invoker(NEGATE, {"A": a}, {"O": out}).invoke()
    with pytest.raises(tile.TileBindError, match="no input named 'B'"):
        tile.Invoker(NEGATE, {"A": a, "B": a})
    with pytest.raises(tile.TileBindError, match="no output named 'P'"):
        tile.Invoker(NEGATE, outputs={"P": out})
    assert [job.kind for job in fake_hal.jobs] == []
    np.testing.assert_array_equal(out.to_numpy(), [4, 4])


def test_one_tensor_for_two_outputs_is_refused(cpu: tile.Device) -> None:
    source = "function (A[N]) -> (O, P) { O = A; P = A; }"
    out = tile.Tensor(cpu, (1,))
    invoker = tile.Invoker(source, {"A": f32(1)}, {"O": out})
    with pytest.raises(tile.TileBindError, match="'O' and 'P' are bound to the same tensor"):
        invoker.set_output("P", out)


def test_outputs_of_another_dtype_are_converted_on_store(cpu: tile.Device) -> None:
    invoker = tile.Invoker(COPY, {"A": f32(1.7, -2.7, 100.0, 0.0)})
    as_int8 = tile.Tensor(cpu, (4,), "int8")
    invoker.set_output("O", as_int8)
    invoker.invoke().wait()
    np.testing.assert_array_equal(as_int8.to_numpy(), [1, -2, 100, 0])  # toward zero
    as_bool = tile.Tensor(cpu, (4,), "bool")
    invoker.set_output("O", as_bool)
    invoker.set_input("A", f32(0.0, 2.0, np.nan, -0.0))
    invoker.invoke().wait()
    np.testing.assert_array_equal(as_bool.to_numpy(), [False, True, True, False])


def test_conversion_follows_the_event_order(fake: tile.Device, fake_hal: FakeDevice) -> None:
    gate = fake_hal.hold("neg")
    as_int = tile.Tensor(fake, (2,), "int64")
    run = tile.Invoker(NEGATE, {"A": f32(1.5, 2.5)}, {"O": as_int}).invoke()
    assert not run.done()
    gate.set()
    np.testing.assert_array_equal(as_int.to_numpy(), [-1, -2])
    run.wait()


def test_an_output_that_is_an_input_is_returned_unchanged(cpu: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(f32(1, 2), cpu)
    function = tile.Function(PASS_THROUGH)
    assert function(I=tensor)["I"] is tensor
    np.testing.assert_array_equal(tile.run(PASS_THROUGH, {"I": f32(3, 4)})["I"], [3, 4])


def test_an_input_output_bound_to_another_tensor_is_copied(cpu: tile.Device) -> None:
    tensor = tile.Tensor.from_numpy(f32(1, 2), cpu)
    same_dtype = tile.Tensor(cpu, (2,))
    tile.Invoker(PASS_THROUGH, {"I": tensor}, {"I": same_dtype}).invoke().wait()
    np.testing.assert_array_equal(same_dtype.to_numpy(), [1, 2])
    other_dtype = tile.Tensor(cpu, (2,), "uint8")
    tile.Invoker(PASS_THROUGH, {"I": tensor}, {"I": other_dtype}).invoke().wait()
    np.testing.assert_array_equal(other_dtype.to_numpy(), [1, 2])
    tile.Invoker(PASS_THROUGH, {"I": tensor}, {"I": tensor}).invoke().wait()  # nothing to do
    np.testing.assert_array_equal(tensor.to_numpy(), [1, 2])


def test_a_tensor_bound_as_input_and_output(fake: tile.Device, fake_hal: FakeDevice) -> None:
    tensor = tile.Tensor.from_numpy(f32(1, 2, 3), fake)
    gate = fake_hal.hold("copy_buffer")
    run = tile.Invoker(NEGATE, {"A": tensor}, {"O": tensor}).invoke()
    (copy,) = fake_hal.jobs_of("copy_buffer")  # the kernel reads a private copy
    (neg,) = fake_hal.jobs_of("neg")
    assert copy.event in neg.deps
    gate.set()
    run.wait()
    np.testing.assert_array_equal(tensor.to_numpy(), [-1, -2, -3])


def test_scalar_constants_never_become_buffers(fake: tile.Device, generator: FakeGenerator) -> None:
    scale = tile.Function(SCALE)
    out = scale(device=fake, A=f32(1, 2), K=3)["O"]
    np.testing.assert_array_equal(out.to_numpy(), [3, 6])
    out = scale(device=fake, A=f32(1, 2), K=np.array(4, np.int8))["O"]
    np.testing.assert_array_equal(out.to_numpy(), [4, 8])
    assert len(generator.calls) == 2  # constants are compiled in: one program per value
    for bound in list(generator.calls):
        kernel_list = generator(bound, fake.settings)
        assert kernel_list.inputs == ("A",)
        assert [param.name for param in kernel_list.kernels[0].params] == ["O", "A"]


def test_a_0d_tensor_binds_as_a_tensor(fake: tile.Device, generator: FakeGenerator) -> None:
    scale = tile.Function(SCALE)
    k = tile.Tensor.from_numpy(np.array(2, np.float32), fake)
    np.testing.assert_array_equal(scale(A=f32(1, 2), K=k)["O"].to_numpy(), [2, 4])
    with k.mmap_discard() as view:
        view[...] = 5
    np.testing.assert_array_equal(scale(A=f32(1, 2), K=k)["O"].to_numpy(), [5, 10])
    assert len(generator.calls) == 1  # a new value of a tensor is no new signature


def test_tensors_of_one_call_share_a_device(cpu: tile.Device, fake: tile.Device) -> None:
    on_cpu = tile.Tensor.from_numpy(f32(1), cpu)
    on_fake = tile.Tensor.from_numpy(f32(1), fake)
    add = tile.Function("function (A, B) -> (O) { O = A + B; }")
    with pytest.raises(tile.DeviceMismatch, match="'B' on fake"):
        add(A=on_cpu, B=on_fake)
    with pytest.raises(tile.DeviceMismatch):
        add(device=fake, A=on_cpu, B=f32(1))
    invoker = tile.Invoker(NEGATE, {"A": on_cpu})
    with pytest.raises(tile.DeviceMismatch):
        invoker.set_output("O", tile.Tensor(fake, (1,)))
    np.testing.assert_array_equal(add(device=fake, A=on_fake, B=2.0)["O"].to_numpy(), [3])


def test_numpy_only_calls_run_on_the_requested_device(fake: tile.Device) -> None:
    negate = tile.Function(NEGATE, name="negate")
    assert negate.name == "negate" and "negate" in repr(negate)
    outputs = negate(device=fake, A=f32(2))
    assert outputs["O"].device is fake
    np.testing.assert_array_equal(outputs["O"].to_numpy(), [-2])
