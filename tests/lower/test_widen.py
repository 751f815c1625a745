"""Elementwise tiles on vectors (`tile.lower.widen`, `HardwareSettings.vector_loops`).

Which bodies are widened, and that the widened kernels compute what numpy does in float64 at
sizes on lane and tile edges (1, primes, 2^k +- 1): through the reference interpreter with
poisoned outputs, and on both shipped devices (opencl.0 widens, llvm_cpu.0 does not) against
the reference evaluator.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tile
from semtree.kernel import KernelKind
from semtree.nodes import Lanes, walk
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program

WIDE = {width: replace(LLVM_CPU, vec_size=width, vector_loops=True) for width in (2, 4, 8, 16)}
SIZES = [1, 2, 7, 8, 9, 31, 32, 33, 63, 65, 127, 257, 1000]

GELU = """function (X[N]) -> (O) {
    O = 0.5 * X * (1.0 + tanh(0.79788456 * (X + 0.044715 * X * X * X)));
}"""
BIAS = "function (X[M, N], B[N]) -> (O) { O = exp(X + B) * 2.0; }"
ROW_SCALE = "function (X[M, N], S[M, U]) -> (O) { O = X * S - S; }"
TWO_OUT = "function (X[N], Y[N]) -> (O, P) { O = max(X, Y); P = X / (abs(Y) + 1.0); }"
SELECT = "function (X[N]) -> (O) { O = X > 0.5 ? X : 0.25 * X; }"
INTEGERS = "function (A[N], B[N]) -> (O) { O = A / B + A * 7 - (A >> 1); }"
CAST = "function (A[N]) -> (O) { O = as_float(A, 32) * 0.5 + 1.0; }"
COMPARE = "function (X[N]) -> (O) { O = X > 0.0; }"  # bool memory: not widened
HALF_CAST = "function (A[N]) -> (O, P) { O = as_float(A, 32); P = as_float(A * 3.0, 16); }"
TRANSPOSE = "function (X[M, N]) -> (O) { O[n, m: N, M] = =(X[m, n]); }"


def _rand(rng: np.random.Generator, *shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _widened(source: str, inputs: dict[str, np.ndarray], width: int = 8) -> bool:
    kernel_list = generate_program(tile.Function(source).bind(inputs), WIDE[width])
    bodies = [k.body for k in kernel_list.kernels if k.kind is KernelKind.ELEMENTWISE]
    assert bodies, "no elementwise kernel"
    return any(isinstance(node, Lanes) for body in bodies for node in walk(body))  # type: ignore[arg-type]


def test_which_bodies_are_widened() -> None:
    rng = np.random.default_rng(0)
    x = _rand(rng, 64)
    assert _widened(GELU, {"X": x})
    assert _widened(BIAS, {"X": _rand(rng, 3, 40), "B": _rand(rng, 40)})
    assert _widened(ROW_SCALE, {"X": _rand(rng, 3, 40), "S": _rand(rng, 3, 1)})
    assert _widened(SELECT, {"X": x})
    assert _widened(INTEGERS, {"A": x.astype(np.int32), "B": x.astype(np.int32)})
    assert not _widened(COMPARE, {"X": x})
    assert _widened(GELU, {"X": x.astype(np.float16)})  # half lanes, computed in float
    assert _widened(HALF_CAST, {"A": x.astype(np.float16)})
    assert not _widened(GELU, {"X": x.astype(np.float64)})  # PoCL aborts on tanh(double8)
    without = generate_program(tile.Function(GELU).bind({"X": x}), LLVM_CPU)
    assert not any(isinstance(node, Lanes) for k in without.kernels for node in walk(k.body))  # type: ignore[arg-type]


def test_a_widened_loop_steps_by_vectors() -> None:
    x = np.zeros(1001, np.float32)
    kernel_list = generate_program(tile.Function(GELU).bind({"X": x}), WIDE[8])
    text = str(kernel_list.kernels[0].body)
    assert "tw0 * 8" in text and "x0 + 8 <= 1001" in text and "1001 - x0" in text


@pytest.mark.parametrize("shape", [(37, 50), (64, 33), (100, 17), (300, 16), (5, 1000)])
def test_tiles_over_rows_are_widened(shape: tuple[int, int]) -> None:
    """A tile of several rows or a long strip (`tile.lower.tiles.GROUP_ELEMENTS`): the tile
    loop of a row is widened inside the loop over rows, the guard of the rows kept around it,
    ragged rows counted; the result is numpy's, outputs poisoned (reference interpreter)."""
    rng = np.random.default_rng(shape[1])
    inputs = {"X": _rand(rng, *shape), "B": _rand(rng, shape[1])}
    kernel_list = generate_program(tile.Function(BIAS).bind(inputs), WIDE[16])
    (kernel,) = kernel_list.kernels
    assert np.prod(kernel.tile) > 4 * 16  # more than one strip of vectors
    assert any(isinstance(node, Lanes) for node in walk(kernel.body))  # type: ignore[arg-type]
    want = np.exp(inputs["X"].astype(np.float64) + inputs["B"]) * 2
    got = run_program(BIAS, inputs, WIDE[16])["O"]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


CASES = [  # source, inputs for a size, numpy of the inputs in order
    (
        GELU,
        lambda r, n: {"X": _rand(r, n)},
        lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3))),
    ),
    (BIAS, lambda r, n: {"X": _rand(r, 3, n), "B": _rand(r, n)}, lambda x, b: np.exp(x + b) * 2),
    (ROW_SCALE, lambda r, n: {"X": _rand(r, 2, n), "S": _rand(r, 2, 1)}, lambda x, s: x * s - s),
    (SELECT, lambda r, n: {"X": _rand(r, n)}, lambda x: np.where(x > 0.5, x, 0.25 * x)),
]


@pytest.mark.parametrize("width", [2, 4, 8, 16])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", range(len(CASES)), ids=["gelu", "bias", "row_scale", "select"])
def test_widened_kernels_match_numpy(case: int, n: int, width: int) -> None:
    source, make, reference = CASES[case]
    inputs = make(np.random.default_rng(n), n)
    want = reference(*(v.astype(np.float64) for v in inputs.values()))
    got = run_program(source, inputs, WIDE[width])["O"]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("n", [1, 7, 9, 33, 1000])
def test_widened_two_outputs_and_integers(n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = _rand(rng, n), _rand(rng, n)
    got = run_program(TWO_OUT, {"X": x, "Y": y}, WIDE[8])
    np.testing.assert_array_equal(got["O"], np.maximum(x, y))
    np.testing.assert_allclose(got["P"], x / (np.abs(y.astype(np.float64)) + 1), rtol=1e-6)
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    b = rng.integers(-5, 6, n).astype(np.int32)  # zeros included: x / 0 == 0
    got = run_program(INTEGERS, {"A": a, "B": b}, WIDE[8])["O"]
    quotient = np.where(b == 0, 0, np.trunc(a / np.where(b == 0, 1, b))).astype(np.int64)
    want = quotient + a * 7 - (a >> 1)
    np.testing.assert_array_equal(got, want)
    got = run_program(CAST, {"A": a}, WIDE[8])["O"]
    np.testing.assert_allclose(got, a * 0.5 + 1.0, rtol=1e-6)


@pytest.mark.parametrize("width", [2, 4, 8, 16])
@pytest.mark.parametrize("n", [1, 7, 9, 33, 1000])
def test_widened_half(n: int, width: int) -> None:
    """Half memory on lanes: loads, a cast to float32, a rounding cast back and stores, at
    lane edges (counted lanes), bit for bit as numpy rounds them."""
    rng = np.random.default_rng(n)
    a = (_rand(rng, n) * 300).astype(np.float16)
    got = run_program(HALF_CAST, {"A": a}, WIDE[width])
    np.testing.assert_array_equal(got["O"], a.astype(np.float32))
    with np.errstate(over="ignore"):
        want = (a.astype(np.float32) * np.float32(3.0)).astype(np.float16)
    np.testing.assert_array_equal(got["P"], want)


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 33, 257, 1000])
def test_elementwise_edges_on_devices(device_id: str, n: int, devices: dict) -> None:
    rng = np.random.default_rng(n)
    cases = [
        Case("gelu", GELU, {"X": _rand(rng, n)}),
        Case("bias", BIAS, {"X": _rand(rng, 3, n), "B": _rand(rng, n)}),
        Case("row_scale", ROW_SCALE, {"X": _rand(rng, 2, n), "S": _rand(rng, 2, 1)}),
        Case("two", TWO_OUT, {"X": _rand(rng, n), "Y": _rand(rng, n)}),
        Case("select", SELECT, {"X": _rand(rng, n)}),
        Case(
            "int",
            INTEGERS,
            {
                "A": rng.integers(-99, 99, n).astype(np.int32),
                "B": rng.integers(-3, 4, n).astype(np.int32),
            },
        ),
        Case("f64", GELU, {"X": _rand(rng, n, dtype=np.float64)}),
        Case("f16", GELU, {"X": _rand(rng, n, dtype=np.float16)}),
        Case("f16_cast", HALF_CAST, {"A": (_rand(rng, n) * 300).astype(np.float16)}),
        Case("transpose", TRANSPOSE, {"X": _rand(rng, 3, n)}),
    ]
    for case in cases:
        outcome = check(case, devices[device_id])
        assert outcome.kind == "ok", f"{case.family} at {n}: {outcome}"
