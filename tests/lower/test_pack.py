"""Packed operands (`tile.lower.pack`, issue 11 item 1): a contraction whose vector operand is
contiguous along the reduction (`A @ B.T`, batched, a linear layer with its epilogue, a Gram
matrix) gets a pack kernel and the register-tiled vector kernel; which ones do, and that the
two kernels compute what numpy does in float64, in the reference interpreter (poisoned
buffers, strict bounds) and on both shipped devices (poisoned outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile
from semtree.kernel import KernelKind
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, SCALAR, run_program, tiled
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program

NT = "function (A[M, K], B[N, K]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[n, k]); }"
TT = "function (A[K, M], B[N, K]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[n, k]); }"
BATCHED = """function (A[G, M, K], B[G, N, K]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, n, k]);
}"""
LINEAR = """function (X[M, K], W[N, K], Bias[N]) -> (O) {
    C[m, n: M, N] = +(X[m, k] * W[n, k]);
    O = relu(C + Bias);
}"""
GRAM = "function (A[M, K]) -> (C) { C[m, n: M, M] = +(A[m, k] * A[n, k]); }"
SHAPES = {  # inputs of each source for (m, k, n)
    NT: lambda m, k, n: {"A": (m, k), "B": (n, k)},
    TT: lambda m, k, n: {"A": (k, m), "B": (n, k)},
    BATCHED: lambda m, k, n: {"A": (3, m, k), "B": (3, n, k)},
    LINEAR: lambda m, k, n: {"X": (m, k), "W": (n, k), "Bias": (n,)},
    GRAM: lambda m, k, n: {"A": (m, k)},
}


def inputs(source: str, m: int, k: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = SHAPES[source](m, k, n)
    # Multiples of 1/8 up to 2: float32 sums of them are exact at these sizes.
    return {
        name: (rng.integers(-16, 17, shape) / 8).astype(np.float32)
        for name, shape in shapes.items()
    }


def expected(source: str, x: dict[str, np.ndarray]) -> np.ndarray:
    wide = {name: value.astype(np.float64) for name, value in x.items()}
    if source is NT:
        return wide["A"] @ wide["B"].T
    if source is TT:
        return wide["A"].T @ wide["B"].T
    if source is BATCHED:
        return wide["A"] @ wide["B"].transpose(0, 2, 1)
    if source is LINEAR:
        return np.maximum(wide["X"] @ wide["W"].T + wide["Bias"], 0)
    return wide["A"] @ wide["A"].T


def kernels(source: str, x: dict, settings_: object = LLVM_CPU) -> list:
    bound = tile.Function(source).bind(x)
    return list(generate_program(bound, settings_).kernels)  # type: ignore[arg-type]


def packed(kernel_list: list) -> bool:
    """A pack kernel, then the vector kernel reading its output."""
    names = [kernel.name for kernel in kernel_list]
    vector = [k for k in kernel_list if k.kind is KernelKind.CONTRACTION and "b_row" in str(k.body)]
    return any(name.endswith("_pack") for name in names) and len(vector) == 1


def copied(kernel_list: list) -> bool:
    """B copied first, packed or in panels."""
    return any(kernel.name.endswith(("_pack", "_panels")) for kernel in kernel_list)


@pytest.mark.parametrize("source", list(SHAPES), ids=["nt", "tt", "batched", "linear", "gram"])
@pytest.mark.parametrize("settings_", [LLVM_CPU, tiled(4)], ids=["llvm_cpu", "vec4"])
def test_transposed_operands_are_packed(source: str, settings_: object) -> None:
    x = inputs(source, 130, 37, 53)
    assert packed(kernels(source, x, settings_))
    (output,) = tile.Function(source).outputs
    got = run_program(source, x, settings_)[output]  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, expected(source, x))


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(8, 512, 512), (16, 1024, 100), (23, 600, 64), (4, 16, 300)],
)
def test_few_rows_and_a_long_reduction_keep_the_dot_products(m: int, k: int, n: int) -> None:
    x = inputs(NT, m, k, n)
    assert not packed(kernels(NT, x))


@pytest.mark.parametrize(("m", "k", "n"), [(16, 1149, 81), (5, 1000, 1000), (3, 600, 40)])
def test_strided_dot_products_are_packed_with_few_rows(m: int, k: int, n: int) -> None:
    """In `A.T @ B.T` the generic kernel's dot products are strided in A: packing pays from 3
    rows on, where `A @ B.T` keeps its dot products (above)."""
    x = inputs(TT, m, k, n)
    assert copied(kernels(TT, x))
    assert not copied(kernels(NT, inputs(NT, m, k, n)))
    if m * k * n < 100_000:  # the reference interpreter's pace
        np.testing.assert_array_equal(run_program(TT, x)["C"], expected(TT, x))


@pytest.mark.parametrize(("m", "k", "n"), [(2, 1500, 1500), (1, 700, 300), (12, 40, 150)])
def test_strided_dot_products_keep_them_with_two_rows_or_a_small_operand(
    m: int, k: int, n: int
) -> None:
    """Two rows share too little of a packed B; a B under 8192 elements is not worth a launch."""
    assert not copied(kernels(TT, inputs(TT, m, k, n)))


@pytest.mark.parametrize(("m", "k", "n"), [(24, 1024, 100), (68, 682, 83)])
def test_from_24_rows_a_long_reduction_is_packed(m: int, k: int, n: int) -> None:
    assert copied(kernels(NT, inputs(NT, m, k, n)))


def test_what_the_vector_kernel_takes_as_it_is_is_not_packed() -> None:
    source = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
    x = {"A": np.ones((200, 30), np.float32), "B": np.ones((30, 40), np.float32)}
    assert not any(kernel.name.endswith("_pack") for kernel in kernels(source, x))
    assert not any(
        kernel.name.endswith("_pack") for kernel in kernels(NT, inputs(NT, 200, 30, 40), SCALAR)
    )


def test_guarded_contractions_are_packed_where_every_read_stays_inside() -> None:
    """A guard that stays in the loops (one that flattening cannot fold into a range) leaves
    the pack kernel alone where B's reads stay inside B for every value of its variables (the
    kernel copies them all); where the guard is what keeps them inside, nothing is packed."""
    source = """function (A[M, K], B[N, K]) -> (C) {
        C[m, n: M, N] = +(A[m, k] * B[n, k]), m - k < M;
    }"""
    x = inputs(NT, 200, 30, 40)
    assert packed(kernels(source, x))
    a, b = x["A"].astype(np.float64), x["B"].astype(np.float64)
    want = np.tril(a) @ b.T  # k <= m
    np.testing.assert_array_equal(run_program(source, x)["C"], want)
    shifted = """function (A[M, K], B[N, K]) -> (C) {
        C[m, n: M, N] = +(A[m, k] * B[n, k + m]), k + m < K;
    }"""
    x = inputs(NT, 30, 30, 40)
    assert not any(kernel.name.endswith("_pack") for kernel in kernels(shifted, x))
    a, b = x["A"].astype(np.float64), x["B"].astype(np.float64)
    want = np.array([[a[m, : 30 - m] @ b[n, m:] for n in range(40)] for m in range(30)])
    np.testing.assert_array_equal(run_program(shifted, x)["C"], want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(list(SHAPES)),
    m=st.integers(16, 160),
    k=st.integers(1, 40),
    n=st.integers(1, 70),
    seed=st.integers(0, 2**16),
)
def test_random_packed_contractions(source: str, m: int, k: int, n: int, seed: int) -> None:
    x = inputs(source, m, k, n, seed)
    (output,) = tile.Function(source).outputs
    np.testing.assert_array_equal(run_program(source, x)[output], expected(source, x))


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("source", list(SHAPES), ids=["nt", "tt", "batched", "linear", "gram"])
def test_packed_contractions_on_the_devices(device_id: str, source: str, devices: dict) -> None:
    for m, k, n in [(16, 1, 1), (129, 17, 33), (200, 64, 7), (17, 31, 65), (3, 601, 47)]:
        outcome = check(Case("pack", source, inputs(source, m, k, n, seed=m)), devices[device_id])
        assert outcome.kind == "ok", (m, k, n, outcome)
