"""Dynamic batch dimensions (`tile.runtime.dynamic`, issue 13 item 3): a function compiled once
with `tile.spec(("N", ...))` runs every batch size with no further compilation, every result
right against a float64 numpy reference, reductions over the batch and the batch size as a
value included; programs whose rows depend on other rows otherwise are refused clearly at
compile time; calls with inputs off the compiled signature are clear errors."""

from __future__ import annotations

import json
import zipfile
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tests.conftest import run_script
from tests.shipped import SHIPPED, require_opencl
from tile.lower.batch import BLOCKS

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

# Batch sizes at the edges of every block (B - 1, B, B + 1, 2B, 2B + 1), primes, a large one.
SIZES = sorted(
    {1, 37, 100, 257, *(n for b in BLOCKS[:-1] for n in (b - 1, b, b + 1, 2 * b, 2 * b + 1))}
)
TOLERANCE = 2e-5  # relative to the largest reference value, float32 sums of <= 300 terms


@pytest.fixture(params=SHIPPED)
def device(request: pytest.FixtureRequest) -> str:
    if request.param != "llvm_cpu.0":
        require_opencl()
    return request.param


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(x: np.ndarray) -> np.ndarray:
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)


def _conv(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    kh, kw = k.shape[:2]
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))
    return np.tensordot(windows, k, axes=([4, 5, 3], [0, 1, 2]))


# name: (Tile source, symbolic inputs' other dims, fixed inputs' shapes, reference)
Shapes = dict[str, tuple[int, ...]]
WORKLOADS: dict[str, tuple[str, Shapes, Shapes, Callable]] = {
    "matmul": (
        "function (A[M, K], B[K, N]) -> (O) { O[m, n: M, N] = +(A[m, k] * B[k, n]); }",
        {"A": (45,)},
        {"B": (45, 33)},
        lambda a, b: a @ b,
    ),
    "matmul_bias_relu": (
        "function (A[M, K], B[K, N], C[N]) -> (O) {"
        " T[m, n: M, N] = +(A[m, k] * B[k, n]); O = relu(T + C); }",
        {"A": (64,)},
        {"B": (64, 48), "C": (48,)},
        lambda a, b, c: np.maximum(a @ b + c, 0),
    ),
    "batched_matmul": (
        "function (A[B, M, K], X[B, K, N]) -> (O) {"
        " O[b, m, n: B, M, N] = +(A[b, m, k] * X[b, k, n]); }",
        {"A": (9, 17), "X": (17, 5)},
        {},
        lambda a, x: a @ x,
    ),
    "conv_valid": (
        "function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {"
        " O[n, x, y, co: N, H - KH + 1, W - KW + 1, CO] ="
        " +(I[n, x + i, y + j, ci] * K[i, j, ci, co]); }",
        {"I": (9, 8, 5)},
        {"K": (3, 3, 5, 7)},
        _conv,
    ),
    "softmax": (
        "function (X[M, N]) -> (O) { MX[m, 0: M, 1] = >(X[m, n]); E = exp(X - MX);"
        " S[m, 0: M, 1] = +(E[m, n]); O = E / S; }",
        {"X": (300,)},
        {},
        _softmax,
    ),
    "layernorm": (
        "function (X[M, N]) -> (O) { S[m, 0: M, 1] = +(X[m, n]); MU = S / N; D = X - MU;"
        " V[m, 0: M, 1] = +(D[m, n] * D[m, n]); O = D / sqrt(V / N + 0.00001); }",
        {"X": (77,)},
        {},
        _layernorm,
    ),
    "row_max_8x7": (
        "function (X[M, N]) -> (O) { O[m: M] = >(X[m, n]); }",
        {"X": (7,)},
        {},
        lambda x: x.max(axis=1),
    ),
    "maxpool": (
        "function (I[N, H, W, C]) -> (O) {"
        " O[n, x, y, c: N, H / 2, W / 2, C] = >(I[n, 2 * x + i, 2 * y + j, c]), i < 2, j < 2; }",
        {"I": (6, 4, 3)},
        {},
        lambda inp: inp.reshape(inp.shape[0], 3, 2, 2, 2, 3).max(axis=(2, 4)),
    ),
    "elementwise": (
        "function (X[N, C], G[C]) -> (O) { O = tanh(X) * G + 1; }",
        {"X": (19,)},
        {"G": (19,)},
        lambda x, g: np.tanh(x) * g + 1,
    ),
    # Reductions over the batch (tile.lower.stages), and the batch size as a value.
    "batchnorm": (
        "function (X[N, C]) -> (O) { S[c: C] = +(X[n, c]); MU = S / N; D = X - MU;"
        " V[c: C] = +(D[n, c] * D[n, c]); O = D / sqrt(V / N + 0.00001); }",
        {"X": (21,)},
        {},
        lambda x: (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5),
    ),
    "weight_gradient": (
        "function (X[N, I], D[N, J]) -> (O) { O[i, j: I, J] = +(X[n, i] * D[n, j]); }",
        {"X": (37,), "D": (18,)},
        {},
        lambda x, d: x.T @ d,
    ),
    "conv_weight_gradient": (
        "function (I[N, H, W, CI], D[N, X, Y, CO]) -> (O) {"
        " O[i, j, ci, co: 3, 3, CI, CO] = +(I[n, x + i, y + j, ci] * D[n, x, y, co]); }",
        {"I": (5, 4, 3), "D": (3, 2, 4)},
        {},
        lambda i, d: np.einsum("nxyijc,nxyo->ijco", _windows(i, 3, 3), d),
    ),
    "column_min_square": (
        "function (X[N, C], G[C]) -> (O) { O[c: C] = <(X[n, c] * X[n, c]); }",
        {"X": (29,)},
        {"G": (29,)},
        lambda x, g: (x * x).min(axis=0),
    ),
    "scaled_by_batch": (
        "function (X[N, C]) -> (O) { O = X / N + N; }",
        {"X": (6,)},
        {},
        lambda x: x / len(x) + len(x),
    ),
}


def _windows(x: np.ndarray, kh: int, kw: int) -> np.ndarray:
    """x[n, a + i, b + j, c] at [n, a, b, i, j, c] (valid windows of a channels-last image)."""
    return np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2)).transpose(
        0, 1, 2, 4, 5, 3
    )


def _inputs(name: str, rows: int, seed: int) -> dict[str, np.ndarray]:
    _, symbolic, fixed, _ = WORKLOADS[name]
    rng = _rng(seed)
    values = {key: rng.standard_normal(shape).astype(np.float32) for key, shape in fixed.items()}
    for key, rest in symbolic.items():
        values[key] = rng.standard_normal((rows, *rest)).astype(np.float32)
    return values


def _specs(name: str) -> dict[str, object]:
    _, symbolic, fixed, _ = WORKLOADS[name]
    rng = _rng(0)
    specs: dict[str, object] = {
        key: rng.standard_normal(shape).astype(np.float32) for key, shape in fixed.items()
    }
    symbol = "B" if name == "batched_matmul" else "N"
    specs.update({key: tile.spec((symbol, *rest)) for key, rest in symbolic.items()})
    return specs


def _no_builds(monkeypatch: pytest.MonkeyPatch, device: str) -> list[str]:
    """Make every later build of `device`'s compiler fail the test: nothing may compile."""
    compiler = tile.device(device).runtime.device.compiler
    builds: list[str] = []

    def refuse(*args: object, **kwargs: object) -> object:
        builds.append("build")
        raise AssertionError("a dynamic function compiled again")

    monkeypatch.setattr(compiler, "build", refuse)
    return builds


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_one_compile_serves_every_batch_size(
    device: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, _, _, reference = WORKLOADS[name]
    function = tile.Function(source)
    specs = _specs(name)
    compiled = function.compile(device=device, **specs)
    fixed = {key: value for key, value in specs.items() if isinstance(value, np.ndarray)}
    builds = _no_builds(monkeypatch, device)
    for rows in SIZES:
        values = {**_inputs(name, rows, seed=rows), **fixed}
        got = compiled(**values)["O"].to_numpy()
        want = reference(*(values[key].astype(np.float64) for key in function.inputs))
        assert got.shape == want.shape, (rows, got.shape, want.shape)
        scale = 1 + np.abs(want).max()
        assert np.abs(got - want).max() <= TOLERANCE * scale, (name, rows)
    assert not builds


def test_fifty_batch_sizes_without_compiling(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13's acceptance: 50 batch sizes in 1..1000 from one compile, every result right."""
    source, _, _, reference = WORKLOADS["matmul_bias_relu"]
    specs = _specs("matmul_bias_relu")
    function = tile.Function(source)
    compiled = function.compile(device=device, **specs)
    builds = _no_builds(monkeypatch, device)
    sizes = sorted({1, 1000, *_rng(5).integers(1, 1001, 48).tolist()})
    for rows in sizes:
        values = {**specs, "A": _rng(rows).standard_normal((rows, 64)).astype(np.float32)}
        got = compiled(**values)["O"].to_numpy()
        want = reference(*(np.asarray(values[k], dtype=np.float64) for k in function.inputs))
        assert np.abs(got - want).max() <= TOLERANCE * (1 + np.abs(want).max()), rows
    assert not builds
    assert len(sizes) >= 45


def test_tensors_in_and_out(device: str) -> None:
    """Tensor inputs, and an output fed back in as the next call's input."""
    source = "function (X[N, C]) -> (O) { O = X * 2 + 1; }"
    compiled = tile.Function(source).compile(X=tile.spec(("N", 5)), device=device)
    x = np.arange(35, dtype=np.float32).reshape(7, 5)
    first = compiled(X=tile.Tensor.from_numpy(x, device=device))["O"]
    second = compiled(X=first)["O"].to_numpy()
    assert np.array_equal(second, (x * 2 + 1) * 2 + 1)


def test_unbatched_outputs_and_inputs_returned() -> None:
    """An output without the batch axis (from the fixed inputs only) and one per row."""
    source = "function (X[N, C], W[C]) -> (O, T) { T[c: C] = +(W[c] * W[c]); O = X * T; }"
    w = np.arange(1, 4, dtype=np.float32)
    compiled = tile.Function(source).compile(X=tile.spec(("N", 3)), W=w)
    for rows in (1, BLOCKS[0] + 3):
        x = _rng(rows).standard_normal((rows, 3)).astype(np.float32)
        out = compiled(X=x, W=w)
        assert np.allclose(out["T"].to_numpy(), w * w)
        assert np.allclose(out["O"].to_numpy(), x * w * w)


REFUSED = {
    "pairs of rows in a reduction": (
        "function (X[N, C]) -> (O) { O[c: C] = +(X[n, c] * X[m, c]); }"
    ),
    "batch plus one as a value": "function (X[N, C]) -> (O) { O = X / (N + 1); }",
    "reads another row": (
        "function (X[N, C]) -> (O) { O[n, c: N, C] = +(X[n + 1, c]), n + 1 < N; }"
    ),
    "transposed batch": "function (X[N, C]) -> (O) { O[c, n: C, N] = =(X[n, c]); }",
    "grows the batch": "function (X[N, C]) -> (O) { O[i, c: 2 * N, C] = =(X[i / 2, c]); }",
    "index along the batch": "function (X[N, C]) -> (O) { O = index(X, 0); }",
    "pairs of rows": "function (X[N, C]) -> (O) { O[n, m: N, N] = +(X[n, c] * X[m, c]); }",
}


@pytest.mark.parametrize("why", sorted(REFUSED))
def test_programs_whose_rows_depend_on_other_rows_are_refused(why: str) -> None:
    function = tile.Function(REFUSED[why])
    with pytest.raises(tile.TileUnsupported, match="cannot take a dynamic N"):
        function.compile(X=tile.spec(("N", 4)))


def test_spec_and_call_errors() -> None:
    with pytest.raises(ValueError, match="only the first dimension"):
        tile.spec((4, "N"))
    with pytest.raises(ValueError, match="identifier"):
        tile.spec(("4N", 2))
    function = tile.Function("function (X[N, C], Y[N, C]) -> (O) { O = X + Y; }")
    with pytest.raises(tile.TileUnsupported, match="one symbolic dimension"):
        function.compile(X=tile.spec(("N", 3)), Y=tile.spec(("M", 3)))
    compiled = function.compile(X=tile.spec(("N", 3)), Y=tile.spec(("N", 3)))
    x = np.ones((5, 3), np.float32)
    with pytest.raises(tile.TileBindError, match="another input has 5"):
        compiled(X=x, Y=np.ones((4, 3), np.float32))
    with pytest.raises(
        tile.TileBindError, match=r"compiled for a float32 tensor of shape \[N, 3\]"
    ):
        compiled(X=x, Y=np.ones((5, 4), np.float32))
    with pytest.raises(tile.TileBindError, match=r"shape \[N, 3\]"):
        compiled(X=x, Y=np.ones((5, 3), np.float64))
    with pytest.raises(tile.TileBindError, match="at least one row"):
        compiled(X=np.ones((0, 3), np.float32), Y=np.ones((0, 3), np.float32))
    with pytest.raises(tile.TileBindError, match="missing input"):
        compiled(X=x)
    assert np.array_equal(compiled(X=x, Y=x)["O"].to_numpy(), x + x)


def test_long_rows_summed_in_partial_sums(device: str) -> None:
    """Rows of 2^20 elements: the one-row kernels sum each in partial sums, whose buffer is a
    private copy per row (tile.lower.batch)."""
    source = "function (X[N, C]) -> (O) { O[n: N] = +(X[n, c]); }"
    compiled = tile.Function(source).compile(X=tile.spec(("N", 1 << 20)), device=device)
    if tile.device(device).runtime.device.settings.threads == 1:  # CPU kernels split rows
        assert compiled._stages[0][1].batched.private  # the case this test is for
    for rows in (1, 3):
        x = _rng(rows).standard_normal((rows, 1 << 20)).astype(np.float32)
        got = compiled(X=x)["O"].to_numpy()
        want = x.astype(np.float64).sum(axis=1)
        assert np.abs(got - want).max() <= 1e-6 * np.abs(x).sum(axis=1).max(), rows


@pytest.mark.parametrize("mode", ["clamped", "views", "staged"])
def test_rows_left_over_clamped_in_place_or_staged(
    device: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows that fill no whole block: the last block clamped to end at the last row (one
    launch), or, where that would misalign a vector access (forced here) or compute more
    than an eighth of the rows twice, the next smaller block over the last rows, in place
    through views of the call's buffers where the backend makes views at their offset (rows
    of 32 floats: at every row, on every backend here), else in staging buffers. R, made
    block by block, is read whole by the column mean (a stage of its own) and again block by
    block after it."""
    executor = tile.device(device).runtime.device.executor
    monkeypatch.setattr(type(executor), "makes_views", mode == "views")
    if mode != "clamped":
        monkeypatch.setattr(tile.runtime.dynamic, "clamps", lambda batched, rows: False)
    source = (
        "function (A[M, K], B[K, N], C[N]) -> (O) {"
        " T[m, n: M, N] = +(A[m, k] * B[k, n]); R = relu(T + C);"
        " S[n: N] = +(R[m, n]); O = R - S / M; }"
    )
    b = _rng(1).standard_normal((32, 32)).astype(np.float32)
    c = _rng(2).standard_normal(32).astype(np.float32)
    compiled = tile.Function(source).compile(A=tile.spec(("N", 32)), B=b, C=c, device=device)
    sizes = [BLOCKS[1] + 1, BLOCKS[0] + 5, 100]  # B + 1: an extra block would be waste
    if mode == "clamped":  # and at most an eighth of the rows computed twice
        sizes = [BLOCKS[1] + 1, *(k * BLOCKS[0] - 1 for k in (1, 2, 11))]
    for rows in sizes:
        a = _rng(rows).standard_normal((rows, 32)).astype(np.float32)
        got = compiled(A=a, B=b, C=c)["O"].to_numpy()
        want = np.maximum(a.astype(np.float64) @ b + c, 0)
        want -= want.mean(axis=0)
        assert np.abs(got - want).max() <= TOLERANCE * (1 + np.abs(want).max()), rows
        plan = compiled._plan(rows)[0]
        kinds = [type(kernel).__name__ for kernel in plan.kernels]
        block = max(b for b in BLOCKS if b <= rows)
        clamped = mode == "clamped" and rows != BLOCKS[1] + 1
        assert ("_Viewed" in kinds) == (mode == "views"), kinds
        assert ("_RangeCopy" in kinds) == (not clamped and mode != "views"), kinds
        if clamped:  # each block stage's kernels launch once, over ceil(N / B)
            launches = [k for k in plan.kernels if type(k).__name__ == "_Launch"]
            assert {launch.count for launch in launches} == {-(-rows // block)}


BUNDLE_SCRIPT = """
import sys
if sys.argv[1] == "load":
    sys.modules["lark"] = None  # importing Lark now fails
import numpy as np
import tile
mode, device, path = sys.argv[1:4]
source = (
    "function (X[N, K], W[K, M]) -> (Y) { T[n, m: N, M] = +(X[n, k] * W[k, m]); H = tanh(T);"
    " S[m: M] = +(H[n, m]); Y = H - S / N; }"
)
w = np.random.default_rng(1).standard_normal((19, 11)).astype(np.float32)
if mode == "save":
    compiled = tile.Function(source).compile(X=tile.spec(("N", 19)), W=w, device=device)
    compiled.save(path)
else:
    compiled = tile.load(path)
    assert type(compiled).__name__ == "DynamicFunction"
    assert compiled.device is tile.device(device), compiled.device
outputs = {}
for rows in (1, 7, 30, 100):
    x = np.random.default_rng(rows).standard_normal((rows, 19)).astype(np.float32)
    outputs[str(rows)] = compiled(X=x, W=w)["Y"].to_numpy()
np.savez(path + "." + mode + ".npz", **outputs)
print("lark" in sys.modules and sys.modules["lark"] is not None)
"""


def test_a_dynamic_bundle_runs_in_another_process_without_lark(tmp_path: Path, device: str) -> None:
    path = tmp_path / "dense.tileb"

    run_script(BUNDLE_SCRIPT, "save", device, str(path))
    loaded_without_lark = run_script(BUNDLE_SCRIPT, "load", device, str(path)) == "False"
    assert loaded_without_lark  # Lark was never imported
    saved, loaded = np.load(f"{path}.save.npz"), np.load(f"{path}.load.npz")
    assert set(saved) == set(loaded) == {"1", "7", "30", "100"}
    for rows in saved:
        assert np.array_equal(saved[rows], loaded[rows]), rows  # identical, bit for bit
    header = json.loads(zipfile.ZipFile(path).read("bundle.json"))
    dynamic = header["dynamic"]
    assert (dynamic["symbol"], dynamic["blocks"], dynamic["outputs"]) == ("N", list(BLOCKS), ["Y"])
    assert len(dynamic["hidden"]) == 1  # N as a value
    assert {"code.0.24.bin", "code.1.bin", "code.2.1.bin"} <= set(zipfile.ZipFile(path).namelist())


def test_a_damaged_dynamic_bundle_is_refused(tmp_path: Path) -> None:
    source = "function (X[N, C]) -> (O) { O = X + 1; }"
    path = tile.Function(source).compile(X=tile.spec(("N", 3))).save(tmp_path / "d.tileb")
    with zipfile.ZipFile(path) as bundle:
        members = {name: bundle.read(name) for name in bundle.namelist()}
    members["code.0.6.bin"] = members["code.0.6.bin"][:-1] + b"?"
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    with pytest.raises(tile.TileBundleError, match=r"code\.0\.6\.bin does not match its checksum"):
        tile.load(path)


def test_a_second_compile_comes_from_the_disk_cache(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block size's kernels are kept in tile's disk cache: compiling the same dynamic
    function again (as a new process would) builds nothing, and runs the same."""
    source = "function (X[N, C], G[C]) -> (O) { O = exp(X) * G + 3; }"
    g = np.arange(5, dtype=np.float32)
    first = tile.Function(source).compile(X=tile.spec(("N", 5)), G=g, device=device)
    builds = _no_builds(monkeypatch, device)
    second = tile.Function(source).compile(X=tile.spec(("N", 5)), G=g, device=device)
    assert not builds and second is not first
    for rows in (1, 8, 31):
        x = _rng(rows).standard_normal((rows, 5)).astype(np.float32)
        want = first(X=x, G=g)["O"].to_numpy()
        assert np.array_equal(second(X=x, G=g)["O"].to_numpy(), want)
        assert np.allclose(want, np.exp(x) * g + 3, rtol=1e-5)


def test_a_batch_too_large_to_index_is_refused_before_allocating() -> None:
    compiled = tile.Function("function (X[N, C]) -> (O) { O = X * 2; }").compile(
        X=tile.spec(("N", 1 << 20))
    )
    assert compiled.output_shapes(2047)["O"][0] == (2047, 1 << 20)
    with pytest.raises(tile.TileOutOfMemory, match="2\\^31"):
        compiled.output_shapes(2048)  # 2^31 elements: the plan is refused, nothing allocated


def test_gradients_of_a_network_over_any_batch(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gradient of a two-layer network's mean squared output (`tile.gradient`) reduces
    over the batch (weight gradients, a bias gradient, the mean's 1 / N): compiled once, it
    is right at every batch size against numpy's float64 backward pass."""
    network = tile.Function(
        "function (X[N, I], W[I, H], B[H], V[H, O]) -> (L) {"
        " T[n, h: N, H] = +(X[n, i] * W[i, h]); A = relu(T + B);"
        " Y[n, o: N, O] = +(A[n, h] * V[h, o]); S[] = +(Y[n, o] * Y[n, o]); L = S / N; }"
    )
    gradient = tile.gradient(network, of="L", wrt=("W", "B", "V"))
    rng = _rng(3)
    w, b, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((10, 16), 16, (16, 3)))
    one = np.float32(1.0)
    compiled = gradient.compile(X=tile.spec(("N", 10)), W=w, B=b, V=v, DL=one, device=device)
    builds = _no_builds(monkeypatch, device)
    for rows in (1, BLOCKS[1] + 1, BLOCKS[0], 2 * BLOCKS[0] + 5, 257):
        x = _rng(rows).standard_normal((rows, 10)).astype(np.float32)
        got = compiled(X=x, W=w, B=b, V=v, DL=one)
        t = x.astype(np.float64) @ w + b
        a = np.maximum(t, 0)
        dy = 2 * (a @ v) / rows
        dt = (dy @ v.T) * (t > 0)
        want = {"DW": x.T @ dt, "DB": dt.sum(axis=0), "DV": a.T @ dy}
        for name, expected in want.items():
            scale = 1 + np.abs(expected).max()
            assert np.abs(got[name].to_numpy() - expected).max() <= TOLERANCE * scale, (rows, name)
    assert not builds
