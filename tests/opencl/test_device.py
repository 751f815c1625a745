"""Enumeration, capabilities and settings of OpenCL devices (design 6.1, Appendix C),
the registry's view of the backend, failures to start, and lazy imports."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pyopencl as cl
import pytest

import hal
from hal import registry
from hal.interfaces import DeviceKind
from hal_opencl import device as opencl_device
from hal_opencl.device import OpenCLDriver, device_kind, hardware_settings
from tests.shipped import opencl_failure, require_opencl

REPO = Path(__file__).resolve().parents[2]


def test_devices_are_numbered_and_described(device: hal.Device) -> None:
    driver = hal.get_driver("opencl")
    assert driver.name == "opencl" and driver.id_prefix == "opencl"
    devices = driver.devices()
    assert [d.id for d in devices] == [f"opencl.{n}" for n in range(len(devices))]
    assert device in devices  # the tested device (tests.shipped): opencl.0 unless chosen
    capabilities = device.capabilities  # type: ignore[attr-defined]
    assert device.description == f"{capabilities.platform}: {capabilities.name}"
    cl_device = device.cl_device  # type: ignore[attr-defined]
    assert capabilities.compute_units == cl_device.max_compute_units
    assert capabilities.local_memory == cl_device.local_mem_size
    assert capabilities.max_allocation == cl_device.max_mem_alloc_size
    assert capabilities.fp64 == ("cl_khr_fp64" in cl_device.extensions)
    assert capabilities.fp16 == ("cl_khr_fp16" in cl_device.extensions)
    assert capabilities.base_address_alignment == cl_device.mem_base_addr_align // 8
    assert capabilities.summary()
    assert [s.name for s in driver.device_sets() if device in s.devices] == [capabilities.platform]


def test_registry_lists_llvm_first_then_opencl() -> None:
    require_opencl()
    devices, failures = registry.enumerate()
    ids = [d.id for d in devices]
    assert ids[0] == "llvm_cpu.0" and "opencl.0" in ids
    assert not [f for f in failures if f.backend == "opencl"]


def test_cpu_settings_follow_appendix_c(device: hal.Device) -> None:
    capabilities = device.capabilities  # type: ignore[attr-defined]
    settings = device.settings
    if device.kind is not DeviceKind.CPU:
        pytest.skip("the CPU preset applies to CPU devices")
    assert settings.threads == 1 and settings.use_global
    preferred = capabilities.preferred_vector_width_float
    widest = min(16, preferred if preferred > 1 else capabilities.native_vector_width_float)
    assert settings.vec_size == widest
    assert (settings.max_mem, settings.max_regs, settings.goal_flops_per_byte) == (32768, 1536, 16)
    assert settings.goal_groups == 4 * capabilities.compute_units
    assert settings.goal_dim_sizes == capabilities.max_work_item_sizes
    assert settings.max_work_group_size == capabilities.max_work_group_size
    # float16 computed in float32 on every CPU driver, cl_khr_fp16 or not (semtree preset).
    assert not settings.native_fp16 and settings.half_as_float
    assert settings.fp64 == capabilities.fp64
    assert not settings.fast_math


def test_gpu_settings_follow_appendix_c(device: hal.Device) -> None:
    capabilities = dataclasses.replace(
        device.capabilities,  # type: ignore[attr-defined]
        kind=DeviceKind.GPU,
        max_work_group_size=1024,
        local_memory=49152,
        compute_units=80,
        fp16=True,
        extensions=("cl_khr_fp16", "cl_khr_fp64"),
    )
    settings = hardware_settings(capabilities)
    assert settings.threads == 256 and not settings.use_global
    assert (settings.max_mem, settings.goal_groups, settings.vec_size) == (49152, 320, 1)
    assert settings.native_fp16 and settings.fp64


def test_device_kinds_from_type_bits() -> None:
    assert device_kind(cl.device_type.GPU) is DeviceKind.GPU
    assert device_kind(cl.device_type.CPU | cl.device_type.DEFAULT) is DeviceKind.CPU
    assert device_kind(cl.device_type.ACCELERATOR) is DeviceKind.ACCELERATOR
    assert device_kind(cl.device_type.CUSTOM) is DeviceKind.OTHER


def test_no_platform_is_a_device_unavailable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl_device.cl, "get_platforms", list)
    with pytest.raises(hal.DeviceUnavailableError, match="no OpenCL platform"):
        OpenCLDriver()

    def broken() -> list[cl.Platform]:
        raise cl.LogicError(
            cl._cl._ErrorRecord("PLATFORM_NOT_FOUND_KHR", -1001, "clGetPlatformIDs")
        )

    monkeypatch.setattr(opencl_device.cl, "get_platforms", broken)
    with pytest.raises(hal.DeviceUnavailableError, match="PLATFORM_NOT_FOUND_KHR"):
        OpenCLDriver()


def test_platform_without_devices_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    class Empty:
        name = "Empty platform"

        def get_devices(self) -> list[cl.Device]:
            raise cl.RuntimeError(cl._cl._ErrorRecord("DEVICE_NOT_FOUND", -1, "clGetDeviceIDs"))

    real = cl.get_platforms()
    monkeypatch.setattr(opencl_device.cl, "get_platforms", lambda: [Empty()])
    with pytest.raises(hal.DeviceUnavailableError, match="Empty platform"):
        OpenCLDriver()
    require_opencl()
    monkeypatch.setattr(opencl_device.cl, "get_platforms", lambda: [Empty(), *real])
    driver = OpenCLDriver()
    assert driver.devices()[0].id == "opencl.0" and driver.skipped
    driver.close()


def test_devices_whose_compiler_rejects_a_probe_are_not_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = "error: unknown target CPU 'generic'"
    monkeypatch.setattr(opencl_device, "compile_problem", lambda cl_device: problem)
    # Raised when the driver starts, or when it lists devices if a hidden platform (Oclgrind)
    # that could still be selected is installed.
    with pytest.raises(hal.DeviceUnavailableError) as caught:  # PoCL's LLVM and a new CPU
        OpenCLDriver().devices()
    assert caught.value.unsupported_host
    assert "unknown target CPU" in caught.value.reason and "does not know" in caught.value.reason
    problem = "error: out of resources"
    with pytest.raises(hal.DeviceUnavailableError) as caught:  # anything else
        OpenCLDriver().devices()
    assert not caught.value.unsupported_host and "out of resources" in caught.value.reason


def test_the_probe_reports_the_driver_log() -> None:
    error = opencl_failure()
    if error is None:
        first = hal.get_driver("opencl").default_device()
        assert opencl_device.compile_problem(first.cl_device) is None  # type: ignore[attr-defined]
    else:  # this host cannot compile: the probe says why, in the driver's words
        problem = opencl_device.compile_problem(cl.get_platforms()[0].get_devices()[0])
        assert problem is not None and problem.split(": ", 1)[1] in error.reason


def test_close_and_reopen(device: hal.Device) -> None:
    other = opencl_device.OpenCLDevice(90, device.cl_device)  # type: ignore[attr-defined]
    first = other.queue
    other.close()
    other.close()
    assert other.queue is not first  # a closed device makes a fresh queue on next use
    other.close()


def test_imports_are_lazy() -> None:
    """Importing the package or its renderer imports neither pyopencl nor, for listing
    devices, the kernel IR."""
    code = (
        "import sys, hal_opencl; assert 'pyopencl' not in sys.modules; "
        "assert 'semtree' not in sys.modules; "
        "from hal_opencl import render_program; import hal_opencl.render; "
        "assert 'pyopencl' not in sys.modules; print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize(
    ("version", "width", "expected"),
    [
        # LLVM 14 names AMD Zen 4 "znver3", without AVX-512, though the processor has it.
        ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", 16, 8),
        ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-skylake-avx512", 16, 16),
        ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-sapphirerapids", 16, 16),
        ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", 8, 8),
        ("OpenCL 3.0 PoCL HSTR: pthread-aarch64-unknown-linux-gnu-neoverse-n1", 4, 4),
        ("OpenCL 3.0 (Build 0)", 16, 16),  # Intel's runtime compiles what it reports
        ("OpenCL 3.0 PoCL", 16, 16),  # no target named: the width as reported
    ],
)
def test_pocl_widths_are_those_its_target_compiles(version: str, width: int, expected: int) -> None:
    assert opencl_device.compiled_width(version, width) == expected


def test_the_device_widths_are_what_its_compiler_targets(device: hal.Device) -> None:
    """The generator's vector widths never exceed what the device's compiler emits: a max over
    4096 floats in vectors of 16 aborted PoCL 3.0 on AMD Zen 4 (LLVM 14: "Cannot emit physreg
    copy instruction"), which takes the whole process down."""
    capabilities = device.capabilities  # type: ignore[attr-defined]
    version = capabilities.version
    widths = (capabilities.preferred_vector_width_float, capabilities.native_vector_width_float)
    for width in widths:
        assert width == opencl_device.compiled_width(version, width)
    code = (
        "import numpy as np, tile\n"
        "f = tile.Function('function (X[N]) -> (M, L) { M[] = >(X[i]); L[] = <(X[i]); }')\n"
        "x = np.random.default_rng(3).standard_normal(4099).astype(np.float32)\n"
        f"out = f(device={device.id!r}, X=x)\n"
        "assert float(out['M'].numpy()) == x.max() and float(out['L'].numpy()) == x.min()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
