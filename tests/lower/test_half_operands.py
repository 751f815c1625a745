"""Widened float16 operands (`tile.lower.pack.float_copy`, issue 12 item 3): on a device
without half arithmetic whose half loads are scalar code (OpenCL without cl_khr_fp16), the
register-tiled kernel of a float16 product reads float32 copies of its operands, each made
once by a kernel of its own, instead of converting every element once per tile. Which
programs get them, and that they compute what numpy does in float64 (rounded once to half at
the end), in the reference interpreter and on both shipped devices (poisoned outputs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tile
from semtree.kernel import HardwareSettings
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program

OPENCL_CPU = HardwareSettings.opencl_cpu(
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    max_compute_units=2,
    preferred_vector_width_float=8,
)
NN = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
TN = "function (A[K, M], B[K, N]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[k, n]); }"
BATCHED = """function (A[G, M, K], B[G, K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]);
}"""
SHAPES = {
    NN: lambda m, k, n: {"A": (m, k), "B": (k, n)},
    TN: lambda m, k, n: {"A": (k, m), "B": (k, n)},
    BATCHED: lambda m, k, n: {"A": (2, m, k), "B": (2, k, n)},
}
IDS = ["nn", "tn", "batched"]


def inputs(source: str, m: int, k: int, n: int, dtypes: tuple[str, str], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    # Multiples of 1/8 up to 2: exact in half, and their float32 sums exact at these sizes.
    return {
        name: (rng.integers(-16, 17, shape) / 8).astype(dtype)
        for (name, shape), dtype in zip(SHAPES[source](m, k, n).items(), dtypes, strict=True)
    }


def expected(source: str, x: dict) -> np.ndarray:
    a, b = (x[name].astype(np.float64) for name in ("A", "B"))
    if source is TN:
        return a.T @ b
    return a @ b


def suffixes(source: str, x: dict, settings: HardwareSettings) -> list[str]:
    """What each kernel but the product itself does: "a"/"b" copy an operand to float32,
    "half" converts a float32 result to the float16 output."""
    kernels = generate_program(tile.Function(source).bind(x), settings).kernels
    return [kernel.name.rpartition("_")[2] for kernel in kernels if kernel.name.count("_") > 1]


@pytest.mark.parametrize("source", list(SHAPES), ids=IDS)
def test_half_operands_are_copied_to_float_once_each(source: str) -> None:
    x = inputs(source, 37, 29, 48, ("float16", "float16"))
    assert suffixes(source, x, OPENCL_CPU) == ["a", "b"]  # ..._to_float_a, ..._to_float_b
    got = run_program(source, x, OPENCL_CPU)["C"]
    assert got.dtype == np.float16
    # Exact sums in float32, rounded once to half: what numpy's float64 rounds to.
    np.testing.assert_array_equal(got, expected(source, x).astype(np.float16))


@pytest.mark.parametrize(
    ("dtypes", "copied"), [(("float16", "float32"), ["a"]), (("float32", "float16"), ["b"])]
)
def test_only_the_half_operand_of_a_mixed_product_is_copied(
    dtypes: tuple[str, str], copied: list[str]
) -> None:
    x = inputs(NN, 20, 31, 40, dtypes)
    assert suffixes(NN, x, OPENCL_CPU) == copied
    got = run_program(NN, x, OPENCL_CPU)["C"]
    np.testing.assert_array_equal(got, expected(NN, x).astype(got.dtype))


@pytest.mark.parametrize("source", list(SHAPES), ids=IDS)
@pytest.mark.parametrize("n", [1, 17, 45, 333])
def test_an_odd_width_goes_through_a_float32_result(source: str, n: int) -> None:
    """Half takes aligned vectors only; the float32 form of an output width that is no
    multiple of the vector takes vectors at element offsets, then one pass converts."""
    x = inputs(source, 37, 29, n, ("float16", "float16"))
    assert ("half" in suffixes(source, x, OPENCL_CPU)) == (n > 1)  # 1: no vectors to win
    got = run_program(source, x, OPENCL_CPU)["C"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, expected(source, x).astype(np.float16))


def test_what_is_not_copied() -> None:
    x = inputs(NN, 37, 32, 48, ("float16", "float16"))
    assert suffixes(NN, x, LLVM_CPU) == ["a", "b"]  # llvm_cpu has no half arithmetic either
    scalar = dataclasses.replace(OPENCL_CPU, vec_size=1)  # no vector kernel to feed
    assert suffixes(NN, x, scalar) == []
    native = dataclasses.replace(OPENCL_CPU, native_fp16=True, half_as_float=False)
    assert suffixes(NN, x, native) == []
    one_column = inputs(NN, 37, 29, 1, ("float16", "float16"))  # one tile wide: A read once
    assert "a" not in suffixes(NN, one_column, OPENCL_CPU)
    one_row = inputs(NN, 1, 29, 45, ("float16", "float16"))  # one row: B read once
    assert "b" not in suffixes(NN, one_row, OPENCL_CPU)
    floats = inputs(NN, 37, 29, 45, ("float32", "float32"))
    assert suffixes(NN, floats, OPENCL_CPU) == []


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("source", list(SHAPES), ids=IDS)
@pytest.mark.parametrize(
    "dtypes", [("float16", "float16"), ("float16", "float32"), ("float32", "float16")]
)
def test_half_and_mixed_products_on_the_devices(
    device_id: str, source: str, dtypes: tuple[str, str], devices: dict
) -> None:
    for m, k, n in [(1, 1, 1), (7, 3, 17), (33, 17, 9), (65, 8, 64), (16, 31, 129)]:
        case = Case("half", source, inputs(source, m, k, n, dtypes, seed=m + n))
        outcome = check(case, devices[device_id])
        assert outcome.kind == "ok", (m, k, n, outcome)


@pytest.mark.parametrize("source", list(SHAPES), ids=IDS)
def test_a_blocked_half_product_goes_through_float32_and_panels(source: str) -> None:
    """Where the float32 product walks its reduction in blocks (tile.lower.vector_blocks),
    which needs a float32 output, a float16 one goes through a float32 result too, and the
    float copy of B is packed in panels (matmul 1024 on llvm_cpu: 2.7x the float32 time,
    1.1x so)."""
    x = inputs(source, 33, 515, 1024, ("float16", "float16"))
    assert suffixes(source, x, LLVM_CPU) == ["a", "b", "panels", "half"]


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize(
    ("source", "dtypes", "size"),
    [
        (NN, ("float16", "float16"), (33, 515, 1024)),
        (TN, ("float16", "float16"), (24, 520, 1030)),
        (BATCHED, ("float16", "float16"), (24, 520, 1030)),
        (NN, ("float16", "float32"), (24, 520, 1030)),
    ],
    ids=["nn", "tn", "batched", "nn-mixed"],
)
def test_blocked_half_products_on_the_devices(
    device_id: str,
    source: str,
    dtypes: tuple[str, str],
    size: tuple[int, int, int],
    devices: dict,
) -> None:
    case = Case("half", source, inputs(source, *size, dtypes, seed=sum(size)))
    outcome = check(case, devices[device_id])
    assert outcome.kind == "ok", (size, outcome)
