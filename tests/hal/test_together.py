"""Independent kernels run together on llvm_cpu (7.4): `LLVMExecutor.together` decides, and
`run_together` runs them as one job in which a kernel too small to fill the compute threads
runs beside the others.

Side by side is shown without timing: two kernels that each wait for the other's flag (for
at most 20 s) can both see it only if they run at the same time."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from hal.errors import DependencyFailed
from hal.events import FailedEvent, SettableEvent
from hal_llvm.grid import emit_grid_entry, work_group_function_type
from semtree.types import DType
from tests.hal.kernels import (
    Body,
    Info,
    Kind,
    Program,
    add_vector_add,
    build,
    download,
    make_device,
    new_module,
    upload,
    vector,
)

I32 = ir.IntType(32)
WAIT_ROUNDS = 200_000  # of 100 µs: 20 s before a kernel gives up waiting for the other


def add_meeting(module: ir.Module, name: str, me: int, other: int) -> None:
    """flags[me] = 1, then wait until flags[other] is set: met[0] = 1 if it was, 2 if the
    kernel gave up."""
    pointer = I32.as_pointer()
    function = ir.Function(module, work_group_function_type([pointer, pointer]), name)
    function.linkage = "internal"
    flags, met = function.args[:2]
    entry = function.append_basic_block("entry")
    loop, check, wait = (function.append_basic_block(n) for n in ("loop", "check", "wait"))
    seen, gave_up = function.append_basic_block("seen"), function.append_basic_block("gave_up")
    builder = ir.IRBuilder(entry)
    one = ir.Constant(I32, 1)
    builder.store_atomic(one, builder.gep(flags, [ir.Constant(I32, me)]), "seq_cst", 4)
    builder.branch(loop)
    builder.position_at_end(loop)
    rounds = builder.phi(I32)
    rounds.add_incoming(ir.Constant(I32, 0), entry)
    flag = builder.load_atomic(builder.gep(flags, [ir.Constant(I32, other)]), "seq_cst", 4)
    builder.cbranch(builder.icmp_signed("!=", flag, ir.Constant(I32, 0)), seen, check)
    builder.position_at_end(check)
    following = builder.add(rounds, one)
    rounds.add_incoming(following, wait)
    limit = ir.Constant(I32, WAIT_ROUNDS)
    builder.cbranch(builder.icmp_signed(">=", following, limit), gave_up, wait)
    builder.position_at_end(wait)
    usleep = module.globals.get("usleep") or ir.Function(
        module, ir.FunctionType(I32, [I32]), "usleep"
    )
    builder.call(usleep, [ir.Constant(I32, 100)])
    builder.branch(loop)
    for block, value in ((seen, 1), (gave_up, 2)):
        builder.position_at_end(block)
        builder.store(ir.Constant(I32, value), met)
        builder.ret_void()
    emit_grid_entry(module, function, (1, 1, 1))


def meeting_kernels(device):
    """Kernels `a` (flags, met_a) and `b` (flags, met_b), one work-group each."""
    module = new_module("meeting")
    add_meeting(module, "a", 0, 1)
    add_meeting(module, "b", 1, 0)
    infos = tuple(
        Info(
            name,
            Kind.SPECIAL,
            (vector("flags", DType.INT32, (2,)), vector("met", DType.INT32, (1,), "out")),
            (1, 1, 1),
            body=Body(name),
        )
        for name in ("a", "b")
    )
    library = build(device, Program(infos), module)
    return [device.executor.prepare(library, index) for index in range(2)]


def adders(device, sizes: tuple[int, ...]):
    """One kernel per size n: out = a + b over n float32s, one element per work-group."""
    module = new_module("adders")
    infos = []
    for index, n in enumerate(sizes):
        name = f"add{index}"
        add_vector_add(module, name, (n, 1, 1))
        params = tuple(vector(p, DType.FLOAT32, (n,)) for p in ("a", "b"))
        out = vector("out", DType.FLOAT32, (n,), "out")
        infos.append(Info(name, Kind.ELEMENTWISE, (out, *params), (n, 1, 1), body=Body(name)))
    library = build(device, Program(tuple(infos)), module)
    return [device.executor.prepare(library, index) for index in range(len(sizes))]


def test_kernels_too_small_to_fill_the_threads_run_side_by_side() -> None:
    device = make_device(threads=2, split_seconds=0.0)
    kernels = meeting_kernels(device)
    assert device.executor.together(kernels)
    flags = upload(device, np.zeros(2, np.int32))
    met = [upload(device, np.zeros(1, np.int32)) for _ in kernels]
    launches = [(kernel, [flags, out]) for kernel, out in zip(kernels, met, strict=True)]
    events = device.executor.run_together(launches)
    assert len(events) == 2 and events[0] is events[1]  # one job
    # Each saw the other's flag: they ran at the same time (2 would mean one gave up).
    assert [download(out, np.int32, events).tolist() for out in met] == [[1], [1]]


def test_what_runs_together() -> None:
    """Not one kernel, nor kernels that each fill the threads, nor kernels too short
    together to be worth sharing; profiled launches run one by one, each with its time."""
    device = make_device(threads=2, split_seconds=0.0)
    one, many, other_many = adders(device, (1, 1000, 999))
    together = device.executor.together
    assert together([one, many]) and together([many, one, other_many])
    assert not together([one]) and not together([many, other_many])
    alone = make_device(threads=1, split_seconds=0.0)
    assert not alone.executor.together(adders(alone, (1, 1)))
    patient = make_device(threads=2, split_seconds=1.0)  # nothing here takes a second
    assert not patient.executor.together(adders(patient, (1, 1)))
    buffers = [upload(device, np.ones(1000, np.float32)) for _ in range(3)]
    events = device.executor.run_together([(one, buffers), (many, buffers)], profile=True)
    assert events[0] is not events[1]
    assert all(event.duration_ns() is not None for event in events)


@pytest.mark.parametrize("sizes", [(1, 1000), (997, 1, 3, 64), (2, 1)])
def test_every_work_group_of_every_kernel_runs_once(sizes: tuple[int, ...]) -> None:
    """Slices of kernels worth splitting and whole small ones, in one table, cover every
    work-group: float32 sums match float64 numpy exactly (one rounding), over outputs
    poisoned with NaN."""
    device = make_device(threads=2, split_seconds=0.0)
    kernels = adders(device, sizes)
    assert device.executor.together(kernels)
    random = np.random.default_rng(len(sizes))
    launches, expected, outputs = [], [], []
    for kernel, n in zip(kernels, sizes, strict=True):
        a, b = (random.standard_normal(n).astype(np.float32) for _ in range(2))
        out = upload(device, np.full(n, np.nan, np.float32))
        launches.append((kernel, [out, upload(device, a), upload(device, b)]))
        expected.append((a.astype(np.float64) + b).astype(np.float32))
        outputs.append(out)
    events = device.executor.run_together(launches)
    for out, want in zip(outputs, expected, strict=True):
        np.testing.assert_array_equal(download(out, np.float32, events), want)


def test_a_group_waits_for_its_dependencies_and_fails_with_them() -> None:
    device = make_device(threads=2, split_seconds=0.0)
    kernels = adders(device, (1, 64))
    outputs = [upload(device, np.full(n, np.nan, np.float32)) for n in (1, 64)]
    ones = [upload(device, np.ones(64, np.float32)) for _ in range(2)]
    gate = SettableEvent("gate")
    launches = [(kernel, [out, *ones]) for kernel, out in zip(kernels, outputs, strict=True)]
    events = device.executor.run_together(launches, [gate])
    assert not any(event.is_complete for event in events)
    gate.set_result()
    assert [download(out, np.float32, events).tolist() for out in outputs] == [[2.0], [2.0] * 64]
    poisoned = [upload(device, np.full(n, np.nan, np.float32)) for n in (1, 64)]
    launches = [(kernel, [out, *ones]) for kernel, out in zip(kernels, poisoned, strict=True)]
    failed = device.executor.run_together(launches, [FailedEvent(RuntimeError("upstream"))])
    for event in failed:
        with pytest.raises(DependencyFailed):
            event.wait(10)
    assert all(np.isnan(download(out, np.float32)).all() for out in poisoned)
