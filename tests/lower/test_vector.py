"""The register-tiled vector path (`tile.lower.vector`): which contractions take it, and that
its kernels compute what numpy does, ragged edges included (reference interpreter)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile
from semtree.kernel import KernelKind
from tests.lower.harness import LLVM_CPU, SCALAR, run_program, tiled
from tile.lower import vector_blocks
from tile.lower.generate import generate_program
from tile.lower.vector_shape import dividing_tile

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
BMM = """function (A[G, M, K], B[G, K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]);
}"""
CONV = """function (I[N, X, Y, CI], F[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co: N, X - KX + 1, Y - KY + 1, CO] = +(I[n, x + kx, y + ky, ci] * F[kx, ky, ci, co]);
}"""

SETTINGS = [
    pytest.param(LLVM_CPU, id="llvm_cpu"),
    pytest.param(tiled(4), id="vec4"),
    pytest.param(SCALAR, id="scalar"),
]


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def vector_kernels(source: str, settings: object, inputs: dict) -> list:
    bound = tile.Function(source).bind(inputs)
    kernel_list = generate_program(bound, settings)  # type: ignore[arg-type]
    return [
        k
        for k in kernel_list.kernels
        if k.kind is KernelKind.CONTRACTION and "b_row" in str(k.body)
    ]


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize(
    "m, k, n", [(37, 29, 53), (64, 32, 64), (13, 7, 96), (5, 3, 16), (1, 4, 2)]
)
def test_matmul(settings: object, m: int, k: int, n: int) -> None:
    a, b = rand(m, k), rand(k, n, seed=1)
    assert len(vector_kernels(MATMUL, settings, {"A": a, "B": b})) == 1
    got = run_program(MATMUL, {"A": a, "B": b}, settings)["C"]  # type: ignore[arg-type]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, k", [(125, 847), (2, 5), (17, 33)])
def test_a_single_column_is_no_vector_coordinate(m: int, k: int) -> None:
    """`A @ x` written with a column x (N = 1): vectors of one lane ran 4 rows of scalar
    products, 3.8x torch's time at 125 x 847; the dot products along k are the kernel. `A.T @
    x` takes vectors along m, reading A where it is (no panels for one row of them)."""
    a, b = rand(m, k), rand(k, 1, seed=1)
    assert not vector_kernels(MATMUL, LLVM_CPU, {"A": a, "B": b})
    got = run_program(MATMUL, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    source = "function (A[K, M], B[K, N]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[k, n]); }"
    at = np.ascontiguousarray(a.T)
    bound = tile.Function(source).bind({"A": at, "B": b})
    kernels = generate_program(bound, LLVM_CPU).kernels
    assert [k.name for k in kernels] == ["tile_0"] and "b_row" in str(kernels[0].body)
    got = run_program(source, {"A": at, "B": b})["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_aligned_matmul_uses_full_vectors() -> None:
    a, b = rand(64, 32), rand(32, 128, seed=1)
    (kernel,) = vector_kernels(MATMUL, LLVM_CPU, {"A": a, "B": b})
    widths = {param.name: param.vec_width for param in kernel.params}
    assert widths == {"C": 16, "A": 1, "B": 16}


@pytest.mark.parametrize(("n", "lanes"), [(53, 16), (17, 16), (333, 16), (3, 4), (6, 8)])
def test_ragged_matmul_uses_counted_lanes(n: int, lanes: int) -> None:
    """An output width that is no multiple of 16: vectors at element offsets (scalar
    pointers), the last one of a row counted, never the width-1 fallback."""
    a, b = rand(37, 29), rand(29, n, seed=1)
    (kernel,) = vector_kernels(MATMUL, LLVM_CPU, {"A": a, "B": b})
    assert {param.vec_width for param in kernel.params} == {1}
    body = str(kernel.body)
    assert f"lanes{lanes}(" in body
    assert "b_row" in body
    got = run_program(MATMUL, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_transposed_operand_order() -> None:
    """B first in the statement: the roles follow the strides, not the operand order."""
    source = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(B[k, n] * A[m, k]); }"
    a, b = rand(19, 11), rand(11, 40, seed=1)
    assert vector_kernels(source, LLVM_CPU, {"A": a, "B": b})
    got = run_program(source, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("settings", SETTINGS)
def test_bmm(settings: object) -> None:
    a, b = rand(3, 21, 17), rand(3, 17, 48, seed=1)
    assert vector_kernels(BMM, settings, {"A": a, "B": b})
    got = run_program(BMM, {"A": a, "B": b}, settings)["C"]  # type: ignore[arg-type]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("co", [32, 7])
def test_valid_conv(settings: object, co: int) -> None:
    i, f = rand(2, 9, 10, 5), rand(3, 3, 5, co, seed=1)
    assert vector_kernels(CONV, settings, {"I": i, "F": f})
    got = run_program(CONV, {"I": i, "F": f}, settings)["O"]  # type: ignore[arg-type]
    want = np.zeros((2, 7, 8, co), np.float64)
    for kx in range(3):
        for ky in range(3):
            want += np.einsum("nxyc,cd->nxyd", i[:, kx : kx + 7, ky : ky + 8], f[kx, ky])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_ineligible_contractions_take_the_generic_path() -> None:
    a, b = rand(8, 8), rand(8, 8, seed=1)
    epilogue = (  # one the vectors cannot hold (tests/lower/test_vector_epilogue.py)
        "function (A[M, K], B[K, N]) -> (R) { C[m, n: M, N] = +(A[m, k] * B[k, n]); R = exp(C); }"
    )
    maximum = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = >(A[m, k] * B[k, n]); }"
    guarded = (  # a guard on the vector coordinate n
        "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]), n + k < 8; }"
    )
    for source in (epilogue, maximum, guarded):
        assert not vector_kernels(source, LLVM_CPU, {"A": a, "B": b})
    got = run_program(epilogue, {"A": a, "B": b})["R"]
    np.testing.assert_allclose(got, np.exp(a @ b), rtol=1e-4, atol=1e-4)


def test_integer_contraction_is_not_vectorised() -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.arange(20, dtype=np.int32).reshape(4, 5)
    assert not vector_kernels(MATMUL, LLVM_CPU, {"A": a, "B": b})
    np.testing.assert_array_equal(run_program(MATMUL, {"A": a, "B": b})["C"], a @ b)


TRIANGLE = (
    "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]), m + k < 20; }"
)
PADDED = """function (I[N, X, Y, CI], F[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co: N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * F[kx, ky, ci, co]);
}"""


@pytest.mark.parametrize("settings", SETTINGS)
def test_guards_on_rows_and_reductions(settings: object) -> None:
    """Tiles wholly inside, partly inside and wholly outside the guard; the elements outside
    hold NaN, so a tuple outside the guard that reached an accumulator would show."""
    a, b = rand(23, 17), rand(17, 40, seed=1)
    inside = np.add.outer(np.arange(23), np.arange(17)) < 20
    a[~inside] = np.nan
    assert len(vector_kernels(TRIANGLE, settings, {"A": a, "B": b})) == 1
    got = run_program(TRIANGLE, {"A": a, "B": b}, settings)["C"]  # type: ignore[arg-type]
    np.testing.assert_allclose(got, np.where(inside, a, 0) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("settings", SETTINGS)
def test_padded_convolution(settings: object) -> None:
    i, f = rand(2, 9, 7, 3), rand(3, 3, 3, 32, seed=1)
    f[0, 0, 0, 0] = np.inf  # reaches only tuples inside the image
    assert len(vector_kernels(PADDED, settings, {"I": i, "F": f})) == 1
    got = run_program(PADDED, {"I": i, "F": f}, settings)["O"]  # type: ignore[arg-type]
    want = np.zeros((2, 9, 7, 32))
    for kx in range(3):
        for ky in range(3):  # the outputs whose tuple (kx, ky) is inside the image
            x0, x1, y0, y1 = max(0, 1 - kx), min(9, 10 - kx), max(0, 1 - ky), min(7, 8 - ky)
            window = i[:, x0 + kx - 1 : x1 + kx - 1, y0 + ky - 1 : y1 + ky - 1].astype(np.float64)
            want[:, x0:x1, y0:y1] += np.einsum("nxyc,cd->nxyd", window, f[kx, ky])
    finite = np.isfinite(want)
    assert (np.isfinite(got) == finite).all() and not finite[:, 1:, 1:, 0].any()
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.tuples(*(st.integers(1, n) for n in (6, 9, 4, 3, 3, 3, 20))),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    settings_=st.sampled_from([LLVM_CPU, tiled(4), SCALAR]),
    seed=st.integers(0, 2**16),
)
def test_random_padded_convolutions(
    sizes: tuple[int, ...], pads: tuple[int, int], settings_: object, seed: int
) -> None:
    """2-D convolutions with random sizes and paddings (guards on a grid coordinate, on the
    row coordinate, both, or neither), against a direct sum over the valid taps."""
    h, w, ci, kh, kw, out_h, co = sizes
    ph, pw = pads
    source = f"""function (I[H, W, CI], F[KH, KW, CI, CO]) -> (O) {{
        O[y, x, c: {out_h}, W, CO] = +(I[y + i - {ph}, x + j - {pw}, d] * F[i, j, d, c]);
    }}"""
    rng = np.random.default_rng(seed)
    i = rng.integers(-8, 9, (h, w, ci)).astype(np.float32) / 4
    f = rng.integers(-8, 9, (kh, kw, ci, co)).astype(np.float32) / 4
    want = np.zeros((out_h, w, co))
    valid = False
    for y in range(out_h):
        for x in range(w):
            for a in range(kh):
                for b in range(kw):
                    if 0 <= y + a - ph < h and 0 <= x + b - pw < w:
                        want[y, x] += i[y + a - ph, x + b - pw] @ f[a, b]
                        valid = True
    if not valid:  # no tuple at all is an error of the program (spec: E-EMPTY)
        with pytest.raises(tile.TileError, match="E-EMPTY"):
            run_program(source, {"I": i, "F": f}, settings_)  # type: ignore[arg-type]
        return
    if co > 1:  # one output channel is no vector coordinate (test_a_single_column_is_...)
        assert len(vector_kernels(source, settings_, {"I": i, "F": f})) == 1
    got = run_program(source, {"I": i, "F": f}, settings_)["O"]  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, want)  # quarters: every sum is exact


@pytest.mark.parametrize(("m", "n"), [(97, 65), (64, 64), (3, 1000)])
def test_grid_beyond_the_first_dimension(m: int, n: int) -> None:
    """A device whose first grid dimension holds fewer work-groups than the kernel has (PoCL:
    4096) gets a two- or three-dimensional grid, its spare work-groups doing nothing."""
    small = replace(LLVM_CPU, vec_size=8, goal_dim_sizes=(7, 5, 64))
    inputs = {"A": rand(m, 33), "B": rand(33, n, seed=1)}
    (kernel,) = vector_kernels(MATMUL, small, inputs)
    assert kernel.global_size[1] > 1
    got = run_program(MATMUL, inputs, small)["C"]
    np.testing.assert_allclose(
        got, inputs["A"].astype(np.float64) @ inputs["B"], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("block_bytes", [1, 16896, 25344, 42240, 1 << 30])  # 1, 2, 3, 5, all
@pytest.mark.parametrize(("m", "n"), [(97, 300), (36, 200), (7, 520)])
def test_column_tiles_in_blocks(
    monkeypatch: pytest.MonkeyPatch, block_bytes: int, m: int, n: int
) -> None:
    """Column tiles in blocks (one, several, a ragged last block, all), the order used where
    B is large: every tile computed once (outputs poisoned)."""
    monkeypatch.setattr(vector_blocks, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(vector_blocks, "BLOCKED_ABOVE", 0)
    inputs = {"A": rand(2, m, 33), "B": rand(2, 33, n, seed=1)}
    (kernel,) = vector_kernels(BMM, LLVM_CPU, inputs)
    panel = 33 * 64 * 4  # a column tile of 4 vectors of 16 floats
    blocks = "block" in str(kernel.body)
    assert blocks == (block_bytes // panel < -(-n // 64)), str(kernel.body)
    got = run_program(BMM, inputs, LLVM_CPU)["C"]
    want = inputs["A"].astype(np.float64) @ inputs["B"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("m", "k", "n"), [(7, 5, 16), (13, 33, 64), (9, 17, 40), (3, 4, 7)])
def test_half_matmul_runs_on_vectors_in_float(m: int, k: int, n: int) -> None:
    """float16 operands on a device without native half: the vector kernel, computed in
    float32 and rounded once when stored (as the generic kernel does), aligned vectors only.
    (The presets give it float32 copies of its operands where those pay,
    tests/lower/test_half_operands.py; here it reads the half operands itself.)"""
    rng = np.random.default_rng(m)
    a = (rng.integers(-8, 9, (m, k)) / 8).astype(np.float16)
    b = (rng.integers(-8, 9, (k, n)) / 8).astype(np.float16)
    for preset in (replace(LLVM_CPU, half_as_float=False), replace(tiled(8), half_as_float=False)):
        (kernel,) = vector_kernels(MATMUL, preset, {"A": a, "B": b})
        assert "lanes" not in str(kernel.body)
        got = run_program(MATMUL, {"A": a, "B": b}, preset)["C"]
        want = (a.astype(np.float64) @ b).astype(np.float16)
        np.testing.assert_array_equal(got, want)
    native = replace(LLVM_CPU, native_fp16=True)
    assert vector_kernels(MATMUL, native, {"A": a, "B": b}) == []


@pytest.mark.parametrize(
    ("arguments", "chosen"),
    [
        ((14, 4, 6, 4, 16), (7, 3)),  # 18 rows padded to hold 14: 7 divides them
        ((7, 4, 6, 4, 16), (7, 3)),
        ((10, 4, 6, 4, 16), (5, 4)),
        ((56, 4, 6, 4, 16), (6, 4)),  # 60 rows for 56: within a tenth
        ((13, 4, 6, 4, 16), (7, 3)),  # 14 rows for 13, not 18
        ((14, 4, 6, 2, 8), (5, 2)),  # 16 registers: 15 rows for 14 (7 of 1 vector: too narrow)
        ((7, 4, 6, 2, 8), (4, 3)),  # 8 rows for 7, not 12
        ((18, 4, 8, 3, 16), (9, 2)),  # 24 rows for 18: 9 x 2, the nearest divisor first
        ((10, 4, 6, 2, 4), (5, 2)),  # 16 registers: 5 x 2 and 2 vectors of B fit
        ((120, 5, 6, 4, 16), (4, 5)),  # 8 vectors for 5 columns: 4 x 5
        ((120, 6, 6, 4, 16), (8, 3)),  # 8 for 6: 5 does not divide 6, 3 does
        ((120, 9, 6, 4, 16), (8, 3)),  # 12 for 9
        ((120, 7, 6, 4, 16), (6, 4)),  # 8 for 7: within a fifth
        ((120, 10, 6, 4, 16), (6, 4)),  # 12 for 10: within a fifth
        ((120, 3, 6, 4, 16), (6, 4)),  # under one tile (clamped later)
        ((11, 5, 6, 4, 16), (4, 5)),  # 12 rows for 11: within a tenth; the columns still may
        ((14, 5, 6, 4, 16), (7, 3)),  # rows first
        ((120, 5, 6, 2, 4), (6, 2)),  # 6 vectors of 4 for 5: within a fifth
    ],
)
def test_register_tiles_divide_few_rows_or_columns(
    arguments: tuple[int, int, int, int, int], chosen: tuple[int, int]
) -> None:
    """(rows, vectors) for (size, columns in vectors, rows, vectors, width)."""
    assert dividing_tile(*arguments) == chosen


@pytest.mark.parametrize("n", [65, 81, 144, 33])
def test_columns_in_tiles_that_divide_them(n: int) -> None:
    """Products 65, 81 and 144 wide: 5, 6 and 9 vectors of 16 in tiles of 5 and 3 vectors, not
    4 with a last tile mostly empty; results against numpy."""
    a, b = rand(4, 120, 37), rand(4, 37, n, seed=1)
    (kernel,) = vector_kernels(BMM, LLVM_CPU, {"A": a, "B": b})
    rows, vectors = {65: (4, 5), 81: (8, 3), 144: (8, 3), 33: (6, 3)}[n]
    assert f"acc[{rows * vectors}]" in str(kernel.body) and f"it * {rows} + r" in str(kernel.body)
    got = run_program(BMM, {"A": a, "B": b}, LLVM_CPU)["C"]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [7, 14, 21, 10])
def test_rows_in_tiles_that_divide_them(m: int) -> None:
    """A batch of matmuls 7, 14, 21 or 10 rows high: register tiles of 7 x 3 (5 x 4 for 10)
    instead of 6 x 4, which would compute up to 12 rows for 7; results against numpy."""
    a, b = rand(8, m, 37), rand(8, 37, 100, seed=1)
    (kernel,) = vector_kernels(BMM, LLVM_CPU, {"A": a, "B": b})
    rows, vectors = (5, 4) if m == 10 else (7, 3)
    assert f"acc[{rows * vectors}]" in str(kernel.body) and f"it * {rows} + r" in str(kernel.body)
    got = run_program(BMM, {"A": a, "B": b}, LLVM_CPU)["C"]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
