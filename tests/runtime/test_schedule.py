"""Launch plans: slots, temporaries, where each output comes from, and kernel lists that do
not fit their bound program. Plus a run whose output the generator renamed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tile
from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList, KernelParam
from semtree.types import DType, TensorShape
from tile.lower.schedule import OutputSource, ScheduleError, make_schedule

F32 = DType.FLOAT32
SOURCE = "function (A[N]) -> (O, P) { T = A; O = T; P = O; }"


def bound_program():
    return tile.Function(SOURCE).bind({"A": np.zeros(3, np.float32)})


def param(name: str, direction: Direction, dtype: DType = F32, dims: tuple = (3,)) -> KernelParam:
    return KernelParam(name, direction, dtype, dims)


def copy(name: str, target: str, source: str) -> KernelInfo:
    params = (param(target, Direction.OUT), param(source, Direction.IN))
    return KernelInfo(name, KernelKind.COPY, params, (1, 1, 1), (0, 0, 0), None, 0, 0)


def kernel_list(
    kernels,
    inputs=("A",),
    outputs=("O",),
    temporaries=("T",),
    rewrites=None,
    extra=(),
):
    names = {p.name for k in kernels for p in k.params} | {*inputs, *outputs, *extra}
    shapes = {name: TensorShape(F32, (3,)) for name in names}
    return KernelList(tuple(kernels), shapes, inputs, outputs, temporaries, rewrites or {})


def test_a_renamed_output_is_copied_from_its_buffer() -> None:
    kernels = (copy("k0", "T", "A"), copy("k1", "O", "T"))
    schedule = make_schedule(bound_program(), kernel_list(kernels, rewrites={"P": "O"}))
    assert schedule.slot_names == ("A", "O", "T")
    assert schedule.inputs == (("A", 0),)
    assert schedule.temporaries == ((2, 12),)
    o, p = schedule.outputs
    assert (o.name, o.source, o.slot) == ("O", OutputSource.KERNEL, 1)
    assert (p.name, p.source, p.slot) == ("P", OutputSource.COPY, 1)
    assert [(s.params, s.reads, s.writes) for s in schedule.steps] == [
        ((2, 0), (0,), (2,)),
        ((1, 2), (2,), (1,)),
    ]
    assert "output P: f32[3] from copy slot 1" in str(schedule)


def test_an_input_returned_as_an_output() -> None:
    bound = tile.Function("function (I, J) -> (I, O) { O = J; }").bind(
        {"I": np.zeros(3, np.float32), "J": np.zeros(3, np.float32)}
    )
    listed = kernel_list((copy("k0", "O", "J"),), inputs=("J",), temporaries=())
    first, _ = make_schedule(bound, listed).outputs
    assert (first.source, first.input) == (OutputSource.INPUT, "I")


def zero(name: str, target: str) -> KernelInfo:
    params = (param(target, Direction.OUT),)
    return KernelInfo(name, KernelKind.ZERO, params, (1, 1, 1), (0, 0, 0), None, 0, 0)


@pytest.mark.parametrize(
    ("kernels", "options", "message"),
    [
        ((zero("k0", "A"), copy("k1", "O", "A")), {}, "writes the program input 'A'"),
        ((copy("k0", "O", "A"),), {"inputs": ("A", "N")}, "'N' is not a tensor input"),
        ((copy("k0", "O", "A"),), {"rewrites": {"P": "X"}}, "no kernel writes output 'P'"),
        ((copy("k0", "O", "T"),), {"rewrites": {"P": "O"}}, "reads 'T', which nothing writes"),
    ],
)
def test_kernel_lists_that_do_not_fit(kernels, options, message) -> None:
    listed = kernel_list(kernels, temporaries=(), extra=("X",), **options)
    with pytest.raises(ScheduleError, match=message):
        make_schedule(bound_program(), listed)


def test_an_output_of_the_wrong_shape_is_a_generator_bug() -> None:
    shapes = {"A": TensorShape(F32, (3,)), "O": TensorShape(F32, (4,))}
    info = KernelInfo(
        "k0", KernelKind.ZERO, (param("O", Direction.OUT, dims=(4,)),), (1, 1, 1), (0, 0, 0),
        None, 0, 0,
    )  # fmt: skip
    listed = KernelList((info,), shapes, ("A",), ("O",), (), {"P": "O"})
    with pytest.raises(ScheduleError, match="output 'O' is f32\\[3\\]"):
        make_schedule(bound_program(), listed)


def test_running_a_renamed_output(cpu: tile.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    def generate(bound, settings):
        return kernel_list((copy("k0", "T", "A"), copy("k1", "O", "T")), rewrites={"P": "O"})

    monkeypatch.setattr(sys.modules["tile.lower.generate"], "generate_program", generate)
    values = np.array([1, 2, 3], np.float32)
    result = tile.run(SOURCE, {"A": values})
    np.testing.assert_array_equal(result["O"], values)
    np.testing.assert_array_equal(result["P"], values)
    invoker = tile.Invoker(SOURCE, {"A": values})
    as_int = tile.Tensor(cpu, (3,), "int32")
    invoker.set_output("P", as_int)
    invoker.invoke().wait()
    np.testing.assert_array_equal(as_int.to_numpy(), [1, 2, 3])
