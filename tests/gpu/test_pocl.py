"""GPU-style kernels on PoCL (issue 4): the whole conformance suite with the GPU settings
forced on `opencl.0`, a CPU device that would otherwise get one work-item per work-group.

`TILE_FORCE_GPU_SETTINGS=1` (read by `hal_opencl.device` when a device builds its settings)
gives every OpenCL device the GPU preset from its own queries; on PoCL that is work-groups of
256 work-items and 1 MiB of local memory. The same works for the conformance runner:

    TILE_FORCE_GPU_SETTINGS=1 python shared/conformance/run.py shared/spec/cases --device opencl.0

Here the module's device is a fresh `opencl.0` made while the variable is set, so the other
tests of the session keep their CPU-style device. Every case is compared with its expected
outputs by the conformance runner's own `compare_output`.
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
from hal_opencl.device import FORCE_GPU_SETTINGS, OpenCLDriver, hardware_settings
from hal_opencl.program import render_program
from hal_opencl.render import RenderOptions
from semtree.kernel import KernelKind
from tests.generate.test_conformance import CASES, RUNNER
from tile.generate import generate_program

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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
def gpu_device() -> Iterator[tile.Device]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FORCE_GPU_SETTINGS, "1")
        try:
            driver = OpenCLDriver()
        except DeviceUnavailableError as error:  # the shipped backend is required
            pytest.fail(f"opencl must be available here: {error}")
        hal_device = driver.devices()[0]
        settings = hal_device.settings  # built now, under the variable
    device = tile.Device(
        hal_device.id,
        f"{hal_device.description} (GPU settings forced)",
        hal_device.kind.value,
        settings,
        True,
        hal_device,
    )
    yield device
    driver.close()


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


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case(path: Path, gpu_device: tile.Device) -> None:
    assert RUNNER is not None
    case = json.loads(path.read_text())
    case["_dir"] = str(path.parent)
    inputs, expected = RUNNER.load_arrays(case)
    outputs = tile.run(case["source"], inputs, device=gpu_device)
    tolerance = case.get("tolerance", {"rtol": 0.0, "atol": 0.0})
    for name, spec in case["outputs"].items():
        assert name in outputs, f"output {name} missing"
        ok, message, _ = RUNNER.compare_output(
            name, np.asarray(outputs[name]), expected[name], spec, tolerance, False
        )
        assert ok, message


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
