"""Run Tile programs through the generator and the reference interpreter (no device).

`run_program` binds a function, generates its `KernelList` and executes it with
`tests.reference` on numpy buffers. Every output and temporary starts poisoned (NaN for
floats, 0xFF bytes otherwise), so an element no kernel writes cannot pass: after the run a
bool output must hold only 0/1 bytes, and an integer output that still equals the poison
pattern somewhere is run again with a second pattern, which must give the same values.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

import tile
from semtree.kernel import HardwareSettings, KernelKind
from tests.reference import run_kernel
from tile.lower import vector_blocks
from tile.lower.generate import generate_program

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pytest

    from semtree.kernel import KernelList

LLVM_CPU = HardwareSettings.llvm_cpu(2, ["avx512f", "avx2"])
# One element per work-group and no vectors: the plainest kernels.
SCALAR = HardwareSettings(
    threads=1,
    vec_size=1,
    use_global=True,
    mem_width=64,
    max_mem=32768,
    max_regs=4,
    goal_groups=8,
    goal_flops_per_byte=16,
    goal_dim_sizes=(2**31 - 1, 65535, 65535),
    max_work_group_size=1,
)


class UnwrittenOutputError(AssertionError):
    """Some element of an output was never written."""


def _poison(array: np.ndarray, pattern: int) -> None:
    if array.dtype.kind == "f":
        array[...] = np.nan
    else:
        array.reshape(-1).view(np.uint8)[...] = pattern


def execute(
    kernel_list: KernelList, inputs: Mapping[str, np.ndarray], pattern: int = 0xFF
) -> dict[str, np.ndarray]:
    """Run every kernel on fresh buffers (outputs and temporaries poisoned with `pattern`)."""
    buffers: dict[str, np.ndarray] = {}
    for name, shape in kernel_list.shapes.items():
        if name in kernel_list.inputs:
            array = np.array(inputs[name], dtype=shape.dtype.numpy, order="C", copy=True)
            assert array.shape == tuple(shape.dims), (name, array.shape, shape.dims)
            buffers[name] = array
        else:
            buffers[name] = np.empty(shape.dims, shape.dtype.numpy)
            _poison(buffers[name], pattern)
    for kernel in kernel_list.kernels:
        if kernel.kind is KernelKind.ZERO:
            buffers[kernel.params[0].name][...] = 0
        else:
            run_kernel(kernel, buffers)
    results = {name: buffers[name].copy() for name in kernel_list.outputs}
    for user, buffer in kernel_list.var_rewrites.items():
        results[user] = buffers[buffer].copy()
    return results


def run_kernel_list(
    kernel_list: KernelList, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`execute`, with the checks of the module docstring against unwritten elements."""
    results = execute(kernel_list, inputs, 0xFF)
    suspicious = False
    for name, array in results.items():
        if name in kernel_list.inputs:
            continue
        if array.dtype == np.bool_:
            if np.any(array.reshape(-1).view(np.uint8) > 1):
                raise UnwrittenOutputError(f"output {name} has unwritten elements")
        elif array.dtype.kind in "iu":
            poison = np.full(1, 0xFF, np.uint8).repeat(array.itemsize).view(array.dtype)[0]
            suspicious |= bool(np.any(array == poison))
    if suspicious:
        again = execute(kernel_list, inputs, 0x5A)
        for name, array in results.items():
            if array.dtype.kind in "iu" and not np.array_equal(array, again[name]):
                raise UnwrittenOutputError(f"output {name} has unwritten elements")
    return results


def run_program(
    source: str,
    inputs: Mapping[str, object],
    settings: HardwareSettings = LLVM_CPU,
) -> dict[str, np.ndarray]:
    """Bind, generate and run `source`; the outputs by name."""
    bound = tile.Function(source).bind(dict(inputs))
    kernel_list = generate_program(bound, settings)
    tensors = {name: inputs[name] for name in kernel_list.inputs}
    return run_kernel_list(kernel_list, tensors)  # type: ignore[arg-type]


def tiled(vec_size: int) -> HardwareSettings:
    """The `llvm_cpu` preset of a host whose vectors have `vec_size` floats, with a matching
    register budget: small tiles that still have partial tiles at the edges of most shapes."""
    return replace(LLVM_CPU, vec_size=vec_size, max_regs=16 * vec_size)


def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reduction-blocked vector kernels (`tile.lower.vector_blocks`) for any size of B, in
    steps of about 8 points and blocks of about 24 rows and 128 columns: every edge of them
    is reached at small sizes."""
    monkeypatch.setattr(vector_blocks, "STEP", 8)
    monkeypatch.setattr(vector_blocks, "STEP_ABOVE", 0)
    monkeypatch.setattr(vector_blocks, "BLOCK_ROWS", 24)
    monkeypatch.setattr(vector_blocks, "BLOCK_COLUMNS", 128)
