"""Split reductions (`tile.lower.split`): a large reduction to fewer elements than the device
wants work-groups becomes a partials kernel and a total kernel. Which programs split, and
that both forms compute what numpy does in float64 — through the reference interpreter
(temporaries and outputs poisoned) with a lowered threshold, and on llvm_cpu.0."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import shipped_devices
from tile.lower import split as gen_split
from tile.lower.generate import generate_program

TOTAL = "function (X[N]) -> (O) { O[] = +(X[i]); }"
LARGEST = "function (X[N]) -> (O) { O[] = >(X[i]); }"
SMALLEST = "function (X[N]) -> (O) { O[] = <(X[i]); }"
DOT = "function (A[N], B[N]) -> (O) { O[] = +(A[i] * B[i]); }"
PER_ROW = "function (X[M, N]) -> (O) { O[m: M] = +(X[m, n]); }"
# 2 x 3 x 3 x 5 x 7 x 11: a multiple of 15, not of 4 (with the threshold lowered); a prime.
UNEVEN = 6930
PRIME = 1_048_583


def rand(*shape: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def kernel_names(source: str, inputs: dict[str, np.ndarray]) -> list[str]:
    kernel_list = generate_program(tile.Function(source).bind(inputs), LLVM_CPU)
    return [kernel.name for kernel in kernel_list.kernels]


def test_which_reductions_split() -> None:
    big = rand(1 << 22)
    assert kernel_names(TOTAL, {"X": big}) == ["tile_0_part", "tile_0"]
    assert kernel_names(DOT, {"A": big, "B": big}) == ["tile_0_part", "tile_0"]
    assert kernel_names(PER_ROW, {"X": rand(2, 1 << 21)}) == ["tile_0_part", "tile_0"]
    assert kernel_names(TOTAL, {"X": rand(4096)}) == ["tile_0"]  # too little work
    assert kernel_names(PER_ROW, {"X": rand(64, 1 << 16)}) == ["tile_0"]  # enough elements
    odd = rand((1 << 22) + 3)  # 13 x 322639: 13 equal pieces
    assert kernel_names(TOTAL, {"X": odd}) == ["tile_0_part", "tile_0"]
    # No equal pieces: 16 of them, and a kernel for the rest.
    assert kernel_names(TOTAL, {"X": rand(PRIME)}) == ["tile_0_part", "tile_0_part_tail", "tile_0"]
    epilogue = "function (X[N]) -> (O) { S[] = +(X[i]); O = S * 2.0; }"
    assert kernel_names(epilogue, {"X": big}) == ["tile_0"]


def test_the_partials_are_a_temporary_of_the_accumulator_type() -> None:
    x = rand(1 << 22, dtype=np.float16)
    kernel_list = generate_program(tile.Function(TOTAL).bind({"X": x}), LLVM_CPU)
    (buffer,) = kernel_list.temporaries
    shape = kernel_list.shapes[buffer]
    assert buffer.startswith("_P") and shape.dtype.numpy == np.float32 and shape.dims[0] > 1
    assert kernel_list.shapes["O"].dtype.numpy == np.float16


@pytest.fixture
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gen_split, "MIN_SPLIT_TUPLES", 1024)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(
    ("source", "reference"),
    [(TOTAL, np.sum), (LARGEST, np.max), (SMALLEST, np.min)],
    ids=["sum", "max", "min"],
)
def test_split_reductions_match_numpy(
    low_threshold: None, source: str, reference: object, dtype: type
) -> None:
    x = rand(4096, dtype=dtype)
    assert kernel_names(source, {"X": x}) == ["tile_0_part", "tile_0"]
    got = run_program(source, {"X": x})["O"]
    want = reference(x.astype(np.float64))  # type: ignore[operator]
    tolerance = 2e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(float(got), want, rtol=tolerance, atol=tolerance)


def test_split_with_two_operands_and_rows(low_threshold: None) -> None:
    a, b = rand(2048), rand(2048, seed=1)
    assert kernel_names(DOT, {"A": a, "B": b}) == ["tile_0_part", "tile_0"]
    np.testing.assert_allclose(run_program(DOT, {"A": a, "B": b})["O"], a @ b, rtol=1e-5)
    x = rand(3, 1024)
    assert kernel_names(PER_ROW, {"X": x}) == ["tile_0_part", "tile_0"]
    got = run_program(PER_ROW, {"X": x})["O"]
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("source", "reference"),
    [(TOTAL, np.sum), (LARGEST, np.max), (SMALLEST, np.min)],
    ids=["sum", "max", "min"],
)
def test_llvm_cpu_runs_split_reductions(source: str, reference: object) -> None:
    x = rand(1 << 22, seed=3)
    x[12345] = 40.0  # the largest, in the first part
    x[(1 << 22) - 7] = -40.0  # the smallest, in the last
    got = tile.run(source, {"X": x}, device="llvm_cpu.0")["O"]
    want = reference(x.astype(np.float64))  # type: ignore[operator]
    np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize(
    ("source", "reference"),
    [(TOTAL, np.sum), (LARGEST, np.max), (SMALLEST, np.min)],
    ids=["sum", "max", "min"],
)
def test_a_reduction_of_any_divisible_length_splits(
    low_threshold: None, source: str, reference: object
) -> None:
    """Where pieces can be equal, they are: a length with no factor 4 splits in 15 parts, the
    reference and both shipped devices agree with numpy (extremes in the first and last
    parts)."""
    x = rand(UNEVEN, seed=5)
    x[3], x[UNEVEN - 2] = 40.0, -40.0
    kernel_list = generate_program(tile.Function(source).bind({"X": x}), LLVM_CPU)
    assert [kernel.name for kernel in kernel_list.kernels] == ["tile_0_part", "tile_0"]
    assert kernel_list.shapes["_P0"].dims == (15,)
    want = reference(x.astype(np.float64))  # type: ignore[operator]
    results = [run_program(source, {"X": x})["O"]]
    for device in shipped_devices().values():
        function = tile.Function(source)
        results.append(function(device=device, X=x)["O"].to_numpy())
    for got in results:
        np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(
    ("source", "reference"),
    [(TOTAL, np.sum), (LARGEST, np.max), (SMALLEST, np.min), (PER_ROW, None)],
    ids=["sum", "max", "min", "rows"],
)
def test_a_prime_length_splits_with_a_tail(
    low_threshold: None, source: str, reference: object, dtype: type
) -> None:
    """4099 (prime) = 16 pieces of 256 and a rest of 3 (per row, over three rows: fewer
    pieces), which a third kernel reduces into the partials' last row: the extremes sit in
    the rest and in the first piece. The reference (temporaries and outputs poisoned) and
    both shipped devices agree with float64 numpy."""
    n = 4099
    x = rand(3, n, dtype=dtype, seed=9) if source is PER_ROW else rand(n, dtype=dtype, seed=9)
    flat = x.reshape(-1, n)
    flat[:, n - 2], flat[:, 5] = 40.0, -40.0
    kernel_list = generate_program(tile.Function(source).bind({"X": x}), LLVM_CPU)
    names = [kernel.name for kernel in kernel_list.kernels]
    assert names == ["tile_0_part", "tile_0_part_tail", "tile_0"]
    rows, *kept = kernel_list.shapes["_P0"].dims  # the pieces' rows and the tail's
    tail = kernel_list.kernels[1]  # the rest of each row: its cost counts that, not all of X
    assert tail.flops == n % (rows - 1) * (x.size // n) and tail.bytes < x.nbytes // 20
    assert tuple(kept) == x.shape[:-1] and rows >= 3
    if source is not PER_ROW:
        assert rows == 17
    wide = x.astype(np.float64)
    want = wide.sum(axis=1) if reference is None else reference(wide)  # type: ignore[operator]
    results = [run_program(source, {"X": x})["O"]]
    for device in shipped_devices().values():
        function = tile.Function(source)
        results.append(function(device=device, X=x)["O"].to_numpy())
    tolerance = 2e-2 if dtype == np.float16 else 1e-5
    scale = np.abs(wide).sum(axis=-1).max() if reference is not np.max else 1.0
    for got in results:
        np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=tolerance * scale)
        if reference in (np.max, np.min):
            assert float(got) == float(want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 5),
    vectors=st.integers(2, 40),
    extra=st.integers(0, 7),
    agg=st.sampled_from(["+", ">", "<"]),
    product=st.booleans(),
    split=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_lane_reductions(
    rows: int, vectors: int, extra: int, agg: str, product: bool, split: bool, seed: int
) -> None:
    """Row reductions of 16 to 327 elements, in lanes and possibly split (in equal pieces, or
    with a tail), with one operand or two (one of them constant along the row), against
    numpy: quarters make every sum exact."""
    k = 8 * vectors + extra
    term = "X[m, k] * S[m]" if product else "X[m, k]"
    source = f"function (X[M, K], S[M]) -> (O) {{ O[m: M] = {agg}({term}); }}"
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 9, (rows, k)).astype(np.float32) / 4
    s = rng.integers(-8, 9, rows).astype(np.float32) / 4
    terms = x * s[:, None] if product else x
    want = {"+": terms.sum(axis=1), ">": terms.max(axis=1), "<": terms.min(axis=1)}[agg]
    threshold = 64 if split else gen_split.MIN_SPLIT_TUPLES
    with mock.patch.object(gen_split, "MIN_SPLIT_TUPLES", threshold):
        got = run_program(source, {"X": x, "S": s})["O"]
    np.testing.assert_array_equal(got, want)


COLUMNS = "function (X[M, N]) -> (O) { O[n: N] = +(X[m, n]); }"


def test_narrow_column_reductions_split_along_their_rows() -> None:
    """A streaming reduction (every operand contiguous along the kept last dimension) whose
    rows are too narrow to give every core a strip is cut into pieces of rows instead."""
    kernel_list = generate_program(tile.Function(COLUMNS).bind({"X": rand(100_000, 75)}), LLVM_CPU)
    assert [kernel.name for kernel in kernel_list.kernels] == ["tile_0_part", "tile_0"]
    assert kernel_list.shapes["_P0"].dims == (16, 75)
    matvec_t = "function (A[M, N], V[M]) -> (O) { O[n: N] = +(A[m, n] * V[m]); }"
    assert kernel_names(matvec_t, {"A": rand(100_000, 40), "V": rand(100_000)})[0] == "tile_0_part"
    outer = "function (X[A, B, C, D]) -> (O) { O[d: D] = >(X[a, b, c, d]); }"
    assert kernel_names(outer, {"X": rand(46, 67, 16, 75)})[0] == "tile_0_part"
    # Enough strips already: wide rows, or several kept rows of strips.
    assert kernel_names(COLUMNS, {"X": rand(1000, 3001)}) == ["tile_0"]
    kept = "function (X[M, C, N]) -> (O) { O[c, n: C, N] = +(X[m, c, n]); }"
    assert kernel_names(kept, {"X": rand(20000, 3, 75)}) == ["tile_0"]
    # Too little work, or no regrouping allowed (an integer sum is left alone).
    assert kernel_names(COLUMNS, {"X": rand(4096, 75)}) == ["tile_0"]
    integers = np.ones((100_000, 75), np.int32)
    assert kernel_names(COLUMNS, {"X": integers}) == ["tile_0"]


@pytest.mark.parametrize(("agg", "reference"), [("+", np.sum), (">", np.max), ("<", np.min)])
def test_shipped_devices_run_split_column_reductions(agg: str, reference: object) -> None:
    """30011 (prime) rows of 37: 16 pieces of 1875 rows and a tail of 11, on every shipped
    device; quarters keep every sum exact, the extremes sit in the first piece and the tail."""
    source = COLUMNS.replace("+", agg)
    rng = np.random.default_rng(11)
    x = rng.integers(-8, 9, (30011, 37)).astype(np.float32) / 4
    x[3, 5], x[30009, 36], x[30010, 0] = 40.0, -40.0, 41.0
    names = kernel_names(source, {"X": x})
    assert names == ["tile_0_part", "tile_0_part_tail", "tile_0"]
    want = reference(x.astype(np.float64), axis=0)  # type: ignore[operator]
    for device in shipped_devices().values():
        got = tile.Function(source)(device=device, X=x)["O"].to_numpy()
        np.testing.assert_array_equal(got, want, err_msg=device.id)


def column_case(
    rng: np.random.Generator, shape: tuple[int, int, int], agg: str, product: bool
) -> tuple[str, dict[str, np.ndarray], np.ndarray]:
    """A column reduction over the rows of `shape` (rows, kept, width): its source, inputs
    (quarters, so that every sum is exact) and the numpy result."""
    term = "X[m, c, n] * V[m]" if product else "X[m, c, n]"
    source = f"function (X[M, C, N], V[M]) -> (O) {{ O[c, n: C, N] = {agg}({term}); }}"
    x = rng.integers(-8, 9, shape).astype(np.float32) / 4
    v = rng.integers(-8, 9, shape[0]).astype(np.float32) / 4
    terms = x * v[:, None, None] if product else x
    want = {"+": terms.sum(axis=0), ">": terms.max(axis=0), "<": terms.min(axis=0)}[agg]
    return source, {"X": x, "V": v}, want


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 260),
    width=st.integers(1, 10),
    kept=st.integers(1, 2),
    agg=st.sampled_from(["+", ">", "<"]),
    product=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_column_reductions(
    rows: int, width: int, kept: int, agg: str, product: bool, seed: int
) -> None:
    """Column reductions of `kept` x `width` outputs over 1 to 260 rows, one operand or a
    second constant along the row (a matvec-T), split wherever the strips are too few (the
    threshold lowered), through the reference interpreter (temporaries and outputs poisoned)
    against numpy."""
    rng = np.random.default_rng(seed)
    source, inputs, want = column_case(rng, (rows, kept, width), agg, product)
    with mock.patch.object(gen_split, "MIN_SPLIT_TUPLES", 1024):
        names = kernel_names(source, inputs)
        got = run_program(source, inputs)["O"]
    strips = kept * -(-width // LLVM_CPU.vec_size)
    tuples = rows * kept * width
    splits = tuples >= 1024 and strips < LLVM_CPU.goal_groups and rows >= 2 * gen_split.STRIP_ROWS
    assert (names[0] == "tile_0_part") == splits, names
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(16))
def test_random_column_reductions_on_shipped_devices(seed: int) -> None:
    """Wider random column reductions than the interpreter can afford (1 to 111 columns, 1 to
    3 kept rows, 128 to 20000 rows, the threshold lowered) on every shipped device."""
    rng = np.random.default_rng(1000 + seed)
    shape = (int(rng.integers(128, 20001)), int(rng.integers(1, 4)), int(rng.integers(1, 112)))
    agg = ("+", ">", "<")[seed % 3]
    source, inputs, want = column_case(rng, shape, agg, product=seed % 2 == 1)
    with mock.patch.object(gen_split, "MIN_SPLIT_TUPLES", 1024):
        for device in shipped_devices().values():
            got = tile.Function(source)(device=device, **inputs)["O"].to_numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{device.id} {shape}")


OUTER_AND_RUNS = "function (X[A, B, C]) -> (O) { O[b: B] = +(X[a, b, c]); }"


def test_which_reductions_take_their_runs_first() -> None:
    """A reduction over short contiguous runs (up to 2 KB) and outer variables
    becomes a kernel over the runs, into a temporary in the operand's order, and one over the
    outer variables."""
    x = rand(228, 208, 43)
    kernel_list = generate_program(tile.Function(OUTER_AND_RUNS).bind({"X": x}), LLVM_CPU)
    assert [kernel.name for kernel in kernel_list.kernels] == ["tile_0_runs", "tile_0"]
    assert kernel_list.shapes["_R0"].dims == (228, 208)
    largest = OUTER_AND_RUNS.replace("+", ">")
    assert kernel_names(largest, {"X": x}) == ["tile_0_runs", "tile_0"]
    weighted = "function (X[A, B, C], Y[C]) -> (O) { O[b: B] = +(X[a, b, c] * Y[c]); }"
    assert kernel_names(weighted, {"X": x, "Y": rand(43)}) == ["tile_0_runs", "tile_0"]
    # A coordinate outside an outer variable: T keeps the operand's order, b before a.
    middle = "function (X[B, A, D, C]) -> (O) { O[b, d: B, D] = +(X[b, a, d, c]); }"
    kernel_list = generate_program(tile.Function(middle).bind({"X": rand(9, 500, 7, 40)}), LLVM_CPU)
    assert kernel_list.shapes["_R0"].dims == (9, 500, 7)
    # Runs over 2 KB, too few outer rows, too little work, integers: one kernel.
    assert kernel_names(OUTER_AND_RUNS, {"X": rand(20, 208, 513)}) == ["tile_0"]
    assert kernel_names(OUTER_AND_RUNS, {"X": rand(20, 208, 512)})[0] == "tile_0_runs"
    assert kernel_names(OUTER_AND_RUNS, {"X": rand(7, 8000, 43)}) == ["tile_0"]
    assert kernel_names(OUTER_AND_RUNS, {"X": rand(20, 20, 43)}) == ["tile_0"]
    integers = np.ones((228, 208, 43), np.int32)
    assert kernel_names(OUTER_AND_RUNS, {"X": integers}) == ["tile_0"]


@pytest.mark.parametrize(("agg", "reference"), [("+", np.sum), (">", np.max), ("<", np.min)])
def test_shipped_devices_reduce_runs_first(agg: str, reference: object) -> None:
    """228 x 208 x 43 over its first and last axes on every shipped device: quarters keep
    every sum exact; the extremes sit in the first run and in the last element."""
    source = OUTER_AND_RUNS.replace("+", agg)
    x = np.random.default_rng(12).integers(-8, 9, (228, 208, 43)).astype(np.float32) / 4
    x[0, 3, 0], x[227, 207, 42], x[100, 207, 20] = 40.0, -40.0, 41.0
    assert kernel_names(source, {"X": x})[0] == "tile_0_runs"
    want = reference(x.astype(np.float64), axis=(0, 2))  # type: ignore[operator]
    for device in shipped_devices().values():
        got = tile.Function(source)(device=device, X=x)["O"].to_numpy()
        np.testing.assert_array_equal(got, want, err_msg=device.id)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outer=st.integers(1, 12),
    kept=st.integers(LLVM_CPU.goal_groups, 20),  # fewer elements take split_reduction
    run=st.integers(1, 80),
    agg=st.sampled_from(["+", ">", "<"]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_reductions_of_runs_first(
    outer: int, kept: int, run: int, agg: str, weighted: bool, seed: int
) -> None:
    """X[A, B, C] over a and c (runs of 1 to 80, up to 12 outer rows), one operand or a
    second along c, taken in two kernels wherever the runs are in lanes (the threshold
    lowered), through the reference interpreter (temporaries and outputs poisoned) against
    numpy on quarters (exact)."""
    term = "X[a, b, c] * Y[c]" if weighted else "X[a, b, c]"
    source = f"function (X[A, B, C], Y[C]) -> (O) {{ O[b: B] = {agg}({term}); }}"
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 9, (outer, kept, run)).astype(np.float32) / 4
    y = rng.integers(-8, 9, run).astype(np.float32) / 4
    terms = x * y if weighted else x
    want = {"+": terms.sum(axis=(0, 2)), ">": terms.max(axis=(0, 2)), "<": terms.min(axis=(0, 2))}
    with mock.patch.object(gen_split, "MIN_SPLIT_TUPLES", 1024):
        names = kernel_names(source, {"X": x, "Y": y})
        got = run_program(source, {"X": x, "Y": y})["O"]
    in_lanes = run >= 16  # tile.lower.accumulators.lane_split: 2 x 8 lanes or more
    runs_first = x.size >= 1024 and outer >= gen_split.MIN_INNER_ROWS and in_lanes
    assert (names[0] == "tile_0_runs") == runs_first, names
    np.testing.assert_array_equal(got, want[agg])
