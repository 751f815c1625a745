"""Reduction-blocked vector kernels and B in panels (`tile.lower.vector_blocks`,
`tile.lower.pack.pack_operand`): with the block and step sizes made small, every edge (a
ragged last block of rows or columns, a shorter last step, padded panels, counted lanes) is
reached at small sizes, and the kernels compute what float64 numpy does (reference
interpreter, outputs and temporaries poisoned)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.kernel import KernelKind
from tests.lower.harness import LLVM_CPU, run_program, small_steps, tiled
from tile.lower import vector_blocks
from tile.lower.generate import generate_program

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
MATMUL_T = "function (A[M, K], B[N, K]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[n, k]); }"
BMM = """function (A[G, M, K], B[G, K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]);
}"""
SHARED_B = """function (A[G, M, K], B[K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[k, n]);
}"""
BIAS_RELU = """function (A[M, K], B[K, N], D[N]) -> (R) {
    C[m, n: M, N] = +(A[m, k] * B[k, n]);
    R = relu(C + D);
}"""
BOTH = """function (A[M, K], B[K, N], D[N]) -> (C, R) {
    C[m, n: M, N] = +(A[m, k] * B[k, n]);
    R = C * D;
}"""


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    small_steps(monkeypatch)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def kernels(source: str, settings: object, inputs: dict) -> list:
    bound = tile.Function(source).bind(inputs)
    return list(generate_program(bound, settings).kernels)  # type: ignore[arg-type]


def blocked(kernel: object) -> bool:
    body = str(kernel.body)  # type: ignore[attr-defined]
    return "b_row" in body and "k0" in body


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize(
    ("settings", "m", "k", "n"),
    [
        *(
            pytest.param(LLVM_CPU, *size, id=f"llvm_cpu-{size}")
            for size in ((37, 16, 130), (7, 17, 520), (97, 40, 53), (13, 67, 130), (29, 33, 333))
        ),
        *(
            pytest.param(tiled(4), *size, id=f"vec4-{size}")
            for size in ((19, 16, 30), (9, 19, 21), (26, 24, 17))
        ),
    ],
)
def test_blocked_matmul(settings: object, m: int, k: int, n: int) -> None:
    """K in steps (exact, and with a shorter last one), rows and columns in blocks with a
    ragged last one, B in panels with padding past its last column."""
    a, b = rand(m, k), rand(k, n, seed=1)
    listed = kernels(MATMUL, settings, {"A": a, "B": b})
    main = [kernel for kernel in listed if blocked(kernel)]
    assert len(main) == 1, [kernel.name for kernel in listed]
    assert [kernel.name for kernel in listed] == ["tile_0_panels", "tile_0"]
    got = run_program(MATMUL, {"A": a, "B": b}, settings)["C"]  # type: ignore[arg-type]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("small_blocks")
def test_steps_sum_in_the_unblocked_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The partial sums stored between steps are added in the same order: the results are
    bit-identical to the plain kernel's."""
    a, b = rand(31, 50), rand(50, 70, seed=1)
    assert any(blocked(k) for k in kernels(MATMUL, LLVM_CPU, {"A": a, "B": b}))
    got = run_program(MATMUL, {"A": a, "B": b})["C"]
    monkeypatch.setattr(vector_blocks, "STEP_ABOVE", 1 << 60)
    assert not any(blocked(k) for k in kernels(MATMUL, LLVM_CPU, {"A": a, "B": b}))
    np.testing.assert_array_equal(got, run_program(MATMUL, {"A": a, "B": b})["C"])


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize(
    ("source", "b_shape"),
    [pytest.param(BMM, (3, 40, 70), id="bmm"), pytest.param(SHARED_B, (40, 70), id="shared")],
)
def test_blocked_batched(source: str, b_shape: tuple[int, ...]) -> None:
    """A batch: B's panels per batch element, or one set shared by every batch element."""
    a, b = rand(3, 23, 40), rand(*b_shape, seed=1)
    listed = kernels(source, LLVM_CPU, {"A": a, "B": b})
    assert any(blocked(kernel) for kernel in listed)
    assert listed[0].name.endswith("_panels")
    got = run_program(source, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("n", [64, 45])
def test_blocked_transposed_b(n: int) -> None:
    """B contiguous along k (x @ W.T): packed straight into panels."""
    a, b = rand(50, 41), rand(n, 41, seed=1)
    listed = kernels(MATMUL_T, LLVM_CPU, {"A": a, "B": b})
    assert [kernel.name for kernel in listed] == ["tile_0_panels", "tile_0"]
    assert blocked(listed[1])
    got = run_program(MATMUL_T, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("n", [64, 53])
def test_blocked_epilogue(n: int) -> None:
    """A fused epilogue runs on the last step only; the partial sums go to the output."""
    a, b, d = rand(30, 40), rand(40, n, seed=1), rand(n, seed=2)
    inputs = {"A": a, "B": b, "D": d}
    listed = kernels(BIAS_RELU, LLVM_CPU, inputs)
    product = a.astype(np.float64) @ b
    if any(blocked(kernel) for kernel in listed):
        pytest.fail("the product is a temporary the kernel does not store: no steps")
    got = run_program(BIAS_RELU, inputs)["R"]
    np.testing.assert_allclose(got, np.maximum(product + d, 0), rtol=1e-5, atol=1e-5)
    listed = kernels(BOTH, LLVM_CPU, inputs)
    assert sum(blocked(kernel) for kernel in listed) == 1
    assert [k.kind for k in listed].count(KernelKind.CONTRACTION) == 2  # panels, product
    results = run_program(BOTH, inputs)
    np.testing.assert_allclose(results["C"], product, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results["R"], product * d, rtol=1e-5, atol=1e-5)


def test_plain_order_below_the_threshold() -> None:
    """Small B, short reductions, guards or several reduction variables: no steps."""
    a, b = rand(64, 64), rand(64, 64, seed=1)
    assert not any(blocked(k) for k in kernels(MATMUL, LLVM_CPU, {"A": a, "B": b}))


def test_step_sizes() -> None:
    """A step divides the reduction where a size near 256 does, else 256 and a shorter last."""
    assert vector_blocks.step_size(1024) == 256
    assert vector_blocks.step_size(1000) == 250
    assert vector_blocks.step_size(777) == 259
    assert vector_blocks.step_size(1009) == 256  # prime
    assert 128 <= vector_blocks.step_size(3000) <= 512
    assert 3000 % vector_blocks.step_size(3000) == 0
