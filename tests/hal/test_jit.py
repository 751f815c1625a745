"""The LLVM compiler and the `__grid` ABI, with kernels built by hand with IRBuilder."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from llvmlite import ir

from hal.errors import BackendCompileError, HalError, UnsupportedOnDevice
from hal.events import SettableEvent
from hal_llvm.compiler import compile_module, host
from hal_llvm.grid import emit_grid_entry, grid_symbol
from hal_llvm.host import HostCpu
from semtree.types import DType
from tests.hal.kernels import (
    Body,
    Info,
    Kind,
    Program,
    add_id_recorder,
    add_vector_add,
    build,
    download,
    make_device,
    new_module,
    upload,
    vector,
)

GRID = (5, 3, 2)
GROUPS = 30


def _expected_codes() -> np.ndarray:
    g2, g1, g0 = np.meshgrid(range(GRID[2]), range(GRID[1]), range(GRID[0]), indexing="ij")
    return (g0 + (g1 << 16) + (g2 << 32)).reshape(-1).astype(np.int64)


@pytest.fixture(scope="module")
def id_recorder():
    module = new_module("ids")
    add_id_recorder(module, "ids", GRID)
    return compile_module(module, name="ids")


@pytest.mark.parametrize(
    ("begin", "end"), [(0, GROUPS), (0, 1), (4, 6), (7, 23), (29, 30), (12, 12), (20, 3)]
)
def test_grid_entry_runs_exactly_its_range(id_recorder, begin: int, end: int) -> None:
    out = np.full(GROUPS, -1, np.int64)
    slots = np.array([out.ctypes.data], np.uint64)  # the params array: one buffer address
    id_recorder.grid_entry(grid_symbol("ids"))(slots.ctypes.data, begin, end)
    expected = np.full(GROUPS, -1, np.int64)
    expected[begin:end] = _expected_codes()[begin:end]
    np.testing.assert_array_equal(out, expected)


def test_compile_from_text_and_look_up_symbols() -> None:
    module = new_module("text")
    add_vector_add(module, "vadd", (4, 1, 1))
    jit = compile_module(str(module), name="text")
    assert jit.address(grid_symbol("vadd")) > 0
    assert "define void @vadd__grid" in jit.source_of(["vadd", "vadd__grid"])
    with pytest.raises(KeyError, match="nothing"):
        jit.address("nothing")


def test_invalid_ir_raises_backend_compile_error_with_source_and_log() -> None:
    text = "define void @broken(i32 %x) {\n  ret i64 %x\n}\n"
    with pytest.raises(BackendCompileError) as caught:
        compile_module(text, name="broken")
    error = caught.value
    assert error.kernel == "broken" and error.source == text and error.log
    assert "compiler log" in str(error) and "    2 |   ret i64 %x" in str(error)


def test_grid_wrapper_needs_three_trailing_ids() -> None:
    module = new_module("bad")
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "k")
    with pytest.raises(ValueError, match="three i64"):
        emit_grid_entry(module, function, (1, 1, 1))


def _vector_add_program(size: tuple[int, int, int], flops: int = 0) -> tuple[Program, ir.Module]:
    count = size[0] * size[1] * size[2]
    module = new_module("vadd")
    add_vector_add(module, "vadd", size)
    params = (
        vector("out", DType.FLOAT32, (count,), "out"),
        vector("a", DType.FLOAT32, (count,)),
        vector("b", DType.FLOAT32, (count,)),
    )
    info = Info("vadd_0", Kind.ELEMENTWISE, params, size, body=Body("vadd"), flops=flops)
    return Program((info,)), module


@pytest.mark.parametrize("split", [False, True])
def test_vector_add_through_the_device(split: bool) -> None:
    device = make_device(split_seconds=0.0 if split else 1e9)
    try:
        program, module = _vector_add_program((7, 5, 3))
        library = build(device, program, module)
        assert "vadd__grid" in library.source(0)
        kernel = device.executor.prepare(library, 0)
        assert kernel._split is (split and device.runtime.threads > 1)
        a = np.random.default_rng(1).random(105, dtype=np.float32)
        b = np.arange(105, dtype=np.float32)
        left, right = upload(device, a), upload(device, b)
        out = device.executor.allocate(105 * 4)
        event = kernel.run([out, left, right])
        np.testing.assert_array_equal(download(out, np.float32, [event]), a + b)
        again = kernel.run([out, right, right])
        np.testing.assert_array_equal(download(out, np.float32, [again]), b + b)
        # Those ran at once, through the kernel's own array; a queued launch (behind a gate)
        # gets an array of its own, which the same buffers reuse, and other buffers replace.
        assert kernel._inline and kernel._binding is None
        gate = SettableEvent("gate")
        queued = [kernel.run([out, left, right], [gate])]
        first = kernel._binding
        queued.append(kernel.run([out, left, right], [gate]))
        assert first is not None and kernel._binding is first
        other = kernel.run([out, right, left], [gate])
        assert kernel._binding is not first
        gate.set_result()
        np.testing.assert_array_equal(download(out, np.float32, [*queued, other]), a + b)
        # run_fitted: the same launch, its buffers trusted (a cached call's), inline or queued.
        fitted = kernel.run_fitted([out, left, left])
        np.testing.assert_array_equal(download(out, np.float32, [fitted]), a + a)
        gate = SettableEvent("gate")
        fitted = kernel.run_fitted([out, right, right], [gate])
        gate.set_result()
        np.testing.assert_array_equal(download(out, np.float32, [fitted]), b + b)
    finally:
        device.close()


def test_kernel_arguments_are_checked(cpu_device) -> None:
    program, module = _vector_add_program((8, 1, 1))
    kernel = cpu_device.executor.prepare(build(cpu_device, program, module), 0)
    small, good = cpu_device.executor.allocate(16), cpu_device.executor.allocate(32)
    with pytest.raises(ValueError, match="takes 3 buffers"):
        kernel.run([good, good])
    with pytest.raises(ValueError, match=r"'a' .* needs 32 bytes"):
        kernel.run([good, small, good])
    with pytest.raises(TypeError, match="llvm_cpu"):
        kernel.run([good, good, np.zeros(8, np.float32)])  # type: ignore[list-item]


def test_zero_and_copy_kernels_need_no_code(cpu_device) -> None:
    shape = (6,)
    zero = Info("z", Kind.ZERO, (vector("t", DType.INT16, shape, "out"),), (1, 1, 1), (0, 0, 0))
    copy = Info(
        "c",
        Kind.COPY,
        (vector("d", DType.INT16, shape, "out"), vector("s", DType.INT16, shape)),
        (1, 1, 1),
        (0, 0, 0),
    )
    cpu_device.compiler.renderer = None  # must not be needed
    library = cpu_device.compiler.build(Program((zero, copy)), cpu_device)
    assert library.jit is None and "memset" in library.source(0)
    source = upload(cpu_device, np.arange(8, dtype=np.int16))  # larger than the tensor
    target = upload(cpu_device, np.full(8, -1, np.int16))
    copied = cpu_device.executor.prepare(library, 1).run([target, source])
    assert download(target, np.int16, [copied]).tolist() == [0, 1, 2, 3, 4, 5, -1, -1]
    zeroed = cpu_device.executor.prepare(library, 0).run([target], [copied])
    assert download(target, np.int16, [zeroed]).tolist() == [0] * 6 + [-1, -1]


def test_build_rejects_work_groups_of_several_items(cpu_device) -> None:
    info = Info("wide", Kind.ELEMENTWISE, (), (64, 1, 1), (16, 1, 1), body=Body("wide"))
    with pytest.raises(UnsupportedOnDevice, match=r"\(16, 1, 1\)"):
        build(cpu_device, Program((info,)), new_module("wide"))


def test_build_reports_a_missing_entry_point(cpu_device) -> None:
    module = new_module("other")
    add_vector_add(module, "other", (1, 1, 1))
    info = Info("k", Kind.ELEMENTWISE, (), (1, 1, 1), body=Body("expected"))
    with pytest.raises(BackendCompileError, match="expected__grid"):
        build(cpu_device, Program((info,)), module)


def test_missing_renderer_is_a_clear_error(cpu_device, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "hal_llvm.render", None)  # makes the import fail
    cpu_device.compiler.renderer = None
    info = Info("k", Kind.ELEMENTWISE, (), (1, 1, 1), body=Body("k"))
    with pytest.raises(HalError, match=r"renderer \(hal_llvm.render.render\) is not available"):
        cpu_device.compiler.build(Program((info,)), cpu_device)


def test_dump_directory_receives_ir_and_assembly(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TILE_DUMP_DIR", str(tmp_path))
    module = new_module("dumped")
    add_vector_add(module, "dumped", (2, 1, 1))
    compile_module(module, name="dumped/kernel")
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["dumped_kernel.ll", "dumped_kernel.opt.ll", "dumped_kernel.s"]
    assert "dumped__grid" in (tmp_path / "dumped_kernel.s").read_text()


def test_host_probe_and_settings_preset() -> None:
    cpu = host()
    assert cpu.name and cpu.triple and cpu.cores >= 1
    fields = cpu.settings_fields()
    assert fields["threads"] == 1 and fields["max_work_group_size"] == 1
    assert fields["use_global"] is True and fields["goal_groups"] == 4 * cpu.cores
    wide = HostCpu("x86_64", "test", frozenset({"avx512f", "avx2"}), "+avx512f", 2)
    narrow = HostCpu("x86_64", "test", frozenset({"avx2"}), "+avx2", 2)
    assert (wide.vec_size, narrow.vec_size) == (16, 8)
    assert wide.target_features(16) == "+avx512f,+prefer-no-gather,-prefer-256-bit"
    assert wide.target_features(8) == "+avx512f,+prefer-no-gather"
    assert narrow.target_features(16) == "+avx2,+prefer-no-gather"
    plain = HostCpu("x86_64", "test", frozenset({"sse4.2"}), "+sse4.2", 2)
    assert plain.target_features(4) == "+sse4.2"
    assert wide.settings_fields()["max_regs"] == 1536
    assert narrow.settings_fields()["max_regs"] == 768


def test_thread_count_override(monkeypatch) -> None:
    from hal_llvm.host import usable_cores

    monkeypatch.setenv("TILE_CPU_THREADS", "3")
    assert usable_cores() == 3
    monkeypatch.setenv("TILE_CPU_THREADS", "zero")
    with pytest.raises(ValueError, match="TILE_CPU_THREADS"):
        usable_cores()


def test_device_settings_come_from_semtree() -> None:
    kernel = pytest.importorskip("semtree.kernel")
    from hal_llvm.device import LLVMDevice

    device = LLVMDevice(host())
    settings = device.settings
    assert isinstance(settings, kernel.HardwareSettings)
    assert settings.vec_size == host().vec_size and settings.threads == 1
    # semtree's preset and the host's own reading of Appendix C agree.
    assert settings == kernel.HardwareSettings(**host().settings_fields())


def _resident_mb() -> float:
    import os
    from pathlib import Path

    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_compiling_modules_does_not_grow_memory() -> None:
    """Each compilation frees its O3 pass pipeline, LLVM context and engine (issue 10: the
    pass manager alone leaked ~60 KB per module, 18 MB here, through an llvmlite bug)."""
    import gc

    def compile_one(index: int) -> None:
        text = f"define i64 @f{index}(i64 %x) {{\n  %y = mul i64 %x, {index + 3}\n  ret i64 %y\n}}"
        jit = compile_module(text, name=f"m{index}")
        assert jit.address(f"f{index}")

    for index in range(100):
        compile_one(index)
    gc.collect()
    before = _resident_mb()
    for index in range(100, 400):
        compile_one(index)
    gc.collect()
    assert _resident_mb() - before < 6.0
