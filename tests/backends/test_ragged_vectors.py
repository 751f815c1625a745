"""Contractions whose innermost tile is one vector that sticks out of the shape
(`tile.lower.tiles.ragged_vector`): a column sum of 102 columns in tiles of 16. On llvm_cpu.0
they run on vectors, the last one masked (`widen_lanes`); before, LLVM unrolled the padded
tile loop and loaded every element on its own behind a branch (2-4x slower).

Checked: which tiles are widened; the answers against float64 numpy, through the reference
interpreter (out-of-bounds reads refused, outputs poisoned) and on every shipped device, and
on llvm_cpu.0 compiled for AVX2 (8 lanes) as well as for the host; and the point of it, that
the accumulators of the compiled loops are whole vectors in registers.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal_llvm.compiler import host
from hal_llvm.device import LLVMDevice
from semtree.kernel import HardwareSettings, KernelKind
from tests.fuzz.check import poison
from tests.lower.harness import LLVM_CPU, run_program
from tests.lower.test_flatten import flat_of
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program
from tile.lower.tiles import ragged_vector

if TYPE_CHECKING:
    from collections.abc import Iterator

COLUMNS = "function (X[M, N]) -> (O) {{ O[n: N] = {agg}(X[m, n]); }}"
OUTER = "function (X[A, B, C]) -> (O) {{ O[c: C] = {agg}(X[a, b, c]); }}"
STRIDED = "function (X[A, B, C, D]) -> (O) {{ O[c: C] = {agg}(X[a, b, c, d]); }}"
MIDDLE = "function (X[A, B, C]) -> (O) {{ O[a, c: A, C] = {agg}(X[a, b, c]); }}"
VECTOR_MATRIX = "function (A[K, M], V[K]) -> (O) {{ O[m: M] = {agg}(V[k] * A[k, m]); }}"
REDUCE = {"+": np.sum, ">": np.max, "<": np.min, "*": np.prod}
# Columns off the grid of 8 and 16 lanes (and on it: 32), rows from 1 to a few hundred.
SHAPES = [(1, 17), (7, 15), (300, 17), (61, 33), (300, 102), (5, 127), (9, 32)]
CASES = [(COLUMNS, shape, (0,)) for shape in SHAPES]
CASES += [(OUTER, (3, 29, 102), (0, 1)), (MIDDLE, (4, 37, 23), (1,))]
CASES += [(STRIDED, (2, 17, 101, 4), (0, 1, 3))]


def avx2_device() -> LLVMDevice:
    """llvm_cpu.0 as on a host with AVX2 and no AVX-512: code for 8 lanes."""
    cpu = host()
    features = frozenset(f for f in cpu.features if not f.startswith("avx512"))
    flags = [
        f"-{f[1:]}" if f[1:].startswith("avx512") else f for f in cpu.feature_string.split(",")
    ]
    narrow = replace(cpu, features=features, feature_string=",".join(flags))
    return LLVMDevice(narrow, 0)


@pytest.fixture(scope="module")
def devices() -> Iterator[dict[str, tile.Device]]:
    found = dict(shipped_devices())
    if "avx512f" not in host().features:
        yield found
        return
    narrow = avx2_device()
    kind = narrow.kind.value
    found["llvm_cpu.0 avx2"] = tile.Device(narrow.id, "AVX2", kind, narrow.settings, True, narrow)
    yield found
    narrow.close()


def values(rng: np.random.Generator, agg: str, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values of both signs; near 1 for a product, so that it stays finite."""
    count = int(np.prod(shape))
    if agg == "*":
        return (1 + (rng.permutation(count) % 21 - 10) / 200).reshape(shape).astype(np.float32)
    return ((rng.permutation(count) - count / 2) / 7).reshape(shape).astype(np.float32)


def check(got: np.ndarray, x: np.ndarray, agg: str, axes: tuple[int, ...]) -> bool:
    """Max and min exact; a sum within float32 rounding of the sum of the magnitudes, a
    product within 1e-4 of itself."""
    wide = x.astype(np.float64)
    want = REDUCE[agg](wide, axis=axes)
    if agg in "><":
        return bool(np.array_equal(got, want))
    scale = np.sum(np.abs(wide), axis=axes) if agg == "+" else np.abs(want)
    return bool(np.all(np.abs(got.astype(np.float64) - want) <= 1e-4 * scale))


def test_only_one_ragged_vector_read_contiguously_is_widened() -> None:
    vec = LLVM_CPU.vec_size

    def widened(source: str, shape: tuple[int, ...], tiles: tuple[int, ...], **kw: object) -> bool:
        settings = replace(LLVM_CPU, **kw)  # type: ignore[arg-type]
        flat = flat_of(source.format(agg="+"), X=shape)
        order = tuple(range(flat.outputs))
        return ragged_vector(flat, flat.ranges[: flat.outputs], tiles, order, settings)

    assert widened(COLUMNS, (5, 102), (vec,))
    assert widened(MIDDLE, (4, 9, 17), (1, vec))
    assert not widened(COLUMNS, (5, 6 * vec), (vec,))  # whole tiles
    assert not widened(COLUMNS, (5, 102), (4 * vec,))  # LLVM's own vectorizer
    assert not widened(COLUMNS, (5, 102), (vec // 2,))  # part of a vector
    assert not widened(MIDDLE, (17, 9, 8), (vec, 8))  # not the innermost loop
    assert not widened(STRIDED, (2, 3, 102, 4), (vec,))  # read 4 elements apart
    assert not widened(COLUMNS, (5, 102), (vec,), vector_loops=True)  # widened anyway


def _contraction_text(
    source: str, inputs: dict[str, np.ndarray], settings: HardwareSettings
) -> str:
    kernel_list = generate_program(tile.Function(source).bind(inputs), settings)
    return "".join(str(k.body) for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION)


def test_column_tiles_of_one_vector_run_on_lanes() -> None:
    """102 columns in tiles of 16: every row's load is 16 lanes, counted at the shape's edge;
    the padded form (an identity, a branch per element) is gone."""
    text = _contraction_text(
        COLUMNS.format(agg="+"), {"X": np.zeros((300, 102), np.float32)}, LLVM_CPU
    )
    assert "lanes16(acc, tr0) = lanes16(acc, tr0) + lanes16(in0, " in text, text
    assert "102 - (base0 + tr0))" in text, text
    assert "float v = " not in text, text
    # Channels in tiles of 64 keep the padded form, which LLVM vectorizes itself.
    depthwise = (
        "function (I[N, H, W, C], K[KH, KW, C]) -> (O) { O[n, y, x, c: N, H, W, C] = "
        "+(I[n, y + i - 1, x + j - 1, c] * K[i, j, c]); }"
    )
    inputs = {"I": np.zeros((1, 9, 9, 97), np.float32), "K": np.zeros((3, 3, 97), np.float32)}
    text = _contraction_text(depthwise, inputs, LLVM_CPU)
    assert "lanes" not in text and "float v = " in text, text


@pytest.mark.parametrize("agg", ["+", ">", "<", "*"])
@pytest.mark.parametrize("width", [8, 16])
def test_ragged_vectors_match_numpy_in_the_interpreter(agg: str, width: int) -> None:
    settings = LLVM_CPU if width == 16 else HardwareSettings.llvm_cpu(2, ["avx2"])
    rng = np.random.default_rng(width)
    wrong = []
    for source, shape, axes in CASES:
        x = values(rng, agg, shape)
        got = run_program(source.format(agg=agg), {"X": x}, settings)["O"]
        if not check(got, x, agg, axes):
            wrong.append(shape)
    assert not wrong, f"{agg} wrong at {wrong} ({width} lanes)"


def run_poisoned(source: str, inputs: dict[str, np.ndarray], device: tile.Device) -> np.ndarray:
    """The output of one run, its buffer filled with NaN patterns beforehand."""
    invoker = tile.Invoker(source, inputs, device=device)
    shape, dtype = invoker.get_output_shape("O")
    output = tile.Tensor.from_numpy(poison(shape, np.dtype(dtype)), device)
    invoker.set_outputs({"O": output})
    invoker.invoke().wait()
    return output.to_numpy()


@pytest.mark.parametrize("device_id", [*SHIPPED, "llvm_cpu.0 avx2"])
@pytest.mark.parametrize("agg", ["+", ">", "<", "*"])
def test_ragged_vectors_on_the_devices(
    device_id: str, agg: str, devices: dict[str, tile.Device]
) -> None:
    if device_id not in devices:  # the host has no AVX-512: llvm_cpu.0 itself is AVX2
        assert "avx512f" not in host().features
        return
    rng = np.random.default_rng(3)
    wrong = []
    for source, shape, axes in CASES:
        x = values(rng, agg, shape)
        got = run_poisoned(source.format(agg=agg), {"X": x}, devices[device_id])
        if not check(got, x, agg, axes):
            wrong.append(shape)
    if agg == "+":  # with a product: V . A over 3001 rows, 1003 columns
        a, v = values(rng, agg, (3001, 1003)), values(rng, agg, (3001,))
        got = run_poisoned(VECTOR_MATRIX.format(agg=agg), {"A": a, "V": v}, devices[device_id])
        want = v.astype(np.float64) @ a.astype(np.float64)
        scale = np.abs(v.astype(np.float64)) @ np.abs(a.astype(np.float64))
        if not np.all(np.abs(got - want) <= 1e-5 * scale):
            wrong.append((3001, 1003))
    assert not wrong, f"{agg} wrong at {wrong} on {device_id}"


@pytest.mark.parametrize("shape", [(300, 102), (2000, 17), (61, 33)])
@pytest.mark.parametrize("narrow", [False, True], ids=["host", "avx2"])
def test_llvm_cpu_keeps_ragged_vectors_in_registers(
    shape: tuple[int, int], narrow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every loop-carried float value of the compiled column sum is a whole vector."""
    monkeypatch.setenv("TILE_CACHE", "0")  # compile: an object from the disk cache has no IR
    device = avx2_device() if narrow else LLVMDevice(host(), 0)
    try:
        settings = device.settings
        bound = tile.Function(COLUMNS.format(agg="+")).bind({"X": np.zeros(shape, np.float32)})
        kernel_list = generate_program(bound, settings)
        library = device.compiler.build(kernel_list, device)
        text = "".join(library.source(i) for i in range(len(kernel_list.kernels)))
    finally:
        device.close()
    carried = set(re.findall(r"= phi (<\d+ x float>|float) ", text))
    assert carried == {f"<{settings.vec_size} x float>"}, carried
