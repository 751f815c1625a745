"""Reduction-blocked vector kernels and B in panels on both shipped devices (issue 11 item 1;
`tile.lower.vector_blocks`, `tile.lower.pack.pack_operand`).

With the step and block sizes made small, random matmuls (row-major and transposed B, a
batch, a product stored beside an epilogue) of sizes at lane and tile edges reach every edge
of the blocked kernels, with poisoned outputs, against the reference evaluator
(`tests.fuzz.check`). One product large enough for the real thresholds runs too, against
float64 numpy. Only llvm_cpu takes steps (`HardwareSettings.reduction_steps`); the OpenCL
device runs the same programs on its plain kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import small_steps
from tests.shipped import SHIPPED, shipped_devices

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
MATMUL_T = "function (A[M, K], B[N, K]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[n, k]); }"
BMM = """function (A[G, M, K], B[G, K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]);
}"""
BOTH = """function (A[M, K], B[K, N], D[N]) -> (C, R) {
    C[m, n: M, N] = +(A[m, k] * B[k, n]);
    R = relu(C + D);
}"""
SIZES = [1, 2, 7, 15, 16, 17, 31, 33, 63, 64, 65, 97, 129]


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


def _data(rng: np.random.Generator, *shape: int) -> np.ndarray:
    # Multiples of 1/8 up to 2: float32 sums of them are exact at these sizes.
    return (rng.integers(-16, 17, shape) / 8).astype(np.float32)


@pytest.mark.parametrize("device_id", SHIPPED)
def test_random_blocked_matmuls(
    device_id: str, devices: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_steps(monkeypatch)
    rng = np.random.default_rng(29)
    for index in range(16):
        m, n = (int(rng.choice(SIZES)) for _ in range(2))
        k = int(rng.integers(16, 90))
        source = (MATMUL, MATMUL_T, BMM, BOTH)[index % 4]
        if source is MATMUL_T:
            inputs = {"A": _data(rng, m, k), "B": _data(rng, n, k)}
        elif source is BMM:
            inputs = {"A": _data(rng, 2, m, k), "B": _data(rng, 2, k, n)}
        else:
            inputs = {"A": _data(rng, m, k), "B": _data(rng, k, n)}
        if source is BOTH:
            inputs["D"] = _data(rng, n)
        outcome = check(Case("blocked", source, inputs), devices[device_id])
        assert outcome.kind == "ok", f"{source} {(m, k, n)}: {outcome}"


@pytest.mark.parametrize("device_id", SHIPPED)
def test_blocked_at_the_real_thresholds(device_id: str, devices: dict) -> None:
    """B of 1031 x 700 floats (2.9 MB): steps of 257 with a shorter last one, B in padded
    panels, an output width that is no multiple of the vector width."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((203, 1031)).astype(np.float32)
    b = rng.standard_normal((1031, 700)).astype(np.float32)
    invoker = tile.Invoker(MATMUL, {"A": a, "B": b}, device=devices[device_id])
    out = tile.Tensor.from_numpy(np.full((203, 700), np.nan, np.float32), devices[device_id])
    invoker.set_outputs({"C": out})
    invoker.invoke().wait()
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
