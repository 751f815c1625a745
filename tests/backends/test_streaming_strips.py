"""Streaming reductions on llvm_cpu (`tile.lower.tiles._row_strip`, `tile.lower.jam`): a
column sum, a matvec-T, a reduction over a middle axis, whose operands are contiguous along
the output's last dimension.

Where the operands come from memory (more than `CACHED_BYTES`, over `STRIP_ROWS` rows), a
work-group owns a wide strip of columns and one pass of its tile loop takes `JAM_STEPS` rows.
Those sizes cost tens of megabytes; here `CACHED_BYTES` is 0 and `STRIP_ROWS` 1, so that
small shapes take that path: strips of up to 2048 columns or 528, the last strip partial,
reductions whose length leaves 0 to 3 rows after the jammed steps, and some too short to jam.
Every case is compared with float64 numpy (outputs poisoned) through the reference
interpreter and on every shipped device (OpenCL has no `reduction_steps` and runs its own
kernels), with `+`, `*`, `>` and `<`, float32, float16 and int32. The sources are this
file's own (output `S`), so no program compiled under another threshold is reused from a
cache.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from semtree.nodes import For, walk
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower import tiles
from tile.lower.generate import generate_program
from tile.lower.jam import JAM_STEPS

if TYPE_CHECKING:
    from collections.abc import Iterator

COLUMNS = "function (X[M, N]) -> (S) {{ S[n: N] = {agg}(X[m, n]); }}"
MATVEC_T = "function (A[M, N], V[M]) -> (S) { S[n: N] = +(A[m, n] * V[m]); }"
MIDDLE = "function (X[A, B, C]) -> (S) {{ S[a, c: A, C] = {agg}(X[a, b, c]); }}"
SCALED = "function (X[M, N], W[N]) -> (S) { S[n: N] = >(X[m, n] * W[n]); }"
# x @ A as a product of one row (`tile.lower.vector._one_row_from_memory`), with an epilogue.
ROW = (
    "function (V[U, M], A[M, N], D[N]) -> (S) { P[u, n: U, N] = +(V[u, m] * A[m, n]); "
    "S = relu(P + D); }"
)
ROWS = (1, 7, 8, 9, 10, 11, 33)  # under 2 * JAM_STEPS: no jam; then 0..3 rows left over
WIDTHS = (1, 15, 17, 47, 49, 129, 2047, 2049, 3001)


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


@pytest.fixture(params=[8192, 2112], ids=["wide", "narrow"])
def from_memory(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Every streaming reduction as if from memory, in strips of up to 2048 or 528 floats;
    programs compiled before or under the patch are forgotten, none is read from disk."""
    monkeypatch.setattr(tiles, "CACHED_BYTES", 0)
    monkeypatch.setattr(tiles, "STRIP_ROWS", 1)
    monkeypatch.setattr(tiles, "STRIP_BYTES", request.param)
    monkeypatch.setenv("TILE_CACHE", "0")
    for device_id in SHIPPED:
        tile.device(device_id).clear_cache()
    yield request.param
    for device_id in SHIPPED:
        tile.device(device_id).clear_cache()


def cases(rng: np.random.Generator, small: bool) -> list[Case]:
    """Random cases; `small`: widths the interpreter runs in a few seconds."""
    found = []
    widths = [w for w in WIDTHS if w < 200] if small else list(WIDTHS)
    for index in range(12 if small else 24):
        m, n = int(rng.choice(ROWS)), int(rng.choice(widths))
        kind = index % 7
        if kind == 6:
            inputs = {"V": _data(rng, 1, m), "A": _data(rng, m, n), "D": _data(rng, n)}
            found.append(Case("row", ROW, inputs))
        elif kind == 0:
            inputs = {"A": _data(rng, m, n), "V": _data(rng, m)}
            found.append(Case("matvec-T", MATVEC_T, inputs))
        elif kind == 1:
            inputs = {"X": _data(rng, 3, m, n)}
            found.append(Case("middle", MIDDLE.format(agg=("+", ">")[index % 2]), inputs))
        elif kind == 2:
            found.append(Case("scaled", SCALED, {"X": _data(rng, m, n), "W": _data(rng, n)}))
        elif kind == 3:  # products of values near 1
            x = (1 + rng.integers(-8, 9, (m, n)) / 64).astype(np.float32)
            found.append(Case("product", COLUMNS.format(agg="*"), {"X": x}))
        elif kind == 4:
            x = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
            found.append(Case("int32", COLUMNS.format(agg=("+", "<")[index % 2]), {"X": x}))
        else:
            x = _data(rng, m, n).astype(np.float16)
            found.append(Case("float16", COLUMNS.format(agg=(">", "+")[index % 2]), {"X": x}))
    return found


def _data(rng: np.random.Generator, *shape: int) -> np.ndarray:
    # Multiples of 1/8 up to 2: float32 sums of them are exact at these sizes.
    return (rng.integers(-16, 17, shape) / 8).astype(np.float32)


def _reference(case: Case) -> np.ndarray:
    inputs = {k: v.astype(np.float64) for k, v in case.inputs.items()}
    if case.family == "matvec-T":
        return inputs["V"] @ inputs["A"]
    if case.family == "middle":
        reduce = np.sum if "+(" in case.source else np.max
        return reduce(inputs["X"], axis=1)
    if case.family == "row":
        return np.maximum(inputs["V"] @ inputs["A"] + inputs["D"], 0)
    if case.family == "scaled":
        return np.max(inputs["X"] * inputs["W"], axis=0)
    reduce = {"+(": np.sum, "*(": np.prod, ">(": np.max, "<(": np.min}
    (agg,) = [f for op, f in reduce.items() if op in case.source]
    return agg(inputs["X"], axis=0)


def test_strips_and_steps_where_the_operands_come_from_memory(from_memory: int) -> None:
    """The kernel's structure: one strip per core, the jammed loop (step JAM_STEPS) and the
    rows left after it; without the patched threshold, a register strip and no jam."""
    x = {"X": np.zeros((4 * JAM_STEPS + 3, 3001), np.float32)}
    source = COLUMNS.format(agg="+")
    (kernel,) = generate_program(tile.Function(source).bind(x), LLVM_CPU).kernels
    strip = {8192: 1504, 2112: 512}[from_memory]  # 1504 + 1497; 5 x 512 + 441
    assert kernel.tile == (strip,)
    loops = [n for n in walk(kernel.body) if isinstance(n, For)]  # type: ignore[arg-type]
    assert any(loop.step == JAM_STEPS and loop.count == 4 for loop in loops)
    plain = replace(LLVM_CPU, reduction_steps=False)  # OpenCL: neither
    (kernel,) = generate_program(tile.Function(source).bind(x), plain).kernels
    assert all(n.step == 1 for n in walk(kernel.body) if isinstance(n, For))  # type: ignore[arg-type]


def test_a_product_of_one_row_from_memory_streams(from_memory: int) -> None:
    """x @ A from memory takes the strips, not the register tile, which has no rows to
    share A's loads (`b_row`: its row of B); from the caches, the register tile."""
    inputs = {"V": np.zeros((1, 77), np.float32), "A": np.zeros((77, 3001), np.float32)}
    inputs["D"] = np.zeros(3001, np.float32)
    bound = tile.Function(ROW).bind(inputs)
    (kernel,) = generate_program(bound, LLVM_CPU).kernels
    assert "b_row" not in str(kernel.body)
    assert kernel.tile == (1, {8192: 1504, 2112: 512}[from_memory])
    two = tile.Function(ROW).bind({**inputs, "V": np.zeros((2, 77), np.float32)})
    assert all("b_row" in str(k.body) for k in generate_program(two, LLVM_CPU).kernels)


def test_a_product_of_one_row_from_the_caches_keeps_the_register_tile() -> None:
    inputs = {"V": np.zeros((1, 77), np.float32), "A": np.zeros((77, 3001), np.float32)}
    bound = tile.Function(ROW).bind({**inputs, "D": np.zeros(3001, np.float32)})
    (kernel,) = generate_program(bound, LLVM_CPU).kernels
    assert "b_row" in str(kernel.body)


def test_no_jam_from_the_caches() -> None:
    """From the caches: a matvec-T in register strips, a column sum in the strips of devices
    without `reduction_steps`; neither jammed."""
    a, v = np.zeros((4 * JAM_STEPS + 3, 3001), np.float32), np.zeros(4 * JAM_STEPS + 3, np.float32)
    (kernel,) = generate_program(tile.Function(MATVEC_T).bind({"A": a, "V": v}), LLVM_CPU).kernels
    assert kernel.tile == (16 * tiles.REGISTER_STRIP[16],)
    assert all(n.step == 1 for n in walk(kernel.body) if isinstance(n, For))  # type: ignore[arg-type]
    (kernel,) = generate_program(
        tile.Function(COLUMNS.format(agg="+")).bind({"X": a}), LLVM_CPU
    ).kernels
    assert kernel.tile == (tiles.STREAM_ELEMENTS,)
    assert all(n.step == 1 for n in walk(kernel.body) if isinstance(n, For))  # type: ignore[arg-type]


def test_jammed_strips_match_numpy_in_the_interpreter(from_memory: int) -> None:
    wrong = []
    for case in cases(np.random.default_rng(41), small=True):
        got = run_program(case.source, case.inputs, LLVM_CPU)["S"].astype(np.float64)
        want = _reference(case)
        if got.shape != want.shape or not np.allclose(got, want, rtol=2e-3, atol=1e-3):
            wrong.append((case.family, case.source, {k: v.shape for k, v in case.inputs.items()}))
    assert not wrong, wrong


@pytest.mark.parametrize("device_id", SHIPPED)
def test_jammed_strips_match_the_reference_on_the_devices(
    device_id: str, devices: dict[str, tile.Device], from_memory: int
) -> None:
    wrong = []
    for case in cases(np.random.default_rng(42 + from_memory), small=False):
        outcome = check(case, devices[device_id])
        want = _reference(case)
        got = np.asarray(tile.run(case.source, case.inputs, device=device_id)["S"], np.float64)
        if outcome.kind != "ok" or not np.allclose(got, want, rtol=2e-3, atol=1e-3):
            shapes = {k: v.shape for k, v in case.inputs.items()}
            wrong.append((case.family, case.source, shapes, outcome.kind, outcome.detail))
    assert not wrong, f"wrong on {device_id}: {wrong}"
