"""GPU-style kernels on PoCL (issue 4): the whole conformance suite with the GPU settings
forced on `opencl.0` (or the device `TILE_TEST_OPENCL` names: tests.shipped), a CPU device
that would otherwise get one work-item per work-group.

`TILE_FORCE_GPU_SETTINGS=1` (read by `hal_opencl.device` when a device builds its settings)
gives every OpenCL device the GPU preset from its own queries; on PoCL that is work-groups of
256 work-items and 1 MiB of local memory. The same works for the conformance runner:

    TILE_FORCE_GPU_SETTINGS=1 python shared/conformance/run.py shared/spec/cases --device opencl.0

Here the module's device is a fresh instance of it made while the variable is set, so the other
tests of the session keep their CPU-style device. Every case is compared with its expected
outputs by the conformance runner's own `compare_output`. A second device runs the
`SMALL_GPU` and `MID_GPU` settings (few work-items, little local memory), whose kernels have
several elements per work-item, reductions in several chunks and operands left in global
memory: some cases under them, and contractions over every kind of element type (half,
bool, narrow and wide integers, double) compared with `llvm_cpu.0`. Under `-m slow`, the
whole suite runs under those settings too.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal.errors import DeviceUnavailableError
from hal.interfaces import DeviceKind
from hal_opencl.device import FORCE_GPU_SETTINGS, OpenCLDevice, OpenCLDriver, hardware_settings
from hal_opencl.program import render_program
from hal_opencl.render import RenderOptions
from semtree.kernel import KernelKind
from tests.gpu.settings import MID_GPU, SMALL_GPU
from tests.lower.test_conformance import CASES, RUNNER
from tests.shipped import missing_opencl, pick
from tile.lower.generate import generate_program

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import pyopencl as cl

    import hal
    from semtree.kernel import HardwareSettings

pytestmark = pytest.mark.opencl

# Matmuls, convolutions and reductions: each of their contraction kernels stages operands.
STAGED = [
    "matmul_2d",
    "matmul_batched_3d",
    "matmul_int32",
    "spec006_matmul",
    "dot_3d_2d",
    "conv1d_valid_nwc",
    "conv2d_valid_nhwc",
    "conv2d_same_stride2",
    "conv2d_dilated_same",
    "conv3d_valid_ndhwc",
    "spec022_conv1d_valid",
    "spec023_conv2d_same",
    "depthwise_conv2d_same_mult2",
    "sum_axis1_keepdims",
    "sum_all_to_0d",
    "tutorial_max_over_axis",
    "maxpool2d_valid_nhwc",
    "spec005_prod_axis1",
]


@pytest.fixture(scope="module")
def opencl() -> Iterator[hal.Device]:
    """A fresh instance of the tested OpenCL device (tests.shipped), its settings built
    under the variable."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FORCE_GPU_SETTINGS, "1")
        try:
            driver = OpenCLDriver()
            hal_device = pick(driver)
        except DeviceUnavailableError as error:  # the shipped backend is required
            missing_opencl(error)
        hal_device.settings  # noqa: B018 (built now, under the variable)
    yield hal_device
    driver.close()


@pytest.fixture(scope="module")
def gpu_device(opencl: hal.Device) -> tile.Device:
    """The tested OpenCL device with the GPU settings forced by the variable."""
    hal_device = opencl
    return tile.Device(
        hal_device.id,
        f"{hal_device.description} (GPU settings forced)",
        hal_device.kind.value,
        hal_device.settings,
        True,
        hal_device,
    )


class _Configured(OpenCLDevice):
    """An OpenCL device with the kernel generator's settings given by the test."""

    def __init__(self, cl_device: cl.Device, settings: HardwareSettings) -> None:
        super().__init__(0, cl_device)
        self.given = settings

    @property
    def settings(self) -> HardwareSettings:  # type: ignore[override]
        return self.given


@pytest.fixture(scope="module", params=[SMALL_GPU, MID_GPU], ids=["small", "mid"])
def small_device(request: pytest.FixtureRequest, opencl: hal.Device) -> Iterator[tile.Device]:
    hal_device = _Configured(opencl.cl_device, request.param)  # type: ignore[attr-defined]
    yield tile.Device(
        hal_device.id, "configured", hal_device.kind.value, request.param, True, hal_device
    )
    hal_device.close()


def test_the_variable_selects_the_gpu_preset(
    gpu_device: tile.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = gpu_device.settings
    assert settings is not None
    assert settings.threads > 1 and not settings.use_global
    capabilities = gpu_device.runtime.device.capabilities  # type: ignore[attr-defined]
    monkeypatch.setenv(FORCE_GPU_SETTINGS, "1")
    assert hardware_settings(capabilities) == settings
    if capabilities.kind is DeviceKind.CPU:  # PoCL: CPU-style kernels without the variable
        for unset in ("0", ""):
            monkeypatch.setenv(FORCE_GPU_SETTINGS, unset)
            assert hardware_settings(capabilities).threads == 1
            assert hardware_settings(capabilities).use_global


def _check_case(path: Path, device: tile.Device) -> None:
    assert RUNNER is not None
    case = json.loads(path.read_text())
    case["_dir"] = str(path.parent)
    inputs, expected = RUNNER.load_arrays(case)
    outputs = tile.run(case["source"], inputs, device=device)
    tolerance = case.get("tolerance", {"rtol": 0.0, "atol": 0.0})
    for name, spec in case["outputs"].items():
        assert name in outputs, f"output {name} missing"
        ok, message, _ = RUNNER.compare_output(
            name, np.asarray(outputs[name]), expected[name], spec, tolerance, False
        )
        assert ok, message


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case(path: Path, gpu_device: tile.Device) -> None:
    _check_case(path, gpu_device)


SOME = [
    "matmul_batched_3d",
    "conv2d_same_stride2",
    "conv2d_transpose_same_stride2",
    "lang_test_fractional_index_subdivision",
    "maxpool2d_same_stride2",
    "mlp_two_dense_softmax",
    "spec018_cumsum_constraint",
    "spec032_unpool_overlap",
    "spec038_argmax",
    "spec040_default_partial",
    "spec047_int_contraction_wrap",
    "sum_all_to_0d",
]


@pytest.mark.parametrize("path", [p for p in CASES if p.stem in SOME], ids=lambda p: p.stem)
def test_case_with_small_work_groups(path: Path, small_device: tile.Device) -> None:
    _check_case(path, small_device)


@pytest.mark.slow
@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_every_case_with_small_work_groups(path: Path, small_device: tile.Device) -> None:
    _check_case(path, small_device)


# Contractions over every kind of element type: (source, {input: (dtype, shape)}).
TYPED = [
    (
        "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }",
        {"A": ("float16", (13, 40)), "B": ("float16", (40, 9))},
    ),
    ("function (A[M, K]) -> (C) { C[m: M] = +(A[m, k]); }", {"A": ("int8", (5, 300))}),
    ("function (A[M, K]) -> (C) { C[m: M] = *(A[m, k]); }", {"A": ("uint16", (6, 40))}),
    ("function (A[K, N]) -> (C) { C[n: N] = >(A[k, n]); }", {"A": ("int64", (70, 3))}),
    (
        "function (A[K, N], B[K]) -> (C) { C[n: N] = <(A[k, n] * B[k]); }",
        {"A": ("float64", (50, 4)), "B": ("float64", (50,))},
    ),
    (
        "function (A[M, K], B[K]) -> (C) { C[m: M] = >(A[m, k] == B[k]); }",
        {"A": ("int32", (7, 30)), "B": ("int32", (30,))},
    ),
    ("function (A[M, K]) -> (C) { C[m: M] = <(A[m, k]); }", {"A": ("bool", (9, 33))}),
    (
        "function (A[M, K], B[K], V[K]) -> (C) { C[m: M] = +(A[m, k] == B[k] ? V[k]); }",
        {"A": ("uint8", (4, 20)), "B": ("uint8", (20,)), "V": ("float32", (20,))},
    ),
]


@pytest.mark.parametrize(
    ("source", "inputs"), TYPED, ids=["f16", "i8", "u16", "i64", "f64", "eq", "bool", "cond"]
)
def test_element_types_agree_with_the_cpu(
    source: str, inputs: dict[str, tuple[str, tuple[int, ...]]], small_device: tile.Device
) -> None:
    rng = np.random.default_rng(3)
    arrays = {
        name: (rng.random(shape) < 0.9 if dtype == "bool" else rng.integers(0, 3, shape)).astype(
            dtype
        )
        for name, (dtype, shape) in inputs.items()
    }
    want = tile.run(source, arrays, device="llvm_cpu.0")["C"]
    got = tile.run(source, arrays, device=small_device)["C"]
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        assert np.allclose(got, want, rtol=1e-3 if want.dtype == np.float16 else 1e-6)
    else:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("name", STAGED)
def test_contraction_kernels_use_local_memory_and_barriers(
    name: str, gpu_device: tile.Device
) -> None:
    assert RUNNER is not None
    (path,) = [path for path in CASES if path.stem == name]
    case = json.loads(path.read_text())
    case["_dir"] = str(path.parent)
    inputs, _ = RUNNER.load_arrays(case)
    settings = gpu_device.settings
    assert settings is not None
    kernel_list = generate_program(tile.Function(case["source"]).bind(inputs), settings)
    source = render_program(kernel_list, RenderOptions.for_device(settings, gpu_device.id))
    contractions = [k for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION]
    assert contractions
    for kernel in contractions:
        assert kernel.local_size == (settings.threads, 1, 1)
        text = source.functions[kernel.body.name]  # type: ignore[union-attr]
        assert re.search(r"__local \w+ tile_\w+\[\d+\];", text), text
        assert "barrier(CLK_LOCAL_MEM_FENCE);" in text, text
        assert f"reqd_work_group_size({settings.threads}, 1, 1)" in text, text
