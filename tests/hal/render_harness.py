"""Run semtree kernels through the LLVM renderer, compiler and device, and through the
reference interpreter, for the renderer tests (`test_render*.py`).

Many small kernels are built as one KernelList (one module, one O3 + MCJIT run), because
compilation, not execution, is what costs time in these tests.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hal_llvm.compiler import host
from hal_llvm.device import LLVMDevice
from hal_llvm.render import render
from semtree.kernel import (
    Direction,
    HardwareSettings,
    KernelInfo,
    KernelKind,
    KernelList,
    KernelParam,
)
from semtree.types import DType, TensorShape
from tests import reference
from tests.hal.kernels import download, upload

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.nodes import Function


def cpu_settings(**changes: object) -> HardwareSettings:
    """The llvm_cpu preset of this host, with `changes`."""
    preset = HardwareSettings.llvm_cpu(host().cores, host().features)
    return dataclasses.replace(preset, **changes)


@dataclass
class Case:
    """One kernel launch: the body, one array per parameter (outputs too: their initial
    contents) and the grid."""

    function: Function
    arrays: list[np.ndarray]
    grid: tuple[int, int, int] = (1, 1, 1)

    def __post_init__(self) -> None:
        self.arrays = [np.ascontiguousarray(array) for array in self.arrays]
        if self.grid == (1, 1, 1) and self.arrays:
            self.grid = (self.arrays[0].shape[0] if self.arrays[0].ndim else 1, 1, 1)


def kernel_list(cases: Sequence[Case]) -> KernelList:
    """The cases as one KernelList; kernel k's body is renamed `k<k>`, its buffers
    `k<k>_<param>`."""
    kernels, shapes = [], {}
    inputs, outputs = [], []
    for number, case in enumerate(cases):
        body = dataclasses.replace(case.function, name=f"k{number}")
        params = []
        for param, array in zip(body.params, case.arrays, strict=True):
            name = f"k{number}_{param.name}"
            direction = Direction.IN if param.type.is_const else Direction.OUT
            assert param.type.dtype is not None
            params.append(
                KernelParam(name, direction, param.type.dtype, array.shape, param.type.vec_width)
            )
            shapes[name] = TensorShape(param.type.dtype, array.shape)
            (inputs if direction is Direction.IN else outputs).append(name)
        info = KernelInfo(
            f"k{number}", KernelKind.SPECIAL, params, case.grid, (1, 1, 1), body, 0, 0
        )
        kernels.append(info)
    return KernelList(tuple(kernels), shapes, inputs, outputs, ())


class Runner:
    """A private llvm_cpu device per (settings, flush_denormals); close() releases them."""

    def __init__(self) -> None:
        self.devices: dict[tuple[HardwareSettings, bool], LLVMDevice] = {}

    def device(self, settings: HardwareSettings, flush_denormals: bool) -> LLVMDevice:
        key = (settings, flush_denormals)
        if key not in self.devices:
            renderer = functools.partial(render, flush_denormals=flush_denormals)
            self.devices[key] = LLVMDevice(host(), 0, settings=settings, renderer=renderer)
        return self.devices[key]

    def run(
        self,
        cases: Sequence[Case],
        settings: HardwareSettings | None = None,
        *,
        flush_denormals: bool = False,
    ) -> list[list[np.ndarray]]:
        """Every case's arrays after running it on the device."""
        device = self.device(settings or cpu_settings(), flush_denormals)
        library = device.compiler.build(kernel_list(cases), device)
        results = []
        for number, case in enumerate(cases):
            kernel = device.executor.prepare(library, number)
            buffers = [upload(device, array) for array in case.arrays]
            event = kernel.run(buffers)
            results.append(
                [
                    download(buffer, array.dtype, [event]).reshape(array.shape)
                    for buffer, array in zip(buffers, case.arrays, strict=True)
                ]
            )
        return results

    def close(self) -> None:
        for device in self.devices.values():
            device.close()
        self.devices.clear()


def run_reference(cases: Sequence[Case], *, native_fp16: bool = False) -> list[list[np.ndarray]]:
    """Every case's arrays after running it in the reference interpreter."""
    results = []
    for case in cases:
        arrays = [array.copy() for array in case.arrays]
        reference.run(case.function, arrays, case.grid, native_fp16=native_fp16)
        results.append(arrays)
    return results


TOLERANCE = {DType.FLOAT16: 1e-3, DType.FLOAT32: 1e-6, DType.FLOAT64: 1e-13}


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 0.0, what: str = "") -> None:
    """Integers and booleans exactly; floats within `rtol` (NaN matches NaN)."""
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def compare(
    cases: Sequence[Case],
    got: Sequence[Sequence[np.ndarray]],
    want: Sequence[Sequence[np.ndarray]],
    rtol: float = 0.0,
) -> None:
    """Every output array of every case agrees."""
    for case, got_arrays, want_arrays in zip(cases, got, want, strict=True):
        for param, mine, theirs in zip(case.function.params, got_arrays, want_arrays, strict=True):
            if not param.type.is_const:
                assert_same(mine, theirs, rtol, f"{param.name} of\n{case.function}")
