"""The reference evaluator `tile.reference` (issue 9): every construct against numpy computed
by hand from the spec, random contractions against the tuple-at-a-time reference of
tests/lower/strategies.py, and every shared conformance case against its expected
outputs. No device is involved."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tile
from tests.conftest import SHARED
from tests.lower.strategies import contractions, reference_contraction
from tests.lower.strategies import valid_tuples as tuples_one_by_one
from tile.reference import evaluate, evaluate_function, valid_tuples, work

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

F32 = np.float32
I32 = np.int32


def run(source: str, **inputs: object) -> dict[str, np.ndarray]:
    return evaluate_function(source, inputs)


def one(source: str, **inputs: object) -> np.ndarray:
    (result,) = run(source, **inputs).values()
    return result


def elementwise(expression: str, **inputs: np.ndarray) -> np.ndarray:
    names = ", ".join(inputs)
    return one(f"function ({names}) -> (O) {{ O = {expression}; }}", **inputs)


# ---- elementwise: types and arithmetic ----------------------------------------------------------


def test_float_results_are_float64_and_never_rounded() -> None:
    a = np.array([1.0, 3.0, 0.25], F32)
    result = elementwise("(A + 100000000.0) - 100000000.0", A=a)
    assert result.dtype == np.float64
    # float32 would give [0, 0, 0]; the reference keeps every bit of float64.
    np.testing.assert_array_equal(result, a.astype(np.float64))
    third = elementwise("A / 3.0", A=np.array([1.0], np.float16))
    assert third.dtype == np.float64 and third[0] == 1.0 / float(F32(3.0))


def test_integer_arithmetic_wraps_in_its_type() -> None:
    a = np.array([100, -128, 127], np.int8)
    assert elementwise("A + A", A=a).tolist() == [-56, 0, -2]
    assert elementwise("A + A", A=a).dtype == np.int8
    assert elementwise("-A", A=a).tolist() == [-100, -128, -127]
    u = np.array([0, 1, 4294967295], np.uint32)
    assert elementwise("U - 1", U=u).tolist() == [4294967295, 0, 4294967294]  # u32 wins
    assert elementwise("U * U", U=u).tolist() == [0, 1, 1]
    assert elementwise("A * 2", A=np.array([2147483647], I32)).tolist() == [-2]


def test_integer_division_truncates_and_never_traps() -> None:
    a = np.array([7, -7, 7, -7, 5, -2147483648, 0], I32)
    b = np.array([2, 2, -2, -2, 0, -1, 0], I32)
    assert elementwise("A / B", A=a, B=b).tolist() == [3, -3, -3, 3, 0, -2147483648, 0]
    u = np.array([7, 200, 9], np.uint8)
    assert elementwise("U / V", U=u, V=np.array([2, 0, 3], np.uint8)).tolist() == [3, 0, 3]


def test_shifts_take_the_count_modulo_the_width() -> None:
    a = np.array([-7, 1, 1, 1], I32)
    counts = np.array([1, 33, -1, 32], I32)
    assert elementwise("A >> C", A=a, C=counts).tolist() == [-4, 0, 0, 1]
    assert elementwise("A << C", A=a, C=counts).tolist() == [-14, 2, -2147483648, 1]
    u = np.array([4294967289], np.uint32)
    assert elementwise("U >> 1", U=u).tolist() == [2147483644]  # logical for unsigned


def test_bitwise_operators() -> None:
    a, b = np.array([12, -1], np.int16), np.array([10, 3], np.int16)
    assert elementwise("A & B", A=a, B=b).tolist() == [8, 3]
    assert elementwise("A | B", A=a, B=b).tolist() == [14, -1]
    assert elementwise("A ^ B", A=a, B=b).tolist() == [6, -4]
    assert elementwise("~A", A=a).tolist() == [-13, 0]


def test_comparisons_happen_in_the_promoted_type() -> None:
    u = np.array([1, 5], np.uint32)
    i = np.array([-1, 3], I32)
    assert elementwise("U < I", U=u, I=i).tolist() == [True, False]  # -1 is u32 4294967295
    f = np.array([np.nan, 1.0], F32)
    assert elementwise("F != F", F=f).tolist() == [True, False]
    assert elementwise("F == 1", F=f).tolist() == [False, True]


def test_conditional_tests_against_zero() -> None:
    c = np.array([2, 0, -1, 3], I32)
    assert elementwise("C ? 1 : 0", C=c).tolist() == [1, 0, 1, 1]
    f = np.array([0.5, 2.0, -0.5, 0.0, np.nan], F32)
    assert elementwise("F ? 1.0 : 0.0", F=f).tolist() == [1, 1, 1, 0, 1]
    mixed = elementwise("C ? C : 0.5", C=c)
    assert mixed.dtype == np.float64 and mixed.tolist() == [2, 0.5, -1, 3]


def test_conversions() -> None:
    f = np.array([2.7, -2.7, 0.5, -0.5, 300, -1], F32)
    assert elementwise("as_int(F, 32)", F=f).tolist() == [2, -2, 0, 0, 300, -1]
    assert elementwise("as_int(F, 8)", F=f)[:4].tolist() == [2, -2, 0, 0]  # rest: impl.-defined
    i = np.array([300, -1, 2, -129], I32)
    assert elementwise("as_uint(I, 8)", I=i).tolist() == [44, 255, 2, 127]
    assert elementwise("as_int(I, 8)", I=i).tolist() == [44, -1, 2, 127]
    assert elementwise("as_uint(I, 16)", I=i).tolist() == [300, 65535, 2, 65407]
    assert elementwise("as_bool(F)", F=np.array([0.0, -0.5, np.nan], F32)).tolist() == [
        False,
        True,
        True,
    ]
    assert elementwise("as_float(I, 16)", I=i).dtype == np.float64
    as_int = elementwise("as_int(F, 8)", F=np.array([np.nan, np.inf, 1e30], F32))
    assert as_int.dtype == np.int8  # implementation-defined values, but no error


MATH = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "recip": lambda x: 1 / x,
    "floor": np.floor,
    "ceil": np.ceil,
    "abs": np.abs,
    "relu": lambda x: np.where(x < 0, 0.0, x),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "neg": np.negative,
    "ident": lambda x: x,
}
SAMPLE = np.array([0.5, -1.5, 2.5, -2.5, 0.0, 0.25, 1.0, -0.9], F32)


@pytest.mark.parametrize("fn", sorted(MATH))
def test_math_builtins(fn: str) -> None:
    with np.errstate(all="ignore"):
        want = MATH[fn](SAMPLE.astype(np.float64))
    np.testing.assert_allclose(elementwise(f"{fn}(A)", A=SAMPLE), want, rtol=1e-15)


def test_round_pow_min_max() -> None:
    a = np.array([0.5, -1.5, 2.5, -2.5, 0.0, 0.49999999999999994, np.nan], np.float64)
    assert np.array_equal(
        elementwise("round(A)", A=a), [1, -2, 3, -3, 0, 0, np.nan], equal_nan=True
    )
    np.testing.assert_allclose(elementwise("pow(A, 2)", A=SAMPLE), SAMPLE.astype(float) ** 2)
    assert elementwise("max(A, 0.5)", A=SAMPLE[:4]).tolist() == [0.5, 0.5, 2.5, 0.5]
    assert elementwise("min(A, 0)", A=np.array([3, -4], np.int8)).tolist() == [0, -4]
    assert elementwise("abs(A)", A=np.array([3, -4, -128], np.int8)).tolist() == [3, 4, -128]


def test_every_builtin_an_op_can_hold_is_evaluated() -> None:
    """Each elementwise name of tile.lang.builtins reaches the evaluator through some source."""
    a, b = np.array([1, 2], I32), np.array([1.5, 2.5], F32)
    sources = [
        "A + B", "A - B", "A * B", "A / B", "-A", "A == B", "A != B", "A < B", "A > B",
        "A <= B", "A >= B", "A & A", "A | A", "A ^ A", "A << A", "A >> A", "~A", "A ? A : B",
        "pow(B, B)", "round(B)", "as_float(A, 64)", "as_uint(A, 16)", "as_bool(A)",
        "add(A, A)", "bit_xor(A, A)", "cmp_ge(A, B)",
    ]  # fmt: skip
    for source in sources:
        assert elementwise(source, A=a, B=b).shape == (2,), source


def test_broadcasting_and_constants() -> None:
    a = np.arange(6, dtype=F32).reshape(2, 3)
    b = np.array([10, 20, 30], I32)
    np.testing.assert_array_equal(elementwise("A + B", A=a, B=b), a + b)
    out = run("function (A, K) -> (O, C) { O = A * K; C = K + 1; }", A=a, K=2)
    np.testing.assert_array_equal(out["O"], a * 2)
    assert out["C"].shape == () and out["C"] == 3 and out["C"].dtype == np.int32
    assert one("function () -> (O) { O = 2147483647 + 1; }").tolist() == -2147483648


def test_outputs_that_are_inputs_or_constants() -> None:
    a = np.array([1, 2], np.int16)
    assert run("function (I) -> (I) { }", I=a)["I"].tolist() == [1, 2]
    assert run("function (A[N]) -> (O) { O = N * 3; }", A=a)["O"].tolist() == 6
    out = run("function (K) -> (K) { }", K=np.array(7, np.uint8))
    assert out["K"].dtype == np.uint8 and out["K"] == 7


# ---- contractions --------------------------------------------------------------------------------


def contraction(header: str, body: str, **inputs: np.ndarray) -> np.ndarray:
    return one(f"function ({header}) -> (O) {{ {body} }}", **inputs)


MATRIX = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], F32)


@pytest.mark.parametrize(
    ("agg", "want"),
    [("+", MATRIX.sum(1)), ("*", MATRIX.prod(1)), (">", MATRIX.max(1)), ("<", MATRIX.min(1))],
)
def test_aggregations(agg: str, want: np.ndarray) -> None:
    np.testing.assert_array_equal(
        contraction("I[M, N]", f"O[m: M] = {agg}(I[m, n]);", I=MATRIX), want
    )


def test_assignment_transposes_and_pads() -> None:
    np.testing.assert_array_equal(
        contraction("I[M, N]", "O[j, i: N, M] = =(I[i, j]);", I=MATRIX), MATRIX.T
    )
    a = np.array([1, 2, 3], I32)
    assert contraction("A[N]", "O[i: N + 2] = =(A[i - 1]);", A=a).tolist() == [0, 1, 2, 3, 0]
    assert contraction("A[N]", "O[N - 1 - i: N] = =(A[i]);", A=a).tolist() == [3, 2, 1]


def test_matmul_and_combinations() -> None:
    a, b = np.arange(6, dtype=F32).reshape(2, 3), np.arange(12, dtype=F32).reshape(3, 4)
    got = contraction("A[M, K], B[K, N]", "O[i, j: M, N] = +(A[i, k] * B[k, j]);", A=a, B=b)
    np.testing.assert_array_equal(got, a.astype(float) @ b)
    x, y = np.array([1, 2], np.int8), np.array([10, 20, 30], np.int16)
    outer = contraction("X[N], Y[M]", "O[i, j: N, M] = +(X[i] + Y[j]);", X=x, Y=y)
    assert outer.dtype == np.int16 and outer.tolist() == [[11, 21, 31], [12, 22, 32]]


def test_equality_combinations_count_non_matching_tuples() -> None:
    a, b = np.array([1, 3, 2, 3], I32), np.array([3, 1, 3], I32)
    v = np.array([100, 200, 300], I32)
    got = contraction("A[N], B, V", "O[i: N] = +(A[i] == B[j] ? V[j]);", A=a, B=b, V=v)
    assert got.tolist() == [200, 400, 0, 400]
    negative = -v
    assert contraction(
        "A[N], B, V", "O[i: N] = >(A[i] == B[j] ? V[j]);", A=a, B=b, V=negative
    ).tolist() == [
        0,
        0,
        0,
        0,
    ]  # every row also has non-matching j contributing 0
    matches = contraction("A[N], B[M]", "O[i, j: N, M] = =(A[i] == B[j]);", A=a, B=b)
    assert matches.dtype == np.bool_ and matches.tolist()[0] == [False, True, False]
    mixed = contraction(
        "A[N], B, W", "O[i: N] = +(A[i] == B[j] ? W[j]);", A=a, B=b, W=v.astype(F32)
    )
    assert mixed.dtype == np.float64  # promote(i32, i32, f32) = f32, held in float64


def test_boolean_aggregation_is_any_and_all() -> None:
    m = np.array([[True, False], [False, False], [True, True]])
    assert contraction("M[N, K]", "O[i: N] = >(M[i, j]);", M=m).tolist() == [True, False, True]
    assert contraction("M[N, K]", "O[i: N] = <(M[i, j]);", M=m).tolist() == [False, False, True]


def test_integer_aggregation_wraps() -> None:
    a, b = np.array([100, 100], np.int8), np.array([2, 1], np.int8)
    assert contraction("A, B", "O[] = +(A[i] * B[i]);", A=a, B=b).tolist() == 44


def test_constraints_and_unwritten_elements() -> None:
    a = np.array([1, 2, 3, 4, 5], I32)
    assert contraction("A[N]", "O[i: N] = +(A[i]), i - 2 < 2;", A=a).tolist() == [0, 0, 3, 4, 0]
    assert contraction("A[N]", "O[i: N] = +(A[i]), 1 - i < 2;", A=a).tolist() == [1, 2, 0, 0, 0]
    assert contraction("A[N]", "O[i: N] = +(A[k]), i - k < N;", A=a).tolist() == [1, 3, 6, 10, 15]
    b = np.array([-5, -2, -7], I32)
    for agg in "+*><=":
        got = contraction("B[N]", f"O[i: N + 1] = {agg}(B[i]);", B=b)
        assert got.tolist() == [-5, -2, -7, 0], agg  # identities never show
        if agg != "=":  # j is not in the output: E-ASSIGN
            mixed = contraction("B[N]", f"O[i: N] = {agg}(B[j]), i - j - 1 < N;", B=b)
            assert mixed[0] == 0, agg  # element 0 has no tuple


def test_fractional_polynomials_need_integer_values() -> None:
    i = np.array([1.0, 2.0, 3.0], F32)
    got = contraction("I[N]", "O[i: 2 * N] = +(I[i / 2]);", I=i)
    assert got.tolist() == [1, 0, 2, 0, 3, 0]
    five = np.array([1, 2, 3, 4, 5], I32)
    assert contraction("A", "O[i / 2: 3] = +(A[i]);", A=five).tolist() == [1, 3, 5]
    assert contraction("A[N]", "O[i: N] = +(A[i]), i / 2 < 2;", A=five).tolist() == [1, 0, 3, 0, 0]
    assert contraction("A[N]", "O[i: N] = +(A[i]), (i + 1) / 2 < 2;", A=five).tolist() == [
        0,
        2,
        0,
        0,
        0,
    ]
    window = contraction("A", "O[i: 3] = >(A[2 * i + j]), j < 2;", A=five)
    assert window.tolist() == [2, 4, 5]


def test_default_supplies_unwritten_elements_only() -> None:
    i = np.array([1, 2, 3, 4], F32)
    d = np.array([10, 20, 30, 40, 50, 60], F32)
    for agg in "+*><=":
        got = contraction("I, D[M]", f"O[i: M] = {agg}(I[i]) default D;", I=i, D=d)
        assert got.tolist() == [1, 2, 3, 4, 50, 60], agg
    strided = contraction("I, D[M]", "O[2 * i: M] = +(I[i]) default D;", I=i[:3], D=d)
    assert strided.tolist() == [1, 20, 2, 40, 3, 60]
    converted = contraction(
        "J, D[M]", "O[i: M] = +(J[i]) default D;", J=np.array([1, 2], I32), D=d[:3]
    )
    assert converted.dtype == np.int32 and converted.tolist() == [1, 2, 30]


def test_constant_operands() -> None:
    a = np.array([1.0, 2.0, 3.0], F32)
    assert contraction("A[N]", "C = 2.5; O[i: N] = +(A[i] * C[]);", A=a).tolist() == [2.5, 5, 7.5]
    assert contraction("A[N]", "O[i: N] = +(A[i] * N[]);", A=a).tolist() == [3, 6, 9]
    out = run("function (A[N], K) -> (O) { O[i: K] = +(A[i]); }", A=a, K=5)["O"]
    assert out.tolist() == [1, 2, 3, 0, 0]


def test_chunks_do_not_change_the_tuples() -> None:
    a = np.arange(35, dtype=F32).reshape(5, 7)
    bound = tile.Function(
        "function (A[M, N]) -> (O) { O[i, j: M, 3] = +(A[i, 2 * j + k - 1]), k < 3; }"
    ).bind(A=a)
    (op,) = bound.ops
    whole = [np.concatenate(parts) for parts in zip(*_flat(valid_tuples(bound, op)), strict=True)]
    small = [
        np.concatenate(parts) for parts in zip(*_flat(valid_tuples(bound, op, 7)), strict=True)
    ]
    for first, second in zip(whole, small, strict=True):
        np.testing.assert_array_equal(first, second)
    one_by_one = sorted((out, *ins) for out, ins in tuples_one_by_one(bound, op))
    assert sorted(zip(*(w.tolist() for w in whole), strict=True)) == one_by_one


def _flat(chunks: Iterator[tuple[np.ndarray, tuple[np.ndarray, ...]]]) -> Iterator[tuple]:
    for out, operands in chunks:
        yield (out, *operands)


def test_large_boxes_are_enumerated_in_chunks() -> None:
    """A 10^6-tuple box (100 x 100 x 100 matmul) without materialising it."""
    a = np.random.default_rng(0).standard_normal((100, 100)).astype(F32)
    got = contraction("A[N, N]", "O[i, j: N, N] = +(A[i, k] * A[k, j]);", A=a)
    np.testing.assert_allclose(got, a.astype(np.float64) @ a, rtol=1e-12, atol=1e-12)


RELAXED = [HealthCheck.too_slow, HealthCheck.filter_too_much]


@settings(max_examples=150, deadline=None, suppress_health_check=RELAXED)
@given(contractions(), st.data())
def test_random_contractions_match_the_tuple_by_tuple_reference(
    case: object, data: st.DataObject
) -> None:
    inputs = {
        name: np.array(
            data.draw(
                st.lists(st.integers(-3, 3), min_size=math.prod(shape), max_size=math.prod(shape))
            ),
            I32,
        ).reshape(shape)
        for name, shape in case.shapes.items()  # type: ignore[attr-defined]
    }
    try:
        bound = tile.Function(case.source).bind(inputs)  # type: ignore[attr-defined]
    except tile.TileError:
        assume(False)
        return
    (op,) = bound.ops
    expected, counts = reference_contraction(bound, op, inputs)
    got = evaluate(bound, inputs)["O"]
    compared = counts <= 1 if case.agg == "=" else np.ones(got.shape, bool)  # type: ignore[attr-defined]
    if got.dtype == np.bool_:
        want = expected.astype(bool)
    else:
        want = np.array([(int(v) + 2**31) % 2**32 - 2**31 for v in expected.flat]).reshape(
            got.shape
        )
    np.testing.assert_array_equal(got[compared], want[compared])


# ---- special operations -------------------------------------------------------------------------


def test_reshape_index_shape() -> None:
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    np.testing.assert_array_equal(elementwise("reshape(A, 3, 2)", A=a), a.reshape(3, 2))
    assert elementwise("index(A, 0) * 10 + index(A, 1)", A=a).tolist() == [[0, 1, 2], [10, 11, 12]]
    assert elementwise("shape(A)", A=np.zeros((2, 3, 4), np.int8)).tolist() == [2, 3, 4]
    assert one("function (K) -> (O) { O = reshape(K, 1); }", K=np.array(5, np.int8)).tolist() == [5]


def test_gather_and_scatter_clamp() -> None:
    v = np.arange(8, dtype=F32).reshape(4, 2)
    index = np.array([2, 0, -5, 9], I32)
    got = one("function (V, I) -> (O) { O = gather(V, I); }", V=v, I=index)
    np.testing.assert_array_equal(got, v[[2, 0, 0, 3]])
    e = np.array([[1, 2], [3, 4], [5, 6]], F32)
    scattered = one(
        "function (E, I, V) -> (O) { O = scatter(E, I, V); }", E=e, I=np.array([2, 0, 2], I32), V=v
    )
    assert scattered.tolist() == [[3, 4], [0, 0], [6, 8], [0, 0]]
    clamped = one(
        "function (E, I, V) -> (O) { O = scatter(E, I, V); }", E=e, I=np.array([-1, 7, 0], I32), V=v
    )
    assert clamped.tolist() == [[6, 8], [0, 0], [0, 0], [3, 4]]


def test_simple_reduce_and_softmax() -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], F32)
    assert elementwise("simple_reduce(X, 1, 3)", X=x).tolist() == [[5, 7, 9]]
    assert elementwise("simple_reduce(X, 3)", X=x).tolist() == [5, 7, 9]
    rows = np.array([[1, 2, 3], [0, 0, 0]], F32)
    got = one("function (X[R, C]) -> (Y) { Y = builtin_softmax(X, R, C); }", X=rows)
    wide = rows.astype(np.float64)
    want = np.exp(wide - wide.max(1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-14)


def _prng_by_the_spec(state: np.ndarray, count: int) -> tuple[list[float], np.ndarray]:
    """Spec 9.6, one lane and one position at a time in Python integers."""
    state = state.astype(np.int64).copy()
    values = [0.0] * count
    mask = 0xFFFFFFFF
    for lane in range(state.shape[1]):
        a, b, d = (int(state[row, lane]) for row in range(3))
        for position in range(lane, count, state.shape[1]):
            a = (((a & 0xFFFFFFFE) << 12) & mask) ^ ((((a << 13) & mask) ^ a) >> 19)
            b = (((b & 0xFFFFFFF8) << 4) & mask) ^ ((((b << 2) & mask) ^ b) >> 25)
            d = (((d & 0xFFFFFFF0) << 17) & mask) ^ ((((d << 3) & mask) ^ d) >> 11)
            values[position] = float(F32(a ^ b ^ d)) / 4294967296.0
        state[:, lane] = (a, b, d)
    return values, state


def test_prng_follows_the_lane_algorithm() -> None:
    seed = np.random.default_rng(1).integers(16, 2**32, (3, 2048), dtype=np.uint32)
    source = (
        "function (S) -> (V, N) { X = prng_step(S, 3, 1500); V = prng_value(X); "
        "N = prng_state(X); }"
    )
    out = run(source, S=seed)
    values, state = _prng_by_the_spec(seed, 4500)  # two and a fraction rounds of lanes
    assert out["V"].shape == (3, 1500) and out["V"].reshape(-1).tolist() == values
    assert out["N"].dtype == np.uint32 and np.array_equal(out["N"], state)
    unused = run("function (S) -> (N) { X = prng_step(S, 4); N = prng_state(X); }", S=seed)
    np.testing.assert_array_equal(unused["N"], seed)  # no value drawn: the state passes


# ---- the shared conformance cases ---------------------------------------------------------------

CASES = sorted((SHARED / "spec/cases").glob("*.json")) + sorted(
    (SHARED / "conformance/cases").glob("*.json")
)
# Tolerances fitting each float type, for results computed without rounding in float64;
# a case's own tolerance is used when it is looser.
TOLERANCE = {"float16": (1e-2, 1e-3), "float32": (1e-5, 1e-6), "float64": (1e-9, 1e-12)}


def matches(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    if want.dtype.kind != "f":
        return got == want
    if want.dtype.name in TOLERANCE:
        rtol, atol = (
            max(a, b) for a, b in zip((rtol, atol), TOLERANCE[want.dtype.name], strict=True)
        )
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        same = (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
        return same | (np.abs(g - w) <= atol + rtol * np.where(np.isinf(w), 0.0, np.abs(w)))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_conformance_case(path: Path) -> None:
    case = json.loads(path.read_text())
    with np.load(path.parent / case.get("data_file", case["name"] + ".npz")) as arrays:
        inputs = {name: arrays["input__" + name] for name in case["inputs"]}
        expected = {name: arrays["expected__" + name] for name in case["outputs"]}
    got = evaluate(tile.Function(case["source"]).bind(inputs), inputs)
    tolerance = case.get("tolerance", {})
    rtol, atol = float(tolerance.get("rtol", 0.0)), float(tolerance.get("atol", 0.0))
    for name, want in expected.items():
        assert got[name].shape == want.shape, name
        float_kinds = got[name].dtype.kind == want.dtype.kind == "f"
        assert float_kinds or got[name].dtype == want.dtype, name
        assert np.all(matches(got[name], want, rtol, atol)), (name, got[name], want)


def test_all_conformance_cases_are_found() -> None:
    assert len(CASES) >= 270


def test_work_counts_tuples_and_elements() -> None:
    bound = tile.Function(
        "function (A[M, K], B[K, N]) -> (C, D) { C[m, n: M, N] = +(A[m, k] * B[k, n]); D = C; }"
    ).bind(A=np.zeros((6, 5), F32), B=np.zeros((5, 3), F32))
    assert work(bound) == 6 * 5 * 3 + 18 + 18
