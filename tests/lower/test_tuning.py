"""Register tiles chosen by a measured search (`tile.lower.tuning`, issue 11 item 4): which
contractions have a choice, which tiles they may take, that the generator uses the tile
chosen, and that every candidate computes what numpy does in float64, poisoned outputs
included (the reference interpreter; the devices: tests/runtime/test_tune.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.lower.harness import LLVM_CPU, run_kernel_list, small_steps, tiled
from tile.lower.generate import generate_program
from tile.lower.tuning import Tuning

NN = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
TN = "function (A[K, M], B[K, N]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[k, n]); }"
NT = "function (A[M, K], B[N, K]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[n, k]); }"
BATCHED = """function (A[G, M, K], B[G, K, N]) -> (C) {
    C[g, m, n: G, M, N] = +(A[g, m, k] * B[g, k, n]);
}"""
EPILOGUE = """function (A[M, K], B[K, N], S[N]) -> (R) {
    C[m, n: M, N] = +(A[m, k] * B[k, n]);
    R = relu(C + S);
}"""
TWO = """function (A[M, K], B[K, N], D[N, P]) -> (C, E) {
    C[m, n: M, N] = +(A[m, k] * B[k, n]);
    E[m, p: M, P] = +(C[m, n] * D[n, p]);
}"""
SHAPES = {
    NN: lambda m, k, n: {"A": (m, k), "B": (k, n)},
    TN: lambda m, k, n: {"A": (k, m), "B": (k, n)},
    NT: lambda m, k, n: {"A": (m, k), "B": (n, k)},
    BATCHED: lambda m, k, n: {"A": (3, m, k), "B": (3, k, n)},
    EPILOGUE: lambda m, k, n: {"A": (m, k), "B": (k, n), "S": (n,)},
}
IDS = ["nn", "tn", "nt", "batched", "epilogue"]


def inputs(source: str, m: int, k: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal(shape).astype(np.float32)
        for name, shape in SHAPES[source](m, k, n).items()
    }


def expected(source: str, x: dict[str, np.ndarray]) -> np.ndarray:
    a, b = (x[name].astype(np.float64) for name in ("A", "B"))
    if source is TN:
        return a.T @ b
    if source is NT:
        return a @ b.T
    if source is EPILOGUE:
        return np.maximum(a @ b + x["S"].astype(np.float64), 0)
    return a @ b


def sites(source: str, x: dict, settings=LLVM_CPU) -> Tuning:
    tuning = Tuning()
    generate_program(tile.Function(source).bind(x), settings, tuning=tuning)
    return tuning


def main_tile(source: str, x: dict, tuning: Tuning, settings=LLVM_CPU) -> tuple[int, ...]:
    kernel_list = generate_program(tile.Function(source).bind(x), settings, tuning=tuning)
    (site,) = tuning.sites.values()
    (kernel,) = [info for info in kernel_list.kernels if info.name == site.kernel]
    return kernel.tile


def test_the_cost_models_tile_comes_first_and_every_candidate_fits() -> None:
    for m, k, n in [(1, 5, 1), (2, 3, 17), (9, 50, 823), (1000, 333, 777), (256, 256, 256)]:
        x = inputs(NN, m, k, n)
        tuning = sites(NN, x)
        if m == n == 1:  # one element: nothing to choose
            assert tuning.sites == {}
            continue
        (site,) = tuning.sites.values()
        assert site.kernel == "tile_0"
        assert len(set(site.candidates)) == len(site.candidates) >= 2
        untuned = main_tile(NN, x, Tuning())
        rows, vectors = site.candidates[0]
        assert untuned == (rows, vectors * 16)  # the default generation's own tile
        for rows, vectors in site.candidates:
            assert 1 <= rows <= m and 1 <= vectors <= -(-n // 16)


def test_the_generator_takes_the_chosen_tile() -> None:
    x = inputs(NN, 100, 40, 200)
    (site,) = sites(NN, x).sites.values()
    for rows, vectors in site.candidates:
        tuning = Tuning({site.key: (rows, vectors)})
        assert main_tile(NN, x, tuning) == (rows, vectors * 16)
    # A tile that is no candidate (a stale memory) is ignored: the cost model's.
    stale = Tuning({site.key: (31, 7)})
    rows, vectors = site.candidates[0]
    assert main_tile(NN, x, stale) == (rows, vectors * 16)


def test_which_contractions_have_a_choice() -> None:
    x = {"A": np.ones((30, 20), np.float32), "B": np.ones((20, 40), np.float32)}
    x["D"] = np.ones((40, 50), np.float32)
    two = sites(TWO, x)
    assert sorted(site.kernel for site in two.sites.values()) == ["tile_0", "tile_1"]
    largest = "function (A[M, K]) -> (C) { C[m: M] = >(A[m, k]); }"
    (key,) = sites(largest, {"A": x["A"]}).sites  # a generic kernel's tiles, no register tile
    assert key.startswith("tiles|")
    elementwise = "function (A[M, K]) -> (C) { C = A * 2; }"
    assert sites(elementwise, {"A": x["A"]}).sites == {}


@pytest.mark.parametrize("source", list(SHAPES), ids=IDS)
@pytest.mark.parametrize("vec_size", [16, 4])
def test_every_candidate_computes_the_product(source: str, vec_size: int) -> None:
    settings = tiled(vec_size)
    for m, k, n in [(1, 7, 33), (7, 3, 17), (17, 5, 63)]:
        x = inputs(source, m, k, n, seed=m * n + k)
        want = expected(source, x)
        tuning = sites(source, x, settings)
        for site in tuning.sites.values():
            for candidate in site.candidates:
                chosen = Tuning({site.key: candidate})
                bound = tile.Function(source).bind(x)
                kernel_list = generate_program(bound, settings, tuning=chosen)
                got = run_kernel_list(kernel_list, {name: x[name] for name in kernel_list.inputs})
                output = "R" if source is EPILOGUE else "C"
                np.testing.assert_allclose(
                    got[output], want, rtol=1e-5, atol=1e-5, err_msg=f"{(m, k, n)} {candidate}"
                )


@pytest.mark.parametrize("source", [NN, TN], ids=["nn", "tn"])
def test_every_candidate_of_a_blocked_product(source: str, monkeypatch) -> None:
    """Reduction-blocked kernels with B packed in panels sized by the chosen tile."""
    small_steps(monkeypatch)
    x = inputs(source, 9, 17, 129, seed=3)
    want = expected(source, x)
    (site,) = sites(source, x).sites.values()
    for candidate in site.candidates:
        kernel_list = generate_program(
            tile.Function(source).bind(x), LLVM_CPU, tuning=Tuning({site.key: candidate})
        )
        panels = any(info.name.endswith("_panels") for info in kernel_list.kernels)
        assert panels or candidate != site.candidates[0]  # a tile may make blocks too small
        got = run_kernel_list(kernel_list, {name: x[name] for name in kernel_list.inputs})
        np.testing.assert_allclose(got["C"], want, rtol=1e-5, atol=1e-5, err_msg=str(candidate))


# Generic kernels (tile.lower.contract) whose work-group tiles a search may choose.
MATVEC = "function (A[M, K], X[K]) -> (O) { O[m: M] = +(A[m, k] * X[k]); }"
COLUMN_SUM = "function (A[M, N]) -> (O) { O[n: N] = +(A[m, n]); }"
ROW_MAX = "function (A[M, N]) -> (O) { O[m: M] = >(A[m, n]); }"
POOL = """function (I[N, H, W, C]) -> (O) {
    O[n, y, x, c: N, H / 2, W / 2, C] = >(I[n, 2 * y + i, 2 * x + j, c]), i < 2, j < 2;
}"""
GENERIC = {
    MATVEC: (
        lambda m, n: {"A": (m, n), "X": (n,)},
        lambda x: x["A"].astype(np.float64) @ x["X"],
    ),
    COLUMN_SUM: (lambda m, n: {"A": (m, n)}, lambda x: x["A"].astype(np.float64).sum(0)),
    ROW_MAX: (lambda m, n: {"A": (m, n)}, lambda x: x["A"].max(1)),
    POOL: (
        lambda m, n: {"I": (2, 2 * m, 4, n)},
        lambda x: x["I"].reshape(2, x["I"].shape[1] // 2, 2, 2, 2, -1).max(axis=(2, 4)),
    ),
}


def generic_sites(source: str, x: dict, settings=LLVM_CPU) -> list:
    return [site for site in sites(source, x, settings).sites.values() if "tiles|" in site.key]


def test_generic_tiles_candidates() -> None:
    rng = np.random.default_rng(0)
    x = {"A": rng.standard_normal((300, 200)).astype(np.float32)}
    (site,) = generic_sites(COLUMN_SUM, x)
    kernel_list = generate_program(tile.Function(COLUMN_SUM).bind(x), LLVM_CPU)
    (info,) = kernel_list.kernels
    assert site.candidates[0] == info.tile  # the cost model's first
    (width,) = info.tile
    assert site.candidates == ((width,), (2 * width,), (4 * width,))  # wider strips
    x["X"] = x["A"][0]
    (site,) = generic_sites(MATVEC, x)
    assert site.candidates == ((1,), (2,), (4,))  # rows of a lane reduction per work-group
    chosen = Tuning({site.key: (4,)})
    kernel_list = generate_program(tile.Function(MATVEC).bind(x), LLVM_CPU, tuning=chosen)
    assert kernel_list.kernels[0].tile == (4,)
    twice = "function (A[M, N]) -> (O) { O = A * 2; }"
    assert generic_sites(twice, {"A": x["A"]}) == []  # no reduction


@pytest.mark.parametrize("source", list(GENERIC), ids=["matvec", "colsum", "rowmax", "pool"])
@pytest.mark.parametrize("vec_size", [16, 4])
def test_every_generic_candidate_computes_the_contraction(source: str, vec_size: int) -> None:
    settings = tiled(vec_size)
    shapes, reference = GENERIC[source]
    for m, n in [(1, 5), (7, 33), (9, 130)]:
        rng = np.random.default_rng(m * n)
        x = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes(m, n).items()}
        want = reference(x)
        found = generic_sites(source, x, settings)
        assert found or (m, n) == (1, 5)
        for site in found:
            for candidate in site.candidates:
                bound = tile.Function(source).bind(x)
                kernel_list = generate_program(
                    bound, settings, tuning=Tuning({site.key: candidate})
                )
                got = run_kernel_list(kernel_list, {k: x[k] for k in kernel_list.inputs})["O"]
                np.testing.assert_allclose(
                    got, want, rtol=1e-5, atol=1e-5, err_msg=f"{(m, n)} {candidate}"
                )
