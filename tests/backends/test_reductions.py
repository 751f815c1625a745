"""Max and min reductions at sizes off the lane and tile grid, on every shipped device
(issue 9's reproducers; each was wrong or aborted the process on llvm_cpu.0).

LLVM 22's loop vectoriser turns a loop that carries `maxnum`/`minnum` into a NaN-checked
vector loop and drops the remainder iterations (a row max over 7 columns read 4), or aborts
in its cost model (a 1-D max over 190 or 191 elements); `hal_llvm.render` keeps it off such
loops. Every reference here is numpy in float64, outputs are poisoned before each run, and
inputs have no ties, so a dropped element changes the answer.
"""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.shipped import SHIPPED, shipped_devices

SIZES = (1, 3, 4, 7, 8, 9, 16, 17)


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


def run(source: str, device: tile.Device, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    results = tile.Function(source)(**inputs, device=device)
    return {name: np.asarray(value) for name, value in results.items()}


def distinct(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """float32 values without ties (a permutation of a spread range)."""
    count = int(np.prod(shape))
    return (rng.permutation(count).reshape(shape) - count / 2).astype(np.float32) / 7


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("agg", [">", "<"])
def test_row_reductions_at_every_small_shape(
    device_id: str, agg: str, devices: dict[str, tile.Device]
) -> None:
    function = tile.Function(f"function (X[M, K]) -> (O) {{ O[m: M] = {agg}(X[m, k]); }}")
    rng = np.random.default_rng(9)
    reduce = np.max if agg == ">" else np.min
    wrong = []
    for rows in SIZES:
        for columns in SIZES:
            x = distinct(rng, rows, columns)
            got = np.asarray(function(X=x, device=devices[device_id])["O"])
            if not np.array_equal(got, reduce(x.astype(np.float64), axis=1)):
                wrong.append((rows, columns))
    assert not wrong, f"{agg} wrong at shapes {wrong}"


@pytest.mark.parametrize("device_id", SHIPPED)
def test_issue_reproducers(device_id: str, devices: dict[str, tile.Device]) -> None:
    device = devices[device_id]
    x = np.zeros((8, 7), np.float32)
    x[:, 6] = 1
    got = run("function (X[I, J]) -> (O) { O[i: I] = >(X[i, j]); }", device, X=x)["O"]
    np.testing.assert_array_equal(got, np.ones(8, np.float32))

    cube = np.broadcast_to(np.arange(9, dtype=np.float32)[:, None, None], (9, 8, 4)).copy()
    source = "function (I[A, B, D]) -> (O) { O[j, l: B, D] = >(I[i, j, l]); }"
    np.testing.assert_array_equal(run(source, device, I=cube)["O"], np.full((8, 4), 8.0))

    a = (np.arange(16) % 4).astype(np.float32)
    b = np.array([0, 1, 2, 3, 0, 1, 2], np.float32)
    v = (np.arange(1, 8) / 10).astype(np.float32)
    source = "function (A[N], B[M], V[M]) -> (O) { O[i: N] = >(A[i] == B[j] ? V[j]); }"
    want = np.tile(np.array([0.5, 0.6, 0.7, 0.4], np.float32), 4)
    np.testing.assert_array_equal(run(source, device, A=a, B=b, V=v)["O"], want)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("size", [127, 129, 190, 191, 255, 257])
def test_full_reductions_do_not_abort(
    device_id: str, size: int, devices: dict[str, tile.Device]
) -> None:
    x = distinct(np.random.default_rng(size), size)
    for agg, reduce in ((">", np.max), ("<", np.min)):
        got = run(f"function (X[N]) -> (O) {{ O[] = {agg}(X[i]); }}", devices[device_id], X=x)
        assert got["O"] == reduce(x)


@pytest.mark.parametrize("device_id", SHIPPED)
def test_argmax_idiom(device_id: str, devices: dict[str, tile.Device]) -> None:
    source = """function (X[R, C], I[C]) -> (AM) {
      Mx[r: R] = >(X[r, c]);
      AM[r: R] = >(X[r, c] == Mx[r] ? I[c]);
    }"""
    function = tile.Function(source)
    rng = np.random.default_rng(14)
    wrong = []
    for rows in (1, 3, 5, 8, 17):
        for columns in (1, 2, 4, 7, 9, 16, 19):
            x = distinct(rng, rows, columns)
            index = np.arange(columns, dtype=np.int32)
            got = np.asarray(function(X=x, I=index, device=devices[device_id])["AM"])
            if not np.array_equal(got, np.argmax(x, axis=1)):
                wrong.append((rows, columns))
    assert not wrong, f"argmax wrong at shapes {wrong}"


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("shape", [(1, 191), (32, 21), (22, 38), (3, 17)])
def test_softmax_off_the_grid(
    device_id: str, shape: tuple[int, int], devices: dict[str, tile.Device]
) -> None:
    rows, columns = shape
    source = f"function (X[R, C]) -> (Y) {{ Y = builtin_softmax(X, {rows}, {columns}); }}"
    x = distinct(np.random.default_rng(3), rows, columns)
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    got = run(source, devices[device_id], X=x)["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("size", [7, 17, 190, 191])
def test_triangular_and_masked_maxima(
    device_id: str, size: int, devices: dict[str, tile.Device]
) -> None:
    x = distinct(np.random.default_rng(size), size)
    device = devices[device_id]
    running = run("function (X[N]) -> (O) { O[i: N] = >(X[k]), i - k < N; }", device, X=x)
    np.testing.assert_array_equal(running["O"], np.maximum.accumulate(x))
    keys = (np.arange(size) % 3).astype(np.int32)
    source = "function (K[N], X[N], Q[M]) -> (O) { O[q: M] = <(Q[q] == K[n] ? X[n]); }"
    masked = run(source, device, K=keys, X=x, Q=np.arange(3, dtype=np.int32))["O"]
    want = [min(0.0, float(x[keys == q].min())) for q in range(3)]
    np.testing.assert_array_equal(masked, np.array(want, np.float32))


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("agg", ["+", ">", "<"])
def test_lane_reductions_with_a_partial_last_step(
    device_id: str, agg: str, devices: dict[str, tile.Device]
) -> None:
    """Row reductions whose length is no multiple of the lanes (issue 11: they ran without
    lanes): the last step feeds only the lanes below the remainder. Poisoned outputs
    (`tests.fuzz.check`), the reference evaluator in float64."""
    source = f"function (X[M, K]) -> (O) {{ O[m: M] = {agg}(X[m, k]); }}"
    rng = np.random.default_rng(len(agg))
    for columns in (17, 33, 65, 127, 129, 200, 257, 3001):
        x = distinct(rng, 5, columns)
        outcome = check(Case("reduce", source, {"X": x}), devices[device_id])
        assert outcome.kind == "ok", (columns, outcome)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("columns", [1, 3, 7, 19, 33])
def test_many_short_rows(device_id: str, columns: int, devices: dict[str, tile.Device]) -> None:
    """Sums and maxima over a short last axis with thousands of rows: each work-group is small,
    which is where LLVM vectorised the grid loop across work-groups (below)."""
    x = np.random.default_rng(columns).standard_normal((3, 1031, columns)).astype(np.float32)
    for agg, reduce in (("+", np.sum), (">", np.max)):
        source = f"function (X[A, B, C]) -> (O) {{ O[a, b: A, B] = {agg}(X[a, b, c]); }}"
        got = run(source, devices[device_id], X=x)["O"]
        np.testing.assert_allclose(got, reduce(x.astype(np.float64), axis=2), rtol=0, atol=1e-5)


def test_llvm_grid_loops_take_no_gathers(tmp_path, monkeypatch) -> None:
    """A sum over 19 columns of many rows: LLVM's loop vectoriser read each row with 19 gathers
    across 8 work-groups instead of the kernel's own vector loads, 3x slower (AMD Zen 5);
    `hal_llvm.host.HostCpu.target_features` turns gathers off on x86 hosts with AVX2."""
    device = tile.device("llvm_cpu.0")
    monkeypatch.setenv("TILE_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("TILE_CACHE", "0")
    x = np.random.default_rng(19).standard_normal((4099, 19)).astype(np.float32)
    source = "function (X[R, C]) -> (O) { O[r: R] = +(X[r, c]);  }"  # unlike any cached source
    got = run(source, device, X=x)["O"]
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=0, atol=1e-5)
    assembly = "".join(path.read_text() for path in tmp_path.glob("*.s"))
    assert "__grid" in assembly and "vgather" not in assembly
