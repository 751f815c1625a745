"""The OpenCL compiler (design 6.3): readable build errors, the program cache, kernel
objects made once per program, shared bodies, capability checks before building, source
dumps, and launches of one kernel object from several threads at once."""

from __future__ import annotations

import dataclasses
import linecache
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl
import pytest

import hal
from hal_opencl.compiler import INVOKER_LINES, OpenCLCompiler, forget_invoker_lines
from hal_opencl.device import OpenCLDevice
from hal_opencl.program import ProgramSource
from semtree import builder as sb
from semtree.types import DType, Region, Type, TypeBase
from tests.opencl.harness import download, kernel, kernel_list, upload

if TYPE_CHECKING:
    from pathlib import Path

    from semtree.kernel import KernelInfo, KernelList

N = 64


def add_one(name: str = "add_one", dtype: DType = DType.FLOAT32) -> KernelInfo:
    i, out, source = sb.global_id(0), sb.var("out"), sb.var("in")
    function = sb.function(
        name,
        [("out", Type.ptr(dtype)), ("in", Type.ptr(dtype, const=True))],
        sb.assign(out[i], source[i] + 1),
    )
    return kernel(function, N, (N,))


def private_device(device: hal.Device, index: int, **settings: object) -> OpenCLDevice:
    """A second handle on the same OpenCL device, with changed settings."""
    other = OpenCLDevice(index, device.cl_device)  # type: ignore[attr-defined]
    other._settings = dataclasses.replace(device.settings, **settings)
    return other


def test_build_failure_reports_log_and_source(device: hal.Device) -> None:
    program = kernel_list(add_one("broken"))
    text = "// a broken program\n__kernel void broken(__global float* out) {\n  out[0] = nope;\n}\n"

    def render(kernel_list: KernelList, options: object) -> ProgramSource:
        return ProgramSource(text, ("broken",), {"broken": text})

    with pytest.raises(hal.BackendCompileError) as caught:
        OpenCLCompiler(render).build(program, device)  # type: ignore[arg-type]
    error = caught.value
    assert error.source == text and "nope" in error.log
    message = str(error)
    assert device.id in message and "broken" in message
    assert "undeclared identifier 'nope'" in message  # the driver's log
    assert "    3 |   out[0] = nope;" in message  # the numbered source


def test_program_cache_and_kernel_objects(device: hal.Device) -> None:
    compiler = OpenCLCompiler()
    program = kernel_list(add_one())
    first = compiler.build(program, device)  # type: ignore[arg-type]
    again = compiler.build(kernel_list(add_one()), device)  # type: ignore[arg-type]
    assert compiler.builds == 1 and again.built is first.built
    assert first.entry(0)[0] is again.entry(0)[0]  # one cl.Kernel per program
    changed = compiler.build(kernel_list(add_one(dtype=DType.FLOAT64)), device)  # type: ignore[arg-type]
    assert compiler.builds == 2 and changed.built is not first.built
    assert first.options == ("-cl-mad-enable",)
    assert "__kernel void add_one(" in first.source(0)


def test_kernel_objects_leave_nothing_in_linecache(
    device: hal.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyopencl files each kernel object's generated set_args module in linecache, never to
    be removed, when its caches are off (as tile turns them off); the compiler drops those
    entries (issue 10: memory grew with every build)."""
    monkeypatch.setattr(cl, "_PYOPENCL_NO_CACHE", True)
    invokers = lambda: [key for key in linecache.cache if INVOKER_LINES in str(key)]  # noqa: E731
    compiler = OpenCLCompiler()
    names = [f"linecache_{index}" for index in range(5)]
    libraries = [compiler.build(kernel_list(add_one(name)), device) for name in names]  # type: ignore[arg-type]
    assert compiler.builds == len(names)
    assert invokers() == []
    cl.Kernel(libraries[0].built.program, names[0])  # type: ignore[union-attr]
    assert len(invokers()) == 1  # what pyopencl does, so the check above means something
    forget_invoker_lines()
    assert invokers() == []
    buffers = [upload(device, np.zeros(N, np.float32)), upload(device, np.ones(N, np.float32))]
    kernel_ = device.executor.prepare(libraries[-1], 0)
    kernel_.run(buffers).wait()  # the kernels still run
    np.testing.assert_array_equal(download(buffers[0], np.float32), np.full(N, 2, np.float32))


def test_shared_bodies_are_rendered_and_built_once(device: hal.Device) -> None:
    body = add_one().body
    assert body is not None
    first = dataclasses.replace(add_one(), name="launch_a")
    second = dataclasses.replace(add_one(), name="launch_b")
    second = dataclasses.replace(
        second, params=tuple(dataclasses.replace(p, name=p.name + "2") for p in second.params)
    )
    program = kernel_list(first, second)
    library = device.compiler.build(program, device)
    text = library.program_source.text  # type: ignore[attr-defined]
    assert text.count("__kernel void add_one(") == 1
    assert library.entry(0)[0] is library.entry(1)[0]  # type: ignore[attr-defined]
    buffers = [upload(device, np.full(N, value, np.float32)) for value in (0, 1, 0, 5)]
    run_a = device.executor.prepare(library, 0).run(buffers[:2])
    run_b = device.executor.prepare(library, 1).run(buffers[2:])
    assert download(buffers[0], np.float32, [run_a])[0] == 2
    assert download(buffers[2], np.float32, [run_b])[0] == 6


def test_float64_needs_cl_khr_fp64(device: hal.Device) -> None:
    no_doubles = private_device(device, 95, fp64=False)
    try:
        with pytest.raises(hal.UnsupportedOnDevice) as caught:
            no_doubles.compiler.build(kernel_list(add_one(dtype=DType.FLOAT64)), no_doubles)
        message = str(caught.value)
        assert "opencl.95" in message and "float64" in message and "add_one" in message
        no_doubles.compiler.build(kernel_list(add_one(dtype=DType.FLOAT16)), no_doubles)
    finally:
        no_doubles.close()


def test_launch_shape_and_local_memory_checks(device: hal.Device) -> None:
    capabilities = device.capabilities  # type: ignore[attr-defined]
    wide = capabilities.max_work_group_size * 2
    info = dataclasses.replace(add_one(), global_size=(wide, 1, 1), local_size=(wide, 1, 1))
    with pytest.raises(hal.UnsupportedOnDevice, match="work-groups"):
        device.compiler.build(kernel_list(info), device)
    elements = capabilities.local_memory // 4 + 1
    big = Type(TypeBase.VALUE, DType.FLOAT32, array=elements, region=Region.LOCAL)
    function = sb.function(
        "hungry", [("out", Type.ptr(DType.FLOAT32))], [sb.declare(big, "scratch")]
    )
    with pytest.raises(hal.UnsupportedOnDevice, match="local memory"):
        device.compiler.build(kernel_list(kernel(function, N, (N,))), device)


def test_dump_directory(
    device: hal.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILE_DUMP_DIR", str(tmp_path))
    library = OpenCLCompiler().build(kernel_list(add_one("dumped")), device)  # type: ignore[arg-type]
    (dump,) = tmp_path.glob("*.cl")
    assert dump.read_text() == library.program_source.text


def test_concurrent_launches_of_one_kernel(device: hal.Device) -> None:
    """set_args and the enqueue happen under the kernel object's lock."""
    library = device.compiler.build(kernel_list(add_one()), device)
    prepared = device.executor.prepare(library, 0)

    def launch(value: int) -> bool:
        source = upload(device, np.full(N, value, np.float32))
        target = upload(device, np.zeros(N, np.float32))
        event = prepared.run([target, source])
        return bool((download(target, np.float32, [event]) == value + 1).all())

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(launch, range(40)))
