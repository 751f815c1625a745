"""Kernels for one block of a dynamic batch (`tile.lower.batch`) and the check that a program can
run block by block (`tile.lower.separable`), without a device: programs generated for a block
of rows under several settings, made to run over many blocks, and run over 1, 2 and 5 blocks
in the reference interpreter (outputs and temporaries poisoned) against numpy in float64."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from semtree.kernel import HardwareSettings, KernelKind
from semtree.nodes import IndexExpr, walk
from tests.lower.harness import LLVM_CPU, SCALAR, tiled
from tests.reference import poison, run_kernel
from tile.lower.batch import ROWS, BatchError, batch_kernels, clamps
from tile.lower.generate import generate_program
from tile.lower.separable import NotSeparable, batch_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from tile.lower.batch import BatchedList

GPU = HardwareSettings.opencl_gpu(
    max_work_group_size=256,
    max_work_item_sizes=(256, 256, 256),
    local_mem_size=32768,
    max_compute_units=4,
)
SETTINGS = {"llvm_cpu": LLVM_CPU, "vec4": tiled(4), "scalar": SCALAR, "gpu": GPU}

# name: (source, batched inputs -> other dims, fixed inputs -> shapes, reference)
PROGRAMS: dict[str, tuple[str, dict, dict, Callable]] = {
    "matmul": (
        "function (A[M, K], B[K, N]) -> (O) { O[m, n: M, N] = +(A[m, k] * B[k, n]); }",
        {"A": (19,)},
        {"B": (19, 23)},
        lambda a, b: a @ b,
    ),
    "softmax": (
        "function (X[M, N]) -> (O) { MX[m, 0: M, 1] = >(X[m, n]); E = exp(X - MX);"
        " S[m, 0: M, 1] = +(E[m, n]); O = E / S; }",
        {"X": (37,)},
        {},
        lambda x: (
            np.exp(x - x.max(1, keepdims=True))
            / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
        ),
    ),
    "long_rows": (
        "function (X[M, N]) -> (O) { O[m: M] = +(X[m, n]); }",
        {"X": (600,)},
        {},
        lambda x: x.sum(1),
    ),
    "conv": (
        "function (I[N, W, C], K[KW, C, D]) -> (O) {"
        " O[n, x, d: N, W - KW + 1, D] = +(I[n, x + i, c] * K[i, c, d]); }",
        {"I": (9, 4)},
        {"K": (3, 4, 5)},
        lambda inp, k: np.stack(
            [
                np.einsum(
                    "xic,icd->xd",
                    np.lib.stride_tricks.sliding_window_view(i, 3, axis=0).transpose(0, 2, 1),
                    k,
                )
                for i in inp
            ]
        ),
    ),
    "broadcast": (
        "function (X[N, C], G[C]) -> (O) { O = X * G + 2; }",
        {"X": (6,)},
        {"G": (6,)},
        lambda x, g: x * g + 2,
    ),
}


def _bind(name: str, rows: int) -> tile.bind.program.BoundProgram:  # type: ignore[name-defined]
    source, batched, fixed, _ = PROGRAMS[name]
    shapes = {key: tile.spec((rows, *rest)) for key, rest in batched.items()}
    shapes.update({key: tile.spec(shape) for key, shape in fixed.items()})
    return tile.Function(source).bind(shapes)


def _batched(name: str, settings: HardwareSettings, block: int) -> BatchedList:
    sizes = (1, 7, block) if block not in (1, 7) else (1, 7)
    rows = batch_of([_bind(name, size) for size in sizes], sizes).rows
    bound = _bind(name, block)
    kernel_list = generate_program(bound, settings)
    return batch_kernels(kernel_list, rows, set(bound.bindings), block)


def _run(batched: BatchedList, inputs: dict[str, np.ndarray], rows: int) -> dict:
    """Run every kernel over the ceil(rows / block) blocks of `rows` rows (the last block
    clamped) in the reference interpreter."""
    kernel_list = batched.kernel_list
    count = -(-rows // batched.block)
    buffers = {ROWS: np.array(rows, np.int32)}
    for name, shape in kernel_list.shapes.items():
        dims = tuple(shape.dims)
        if name in batched.private:
            dims = (count, *dims)
        elif name in batched.block_elements:
            dims = (rows, *dims[1:])
        if name == ROWS:
            continue
        if name in kernel_list.inputs:
            buffers[name] = np.array(inputs[name], dtype=shape.dtype.numpy)
            assert buffers[name].shape == dims
        else:
            buffers[name] = poison(np.empty(dims, shape.dtype.numpy))
    for index, info in enumerate(kernel_list.kernels):
        if index in batched.batched_kernels and info.body is not None:
            g0, g1, g2 = info.global_size
            info = replace(info, global_size=(g0, g1, g2 * count))
        elif info.kind is KernelKind.COPY:
            np.copyto(buffers[info.params[0].name], buffers[info.params[1].name])
            continue
        run_kernel(info, buffers)
    return {name: buffers[name] for name in kernel_list.outputs}


@pytest.mark.parametrize("settings", sorted(SETTINGS))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("block", [1, 3])
def test_batched_kernels_run_over_any_number_of_blocks(
    name: str, settings: str, block: int
) -> None:
    source, batched_inputs, fixed, reference = PROGRAMS[name]
    order = tile.Function(source).inputs
    batched = _batched(name, SETTINGS[settings], block)
    for index in batched.batched_kernels:
        info = batched.kernel_list.kernels[index]
        if info.body is not None:
            assert any(isinstance(n, IndexExpr) and n.dim == 2 for n in walk(info.body))
    rng = np.random.default_rng(block)
    sizes = [count * block for count in (1, 2, 5)]  # whole blocks
    sizes += [n for n in (2 * block + 1, 5 * block - 1) if clamps(batched, n)]  # clamped
    if block > 1 and settings == "llvm_cpu":
        assert len(sizes) == 5  # scalar accesses: any size may clamp
    for rows in sizes:
        inputs = {
            k: rng.standard_normal((rows, *r)).astype(np.float32) for k, r in batched_inputs.items()
        }
        inputs.update({k: rng.standard_normal(s).astype(np.float32) for k, s in fixed.items()})
        got = _run(batched, inputs, rows)["O"]
        want = reference(*(inputs[k].astype(np.float64) for k in order))
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4 * (1 + np.abs(want).max()), (rows, settings)


def test_generated_buffers_of_batched_kernels_are_private_per_block() -> None:
    """A row of 2^20 elements is summed in partial sums (tile.lower.split) at a block of one
    row: the partials' buffer is a private copy per block, indexed by the block."""
    source = "function (X[M, N]) -> (O) { O[m: M] = +(X[m, n]); }"
    sizes = (1, 2)
    bound = [tile.Function(source).bind({"X": tile.spec((n, 1 << 20))}) for n in sizes]
    rows = batch_of(bound, sizes).rows
    kernel_list = generate_program(bound[0], LLVM_CPU)
    batched = batch_kernels(kernel_list, rows, set(bound[0].bindings), 1)
    assert rows == {"X", "O"}
    assert batched.private and all(name.startswith("_P") for name in batched.private)
    assert batched.batched_kernels == set(range(len(kernel_list.kernels)))


def test_a_batched_kernel_may_not_write_a_tensor_without_the_batch() -> None:
    source = "function (X[N, C]) -> (O) { O[c: C] = +(X[n, c]); }"
    bound = tile.Function(source).bind({"X": tile.spec((4, 3))})
    kernel_list = generate_program(bound, LLVM_CPU)
    with pytest.raises(BatchError, match="writes O, which has no batch axis"):
        batch_kernels(kernel_list, {"X"}, set(bound.bindings), 4)


REDUCE = "function (X[N, C]) -> (O) { O[c: C] = +(X[n, c]); }"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (REDUCE, None),
        ("function (X[N, C]) -> (O) { O = X / N; }", None),
        ("function (X[N, C]) -> (O) { O = X / (N + 1); }", "other than as N"),
        ("function (X[N, C]) -> (O) { O[c, n: C, N] = =(X[n, c]); }", "only\nthrough"),
        ("function (X[N, C]) -> (O) { O[n, c: N, C] = =(X[n, 0]); }", None),
        (
            "function (X[N, C]) -> (O) { O[n, c: N, C] = +(X[n, c] * X[n, k]); }",
            None,
        ),
        ("function (X[N, C]) -> (O) { O[n: N] = +(X[n, c]), n < 3; }", "constrains"),
        ("function (X[N, C]) -> (O) { O[c: C] = +(X[n, c]), n < 3; }", "constrains"),
        ("function (X[N, C]) -> (O) { O[c: C] = +(X[n, c] * X[m, c]); }", "same single"),
        ("function (X[N, C]) -> (O) { O[c: C] = +(X[2 * n, c]); }", "same single"),
        ("function (X[N, C], Y[C]) -> (O) { O[n, c: N, C] = +(X[n, c] * Y[n]); }", "off"),
        ("function (X[N, C], Y[C]) -> (O) { O[c: C] = +(X[n, c] * Y[n]); }", "off"),
        ("function (X[N, C]) -> (O) { O[c: C] = +(X[n, n]); }", "off"),
        ("function (X[N, C]) -> (O) { O = index(X, 0); }", "'index'"),
        ("function (X[N, C]) -> (O) { O = index(X, 1); }", None),
        ("function (X[N, C]) -> (O) { O = reshape(X, N, C, 1); }", None),
    ],
)
def test_separable_programs(source: str, reason: str | None) -> None:
    """Which programs run over any batch (None) and the reason of each refusal."""
    sizes = (1, 7, 16)
    if "Y[C]" in source:
        bound = [
            tile.Function(source).bind({"X": tile.spec((n, 4)), "Y": tile.spec((4,))})
            for n in sizes
        ]
    else:
        bound = [tile.Function(source).bind({"X": tile.spec((n, 4))}) for n in sizes]
    if reason is None:
        batch = batch_of(bound, sizes)
        assert "X" in batch.rows
        assert batch.reductions == ({"O"} if source == REDUCE else set())
        assert len(batch.values) == ("/ N" in source)
        return
    with pytest.raises(NotSeparable) as error:
        batch_of(bound, sizes)
    assert all(part in str(error.value) for part in reason.split("\n")), str(error.value)
