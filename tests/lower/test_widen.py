"""Elementwise tiles and reductions in lanes on vectors (`tile.lower.widen`,
`HardwareSettings.vector_loops`).

Which bodies are widened, and that the widened kernels compute what numpy does in float64 at
sizes on lane and tile edges (1, primes, 2^k +- 1): through the reference interpreter with
poisoned outputs, and on both shipped devices (opencl.0 widens, llvm_cpu.0 does not) against
the reference evaluator.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tile
from semtree import builder as sb
from semtree.kernel import KernelKind
from semtree.nodes import Binary, BinOp, For, IntConst, Lanes, Load, Lookup, Store, Subscript, walk
from semtree.types import DType, Type, TypeBase
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program
from tile.lower.widen import widen_lanes

WIDE = {  # an OpenCL CPU device: vector loops, no reduction steps
    width: replace(LLVM_CPU, vec_size=width, vector_loops=True, reduction_steps=False)
    for width in (2, 4, 8, 16)
}
SIZES = [1, 2, 7, 8, 9, 31, 32, 33, 63, 65, 127, 257, 1000]

GELU = """function (X[N]) -> (O) {
    O = 0.5 * X * (1.0 + tanh(0.79788456 * (X + 0.044715 * X * X * X)));
}"""
BIAS = "function (X[M, N], B[N]) -> (O) { O = exp(X + B) * 2.0; }"
ROW_SCALE = "function (X[M, N], S[M, U]) -> (O) { O = X * S - S; }"
TWO_OUT = "function (X[N], Y[N]) -> (O, P) { O = max(X, Y); P = X / (abs(Y) + 1.0); }"
SELECT = "function (X[N]) -> (O) { O = X > 0.5 ? X : 0.25 * X; }"
INTEGERS = "function (A[N], B[N]) -> (O) { O = A / B + A * 7 - (A >> 1); }"
CAST = "function (A[N]) -> (O) { O = as_float(A, 32) * 0.5 + 1.0; }"
COMPARE = "function (X[N]) -> (O) { O = X > 0.0; }"  # bool memory: not widened
HALF_CAST = "function (A[N]) -> (O, P) { O = as_float(A, 32); P = as_float(A * 3.0, 16); }"
TRANSPOSE = "function (X[M, N]) -> (O) { O[n, m: N, M] = =(X[m, n]); }"


def _rand(rng: np.random.Generator, *shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _widened(source: str, inputs: dict[str, np.ndarray], width: int = 8) -> bool:
    kernel_list = generate_program(tile.Function(source).bind(inputs), WIDE[width])
    bodies = [k.body for k in kernel_list.kernels if k.kind is KernelKind.ELEMENTWISE]
    assert bodies, "no elementwise kernel"
    return any(isinstance(node, Lanes) for body in bodies for node in walk(body))  # type: ignore[arg-type]


def test_which_bodies_are_widened() -> None:
    rng = np.random.default_rng(0)
    x = _rand(rng, 64)
    assert _widened(GELU, {"X": x})
    assert _widened(BIAS, {"X": _rand(rng, 3, 40), "B": _rand(rng, 40)})
    assert _widened(ROW_SCALE, {"X": _rand(rng, 3, 40), "S": _rand(rng, 3, 1)})
    assert _widened(SELECT, {"X": x})
    assert _widened(INTEGERS, {"A": x.astype(np.int32), "B": x.astype(np.int32)})
    assert not _widened(COMPARE, {"X": x})
    assert _widened(GELU, {"X": x.astype(np.float16)})  # half lanes, computed in float
    assert _widened(HALF_CAST, {"A": x.astype(np.float16)})
    assert not _widened(GELU, {"X": x.astype(np.float64)})  # PoCL aborts on tanh(double8)
    without = generate_program(tile.Function(GELU).bind({"X": x}), LLVM_CPU)
    assert not any(isinstance(node, Lanes) for k in without.kernels for node in walk(k.body))  # type: ignore[arg-type]


def test_a_widened_loop_steps_by_vectors() -> None:
    x = np.zeros(1001, np.float32)
    kernel_list = generate_program(tile.Function(GELU).bind({"X": x}), WIDE[8])
    text = str(kernel_list.kernels[0].body)
    assert "tw0 * 8" in text and "x0 + 8 <= 1001" in text and "1001 - x0" in text


@pytest.mark.parametrize("shape", [(37, 50), (64, 33), (100, 17), (300, 16), (5, 1000)])
def test_tiles_over_rows_are_widened(shape: tuple[int, int]) -> None:
    """A tile of several rows or a long strip (`tile.lower.tiles.GROUP_ELEMENTS`): the tile
    loop of a row is widened inside the loop over rows, the guard of the rows kept around it,
    ragged rows counted; the result is numpy's, outputs poisoned (reference interpreter)."""
    rng = np.random.default_rng(shape[1])
    inputs = {"X": _rand(rng, *shape), "B": _rand(rng, shape[1])}
    kernel_list = generate_program(tile.Function(BIAS).bind(inputs), WIDE[16])
    (kernel,) = kernel_list.kernels
    assert np.prod(kernel.tile) > 4 * 16  # more than one strip of vectors
    assert any(isinstance(node, Lanes) for node in walk(kernel.body))  # type: ignore[arg-type]
    want = np.exp(inputs["X"].astype(np.float64) + inputs["B"]) * 2
    got = run_program(BIAS, inputs, WIDE[16])["O"]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


CASES = [  # source, inputs for a size, numpy of the inputs in order
    (
        GELU,
        lambda r, n: {"X": _rand(r, n)},
        lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3))),
    ),
    (BIAS, lambda r, n: {"X": _rand(r, 3, n), "B": _rand(r, n)}, lambda x, b: np.exp(x + b) * 2),
    (ROW_SCALE, lambda r, n: {"X": _rand(r, 2, n), "S": _rand(r, 2, 1)}, lambda x, s: x * s - s),
    (SELECT, lambda r, n: {"X": _rand(r, n)}, lambda x: np.where(x > 0.5, x, 0.25 * x)),
]


@pytest.mark.parametrize("width", [2, 4, 8, 16])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", range(len(CASES)), ids=["gelu", "bias", "row_scale", "select"])
def test_widened_kernels_match_numpy(case: int, n: int, width: int) -> None:
    source, make, reference = CASES[case]
    inputs = make(np.random.default_rng(n), n)
    want = reference(*(v.astype(np.float64) for v in inputs.values()))
    got = run_program(source, inputs, WIDE[width])["O"]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("n", [1, 7, 9, 33, 1000])
def test_widened_two_outputs_and_integers(n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = _rand(rng, n), _rand(rng, n)
    got = run_program(TWO_OUT, {"X": x, "Y": y}, WIDE[8])
    np.testing.assert_array_equal(got["O"], np.maximum(x, y))
    np.testing.assert_allclose(got["P"], x / (np.abs(y.astype(np.float64)) + 1), rtol=1e-6)
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    b = rng.integers(-5, 6, n).astype(np.int32)  # zeros included: x / 0 == 0
    got = run_program(INTEGERS, {"A": a, "B": b}, WIDE[8])["O"]
    quotient = np.where(b == 0, 0, np.trunc(a / np.where(b == 0, 1, b))).astype(np.int64)
    want = quotient + a * 7 - (a >> 1)
    np.testing.assert_array_equal(got, want)
    got = run_program(CAST, {"A": a}, WIDE[8])["O"]
    np.testing.assert_allclose(got, a * 0.5 + 1.0, rtol=1e-6)


@pytest.mark.parametrize("width", [2, 4, 8, 16])
@pytest.mark.parametrize("n", [1, 7, 9, 33, 1000])
def test_widened_half(n: int, width: int) -> None:
    """Half memory on lanes: loads, a cast to float32, a rounding cast back and stores, at
    lane edges (counted lanes), bit for bit as numpy rounds them."""
    rng = np.random.default_rng(n)
    a = (_rand(rng, n) * 300).astype(np.float16)
    got = run_program(HALF_CAST, {"A": a}, WIDE[width])
    np.testing.assert_array_equal(got["O"], a.astype(np.float32))
    with np.errstate(over="ignore"):
        want = (a.astype(np.float32) * np.float32(3.0)).astype(np.float16)
    np.testing.assert_array_equal(got["P"], want)


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 33, 257, 1000])
def test_elementwise_edges_on_devices(device_id: str, n: int, devices: dict) -> None:
    rng = np.random.default_rng(n)
    cases = [
        Case("gelu", GELU, {"X": _rand(rng, n)}),
        Case("bias", BIAS, {"X": _rand(rng, 3, n), "B": _rand(rng, n)}),
        Case("row_scale", ROW_SCALE, {"X": _rand(rng, 2, n), "S": _rand(rng, 2, 1)}),
        Case("two", TWO_OUT, {"X": _rand(rng, n), "Y": _rand(rng, n)}),
        Case("select", SELECT, {"X": _rand(rng, n)}),
        Case(
            "int",
            INTEGERS,
            {
                "A": rng.integers(-99, 99, n).astype(np.int32),
                "B": rng.integers(-3, 4, n).astype(np.int32),
            },
        ),
        Case("f64", GELU, {"X": _rand(rng, n, dtype=np.float64)}),
        Case("f16", GELU, {"X": _rand(rng, n, dtype=np.float16)}),
        Case("f16_cast", HALF_CAST, {"A": (_rand(rng, n) * 300).astype(np.float16)}),
        Case("transpose", TRANSPOSE, {"X": _rand(rng, 3, n)}),
    ]
    for case in cases:
        outcome = check(case, devices[device_id])
        assert outcome.kind == "ok", f"{case.family} at {n}: {outcome}"


# ---- reductions in lanes on vectors (`widen_lanes`) -----------------------------------------

ROW_SUM = "function (X[M, K]) -> (O) { O[m: M] = +(X[m, k]); }"
ROW_MAX = "function (X[M, K]) -> (O) { O[m: M] = >(X[m, k]); }"
ROW_MIN = "function (X[M, K]) -> (O) { O[m: M] = <(X[m, k]); }"
MATVEC = "function (A[M, K], V[K]) -> (O) { O[m: M] = +(A[m, k] * V[k]); }"
SCALED = "function (A[M, K], S[M]) -> (O) { O[m: M] = +(A[m, k] * S[m]); }"


def _contraction_body(source: str, inputs: dict[str, np.ndarray], width: int) -> str:
    kernel_list = generate_program(tile.Function(source).bind(inputs), WIDE[width])
    (body,) = [k.body for k in kernel_list.kernels if k.kind is KernelKind.CONTRACTION]
    return str(body)


def test_lane_loops_and_the_folds_halves_run_on_vectors() -> None:
    """The reduction's steps and the fold's first halves take `width` lanes at a time (acc
    read and written as lanes of the private array), the last, partial step too; the fold's
    halves narrower than a vector stay scalar."""
    rng = np.random.default_rng(1)
    text = _contraction_body(MATVEC, {"A": _rand(rng, 3, 3001), "V": _rand(rng, 3001)}, 16)
    assert "for (int lane_vector = 0; lane_vector < 4; lane_vector += 1)" in text, text
    assert "lanes16(acc, lane) = lanes16(acc, lane) + lanes16(in0, " in text, text
    assert "lanes16(acc, fold32) = lanes16(acc, fold32) + lanes16(acc, fold32 + 32)" in text
    assert "for (int fold8 = 0; fold8 < 8; fold8 += 1)" in text  # 8 lanes: scalar
    # The last step, 3001 = 46 * 64 + 57: a sum's lanes past 57 read nothing and add 0; a
    # maximum's take the identity, -inf (the next test).
    assert "lanes16(in1, k * 64 + lane, 57 - lane)" in text, text
    maximum = _contraction_body(ROW_MAX, {"X": _rand(rng, 3, 3001)}, 16)
    assert "57 - lane, (float)-INFINITY)" in maximum, maximum
    assert "lanes16(acc, lane) = select(lanes16(acc, lane), v, v > lanes16(acc, lane))" in maximum
    narrow = _contraction_body(ROW_SUM, {"X": _rand(rng, 3, 40)}, 16)  # 16 lanes: 1 vector
    assert "lanes16(acc, lane)" in narrow, narrow
    plain = generate_program(
        tile.Function(MATVEC).bind({"A": _rand(rng, 3, 300), "V": _rand(rng, 300)}), LLVM_CPU
    )
    assert not any(isinstance(n, Lanes) for k in plain.kernels for n in walk(k.body))  # type: ignore[arg-type]


def test_the_last_step_of_a_maximum_fills_its_lanes_with_the_identity() -> None:
    """A row maximum's partial last step loads on a vector too, its lanes past the row filled
    with -inf (`Lanes.fill`), not 0, which could exceed a row of negatives; float16 operands
    keep the scalar step. Intel's CPU OpenCL: a maximum over the last 419 of 686 x 13 x 419,
    0.64 ms with the scalar step, 0.32 on vectors; softmax 1000 x 1001 0.32 -> 0.2."""
    text = _contraction_body(ROW_MAX, {"X": np.zeros((300, 1001), np.float32)}, 16)
    assert (
        "float16 v = lanes16(in0, m_ * 1001 + (k * 64 + lane), 41 - lane, (float)-INFINITY);"
        in text
    )
    text = _contraction_body(ROW_MAX, {"X": np.zeros((300, 1001), np.float16)}, 16)
    assert "v = (float)in0[m_ * 1001 + (k * 64 + lane)];" in text, text


@pytest.mark.parametrize("k", [17, 40, 65])
@pytest.mark.parametrize("agg", [">", "<"])
def test_the_last_step_of_a_maximum_of_products_keeps_its_padded_value(k: int, agg: str) -> None:
    """A maximum of products pads the product, not each factor: a fill of -inf in both
    would make the lanes past the edge +inf (fuzz seed 20261219, case 25: >(X[i, j] * Y[j])
    over 65 x 40 came out inf on Intel's CPU OpenCL). Its last step stays scalar; interpreter
    at 16 lanes and every shipped device, against float64 numpy."""
    source = f"function (X[M, K], Y[K]) -> (O) {{ O[m: M] = {agg}(X[m, k] * Y[k]); }}"
    rng = np.random.default_rng(k)
    x, y = _rand(rng, 65, k), _rand(rng, k)
    text = _contraction_body(source, {"X": x, "Y": y}, 16)
    assert "INFINITY)" not in text and f"if (lane < {k % 16})" in text, text
    products = x.astype(np.float64) * y
    want = products.max(axis=1) if agg == ">" else products.min(axis=1)
    got = run_program(source, {"X": x, "Y": y}, WIDE[16])["O"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for device_id in SHIPPED:
        got = tile.run(source, {"X": x, "Y": y}, device=device_id)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_lanes_narrower_than_a_vector_read_memory_on_one() -> None:
    """Rows of 19 run in 8 lanes, 32 rows a group (`tile.lower.tiles`): on a device of 16
    lanes the accumulation takes one vector of 8, the last step counted; the fold stays
    scalar. Intel's CPU OpenCL: a sum over the last axis of 57 x 39 x 90 x 19, 2.9 ms in
    groups of one row, 0.49 in groups of 32 on vectors of 8 (AMD Zen 5)."""
    text = _contraction_body(ROW_SUM, {"X": np.zeros((3000, 19), np.float32)}, 16)
    step = "lanes8(acc, tr0 * 8 + lane) = lanes8(acc, tr0 * 8 + lane) + lanes8(in0, m * 19"
    assert step in text, text
    assert "float8 v = lanes8(in0, m_ * 19 + (k * 8 + lane), 3 - lane);" in text, text
    assert "acc[tf0 * 8 + fold4] = acc[tf0 * 8 + fold4] + acc[tf0 * 8 + fold4 + 4];" in text


def test_loops_whose_steps_depend_on_each_other_stay_scalar() -> None:
    """A loop is widened only where no step reads what another writes, and it writes private
    arrays only."""
    array = Type(TypeBase.VALUE, DType.FLOAT32, 1, 64)
    i = Load(Lookup("i"))

    def element(offset: object) -> Subscript:
        return Subscript(Lookup("acc"), offset)  # type: ignore[arg-type]

    def body(read: object) -> object:
        loop = For("i", 32, 1, sb.block(Store(element(i), Load(element(read)))))
        return sb.function(
            "k",
            [sb.param("out", Type.ptr(DType.FLOAT32))],
            [sb.declare(array, "acc", 0.0), loop],
        )

    shifted = body(Binary(BinOp.ADD, i, IntConst(1)))  # acc[i] = acc[i + 1]: a chain
    assert widen_lanes(shifted, 16) is shifted  # type: ignore[arg-type]
    halves = body(Binary(BinOp.ADD, i, IntConst(32)))  # acc[i] = acc[i + 32]: independent
    assert any(isinstance(n, Lanes) for n in walk(widen_lanes(halves, 16)))  # type: ignore[arg-type]
    to_memory = sb.function(
        "k",
        [sb.param("out", Type.ptr(DType.FLOAT32))],
        [For("i", 32, 1, sb.block(Store(Subscript(Lookup("out"), i), IntConst(1))))],
    )
    assert widen_lanes(to_memory, 16) is to_memory  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [1, 16, 17, 63, 64, 65, 127, 129, 257, 3001])
@pytest.mark.parametrize("width", [4, 8, 16])
def test_reductions_in_lanes_on_vectors_match_numpy(k: int, width: int) -> None:
    """Sums, maxima, minima and products with a vector through the reference interpreter
    (poisoned outputs; a lane past the end of a row would read the next one or fail), float32
    and float16 operands, with the extremes in the last, partial step, and rows all below or
    all above 0 (a maximum's padded lanes must not count as 0)."""
    rng = np.random.default_rng(k)
    for dtype in (np.float32, np.float16):
        x = _rand(rng, 4, k, dtype=dtype)
        x[1, -1], x[2, -1] = 50, -50
        x[2] = -np.abs(x[2]) - 1
        x[3] = np.abs(x[3]) + 1
        v, s = _rand(rng, k, dtype=dtype), _rand(rng, 4, dtype=dtype)
        wide = x.astype(np.float64)
        cases = [
            (ROW_SUM, {"X": x}, wide.sum(axis=1)),
            (ROW_MAX, {"X": x}, wide.max(axis=1)),
            (ROW_MIN, {"X": x}, wide.min(axis=1)),
            (MATVEC, {"A": x, "V": v}, wide @ v.astype(np.float64)),
            (SCALED, {"A": x, "S": s}, (wide * s.astype(np.float64)[:, None]).sum(axis=1)),
        ]
        tolerance = 2e-2 if dtype == np.float16 else 1e-5
        for source, inputs, want in cases:
            got = run_program(source, inputs, WIDE[width])["O"].astype(np.float64)
            scale = np.abs(wide).sum(axis=1) + 1  # sums: relative to the sum of magnitudes
            assert np.all(np.abs(got - want) <= tolerance * scale), (source, dtype)


MIDDLE = "function (X[A, B, C]) -> (O) {{ O[a, c: A, C] = {agg}(X[a, b, c]); }}"
REDUCE = {"+": np.sum, ">": np.max, "<": np.min, "*": np.prod}


def test_tile_loops_of_contractions_run_on_vectors() -> None:
    """A column tile reads, accumulates and stores `width` columns at a time; in a tile past
    the shape (159 columns in tiles of 64) the lanes past it neither read nor write memory."""
    text = _contraction_body(MIDDLE.format(agg=">"), {"X": np.zeros((5, 7, 159), np.float32)}, 16)
    load = "lanes16(in0, a * 1113 + (base1 + tr1) + b * 159, 159 - (base1 + tr1))"
    acc = "lanes16(acc, tr1)"
    assert f"{acc} = select({acc}, {load}, {load} > {acc})" in text, text
    assert "lanes16(out0, a_ * 159 + (base1 + tw1), 159 - (base1 + tw1)) = vO" in text, text


@pytest.mark.parametrize("columns", [1, 17, 65, 159, 200])
@pytest.mark.parametrize("agg", ["+", ">", "<", "*"])
@pytest.mark.parametrize("width", [8, 16])
def test_tile_loops_on_vectors_match_numpy(columns: int, agg: str, width: int) -> None:
    """Reductions over a middle axis, their kept last axis off the tile grid, through the
    reference interpreter (poisoned outputs; a lane past the shape would read past the
    buffer's end or write an element twice): rows all below 0, all above, and mixed."""
    rng = np.random.default_rng(columns)
    x = rng.uniform(0.5, 1.5, (3, 9, columns)).astype(np.float32)
    if agg != "*":
        x[0] = -x[0]
        x[2] = x[2] - 1
    want = REDUCE[agg](x.astype(np.float64), axis=1)
    got = run_program(MIDDLE.format(agg=agg), {"X": x}, WIDE[width])["O"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


DEPTHWISE = (
    "function (I[N, H, W, C], K[KH, KW, C]) -> (O) {{ O[n, y, x, c: N, H, W, C] = "
    "{agg}(I[n, y + i - 1, x + j - 1, c] * K[i, j, c]); }}"
)


def _depthwise(image: np.ndarray, kernel: np.ndarray, agg: str) -> np.ndarray:
    """Same-padded depthwise 3 x 3, in float64; a max ignores the padding."""
    n, h, w, c = image.shape
    fill = 0.0 if agg == "+" else -np.inf
    padded = np.full((n, h + 2, w + 2, c), fill)
    padded[:, 1:-1, 1:-1] = image
    terms = [
        padded[:, i : i + h, j : j + w]
        * np.where(np.isinf(padded[:, i : i + h, j : j + w]), 1, kernel[i, j])
        for i in range(3)
        for j in range(3)
    ]
    return np.sum(terms, axis=0) if agg == "+" else np.max(terms, axis=0)


def test_tile_loops_under_a_guard_they_share_run_on_vectors() -> None:
    """A same-padded depthwise convolution tiles the channels; the padding's guard tests only
    the pixel, the same for every channel, so the channels go on vectors under it."""
    inputs = {"I": np.zeros((1, 6, 5, 32), np.float32), "K": np.zeros((3, 3, 32), np.float32)}
    text = _contraction_body(DEPTHWISE.format(agg="+"), inputs, 8)
    assert "lanes8(acc, tr3) = lanes8(acc, tr3) + lanes8(in0," in text, text
    assert "if (-y - i <= -1 && y + i <= 6 && -x - j <= -1 && x + j <= 5)" in text, text


def test_ragged_channel_tiles_under_a_padding_run_on_vectors() -> None:
    """33 channels in tiles past them: the tile's guard of the channels (outside the padding's)
    becomes the lanes' count, the padding's guard stays around the vector step. Intel's CPU
    OpenCL ran the scalar loop: a depthwise 5 x 5 over 57 x 57 x 97, 9.6 ms, 1.26 on vectors."""
    inputs = {"I": np.zeros((1, 6, 5, 33), np.float32), "K": np.zeros((3, 3, 33), np.float32)}
    text = _contraction_body(DEPTHWISE.format(agg="+"), inputs, 8)
    count = "33 - tr3"  # one tile of 40 channels: its base is 0
    assert "lanes8(acc, tr3) = lanes8(acc, tr3) + lanes8(in0," in text, text
    assert f"lanes8(in1, tr3 + i * 99 + j * 33, {count})" in text, text
    assert text.count("lanes8(acc, tr3) = ") == 1, text  # no copy for whole tiles: none is
    assert "if (-y - i <= -1 && y + i <= 6 && -x - j <= -1 && x + j <= 5)" in text, text


@pytest.mark.parametrize("channels", [1, 7, 16, 33, 64, 97])
@pytest.mark.parametrize("agg", ["+", ">"])
@pytest.mark.parametrize("width", [8, 16])
def test_loops_under_a_shared_guard_match_numpy(channels: int, agg: str, width: int) -> None:
    rng = np.random.default_rng(channels)
    image = rng.uniform(-2, 2, (2, 5, 7, channels)).astype(np.float32)
    kernel = rng.uniform(0.5, 1.5, (3, 3, channels)).astype(np.float32)
    want = _depthwise(image.astype(np.float64), kernel.astype(np.float64), agg)
    source = DEPTHWISE.format(agg=agg)
    got = run_program(source, {"I": image, "K": kernel}, WIDE[width])["O"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- loops over whole rows (`tile.lower.rows`) ----------------------------------------------

SOFTMAX = (
    "function (X[M, N]) -> (O) { MX[m, 0: M, 1] = >(X[m, n]); E = exp(X - MX); "
    "S[m, 0: M, 1] = +(E[m, n]); O = E / S; }"
)


def test_row_loops_off_the_lane_width_run_on_vectors() -> None:
    """A row-fused softmax walks each row of 37 in one loop: its elementwise steps go on
    vectors, the last one counted. Intel's CPU OpenCL ran the scalar loop: softmax 1000 x 1001,
    3.2 ms; 0.77 on vectors."""
    kernel_list = generate_program(
        tile.Function(SOFTMAX).bind({"X": np.zeros((300, 37), np.float32)}), WIDE[8]
    )
    (kernel,) = kernel_list.kernels
    text = str(kernel.body)
    assert "row-fused" in kernel.comments
    assert "if (x1 + 8 <= 37)" in text, text
    assert "float8 vE = exp(v_T0);" in text, text
    assert "lanes8(out1, x0 * 37 + x1, 37 - x1) = vE;" in text, text


@pytest.mark.parametrize("n", [1, 5, 8, 9, 37, 1001])
@pytest.mark.parametrize("width", [4, 16])
def test_row_loops_on_vectors_match_numpy(n: int, width: int) -> None:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((300, n)) * 4).astype(np.float32)
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    got = run_program(SOFTMAX, {"X": x}, WIDE[width])["O"]
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("n", [1, 9, 33, 97, 1001])
def test_row_loops_and_ragged_channels_on_devices(device_id: str, n: int, devices: dict) -> None:
    rng = np.random.default_rng(n)
    image = rng.uniform(-2, 2, (2, 5, 7, n)).astype(np.float32)
    cases = [
        Case("softmax", SOFTMAX, {"X": (rng.standard_normal((300, n)) * 4).astype(np.float32)}),
        Case("depthwise", DEPTHWISE.format(agg="+"), {"I": image, "K": _rand(rng, 3, 3, n)}),
        Case("depthwise_max", DEPTHWISE.format(agg=">"), {"I": image, "K": _rand(rng, 3, 3, n)}),
    ]
    for case in cases:
        outcome = check(case, devices[device_id])
        assert outcome.kind == "ok", f"{case.family} at {n}: {outcome}"
