"""Transpositions in 8 x 8 register blocks (`tile.lower.transpose`): the masks transpose, the
blocks are taken exactly where they may be (whole tiles of a plain permutation of 8- to
32-bit elements), and the results equal numpy's, element for element, at sizes on and off
the block and tile grids (1, primes, 2^k +- 1): through the reference interpreter (outputs
poisoned, unwritten elements and out-of-bounds reads refused) with llvm_cpu's and an OpenCL
CPU driver's settings, and on both shipped devices."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.kernel import HardwareSettings
from semtree.nodes import Binary, BinOp, For, If, Lanes, Shuffle, walk
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program
from tile.lower.transpose import transpose_masks

OPENCL_CPU = HardwareSettings.opencl_cpu(
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    max_compute_units=2,
    preferred_vector_width_float=8,
)
SETTINGS = {"llvm_cpu": LLVM_CPU, "opencl_cpu": OPENCL_CPU}
TRANSPOSE = "function (I[M, N]) -> (O) { O[n, m: N, M] = =(I[m, n]); }"
BATCHED = "function (I[B, M, N]) -> (O) { O[b, n, m: B, N, M] = =(I[b, m, n]); }"
NHWC = "function (I[N, C, H, W]) -> (O) { O[n, h, w, c: N, H, W, C] = =(I[n, c, h, w]); }"
# (source, input shape, the numpy permutation of its axes)
CASES = [
    (TRANSPOSE, (8, 8), (1, 0)),
    (TRANSPOSE, (1, 40), (1, 0)),
    (TRANSPOSE, (7, 9), (1, 0)),
    (TRANSPOSE, (3, 20), (1, 0)),
    (TRANSPOSE, (12, 5), (1, 0)),
    (TRANSPOSE, (16, 40), (1, 0)),
    (TRANSPOSE, (33, 65), (1, 0)),
    (TRANSPOSE, (64, 96), (1, 0)),
    (TRANSPOSE, (127, 257), (1, 0)),
    (BATCHED, (3, 17, 40), (0, 2, 1)),
    (BATCHED, (2, 64, 24), (0, 2, 1)),
    (NHWC, (2, 24, 5, 16), (0, 2, 3, 1)),
    (NHWC, (1, 40, 7, 9), (0, 2, 3, 1)),
    (NHWC, (2, 3, 9, 7), (0, 2, 3, 1)),
    (NHWC, (1, 5, 4, 12), (0, 2, 3, 1)),
]
DTYPES = [np.float32, np.int32, np.float16, np.int8, np.uint16]


def _values(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    """Distinct values (as far as the dtype allows), so a moved element shows."""
    count = int(np.prod(shape))
    numbers = np.random.default_rng(seed).permutation(count)
    if dtype is np.float16:  # integers up to 1024: exact in half
        return (numbers % 2048 - 1024).reshape(shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        return (numbers / 4 - count / 8).reshape(shape).astype(dtype)
    info = np.iinfo(dtype)
    return (numbers % (int(info.max) - int(info.min)) + int(info.min)).reshape(shape).astype(dtype)


def _shuffles(source: str, shape: tuple[int, ...], dtype: type, settings: HardwareSettings) -> int:
    bound = tile.Function(source).bind({"I": np.zeros(shape, dtype)})
    kernels = generate_program(bound, settings).kernels
    return sum(isinstance(node, Shuffle) for k in kernels if k.body for node in walk(k.body))


@pytest.mark.parametrize("width", [2, 4, 8, 16])
def test_the_masks_transpose(width: int) -> None:
    rows = [np.arange(width) + width * i for i in range(width)]
    for first, second, low, high in transpose_masks(width):
        pair = np.concatenate([rows[first], rows[second]])
        rows[first], rows[second] = pair[list(low)], pair[list(high)]
    square = np.arange(width * width).reshape(width, width)
    np.testing.assert_array_equal(np.stack(rows), square.T)


@pytest.mark.parametrize("settings", list(SETTINGS))
def test_blocks_only_where_they_may_be(settings: str) -> None:
    chosen = SETTINGS[settings]
    assert _shuffles(TRANSPOSE, (64, 96), np.float32, chosen) >= 24  # 8 x 8 transpositions
    assert _shuffles(NHWC, (2, 24, 5, 16), np.float16, chosen) >= 24
    assert _shuffles(TRANSPOSE, (64, 96), np.float64, chosen) == 0  # not a Lanes type
    assert _shuffles(TRANSPOSE, (5, 96), np.float32, chosen) >= 24  # 5 of 8 lanes: counted
    assert _shuffles(TRANSPOSE, (3, 96), np.float32, chosen) == 0  # 3 of 8: the element path
    assert _shuffles(TRANSPOSE, (64, 1), np.float32, chosen) == 0  # not a transposition
    with_epilogue = "function (I[M, N]) -> (P) { O[n, m: N, M] = =(I[m, n]); P = O + 1; }"
    assert _shuffles(with_epilogue, (64, 96), np.float32, chosen) == 0
    summed = "function (I[M, N]) -> (O) { O[n, m: N, M] = +(I[m, n]); }"
    assert _shuffles(summed, (64, 96), np.float32, chosen) >= 24  # one tuple each: a move too


def _block_choices(shape: tuple[int, ...], settings: HardwareSettings) -> list[If]:
    """The `if`s inside the loops over blocks that run a block whole or counted: uncounted
    loads in one branch, counted in the other (a choice per block, not per tile)."""
    bound = tile.Function(TRANSPOSE).bind({"I": np.zeros(shape, np.float32)})
    found = []
    for kernel in generate_program(bound, settings).kernels:
        loops = [n for n in walk(kernel.body) if isinstance(n, For)]
        for node in {id(n): n for loop in loops for n in walk(loop.body)}.values():
            if not isinstance(node, If) or node.other is None:
                continue
            counts = [
                {n.count is None for n in walk(branch) if isinstance(n, Lanes)}
                for branch in (node.then, node.other)
            ]
            if counts == [{True}, {False}] and isinstance(node.cond, Binary):
                found.append(node)
    return found


@pytest.mark.parametrize("settings", list(SETTINGS))
def test_an_edge_tile_counts_only_the_blocks_that_stick_out(settings: str) -> None:
    choices = _block_choices((81, 1149), SETTINGS[settings])  # 81 = 64 + 2 * 8 + 1
    assert choices, "an edge tile's blocks are all counted"
    assert all(
        any(isinstance(n, Binary) and n.op is BinOp.LE for n in walk(c.cond)) for c in choices
    )
    assert _block_choices((128, 128), SETTINGS[settings]) == []  # every tile whole


@pytest.mark.parametrize("settings", list(SETTINGS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])  # 4, 2 and 1 bytes
def test_transpositions_through_the_reference(settings: str, dtype: type) -> None:
    for seed, (source, shape, axes) in enumerate(CASES):
        x = _values(shape, dtype, seed)
        got = run_program(source, {"I": x}, SETTINGS[settings])["O"]
        np.testing.assert_array_equal(got, np.transpose(x, axes), err_msg=f"{shape}")


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_transpositions_on_the_devices(device_id: str, dtype: type) -> None:
    device = shipped_devices()[device_id]
    wrong = []
    for seed, (source, shape, axes) in enumerate([*CASES, (TRANSPOSE, (1000, 777), (1, 0))]):
        x = _values(shape, dtype, seed)
        got = np.asarray(tile.Function(source)(I=x, device=device)["O"])
        if got.shape != np.transpose(x, axes).shape or not np.array_equal(
            got, np.transpose(x, axes)
        ):
            wrong.append(shape)
    assert not wrong, f"wrong transpositions of {wrong} on {device_id}"


@pytest.mark.parametrize("settings", list(SETTINGS))
def test_the_element_paths_private_tile_stays_within_half_of_max_mem(settings: str) -> None:
    """Tiles of 64 x 64 for the blocks; float64 (no blocks: the element path, a private copy
    of the tile) in 32 x 32, 8 KB."""
    chosen = SETTINGS[settings]
    for dtype, side in ((np.float32, 64), (np.float64, 32)):
        bound = tile.Function(TRANSPOSE).bind({"I": np.zeros((100, 200), dtype)})
        (kernel,) = generate_program(bound, chosen).kernels
        assert kernel.tile == (side, side)
        assert side * side * np.dtype(dtype).itemsize <= chosen.max_mem // 2
