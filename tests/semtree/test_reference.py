"""The reference interpreter (tests/reference.py) against numpy and against the semantics of
design 4.4 rules 8 to 10 and spec 5.4 / 7.4."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semtree import builder as sb
from semtree.nodes import Builtin, Function, Limit, SemtreeTypeError
from semtree.types import DType, Region, Type, TypeBase
from tests import reference
from tests.reference import InterpreterError, run
from tests.semtree.kernels import elementwise_vec4, group_sum, matmul_tile

F16, F32, F64 = DType.FLOAT16, DType.FLOAT32, DType.FLOAT64
I8, I32, I64, U8, U32 = DType.INT8, DType.INT32, DType.INT64, DType.UINT8, DType.UINT32
BOOL = DType.BOOLEAN
INTEGERS = [DType.INT8, DType.INT16, I32, I64, U8, DType.UINT16, U32, DType.UINT64]
v, i = sb.var, sb.global_id(0)


def unary_kernel(out: DType, source: DType, expr: object, vec: int = 1) -> Function:
    """out[i] = expr, where expr may use `x` = in[i]."""
    return sb.function(
        "k",
        [("out", Type.ptr(out, vec)), ("in", Type.ptr(source, vec, const=True))],
        [
            sb.declare(Type.value(source, vec), "x", v("in")[i]),
            sb.assign(v("out")[i], expr),  # type: ignore[arg-type]
        ],
    )


def binary_kernel(dtype: DType, expr: object, out: DType | None = None) -> Function:
    """out[i] = expr, where expr may use `a` = a[i] and `b` = b[i]."""
    return sb.function(
        "k",
        [
            ("out", Type.ptr(out or dtype)),
            ("a_in", Type.ptr(dtype, const=True)),
            ("b_in", Type.ptr(dtype, const=True)),
        ],
        [
            sb.declare(dtype, "a", v("a_in")[i]),
            sb.declare(dtype, "b", v("b_in")[i]),
            sb.assign(v("out")[i], expr),  # type: ignore[arg-type]
        ],
    )


def apply_unary(out: DType, source: DType, values: object, expr: object, **kwargs) -> np.ndarray:
    data = np.asarray(values, dtype=source.numpy)
    result = np.zeros(data.shape, out.numpy)
    run(unary_kernel(out, source, expr), [result, data], (data.size, 1, 1), **kwargs)
    return result


def apply_binary(dtype: DType, left: object, right: object, expr: object, out=None) -> np.ndarray:
    a, b = np.asarray(left, dtype.numpy), np.asarray(right, dtype.numpy)
    result = np.zeros(a.shape, (out or dtype).numpy)
    run(binary_kernel(dtype, expr, out), [result, a, b], (a.size, 1, 1))
    return result


# ---- the sample kernels against numpy ---------------------------------------------------------


def test_vectorised_elementwise_kernel() -> None:
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    out = np.full(64, np.nan, np.float32)
    run(elementwise_vec4(60), [out, a, b], (16, 1, 1))
    np.testing.assert_allclose(out[:60], np.maximum(a * 2 + b, 0)[:60], rtol=1e-6)
    assert np.isnan(out[60:]).all()  # work-item 15 is outside the bound


@pytest.mark.parametrize(("m", "n", "k", "rows", "vectors"), [(4, 16, 3, 2, 2), (6, 8, 5, 3, 1)])
def test_matmul_register_tile(m: int, n: int, k: int, rows: int, vectors: int) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    function = matmul_tile(m, n, k, rows, vectors)
    run(function, [c, a, b], (n // (4 * vectors), m // rows, 1), (1, 1, 1))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("count", "group"), [(100, 8), (16, 16), (5, 4)])
def test_local_memory_reduction(count: int, group: int) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(count).astype(np.float32)
    groups = -(-count // group)
    out = np.zeros(groups, np.float32)
    run(group_sum(count, group), [out, x], (groups * group, 1, 1), (group, 1, 1))
    padded = np.pad(x, (0, groups * group - count)).reshape(groups, group)
    np.testing.assert_allclose(out, padded.sum(axis=1), rtol=1e-5, atol=1e-6)


def test_work_item_ids_in_three_dimensions() -> None:
    out = np.zeros((3, 4, 6, 3, 3), np.int32)
    stores = []
    for dim in range(3):
        linear = sb.global_id(0) + 6 * (sb.global_id(1) + 4 * sb.global_id(2))
        for slot, value in enumerate((sb.global_id(dim), sb.group_id(dim), sb.local_id(dim))):
            stores.append(sb.assign(v("out")[linear * 9 + dim * 3 + slot], value))
    function = sb.function("ids", [("out", Type.ptr(I32))], stores)
    run(function, [out.reshape(-1)], (6, 4, 3), (3, 2, 1))
    z, y, x = np.meshgrid(range(3), range(4), range(6), indexing="ij")
    for dim, coordinate, local in ((0, x, 3), (1, y, 2), (2, z, 1)):
        np.testing.assert_array_equal(out[..., dim, 0], coordinate)
        np.testing.assert_array_equal(out[..., dim, 1], coordinate // local)
        np.testing.assert_array_equal(out[..., dim, 2], coordinate % local)


# ---- rule 9: integer arithmetic -----------------------------------------------------------------


def test_integer_arithmetic_wraps() -> None:
    a, b = v("a"), v("b")
    np.testing.assert_array_equal(apply_binary(I32, [2**31 - 1], [1], a + b), [-(2**31)])
    np.testing.assert_array_equal(apply_binary(I32, [2147483647], [2], a * b), [-2])
    np.testing.assert_array_equal(apply_binary(U32, [0], [1], a - b), [4294967295])
    np.testing.assert_array_equal(apply_unary(U8, U8, [3], -v("x")), [253])
    np.testing.assert_array_equal(apply_unary(I8, I8, [-128], -v("x")), [-128])
    np.testing.assert_array_equal(apply_unary(I8, I8, [100], v("x") + 300), [-112])  # weak 300


def test_integer_division_truncates_and_is_guarded() -> None:
    a, b = v("a"), v("b")
    left = [7, -7, 7, -7, 5, -5, 0, -(2**31), -(2**31), 2**31 - 1]
    right = [2, 2, -2, -2, 0, 0, 0, -1, 1, -1]
    np.testing.assert_array_equal(
        apply_binary(I32, left, right, a / b),
        [3, -3, -3, 3, 0, 0, 0, -(2**31), -(2**31), -(2**31 - 1)],
    )
    np.testing.assert_array_equal(
        apply_binary(I32, left, right, a % b), [1, -1, 1, -1, 0, 0, 0, 0, 0, 0]
    )
    np.testing.assert_array_equal(apply_binary(U8, [200, 7], [0, 2], a / b), [0, 3])
    np.testing.assert_array_equal(apply_binary(I64, [-(2**63)], [-1], a / b), [-(2**63)])


def test_shifts_take_the_count_modulo_the_width() -> None:
    a, b = v("a"), v("b")
    np.testing.assert_array_equal(apply_binary(I32, [-7], [1], a >> b), [-4])
    np.testing.assert_array_equal(apply_binary(U32, [4294967289], [1], a >> b), [2147483644])
    np.testing.assert_array_equal(
        apply_binary(I32, [1, 1, 1, 5], [33, 31, -1, 32], a << b), [2, -(2**31), -(2**31), 5]
    )
    np.testing.assert_array_equal(apply_binary(I8, [1, -128], [9, 7], a << b), [2, 0])
    np.testing.assert_array_equal(apply_binary(U8, [0x80], [15], a >> b), [1])


def _wrap(value: int, dtype: DType) -> int:
    bits = dtype.bits
    value %= 2**bits
    return value - 2**bits if dtype.is_signed and value >= 2 ** (bits - 1) else value


def _model(op: str, a: int, b: int, dtype: DType) -> int:
    bits = dtype.bits
    match op:
        case "+":
            return _wrap(a + b, dtype)
        case "-":
            return _wrap(a - b, dtype)
        case "*":
            return _wrap(a * b, dtype)
        case "/" | "%":
            if b == 0:
                return 0
            quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            return _wrap(quotient if op == "/" else a - b * quotient, dtype)
        case "<<":
            return _wrap(a << (b % bits), dtype)
        case ">>":
            return a >> (b % bits)
        case "&":
            return a & b
        case "|":
            return _wrap(a | b, dtype)
        case "^":
            return _wrap(a ^ b, dtype)
    raise AssertionError(op)


OPERATIONS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "%": lambda a, b: a % b,
    "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@pytest.mark.parametrize("op", list(OPERATIONS))
@settings(max_examples=15, deadline=None, derandomize=True)
@given(data=st.data())
def test_integer_operations_match_the_model(dtype: DType, op: str, data: st.DataObject) -> None:
    number = st.integers(int(dtype.min), int(dtype.max))
    special = st.sampled_from([0, 1, -1, int(dtype.min), int(dtype.max)]).map(
        lambda value: _wrap(value, dtype)
    )
    pairs = data.draw(
        st.lists(st.tuples(number | special, number | special), min_size=1, max_size=8)
    )
    left, right = zip(*pairs, strict=True)
    got = apply_binary(dtype, left, right, OPERATIONS[op](v("a"), v("b")))
    expected = [_model(op, a, b, dtype) for a, b in pairs]
    assert got.tolist() == expected


def test_comparisons_convert_to_the_common_type() -> None:
    # u32 compared with a negative i32 compares as unsigned (spec 7.4)
    function = sb.function(
        "k",
        [
            ("out", Type.ptr(BOOL)),
            ("a", Type.ptr(U32, const=True)),
            ("b", Type.ptr(I32, const=True)),
        ],
        sb.assign(v("out")[i], v("a")[i].lt(v("b")[i])),
    )
    out = np.zeros(2, bool)
    run(function, [out, np.array([5, 5], np.uint32), np.array([-1, 3], np.int32)], (2, 1, 1))
    assert out.tolist() == [True, False]


# ---- rule 10: INDEX -----------------------------------------------------------------------------


def test_index_values_must_stay_within_int32() -> None:
    function = sb.function(
        "k",
        [("out", Type.ptr(I64))],
        [sb.declare(Type.index(), "big", 2**30), sb.assign(v("out")[0], v("big") * 4)],
    )
    with pytest.raises(InterpreterError, match="INDEX"):
        run(function, [np.zeros(1, np.int64)], (1, 1, 1))
    shifted = sb.function(
        "k", [("out", Type.ptr(I32))], sb.assign(v("out")[0], sb.cast(Type.index(), 3) << 33)
    )
    out = np.zeros(1, np.int32)
    run(shifted, [out], (1, 1, 1))  # the count is taken modulo 32 for INDEX
    assert out[0] == 6


# ---- rule 8: conversions ------------------------------------------------------------------------

FLOATS = [2.7, -2.7, 0.5, -0.5, 300.0, -1.0]


def test_float_to_int_truncates_toward_zero() -> None:
    x = v("x")
    assert apply_unary(I32, F32, FLOATS, sb.cast(I32, x)).tolist() == [2, -2, 0, 0, 300, -1]


def test_float_to_int_saturates_and_nan_gives_zero() -> None:
    x = v("x")
    values = [300.0, -300.0, float("nan"), float("inf"), -float("inf"), 1e30, 255.9]
    assert apply_unary(I8, F32, values, sb.cast(I8, x)).tolist() == [
        127,
        -128,
        0,
        127,
        -128,
        127,
        127,
    ]
    assert apply_unary(U8, F32, values, sb.cast(U8, x)).tolist() == [255, 0, 0, 255, 0, 255, 255]
    big = [9.3e18, -9.3e18, 1e19]
    assert apply_unary(I64, F64, big, sb.cast(I64, x)).tolist() == [2**63 - 1, -(2**63), 2**63 - 1]
    assert apply_unary(DType.UINT64, F64, [1e19, 2e19], sb.cast(DType.UINT64, x)).tolist() == [
        10**19,
        2**64 - 1,
    ]


def test_integer_narrowing_wraps() -> None:
    x, values = v("x"), [300, -1, 2, -129]
    assert apply_unary(U8, I32, values, sb.cast(U8, x)).tolist() == [44, 255, 2, 127]
    assert apply_unary(I8, I32, values, sb.cast(I8, x)).tolist() == [44, -1, 2, 127]
    assert apply_unary(DType.UINT16, I32, values, sb.cast(DType.UINT16, x)).tolist() == [
        300,
        65535,
        2,
        65407,
    ]


def test_int_to_float_rounds_to_nearest() -> None:
    got = apply_unary(F32, I32, [16777217, 16777219, -3], sb.cast(F32, v("x")))
    assert got.tolist() == [16777216.0, 16777220.0, -3.0]


def test_conversions_to_and_from_bool() -> None:
    values = [0.0, -0.0, 0.5, float("nan"), -3.0]
    assert apply_unary(BOOL, F32, values, sb.cast(BOOL, v("x"))).tolist() == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert apply_unary(F32, BOOL, [True, False], sb.cast(F32, v("x"))).tolist() == [1.0, 0.0]
    assert apply_unary(I32, BOOL, [True, False], v("x") + 1).tolist() == [2, 1]


def test_literals_are_converted_exactly_to_their_context() -> None:
    assert apply_unary(F64, F64, [0.0], v("x") + 0.1).tolist() == [0.1]
    assert apply_unary(F64, F64, [0.0], sb.cast(F64, 0.1)).tolist() == [0.1]
    assert apply_unary(F64, F64, [0.0], 0.1).tolist() == [0.1]  # stored literal: weak
    assert apply_unary(F64, F64, [0.0], sb.cast(F64, sb.cast(F32, 0.1))).tolist() == [
        float(np.float32(0.1))
    ]


def test_float_arithmetic_is_ieee() -> None:
    a, b = v("a"), v("b")
    got = apply_binary(F32, [1.0, -1.0, 0.0], [0.0, 0.0, 0.0], a / b)
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_booleans_in_memory_are_zero_or_one() -> None:
    got = apply_binary(F32, [1.0, 2.0, np.nan], [2.0, 1.0, np.nan], v("a").lt(v("b")), out=BOOL)
    assert got.view(np.uint8).tolist() == [1, 0, 0]
    got = apply_binary(F32, [1.0, 2.0], [2.0, 1.0], sb.not_(v("a").lt(v("b"))), out=BOOL)
    assert got.view(np.uint8).tolist() == [0, 1]


# ---- rule 7: half precision ---------------------------------------------------------------------


def test_half_storage_with_and_without_native_fp16() -> None:
    values = [1.0, 2049.0, 0.1]
    function = unary_kernel(F16, F16, v("x") + 1)
    for native in (True, False):
        data = np.asarray(values, np.float16)
        out = np.zeros(3, np.float16)
        run(function, [out, data], (3, 1, 1), native_fp16=native)
        assert out.tolist() == (data + np.float16(1)).tolist()
    # Without native fp16 the arithmetic is float: 2048 + 1 + 1 is exact before the store.
    function = unary_kernel(F16, F16, v("x") + 1 + 1)
    data = np.asarray([2048.0], np.float16)
    out = np.zeros(1, np.float16)
    run(function, [out, data], (1, 1, 1), native_fp16=False)
    assert out[0] == 2050.0
    run(function, [out, data], (1, 1, 1), native_fp16=True)
    assert out[0] == 2048.0  # each half addition rounds back to 2048
    # An explicit cast to FLOAT16 rounds even without native fp16.
    function = unary_kernel(F16, F16, sb.cast(F16, v("x") + 1) + 1)
    run(function, [out, data], (1, 1, 1), native_fp16=False)
    assert out[0] == 2048.0


# ---- builtins, selections, clamps ---------------------------------------------------------------


def test_round_halves_away_from_zero() -> None:
    values = [0.5, -1.5, 2.5, -2.5, 0.0, 0.49999997, 1.4]
    got = apply_unary(F32, F32, values, sb.call(Builtin.ROUND, v("x")))
    assert got.tolist() == [1.0, -2.0, 3.0, -3.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("fn", "reference"),
    [
        (Builtin.EXP, np.exp),
        (Builtin.LOG, np.log),
        (Builtin.SQRT, np.sqrt),
        (Builtin.TANH, np.tanh),
        (Builtin.SIN, np.sin),
        (Builtin.COS, np.cos),
        (Builtin.TAN, np.tan),
        (Builtin.ASIN, np.arcsin),
        (Builtin.ACOS, np.arccos),
        (Builtin.ATAN, np.arctan),
        (Builtin.SINH, np.sinh),
        (Builtin.COSH, np.cosh),
        (Builtin.FLOOR, np.floor),
        (Builtin.CEIL, np.ceil),
        (Builtin.ABS, np.abs),
        (Builtin.RECIP, np.reciprocal),
    ],
)
def test_float_builtins_match_numpy(fn: Builtin, reference: object) -> None:
    values = np.array([0.5, -1.5, 2.5, -2.5, 0.0, 0.25], np.float32)
    got = apply_unary(F32, F32, values, sb.call(fn, v("x")))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, reference(values), rtol=1e-6)  # type: ignore[operator]


def test_two_and_three_argument_builtins() -> None:
    a, b = v("a"), v("b")
    nan = float("nan")
    got = apply_binary(F32, [nan, 1.0, 3.0], [1.0, nan, 2.0], sb.call(Builtin.MAX, a, b))
    assert got.tolist() == [1.0, 1.0, 3.0]  # C fmax: a NaN operand is ignored
    got = apply_binary(F32, [nan, 1.0, 3.0], [1.0, nan, 2.0], sb.call(Builtin.MIN, a, b))
    assert got.tolist() == [1.0, 1.0, 2.0]
    got = apply_binary(F32, [2.0, -8.0], [0.5, 2.0], sb.call(Builtin.POW, a, b))
    np.testing.assert_allclose(got, [np.sqrt(2.0), 64.0], rtol=1e-6)
    got = apply_binary(I32, [3, -(2**31)], [4, 2], sb.call(Builtin.MAD, a, b, 5))
    assert got.tolist() == [17, 5]  # integer MAD wraps
    assert apply_unary(I32, I32, [-(2**31), -4], sb.call(Builtin.ABS, v("x"))).tolist() == [
        -(2**31),
        4,
    ]
    got = apply_binary(I32, [-3, 7], [5, 2], sb.call(Builtin.MAX, a, b))
    assert got.tolist() == [5, 7]


def test_tile_max_expansion_with_select_keeps_tile_nan_rule() -> None:
    a, b = v("a"), v("b")
    nan = float("nan")
    got = apply_binary(F32, [nan, 1.0], [1.0, nan], sb.select(a.lt(b), b, a))  # max(a, b)
    assert np.isnan(got[0]) and got[1] == 1.0


def test_clamp() -> None:
    x = v("x")
    got = apply_unary(F32, F32, [-2.0, 0.5, 3.0, float("nan")], sb.clamp(x, 0.0, 1.0))
    assert got.tolist() == [0.0, 0.5, 1.0, 0.0]
    assert apply_unary(I32, I32, [-5, 5, 50], sb.clamp(x, 0, 10)).tolist() == [0, 5, 10]


def test_limits() -> None:
    values = [
        sb.limit(which, dtype)
        for dtype in (F32, I8, U32)
        for which in (Limit.MIN, Limit.MAX, Limit.ZERO, Limit.ONE)
    ]
    stores = [sb.assign(v("out")[index], value) for index, value in enumerate(values)]
    out = np.zeros(len(values), np.float64)
    run(sb.function("k", [("out", Type.ptr(F64))], stores), [out], (1, 1, 1))
    big = float(np.finfo(np.float32).max)
    assert out.tolist() == [-big, big, 0, 1, -128, 127, 0, 1, 0, 2**32 - 1, 0, 1]


def test_vector_select_and_scalar_broadcast() -> None:
    x = v("x")
    function = unary_kernel(I32, F32, sb.select(x.gt(0.0), 1, 0), vec=4)
    out = np.zeros(8, np.int32)
    run(function, [out, np.array([1, -1, 0, 2, -3, 4, 5, 0], np.float32)], (2, 1, 1))
    assert out.tolist() == [1, 0, 0, 1, 0, 1, 1, 0]
    function = unary_kernel(F32, F32, sb.call(Builtin.MAD, 2.0, x, 1.0), vec=4)
    result = np.zeros(4, np.float32)
    run(function, [result, np.arange(4, dtype=np.float32)], (1, 1, 1))
    assert result.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_cond_is_lazy_and_select_is_not() -> None:
    n, x = 3, v("in")
    lazy = sb.function(
        "k",
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        sb.assign(v("out")[i], sb.cond(i.lt(n), x[i], -1.0)),
    )
    out = np.zeros(5, np.float32)
    run(lazy, [out, np.arange(3, dtype=np.float32)], (5, 1, 1))
    assert out.tolist() == [0.0, 1.0, 2.0, -1.0, -1.0]
    eager = sb.function(
        "k",
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        sb.assign(v("out")[i], sb.select(i.lt(n), x[i], -1.0)),
    )
    with pytest.raises(InterpreterError, match="accesses elements 3"):
        run(eager, [out, np.arange(3, dtype=np.float32)], (5, 1, 1))


# ---- control flow, memory, pointers -------------------------------------------------------------


def test_while_loops_and_early_return() -> None:
    steps, value = v("steps"), v("value")
    function = sb.function(
        "collatz",
        [("out", Type.ptr(I32)), ("in", Type.ptr(I32, const=True))],
        [
            sb.declare(I32, "value", v("in")[i]),
            sb.declare(I32, "steps", 0),
            sb.if_(value.lt(1), [sb.assign(v("out")[i], -1), sb.ret()]),
            sb.while_(
                value.ne(1),
                [
                    sb.assign(value, sb.select((value & 1).eq(0), value / 2, value * 3 + 1)),
                    sb.assign(steps, steps + 1),
                ],
            ),
            sb.assign(v("out")[i], steps),
        ],
    )
    out = np.zeros(5, np.int32)
    run(function, [out, np.array([1, 6, 7, 0, 27], np.int32)], (5, 1, 1))
    assert out.tolist() == [0, 8, 16, -1, 111]


def test_pointer_variables_and_arrays_of_pointers() -> None:
    rows, row = v("rows"), v("row")
    pointer = Type.ptr(F32, const=True)
    function = sb.function(
        "k",
        [("out", Type.ptr(F32)), ("in", pointer)],
        [
            sb.declare(pointer, "row", v("in") + i * 3),
            sb.declare(Type(TypeBase.POINTER_CONST, F32, array=2, region=Region.GLOBAL), "rows"),
            sb.assign(rows[0], row),
            sb.assign(rows[1], row + 1),
            sb.assign(v("out")[i], rows[0][2] * 10 + rows[1][0] + row[0] / 100),
        ],
    )
    data = np.arange(6, dtype=np.float32)
    out = np.zeros(2, np.float32)
    run(function, [out, data], (2, 1, 1))
    np.testing.assert_allclose(out, [2 * 10 + 1 + 0.0, 5 * 10 + 4 + 0.03])


def test_pointer_casts_reinterpret_the_width() -> None:
    vectors, scalars = Type.ptr(F32, 4, const=True), Type.ptr(F32, const=True)
    function = sb.function(
        "k",
        [("out", Type.ptr(F32)), ("in", vectors)],
        [
            sb.declare(scalars, "flat", sb.cast(scalars, v("in") + 1)),  # + 1 vector
            sb.assign(v("out")[0], v("flat")[1]),
        ],
    )
    out = np.zeros(1, np.float32)
    run(function, [out, np.arange(8, dtype=np.float32)], (1, 1, 1))
    assert out[0] == 5.0
    lanes = sb.function(
        "k", [("out", Type.ptr(F32)), ("in", vectors)], sb.assign(v("out")[0], v("in")[1][0])
    )
    with pytest.raises(SemtreeTypeError, match="cannot be subscripted"):
        run(lanes, [out, np.arange(8, dtype=np.float32)], (1, 1, 1))


def test_private_arrays_and_scalar_parameters() -> None:
    acc = v("acc")
    function = sb.function(
        "k",
        [("out", Type.ptr(I64)), ("n", Type.index()), ("scale", Type.value(F32))],
        [
            sb.declare(Type(TypeBase.VALUE, I64, array=4), "acc", 1),
            sb.for_("j", 4, body=sb.assign(acc[v("j")], acc[v("j")] * v("j") + v("n") + i)),
            sb.for_(
                "j",
                2,
                2,
                sb.assign(v("out")[i * 2 + v("j") / 2], acc[v("j")] * sb.cast(I64, v("scale"))),
            ),
        ],
    )
    out = np.zeros(4, np.int64)
    run(function, [out, 10, 3.5], (2, 1, 1))
    assert out.tolist() == [30, 3 * (2 + 10), 3 * 11, 3 * (2 + 11)]


def test_errors_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "MAX_WHILE_ITERATIONS", 100)
    oob = sb.function("k", [("out", Type.ptr(F32))], sb.assign(v("out")[i + 1], 0.0))
    with pytest.raises(InterpreterError, match="out: work-item 3"):
        run(oob, [np.zeros(4, np.float32)], (4, 1, 1))
    divergent = sb.function("k", [("out", Type.ptr(F32))], sb.if_(i.lt(2), sb.barrier()))
    with pytest.raises(InterpreterError, match="barrier"):
        run(divergent, [np.zeros(4, np.float32)], (4, 1, 1), (4, 1, 1))
    run(divergent, [np.zeros(4, np.float32)], (4, 1, 1), (2, 1, 1))  # whole groups: fine
    endless = sb.function("k", [("out", Type.ptr(F32))], sb.while_(1, []))
    with pytest.raises(InterpreterError, match="while"):
        run(endless, [np.zeros(1, np.float32)], (1, 1, 1))
    with pytest.raises(TypeError, match="float64"):
        run(oob, [np.zeros(4, np.float64)], (4, 1, 1))
    with pytest.raises(ValueError, match="only kernels"):
        run(sb.function("f", [], sb.ret(1), Type.value(I32)), [], (1, 1, 1))
    with pytest.raises(ValueError, match="multiple"):
        run(oob, [np.zeros(4, np.float32)], (4, 1, 1), (3, 1, 1))


def test_unwritten_declarations_are_poisoned() -> None:
    function = sb.function(
        "k", [("out", Type.ptr(F32))], [sb.declare(F32, "t"), sb.assign(v("out")[0], v("t"))]
    )
    out = np.zeros(1, np.float32)
    run(function, [out], (1, 1, 1))
    assert np.isnan(out[0])


def test_empty_grid_runs_nothing() -> None:
    function = sb.function("k", [("out", Type.ptr(F32))], sb.assign(v("out")[0], 1.0))
    out = np.zeros(1, np.float32)
    run(function, [out], (0, 1, 1))
    assert out[0] == 0.0
