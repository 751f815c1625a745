"""Register-tiled vector kernels at every edge, on both shipped devices (issue 11 item 1).

A matmul whose output width or operand offsets are not multiples of the vector width runs on
vectors at element offsets (`semtree.Lanes`), the last vector of a row counted; these tests
drive it through sizes at lane and tile edges (1, primes, 2^k +- 1), an operand read at an
offset, a convolution with an odd channel count and a fused epilogue, each on both devices
with poisoned outputs, against the reference evaluator (`tests.fuzz.check`).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.shipped import SHIPPED, shipped_devices

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
# B read from its second column on: every vector of B starts one element past alignment.
SHIFTED = """function (A[M, K], B[K, N]) -> (C) {
    C[m, n: M, N - 1] = +(A[m, k] * B[k, n + 1]);
}"""
BIAS_RELU = """function (A[M, K], B[K, N], Bias[N]) -> (O) {
    C[m, n: M, N] = +(A[m, k] * B[k, n]);
    O = relu(C + Bias);
}"""
CONV = """function (I[N, X, Y, CI], F[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co: N, X - KX + 1, Y - KY + 1, CO] = +(I[n, x + kx, y + ky, ci] * F[kx, ky, ci, co]);
}"""
EDGES = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 47, 63, 65, 97, 129]


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


def _data(rng: np.random.Generator, *shape: int) -> np.ndarray:
    # Multiples of 1/8 up to 2: float32 sums of them are exact at these sizes.
    return (rng.integers(-16, 17, shape) / 8).astype(np.float32)


def _assert_ok(case: Case, device: object) -> None:
    outcome = check(case, device)  # type: ignore[arg-type]
    assert outcome.kind == "ok", f"{case.source} {case.inputs['A'].shape}: {outcome}"


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("n", EDGES)
def test_matmul_output_widths_at_every_edge(device_id: str, n: int, devices: dict) -> None:
    rng = np.random.default_rng(n)
    for m, k in ((1, 1), (7, 3), (13, 17), (3, 40)):
        case = Case("matmul", MATMUL, {"A": _data(rng, m, k), "B": _data(rng, k, n)})
        _assert_ok(case, devices[device_id])


@pytest.mark.parametrize("device_id", SHIPPED)
def test_random_ragged_matmuls(device_id: str, devices: dict) -> None:
    rng = np.random.default_rng(11)
    for index in range(12):
        m, k, n = (int(x) for x in rng.integers(1, 150, 3))
        source = (MATMUL, SHIFTED, BIAS_RELU)[index % 3]
        n += source is SHIFTED  # B has one more column than the output
        inputs = {"A": _data(rng, m, k), "B": _data(rng, k, n)}
        if source is BIAS_RELU:
            inputs["Bias"] = _data(rng, n)
        _assert_ok(Case("matmul", source, inputs), devices[device_id])


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("co", [3, 17, 33])
def test_convolution_with_ragged_channels(device_id: str, co: int, devices: dict) -> None:
    rng = np.random.default_rng(co)
    inputs = {"I": _data(rng, 2, 9, 7, 5), "F": _data(rng, 3, 2, 5, co)}
    outcome = check(Case("conv", CONV, inputs), devices[device_id])
    assert outcome.kind == "ok", outcome


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("n", [1, 7, 8, 16, 33, 64])
def test_half_matmuls(device_id: str, n: int, devices: dict) -> None:
    """float16 matmuls (the vector kernel where the width allows it), computed in float."""
    rng = np.random.default_rng(n)
    for m, k in ((1, 1), (7, 3), (13, 17)):
        a, b = (_data(rng, m, k).astype(np.float16), _data(rng, k, n).astype(np.float16))
        _assert_ok(Case("matmul", MATMUL, {"A": a, "B": b}), devices[device_id])
