"""Accumulators that every step updates alike (`tile.lower.contract`, `padded`): in a tile that
sticks out of the shape, and in the last, partial step of a reduction in lanes, the elements
or lanes with nothing to read aggregate the identity, and only their loads are guarded.

Two things to hold: the answers (elements past the edge must never reach memory, and lanes
past the end must never read it), checked against float64 numpy through the reference
interpreter (outputs poisoned, out-of-bounds reads refused) and on every shipped device; and
the point of it, that on llvm_cpu.0 the accumulators of such loops stay whole vectors in
registers. Before, a tail of 9 lanes left LLVM 22 shuffling single lanes in and out of the
accumulators in every step of a 12 MB sum (3x slower), and a ragged column tile kept its
accumulators on the stack behind masked stores (1.7x slower).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tile
from hal_llvm.compiler import host
from hal_llvm.device import LLVMDevice
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program

MIDDLE = "function (X[A, B, C]) -> (O) {{ O[a, c: A, C] = {agg}(X[a, b, c]); }}"
ROWS = "function (X[M, K]) -> (O) {{ O[m: M] = {agg}(X[m, k]); }}"
TOTAL = "function (X[N]) -> (O) {{ O[] = {agg}(X[i]); }}"
REDUCE = {"+": np.sum, ">": np.max, "<": np.min, "*": np.prod}
# Kept contiguous axes off the tile grid (tiles of 16 or 64 columns) and reduction lengths
# off the lane grid (64, 32, 16 or 8 lanes): 1, primes, 2^k +- 1.
COLUMNS = (1, 17, 65, 159, 200)
LENGTHS = (17, 63, 65, 127, 3001)


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


def values(rng: np.random.Generator, agg: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Inputs without ties, spread in sign; near 1 for a product, so that it stays finite."""
    count = int(np.prod(shape))
    if agg == "*":
        return (1 + (rng.permutation(count) % 21 - 10) / 200).reshape(shape).astype(dtype)
    if np.dtype(dtype).kind == "i":
        return (rng.permutation(count) - count // 2).reshape(shape).astype(dtype)
    return ((rng.permutation(count) - count / 2) / 7).reshape(shape).astype(dtype)


def tolerance(agg: str, dtype: type) -> float:
    """Exact for integers, max and min; float32 rounding of a sum relative to the sum of the
    magnitudes, of a product relative to it."""
    if agg in "><" or np.dtype(dtype).kind == "i":
        return 0.0
    return 1e-5 if agg == "+" else 1e-3


@pytest.mark.parametrize("columns", COLUMNS)
@pytest.mark.parametrize("agg", ["+", ">", "<", "*"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_ragged_column_tiles_match_numpy(columns: int, agg: str, dtype: type) -> None:
    x = values(np.random.default_rng(columns), agg, (3, 23, columns), dtype)
    want = REDUCE[agg](x.astype(np.float64), axis=1)
    got = run_program(MIDDLE.format(agg=agg), {"X": x}, LLVM_CPU)["O"].astype(np.float64)
    scale = np.sum(np.abs(x.astype(np.float64)), axis=1) if agg == "+" else np.abs(want)
    assert np.all(np.abs(got - want) <= tolerance(agg, dtype) * scale)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("agg", ["+", ">", "<", "*"])
def test_ragged_tiles_and_lane_tails_on_the_devices(
    device_id: str, agg: str, devices: dict[str, tile.Device]
) -> None:
    rng = np.random.default_rng(5)
    wrong = []
    cases = [(MIDDLE, (2, 31, c), 1) for c in COLUMNS]
    cases += [(ROWS, (3, k), 1) for k in LENGTHS] + [(TOTAL, (2000003,), None)]
    for source, shape, axis in cases:
        x = values(rng, agg, shape, np.float32)
        if agg == "*" and source == TOTAL:
            x = np.where(np.arange(x.size) % 1000 == 0, x, np.float32(1))  # stays finite
        x[(0,) * (x.ndim - 1) + (-1,)] = {"+": 1e3, ">": 1e4, "<": -1e4, "*": 1.5}[agg]
        function = tile.Function(source.format(agg=agg))
        got = np.asarray(function(X=x, device=devices[device_id])["O"], np.float64)
        want = REDUCE[agg](x.astype(np.float64), axis=axis)
        scale = np.sum(np.abs(x.astype(np.float64)), axis=axis) if agg == "+" else np.abs(want)
        if not np.all(np.abs(got - want) <= tolerance(agg, np.float32) * scale):
            wrong.append(shape)
    assert not wrong, f"{agg} wrong at shapes {wrong} on {device_id}"


@pytest.mark.parametrize(
    ("source", "shape"),
    [
        (ROWS, (33, 3001)),  # lanes with a tail of 57
        (TOTAL, (3115446,)),  # split into parts, each with a tail of 9 lanes
        (TOTAL, (2000003,)),  # a prime: parts and a tail kernel
        (MIDDLE, (101, 194, 159)),  # tiles of 64 columns: 64 + 64 + 31
        (MIDDLE, (5, 40, 200)),  # 64 + 64 + 64 + 8
    ],
    ids=["rows", "total", "prime", "middle-159", "middle-200"],
)
@pytest.mark.parametrize("agg", ["+", ">"])
def test_llvm_cpu_keeps_the_accumulators_in_vector_registers(
    source: str, shape: tuple[int, ...], agg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every loop-carried float value of the optimised kernels is a whole vector of the
    device's width: no scalar lanes, no odd-sized vectors shuffled in and out."""
    monkeypatch.setenv("TILE_CACHE", "0")  # compile: an object from the disk cache has no IR
    settings = tile.device("llvm_cpu.0").settings
    assert settings is not None
    device = LLVMDevice(host(), 0, settings=settings)  # private: past the program caches
    try:
        bound = tile.Function(source.format(agg=agg)).bind({"X": np.zeros(shape, np.float32)})
        kernel_list = generate_program(bound, settings)
        library = device.compiler.build(kernel_list, device)
        carried: set[str] = set()
        for index in range(len(kernel_list.kernels)):
            carried |= set(re.findall(r"= phi (<\d+ x float>|float) ", library.source(index)))
    finally:
        device.close()
    assert carried == {f"<{settings.vec_size} x float>"}, carried


DEPTHWISE = """function (I[N, H, W, C], K[KH, KW, C]) -> (O) {{
    O[n, y, x, c: N, H, W, C] = {agg}(I[n, y + i - {p}, x + j - {p}, c] * K[i, j, c]);
}}"""


def depthwise_reference(image: np.ndarray, kernel: np.ndarray, agg: str) -> np.ndarray:
    """Same padding, float64: the taps inside the image only (a max ignores the padding)."""
    n, h, w, c = image.shape
    k = kernel.shape[0]
    p = (k - 1) // 2
    fill = 0.0 if agg == "+" else -np.inf
    padded = np.full((n, h + 2 * p, w + 2 * p, c), fill)
    padded[:, p : p + h, p : p + w] = image
    taps = [
        padded[:, i : i + h, j : j + w]
        * np.where(np.isinf(padded[:, i : i + h, j : j + w]), 1, kernel[i, j])
        for i in range(k)
        for j in range(k)
    ]
    return np.sum(taps, axis=0) if agg == "+" else np.max(taps, axis=0)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("agg", ["+", ">"])
def test_guarded_updates_on_the_devices(
    device_id: str, agg: str, devices: dict[str, tile.Device]
) -> None:
    """Same-padded depthwise convolutions: the padding's guards choose each update's value,
    channel tiles stick out of the shape (1, 17, 97, 144 and 200 channels)."""
    rng = np.random.default_rng(8)
    wrong = []
    for c, k in [(1, 3), (17, 3), (97, 5), (144, 3), (200, 3)]:
        image = rng.standard_normal((2, 7, 9, c)).astype(np.float32)
        kernel = rng.standard_normal((k, k, c)).astype(np.float32)
        source = DEPTHWISE.format(agg=agg, p=(k - 1) // 2)
        got = np.asarray(tile.Function(source)(I=image, K=kernel, device=devices[device_id])["O"])
        want = depthwise_reference(image.astype(np.float64), kernel.astype(np.float64), agg)
        if not np.allclose(got, want, rtol=1e-5, atol=1e-4):
            wrong.append(c)
    assert not wrong, f"{agg} wrong at channels {wrong} on {device_id}"


@pytest.mark.parametrize("channels", [97, 144])
def test_llvm_cpu_keeps_guarded_accumulators_in_vector_registers(
    channels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A depthwise convolution whose channel tiles stick out of the shape, under the padding's
    guards: its accumulators are whole vectors carried in registers (they were on the stack,
    behind masked stores: 97 channels 0.53 ms -> 0.26, AMD Zen 5)."""
    monkeypatch.setenv("TILE_CACHE", "0")
    settings = tile.device("llvm_cpu.0").settings
    assert settings is not None
    device = LLVMDevice(host(), 0, settings=settings)
    try:
        source = DEPTHWISE.format(agg="+", p=1)
        inputs = {
            "I": np.zeros((1, 9, 9, channels), np.float32),
            "K": np.zeros((3, 3, channels), np.float32),
        }
        kernel_list = generate_program(tile.Function(source).bind(inputs), settings)
        library = device.compiler.build(kernel_list, device)
        text = "".join(library.source(index) for index in range(len(kernel_list.kernels)))
    finally:
        device.close()
    assert not re.search(r"alloca [\[<]", text)
    # Vectors of whole registers: AVX-512 carries <16 x float>s; on AVX2 LLVM joins the tile's
    # four vectors into one <32 x float> (and may split off a lane of it as a scalar).
    widths = {int(w) for w in re.findall(r"= phi <(\d+) x float> ", text)}
    assert widths, "no accumulator carried in vectors"
    assert all(w % settings.vec_size == 0 for w in widths), widths
