"""Tile-size policy (`tile.lower.tiles`) as the generator applies it: transpositions get square
tiles, contiguous reductions one element per work-group; the kernels stay correct on ragged
shapes whose tiles stick out of the output (reference interpreter, outputs poisoned)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import tile
from hal_opencl import RenderOptions, render_program
from semtree.kernel import HardwareSettings, KernelKind
from semtree.nodes import For, walk
from tests.lower.harness import LLVM_CPU, SCALAR, run_program
from tests.shipped import SHIPPED
from tile.lower.generate import generate_program
from tile.lower.tiles import (
    GROUP_ELEMENTS,
    REGISTER_STRIP,
    STREAM_ELEMENTS,
    STRIP_BYTES,
    choose_tiles,
    from_memory,
)

TRANSPOSE = "function (I[M, N]) -> (O) { O[n, m: N, M] = =(I[m, n]); }"
OPTIONS = RenderOptions(device="test")
PERMUTE = "function (I[A, B, C]) -> (O) { O[c, a, b: C, A, B] = =(I[a, b, c]); }"


def tiles_of(source: str, inputs: dict[str, np.ndarray]) -> tuple[int, ...]:
    kernel_list = generate_program(tile.Function(source).bind(inputs), LLVM_CPU)
    (kernel,) = [k for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION]
    return kernel.tile


def test_policy() -> None:
    t = LLVM_CPU.transpose_tile
    assert choose_tiles((64, 64), LLVM_CPU, reduction_points=1, accumulator_bytes=4) == (1, 64)
    transposed = choose_tiles(
        (64, 64), LLVM_CPU, reduction_points=1, accumulator_bytes=4, crosswise=0
    )
    assert transposed == (t, t)
    small = choose_tiles((3, 64), LLVM_CPU, reduction_points=1, accumulator_bytes=4, crosswise=0)
    assert small == (3, t)
    scalar = choose_tiles((64, 64), SCALAR, reduction_points=1, accumulator_bytes=4, crosswise=0)
    assert scalar == (1, 1)
    lanes = choose_tiles((64, 64), LLVM_CPU, reduction_points=256, accumulator_bytes=4, lanes=64)
    assert lanes == (1, 1)


def test_short_reductions_in_lanes_share_a_group_under_vector_loops() -> None:
    """A reduction in lanes over short rows computes one element per group where the device
    runs the groups in a loop of its own and does not fold rows together (`row_folds`), a row
    of `lanes` elements where it does (llvm_cpu: `folds_rows`), and under `vector_loops` (an
    OpenCL CPU, a call per group) as many as keep a group's reads under GROUP_ELEMENTS, its
    accumulators within 256 and every core its groups."""
    wide = replace(LLVM_CPU, vector_loops=True)
    short = {"reduction_points": 19, "accumulator_bytes": 4, "lanes": 8}
    assert choose_tiles((57, 39, 90), replace(LLVM_CPU, row_folds=False), **short) == (1, 1, 1)
    assert choose_tiles((57, 39, 90), LLVM_CPU, **short) == (1, 1, 8)
    assert choose_tiles((57, 39, 7), LLVM_CPU, **short) == (1, 1, 1)  # rows under the lanes
    assert choose_tiles((1, 1, 50), LLVM_CPU, **short) == (1, 1, 1)  # 7 groups: too few
    assert choose_tiles((1, 1, 57), LLVM_CPU, **short) == (1, 1, 8)  # 8 groups
    long = {"reduction_points": 32, "accumulator_bytes": 4, "lanes": 8}  # 4 steps of lanes
    assert choose_tiles((57, 39, 90), LLVM_CPU, **long) == (1, 1, 1)
    doubles = {"reduction_points": 19, "accumulator_bytes": 8, "lanes": 16}  # two vectors
    assert choose_tiles((57, 39, 90), LLVM_CPU, **doubles) == (1, 1, 1)
    assert choose_tiles((200070,), wide, **short) == (32,)  # 32 x 8 accumulators
    assert choose_tiles((57, 39, 90), wide, **short) == (1, 1, 32)
    long = {"reduction_points": 300, "accumulator_bytes": 4, "lanes": 64}
    assert choose_tiles((4000,), wide, **long) == (4,)  # 1200 elements read
    assert choose_tiles((4000,), wide, reduction_points=2000, accumulator_bytes=4, lanes=64) == (1,)
    few = choose_tiles((2 * wide.goal_groups,), wide, **short)
    assert few == (2,)  # every core keeps its groups


@pytest.mark.parametrize("k", [16, 17, 19, 31, 40, 65])
@pytest.mark.parametrize("rows", [1, 7, 33, 1000])
def test_short_reductions_in_lanes_match_numpy(k: int, rows: int) -> None:
    x = np.random.default_rng(k * rows).standard_normal((rows, 3, k)).astype(np.float32)
    wide = replace(LLVM_CPU, vector_loops=True, vec_size=16, reduction_steps=False)
    for agg, reduce in (("+", np.sum), (">", np.max), ("<", np.min)):
        source = f"function (X[A, B, K]) -> (O) {{ O[a, b: A, B] = {agg}(X[a, b, k]); }}"
        want = reduce(x.astype(np.float64), axis=2)
        got = run_program(source, {"X": x}, wide)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        for device in SHIPPED:
            got = tile.run(source, {"X": x}, device=device)["O"]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape",
    [
        (4096, 256),
        (8, 128, 256),
        (37, 50),
        (5, 3),
        (129, 1),
        (16_000_000,),
        (3, 7, 1000),
        (1000, 333),
    ],
)
@pytest.mark.parametrize("settings", [LLVM_CPU, replace(LLVM_CPU, vector_loops=True)])
def test_elementwise_groups_grow(shape: tuple[int, ...], settings: HardwareSettings) -> None:
    """An elementwise kernel's tile grows from the last dimension outwards (an outer one only
    once the tile spans the dimensions inside it) to at most GROUP_ELEMENTS elements, while
    the grid keeps goal_groups groups; under vector_loops its strip is a whole number of
    vectors where a row holds more than one, grown or not (a row of 333 in a tile of 336:
    `tile.lower.widen` writes no other)."""
    width = settings.vec_size
    tiles = choose_tiles(shape, settings, reduction_points=1, accumulator_bytes=4, elementwise=True)
    strip = 4 * width
    last = (
        -(-shape[-1] // width) * width if settings.vector_loops and shape[-1] > width else shape[-1]
    )
    assert tiles[-1] >= min(last, strip)
    if settings.vector_loops and shape[-1] > width:
        assert tiles[-1] % width == 0
    assert np.prod(tiles) <= max(GROUP_ELEMENTS, min(last, strip))
    groups = np.prod([-(-size // t) for size, t in zip(shape, tiles, strict=True)])
    if np.prod(tiles) > min(last, strip):  # grown: the cores keep their groups
        assert groups >= settings.goal_groups
    for axis in range(len(shape) - 1):
        if tiles[axis] > 1:
            assert all(t >= s for t, s in zip(tiles[axis + 1 :], shape[axis + 1 :], strict=True))
    plain = choose_tiles(shape, settings, reduction_points=1, accumulator_bytes=4)
    assert plain[:-1] == (1,) * (len(shape) - 1)  # a permutation's strip does not grow
    assert choose_tiles(
        (4096, 256), settings, reduction_points=1, accumulator_bytes=4, elementwise=True
    ) == (4, 256)
    assert choose_tiles(
        (16_000_000,), settings, reduction_points=1, accumulator_bytes=4, elementwise=True
    ) == (GROUP_ELEMENTS,)


def test_streaming_reductions_get_wide_strips() -> None:
    """A reduction reading the last output dimension contiguously (a column sum), on a device
    without `reduction_steps` (OpenCL): strips of STREAM_ELEMENTS columns whatever the vector
    width, one row, narrower where the cores would run out of groups."""
    wide = STREAM_ELEMENTS
    plain = replace(LLVM_CPU, reduction_steps=False)
    for vec_size in (4, 8, 16):
        narrow = replace(plain, vec_size=vec_size, max_regs=16 * vec_size)
        streams = {"reduction_points": 4096, "accumulator_bytes": 4, "streams": True}
        assert choose_tiles((3001,), narrow, **streams) == (wide,)
    streams = {"reduction_points": 4096, "accumulator_bytes": 4, "streams": True}
    assert choose_tiles((3001,), plain, **streams) == (wide,)
    assert choose_tiles((16, 300), plain, **streams) == (1, wide)
    assert choose_tiles((200,), plain, **streams) == (plain.vec_size,)  # 13 groups
    assert choose_tiles((5,), plain, **streams) == (5,)


def test_streaming_strips_under_reduction_steps() -> None:
    """llvm_cpu (`reduction_steps`): a strip per core, whole vectors but the last; up to
    STRIP_BYTES of accumulators where the operands come from memory (more than CACHED_BYTES,
    over STRIP_ROWS rows at least),
    REGISTER_STRIP vectors where they come from the caches and one operand is broadcast
    along the strip (a matvec-T); a column sum from the caches keeps STREAM_ELEMENTS."""
    assert LLVM_CPU.goal_groups == 8  # two cores
    memory = {"reduction_points": 4096, "accumulator_bytes": 4, "streams": True}
    cached = {"reduction_points": 100, "accumulator_bytes": 4, "streams": True}
    assert from_memory((3001,), 4096, 4) and not from_memory((3001,), 100, 4)
    assert not from_memory((2, 55, 55, 1 << 12), 9, 4)  # a pooling window: a few rows
    pool = {"reduction_points": 9, "accumulator_bytes": 4, "streams": True}
    assert choose_tiles((2, 55, 55, 1 << 12), LLVM_CPU, **pool)[-1] == STREAM_ELEMENTS
    assert STRIP_BYTES // 4 < 3001 <= 2 * STRIP_BYTES // 4
    assert choose_tiles((3001,), LLVM_CPU, **memory) == (1504,)  # 1504 + 1497
    assert choose_tiles((4096,), LLVM_CPU, **memory) == (2048,)
    long = {**memory, "reduction_points": 1 << 20}
    assert choose_tiles((64,), replace(LLVM_CPU, goal_groups=4), **long) == (64,)  # one core
    assert choose_tiles((300,), LLVM_CPU, **long) == (160,)  # both cores
    assert choose_tiles((64,), LLVM_CPU, **memory) == (16,)  # 1 MiB: from the caches
    registers = 16 * REGISTER_STRIP[16]
    assert choose_tiles((3001,), LLVM_CPU, **cached, broadcasts=True) == (registers,)
    assert choose_tiles((16, 300), LLVM_CPU, **cached, broadcasts=True) == (1, 160)  # 160 + 140
    assert choose_tiles((200,), LLVM_CPU, **cached, broadcasts=True) == (112,)
    assert choose_tiles((17,), LLVM_CPU, **cached, broadcasts=True) == (16,)  # a vector and one
    assert choose_tiles((5,), LLVM_CPU, **cached, broadcasts=True) == (5,)
    avx2 = replace(LLVM_CPU, vec_size=8, max_regs=768)
    assert choose_tiles((3001,), avx2, **cached, broadcasts=True) == (8 * REGISTER_STRIP[8],)
    assert choose_tiles((4096,), avx2, **memory) == (2048,)  # wide strips that divide the row
    assert choose_tiles((3001,), avx2, **memory) == (STREAM_ELEMENTS,)  # no masked wide strip
    assert choose_tiles((3001,), avx2, **memory, broadcasts=True) == (8 * REGISTER_STRIP[8],)
    assert choose_tiles((3001,), LLVM_CPU, **cached) == (STREAM_ELEMENTS,)
    column_sum = "function (X[M, N]) -> (O) { O[n: N] = +(X[m, n]); }"
    assert tiles_of(column_sum, {"X": np.zeros((50, 3001), np.float32)}) == (STREAM_ELEMENTS,)
    matvec_t = "function (A[M, N], V[M]) -> (O) { O[n: N] = +(A[m, n] * V[m]); }"
    inputs = {"A": np.zeros((50, 3001), np.float32), "V": np.zeros(50, np.float32)}
    assert tiles_of(matvec_t, inputs) == (registers,)


def test_streaming_strips_are_whole_vectors_under_vector_loops() -> None:
    """Under `vector_loops` a strip is a whole number of vectors (33 channels: 48, the last
    vector counted), so that `widen_lanes` writes it on vectors, and a row's strips hold as
    many vectors as they can alike (80 columns: 48 + 32, not 64 + 16): a 2 x 2 max pool of
    2 x 111 x 111 x 33 on Intel's CPU OpenCL, 0.75 ms on scalars, 0.19 on vectors."""
    wide = replace(LLVM_CPU, vector_loops=True, vec_size=16, reduction_steps=False)
    streams = {"reduction_points": 4, "accumulator_bytes": 4, "streams": True}
    assert choose_tiles((2, 55, 55, 33), wide, **streams) == (1, 1, 1, 48)
    assert choose_tiles((2, 55, 55, 33), LLVM_CPU, **streams)[-1] == 33
    assert choose_tiles((2, 55, 55, 100), wide, **streams)[-1] == 64  # 7 vectors: 4 + 3
    assert choose_tiles((2, 55, 55, 80), wide, **streams)[-1] == 48  # 5 vectors: 3 + 2
    assert choose_tiles((2, 55, 55, 1000), wide, **streams)[-1] == 64
    assert choose_tiles((1, 300), wide, **streams)[-1] == 32  # every core keeps its groups
    assert choose_tiles((2, 55, 55, 7), wide, **streams)[-1] == 7  # under one vector
    pool = (
        "function (I[N, H, W, C]) -> (O) { O[n, y, x, c: N, 5, 5, C] = "
        ">(I[n, 2 * y + i, 2 * x + j, c]), i < 2, j < 2; }"
    )
    for c in (1, 17, 33, 65):
        image = np.random.default_rng(c).standard_normal((2, 11, 11, c)).astype(np.float32)
        want = image[:, :10, :10].reshape(2, 5, 2, 5, 2, c).max(axis=(2, 4))
        np.testing.assert_array_equal(run_program(pool, {"I": image}, wide)["O"], want)
        for device in SHIPPED:
            np.testing.assert_array_equal(tile.run(pool, {"I": image}, device=device)["O"], want)


@pytest.mark.parametrize("n", [1, 15, 63, 64, 65, 200, 1025])
def test_column_reductions_in_strips(n: int) -> None:
    x = np.random.default_rng(n).standard_normal((37, n)).astype(np.float32)
    for agg, reduce in (("+", np.sum), (">", np.max)):
        source = f"function (X[M, N]) -> (O) {{ O[n: N] = {agg}(X[m, n]); }}"
        want = reduce(x.astype(np.float64), axis=0)
        np.testing.assert_allclose(run_program(source, {"X": x})["O"], want, rtol=1e-5, atol=1e-5)
        for device in SHIPPED:
            got = tile.run(source, {"X": x}, device=device)["O"]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_transpositions_get_square_tiles() -> None:
    t = LLVM_CPU.transpose_tile
    assert tiles_of(TRANSPOSE, {"I": np.zeros((400, 240), np.float32)}) == (t, t)
    assert tiles_of(TRANSPOSE, {"I": np.zeros((40, 24), np.float32)}) == (min(24, t), min(40, t))
    # O[c, a, b]: a and b are neighbours in I too, so this is a transpose of (A * B) x C
    # (tile.lower.collapse.merge_coordinates); a reversal has no such neighbours.
    assert tiles_of(PERMUTE, {"I": np.zeros((8, 10, 80), np.float32)}) == (t, t)
    reverse = "function (I[A, B, C]) -> (O) { O[c, b, a: C, B, A] = =(I[a, b, c]); }"
    assert tiles_of(reverse, {"I": np.zeros((4, 5, 80), np.float32)}) == (t, 1, 8)  # 4 of 8
    assert tiles_of(reverse, {"I": np.zeros((3, 5, 80), np.float32)}) == (t, 1, 3)
    copy = "function (I[M, N]) -> (O) { O[m, n: M, N] = =(I[m, n]); }"
    assert tiles_of(copy, {"I": np.zeros((400, 240), np.float32)}) != (t, t)


def test_transpose_tile_is_a_setting() -> None:
    """The side is the device's setting, never more than the dimension, and halved until a
    private copy of the tile (the element path's) takes at most half of `max_mem`."""
    wide = replace(LLVM_CPU, transpose_tile=32)
    cross = {"reduction_points": 1, "accumulator_bytes": 4, "crosswise": 0}
    assert choose_tiles((64, 64), wide, **cross) == (32, 32)
    assert choose_tiles((5, 100), wide, **cross) == (8, 32)  # whole blocks of 8, 5 live
    assert choose_tiles((3, 100), wide, **cross) == (3, 32)  # 3 of 8 live: the element path
    widest = replace(LLVM_CPU, transpose_tile=128)
    assert choose_tiles((256, 256), widest, **cross) == (64, 64)  # 16 KB of 32 KB
    assert choose_tiles((256, 256), widest, **{**cross, "accumulator_bytes": 8}) == (32, 32)
    with pytest.raises(ValueError, match="transpose_tile"):
        replace(LLVM_CPU, transpose_tile=0)


@pytest.mark.parametrize("shape", [(37, 21), (8, 8), (1, 100), (100, 1), (33, 31), (64, 65)])
def test_ragged_transposes(shape: tuple[int, int]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(run_program(TRANSPOSE, {"I": x})["O"], x.T)
    for side in (8, 32):
        settings = replace(LLVM_CPU, transpose_tile=side)
        np.testing.assert_array_equal(run_program(TRANSPOSE, {"I": x}, settings)["O"], x.T)
    for device in SHIPPED:
        np.testing.assert_array_equal(tile.run(TRANSPOSE, {"I": x}, device=device)["O"], x.T)


def test_ragged_permutation() -> None:
    x = np.arange(3 * 7 * 19, dtype=np.int16).reshape(3, 7, 19)
    np.testing.assert_array_equal(run_program(PERMUTE, {"I": x})["O"], x.transpose(2, 0, 1))
    np.testing.assert_array_equal(tile.run(PERMUTE, {"I": x})["O"], x.transpose(2, 0, 1))


OPENCL_CPU = HardwareSettings.opencl_cpu(
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    max_compute_units=2,
    preferred_vector_width_float=16,
)
MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"


def _tile_loops(source: str, inputs: dict[str, np.ndarray], tag: str) -> list[str]:
    """The counters of `tag`'s tile loops ("r" reads, "w" writes), outermost first."""
    kernel_list = generate_program(tile.Function(source).bind(inputs), OPENCL_CPU)
    (body,) = [k.body for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION]
    return [node.var for node in walk(body) if isinstance(node, For) and node.var[1:2] == tag]


def test_a_transposition_reads_its_tile_along_the_input() -> None:
    """The tile fills along the input's contiguous dimension (vectors from whole lines) and
    is written in output order; other kernels read in output order. (int64: elements the
    register blocks of `tile.lower.transpose` do not move, so the tile is staged.)"""
    x = np.zeros((100, 70), np.int64)
    assert _tile_loops(TRANSPOSE, {"I": x}, "r") == ["tr1", "tr0"]
    assert _tile_loops(TRANSPOSE, {"I": x}, "w") == ["tw0", "tw1"]
    copy = "function (I[M, N]) -> (O) { O[m, n: M, N] = =(I[m, n]); }"
    # One coordinate: m and n walk both tensors as one (merge_coordinates), its loop on
    # vectors under vector_loops (`tile.lower.widen.widen_lanes`).
    assert _tile_loops(copy, {"I": x}, "r") in ([], ["tr0"], ["tr0_vector"])


def test_only_register_sized_tiles_unroll_in_opencl() -> None:
    """`#pragma unroll` keeps a register tile in registers; a transposition's staging tile
    (32 x 32 int64) cannot be, and unrolled it left PoCL's vectoriser gathers. That tile is
    the row of a two-dimensional array, used through a pointer (Intel's compiler gathered
    from the plain form)."""
    x = np.zeros((100, 70), np.int64)
    transposition = generate_program(tile.Function(TRANSPOSE).bind({"I": x}), OPENCL_CPU)
    text = render_program(transposition, OPTIONS).text
    assert "#pragma unroll" not in text
    (name,) = re.findall(r"long (\w+)_row\[1\]\[1024\];", text)
    assert f"long* {name} = {name}_row[0];" in text
    a, b = np.zeros((64, 48), np.float32), np.zeros((48, 64), np.float32)
    matmul = generate_program(tile.Function(MATMUL).bind({"A": a, "B": b}), OPENCL_CPU)
    assert "#pragma unroll" in render_program(matmul, OPTIONS).text
