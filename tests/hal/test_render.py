"""The LLVM renderer against the reference interpreter and numpy: operators, conversions and
builtins over every dtype, scalar and vector (design 4.4, spec 5.4, 7.4 and 9.3).

Each test builds many small kernels as one KernelList (one compile), runs them on a private
llvm_cpu device and in `tests/reference.py`, and compares every output: integers and
booleans exactly, floats exactly where both sides round correctly, within the spec's
tolerance (f32 1e-6, f16 1e-3) for transcendental functions.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from semtree import builder as sb
from semtree.nodes import Binary, BinOp, Builtin, Call, Cast, Limit, Unary, UnOp
from semtree.types import DType, Type
from tests.hal.render_harness import (
    TOLERANCE,
    Case,
    Runner,
    assert_same,
    compare,
    cpu_settings,
    run_reference,
)

ALL = list(DType)
INTEGERS = [dtype for dtype in DType if dtype.is_integer]
FLOATS = [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64]
BOOL, F16, F32, F64 = DType.BOOLEAN, DType.FLOAT16, DType.FLOAT32, DType.FLOAT64
RANDOM = np.random.default_rng(20240611)
i, v = sb.global_id(0), sb.var


@pytest.fixture(scope="module")
def runner():
    runner = Runner()
    yield runner
    runner.close()


def special_values(dtype: DType) -> np.ndarray:
    """Edge cases of `dtype`: limits, signs, zero, shift counts around the width, NaN."""
    if dtype is BOOL:
        return np.array([False, True])
    if dtype.is_float:
        values = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.25, -1e4, 1e30, -3e38]
        values += [np.inf, -np.inf, np.nan, 65504.0, 1e-3, 2.0**31, -(2.0**63), 2.0**64]
        with np.errstate(over="ignore"):
            return np.unique(np.array(values).astype(dtype.numpy))
    bits = dtype.bits
    values = [0, 1, -1, 2, -2, 3, 7, -7, 100, -100, bits - 1, bits, bits + 1, 2 * bits]
    values += [int(dtype.min), int(dtype.max), int(dtype.min) + 1, int(dtype.max) - 1]
    wrapped = [value % 2**bits for value in values]
    return np.unique(np.array(wrapped, np.uint64).astype(dtype.numpy))


def random_values(dtype: DType, count: int) -> np.ndarray:
    if dtype is BOOL:
        return RANDOM.integers(0, 2, count).astype(bool)
    if dtype.is_float:
        return (RANDOM.standard_normal(count) * 10.0 ** RANDOM.integers(-3, 4, count)).astype(
            dtype.numpy
        )
    return RANDOM.integers(int(dtype.min), int(dtype.max), count, endpoint=True, dtype=dtype.numpy)


def pairs(left: DType, right: DType, extra: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values plus random pairs."""
    grid = list(itertools.product(special_values(left), special_values(right)))
    first = np.array([a for a, _ in grid] + list(random_values(left, extra)), left.numpy)
    second = np.array([b for _, b in grid] + list(random_values(right, extra)), right.numpy)
    return first, second


def out_dtype(type_: Type) -> DType:
    return DType.INT64 if type_.is_index else type_.dtype  # type: ignore[return-value]


def binary_case(op: BinOp, left: DType, right: DType, result: DType, width: int = 1) -> Case:
    """out[i] = a[i] op b[i], the operands loaded into variables of their own types."""
    function = sb.function(
        "binary",
        [
            ("out", Type.ptr(result, width)),
            ("a_in", Type.ptr(left, width, const=True)),
            ("b_in", Type.ptr(right, width, const=True)),
        ],
        [
            sb.declare(Type.value(left, width), "a", v("a_in")[i]),
            sb.declare(Type.value(right, width), "b", v("b_in")[i]),
            sb.assign(v("out")[i], Binary(op, v("a").node, v("b").node)),
        ],
    )
    first, second = pairs(left, right)
    count = len(first) // width
    first, second = first[: count * width], second[: count * width]
    output = np.zeros(count * width, result.numpy)
    return Case(function, [output, first, second], (count, 1, 1))


def valid_binary_ops(dtype: DType) -> list[BinOp]:
    if dtype is BOOL:
        arithmetic = [BinOp.AND, BinOp.OR, BinOp.XOR]
    elif dtype.is_float:
        arithmetic = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV]
    else:
        arithmetic = [op for op in BinOp if op.is_arithmetic or op.is_bitwise]
    comparisons = [op for op in BinOp if op.is_comparison or op.is_logical]
    return arithmetic + comparisons


def result_dtype(op: BinOp, dtype: DType) -> DType:
    return BOOL if op.is_comparison or op.is_logical else dtype


def check(runner: Runner, cases: list[Case], rtol: float = 0.0, **run_options: object) -> None:
    native = bool(getattr(run_options.get("settings"), "native_fp16", False))
    compare(cases, runner.run(cases, **run_options), run_reference(cases, native_fp16=native), rtol)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_binary_operators(runner: Runner, dtype: DType) -> None:
    """Wrap-around, x / 0 == 0, MIN / -1 == MIN, x % 0 == 0, shifts by >= the width,
    IEEE float semantics, NaN comparisons; exactly as the reference."""
    ops = valid_binary_ops(dtype)
    check(runner, [binary_case(op, dtype, dtype, result_dtype(op, dtype)) for op in ops])


@pytest.mark.parametrize("dtype", [DType.INT32, DType.UINT8, DType.INT64, F32], ids=str)
def test_binary_operators_on_vectors(runner: Runner, dtype: DType) -> None:
    cases = [
        binary_case(op, dtype, dtype, result_dtype(op, dtype), width)
        for op in valid_binary_ops(dtype)
        for width in (4, 16)
    ]
    check(runner, cases)


def test_specified_integer_results(runner: Runner) -> None:
    """The spec's own examples (7.4), independent of the reference interpreter."""
    cases = [
        binary_case(BinOp.DIV, DType.INT32, DType.INT32, DType.INT32),
        binary_case(BinOp.MOD, DType.INT32, DType.INT32, DType.INT32),
        binary_case(BinOp.SHR, DType.INT32, DType.INT32, DType.INT32),
        binary_case(BinOp.SHL, DType.UINT8, DType.UINT8, DType.UINT8),
    ]
    values = {
        0: ([7, -7, 7, -7, 5, -(2**31), -(2**31)], [2, 2, -2, -2, 0, -1, 0]),
        1: ([7, -7, 7, -7, 5, -(2**31), -(2**31)], [2, 2, -2, -2, 0, -1, 0]),
        2: ([-7, -7, 1, 1], [1, 33, 31, 32]),
        3: ([1, 1, 255], [7, 9, 1]),
    }
    expected = {
        0: [3, -3, -3, 3, 0, -(2**31), 0],
        1: [1, -1, 1, -1, 0, 0, 0],
        2: [-4, -4, 0, 1],
        3: [128, 2, 254],
    }
    for number, (first, second) in values.items():
        dtype = cases[number].arrays[1].dtype
        cases[number].arrays = [
            np.zeros(len(first), dtype),
            np.array(first, dtype),
            np.array(second, dtype),
        ]
        cases[number].grid = (len(first), 1, 1)
    results = runner.run(cases)
    for number, want in expected.items():
        np.testing.assert_array_equal(results[number][0], np.array(want, results[number][0].dtype))


MIXED = [
    (DType.INT32, DType.UINT32),
    (DType.UINT32, DType.INT32),
    (DType.INT8, DType.UINT8),
    (DType.INT64, DType.UINT64),
    (DType.UINT32, DType.INT64),
    (DType.INT16, DType.UINT8),
    (BOOL, DType.INT8),
    (DType.UINT64, F32),
    (DType.INT32, F16),
    (F16, F64),
]


@pytest.mark.parametrize(("left", "right"), MIXED, ids=lambda dtype: str(dtype))
def test_mixed_operand_types(runner: Runner, left: DType, right: DType) -> None:
    """Operands of different types are converted to the promoted type first (a u32
    compared with a negative i32 compares as unsigned)."""
    from semtree.types import promote

    common = promote(left, right)
    ops = [op for op in valid_binary_ops(common) if not op.is_shift or common is not BOOL]
    check(runner, [binary_case(op, left, right, result_dtype(op, common)) for op in ops])


def unary_case(expression: object, source: DType, result: DType, width: int = 1) -> Case:
    function = sb.function(
        "unary",
        [("out", Type.ptr(result, width)), ("in", Type.ptr(source, width, const=True))],
        [
            sb.declare(Type.value(source, width), "x", v("in")[i]),
            sb.assign(v("out")[i], expression),  # type: ignore[arg-type]
        ],
    )
    values = np.concatenate([special_values(source), random_values(source, 61)])
    count = len(values) // width
    values = values[: count * width]
    return Case(function, [np.zeros(count * width, result.numpy), values], (count, 1, 1))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_unary_operators(runner: Runner, dtype: DType) -> None:
    x = v("x").node
    cases = [unary_case(Unary(UnOp.NOT, x), dtype, BOOL)]
    if dtype is not BOOL:
        cases.append(unary_case(Unary(UnOp.NEG, x), dtype, dtype))
        cases.append(unary_case(Unary(UnOp.NEG, x), dtype, dtype, 8))
    if dtype.is_integer:
        cases.append(unary_case(Unary(UnOp.BIT_NOT, x), dtype, dtype))
    check(runner, cases)


def cast_values(source: DType) -> np.ndarray:
    if not source.is_float:
        return np.concatenate([special_values(source), random_values(source, 40)])
    values = [2.7, -2.7, 0.5, -0.5, 300.0, -1.0, 1e10, -1e10, 1e20, -1e20, 0.1, 1 / 3]
    values += [65519.0, 65520.0, 2.0**31, 2.0**31 - 128, 2.0**32, 2.0**63, 2.0**64, -(2.0**63)]
    values += [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0000001, 255.9, 256.0, -128.5, 1e-8]
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(values).astype(source.numpy), random_values(source, 40)])


@pytest.mark.parametrize("source", ALL, ids=str)
def test_conversions(runner: Runner, source: DType) -> None:
    """Cast to every dtype: float -> int truncates and saturates (NaN -> 0), int -> int
    wraps or extends by the source's signedness, to bool is != 0, f64 -> f16 rounds once."""
    cases = []
    for target in ALL:
        cast = Cast(Type.value(target), v("x").node)
        case = unary_case(cast, source, target)
        values = cast_values(source)
        case.arrays = [np.zeros(len(values), target.numpy), values]
        case.grid = (len(values), 1, 1)
        cases.append(case)
    check(runner, cases)


def test_conversions_through_index_and_vectors(runner: Runner) -> None:
    x = v("x").node
    index = Type.index()
    cases = [
        unary_case(Cast(index, x), DType.INT16, DType.INT64),
        unary_case(Cast(index, x), DType.UINT16, DType.INT64),
        unary_case(Cast(Type.value(F32, 4), x), DType.INT8, F32, 1),
        unary_case(Cast(Type.value(DType.INT8, 4), x), F32, DType.INT8, 4),
        unary_case(Cast(Type.value(F16, 8), x), F64, F16, 8),
        unary_case(Cast(Type.value(BOOL, 4), x), F32, BOOL, 4),
        unary_case(Cast(Type.value(F64, 4), x), BOOL, F64, 4),
    ]
    # A scalar cast to a vector broadcasts; its output holds 4 lanes per work-item.
    cases[2].function = sb.function(
        "broadcast",
        [("out", Type.ptr(F32, 4)), ("in", Type.ptr(DType.INT8, const=True))],
        sb.assign(v("out")[i], sb.cast(Type.value(F32, 4), v("in")[i])),
    )
    cases[2].arrays[0] = np.zeros(4 * len(cases[2].arrays[1]), np.float32)
    check(runner, cases)


def test_emulated_half_rounds_every_cast(runner: Runner) -> None:
    """Without native fp16, a Cast to f16 rounds to half and widens again (rule 7)."""
    x = v("x").node
    twice = Binary(BinOp.MUL, Cast(Type.value(F16), x), Cast(Type.value(F16), x))
    cases = [unary_case(twice, F32, F32), unary_case(Cast(Type.value(F16), x), F32, F32)]
    check(runner, cases)
    got = runner.run([cases[1]])[0][0]
    with np.errstate(over="ignore"):
        rounded = cases[1].arrays[1].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, rounded)


def test_native_half(runner: Runner) -> None:
    """With native fp16, f16 values stay half in registers; each operation rounds."""
    settings = cpu_settings(native_fp16=True)
    x = v("x").node
    cases = [
        unary_case(Binary(BinOp.ADD, x, x), F16, F16),
        unary_case(Binary(BinOp.MUL, x, sb.const(0.1).node), F16, F16, 4),
        unary_case(Call(Builtin.EXP, (x,)), F16, F16),
        unary_case(Call(Builtin.SQRT, (x,)), F16, F16, 8),
        unary_case(Cast(Type.value(DType.INT32), x), F16, DType.INT32),
    ]
    got = runner.run(cases, settings)
    want = run_reference(cases, native_fp16=True)
    compare(cases, got, want, rtol=TOLERANCE[F16])


def test_limit_constants(runner: Runner) -> None:
    """LimitConst of every dtype and limit, stored into an output of that dtype."""
    cases = []
    for dtype in ALL:
        assignments = [
            sb.assign(v("out")[position], sb.limit(which, dtype))
            for position, which in enumerate(Limit)
        ]
        function = sb.function("limits", [("out", Type.ptr(dtype))], assignments)
        cases.append(Case(function, [np.zeros(4, dtype.numpy)], (1, 1, 1)))
    check(runner, cases)
    got = runner.run(cases)
    assert got[ALL.index(F16)][0].tolist() == [-65504.0, 65504.0, 0.0, 1.0]
    assert got[ALL.index(DType.INT64)][0].tolist() == [-(2**63), 2**63 - 1, 0, 1]


# ---- builtins ---------------------------------------------------------------------------------

# Arguments inside each function's domain, plus a few outside (NaN results must agree).
DOMAINS = {
    Builtin.ACOS: (-1.0, 1.0),
    Builtin.ASIN: (-1.0, 1.0),
    Builtin.LOG: (1e-3, 1e3),
    Builtin.SQRT: (0.0, 1e4),
    Builtin.EXP: (-20.0, 20.0),
    Builtin.COSH: (-10.0, 10.0),
    Builtin.SINH: (-10.0, 10.0),
    Builtin.TANH: (-10.0, 10.0),
    Builtin.TAN: (-1.5, 1.5),
}
EDGES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, np.inf, -np.inf, np.nan, 100.0, -100.0]


def builtin_arguments(fn: Builtin, dtype: DType, count: int) -> list[np.ndarray]:
    low, high = DOMAINS.get(fn, (-8.0, 8.0))
    if fn is Builtin.POW:
        base = np.concatenate([RANDOM.uniform(0, 4, count - 8), [-2, -2, 0, 0, 1, -1, 2, 4]])
        exponent = np.concatenate([RANDOM.uniform(-3, 3, count - 8), [2, 3, 0, -1, 7, 2, 0.5, -2]])
        return [base.astype(dtype.numpy), exponent.astype(dtype.numpy)]
    arguments = []
    for _ in range(fn.arity):
        values = np.concatenate([RANDOM.uniform(low, high, count - len(EDGES)), EDGES])
        arguments.append(values.astype(dtype.numpy))
    return arguments


def builtin_case(fn: Builtin, dtype: DType, width: int, count: int = 64) -> Case:
    names = [f"x{number}" for number in range(fn.arity)]
    function = sb.function(
        fn.value,
        [("out", Type.ptr(dtype, width))]
        + [(f"in{number}", Type.ptr(dtype, width, const=True)) for number in range(fn.arity)],
        [
            *(
                sb.declare(Type.value(dtype, width), name, v(f"in{number}")[i])
                for number, name in enumerate(names)
            ),
            sb.assign(v("out")[i], sb.call(fn, *(v(name) for name in names))),
        ],
    )
    if dtype.is_float:
        arguments = builtin_arguments(fn, dtype, count)
    else:  # integer tests bring their own values
        arguments = [np.zeros(count, dtype.numpy) for _ in range(fn.arity)]
    return Case(function, [np.zeros(count, dtype.numpy), *arguments], (count // width, 1, 1))


def numpy_builtin(fn: Builtin, arguments: list[np.ndarray]) -> np.ndarray:
    """The exact result (computed in float64) for comparison with a tolerance."""
    wide = [argument.astype(np.float64) for argument in arguments]
    functions = {
        Builtin.ABS: np.abs,
        Builtin.ACOS: np.arccos,
        Builtin.ASIN: np.arcsin,
        Builtin.ATAN: np.arctan,
        Builtin.CEIL: np.ceil,
        Builtin.COS: np.cos,
        Builtin.COSH: np.cosh,
        Builtin.EXP: np.exp,
        Builtin.FLOOR: np.floor,
        Builtin.LOG: np.log,
        Builtin.MAX: np.fmax,
        Builtin.MIN: np.fmin,
        Builtin.POW: np.power,
        Builtin.SIN: np.sin,
        Builtin.SINH: np.sinh,
        Builtin.SQRT: np.sqrt,
        Builtin.TAN: np.tan,
        Builtin.TANH: np.tanh,
        Builtin.RECIP: lambda x: 1 / x,
        Builtin.MAD: lambda a, b, c: a * b + c,
        Builtin.ROUND: lambda x: np.where(
            np.isfinite(x), np.trunc(x) + np.trunc(2 * (x - np.trunc(x))), x
        ),
    }
    with np.errstate(all="ignore"):
        return functions[fn](*wide)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("width", [1, 8], ids=["scalar", "vec8"])
def test_float_builtins(runner: Runner, dtype: DType, width: int) -> None:
    """Every builtin against numpy (float64, rounded to the dtype) within the spec's
    tolerance, and against the reference interpreter. MAD may be fused (one rounding
    instead of the reference's two), so it is held to its error bound relative to
    |a*b| + |c| instead."""
    cases = [builtin_case(fn, dtype, width) for fn in Builtin]
    got = runner.run(cases)
    unfused = [number for number, fn in enumerate(Builtin) if fn is not Builtin.MAD]
    compare(
        [cases[number] for number in unfused],
        [got[number] for number in unfused],
        run_reference([cases[number] for number in unfused]),
        rtol=max(TOLERANCE[dtype], 2e-6),
    )
    for fn, case, result in zip(Builtin, cases, got, strict=True):
        with np.errstate(all="ignore"):
            exact = numpy_builtin(fn, case.arrays[1:])
        if fn is Builtin.MAD:
            first, second, third = (array.astype(np.float64) for array in case.arrays[1:])
            scale = np.abs(first * second) + np.abs(third)
            bound = 2 * TOLERANCE[dtype] * np.where(np.isfinite(scale), scale, 0)
            with np.errstate(invalid="ignore"):
                error = np.abs(result[0] - exact)
            both_nan = np.isnan(exact) & np.isnan(result[0])
            assert np.all((error <= bound) | both_nan | (result[0] == exact)), dtype
            continue
        with np.errstate(all="ignore"):
            want = exact.astype(dtype.numpy)
        assert_same(result[0], want, TOLERANCE[dtype], f"{fn.value} of {dtype}")


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_builtins(runner: Runner, dtype: DType) -> None:
    """abs (abs(MIN) == MIN), min, max and mad on integers, which wrap."""
    cases = []
    for fn in (Builtin.ABS, Builtin.MIN, Builtin.MAX, Builtin.MAD):
        case = builtin_case(fn, dtype, 1)
        first, second = pairs(dtype, dtype, extra=16)
        arguments = [first, second, first[::-1].copy()][: fn.arity]
        case.arrays = [np.zeros(len(first), dtype.numpy), *arguments]
        case.grid = (len(first), 1, 1)
        cases.append(case)
    check(runner, cases)


def test_exp_log_and_tanh_accuracy(runner: Runner) -> None:
    """The IR float32 exp, log and tanh: within 1.5 ulp of the correctly rounded result
    over their whole range, subnormal arguments and results included; zero, negative,
    NaN and infinite arguments as in C."""
    count = 1 << 16
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0]
    values = {
        Builtin.EXP: [np.linspace(-104, 89, count - 9), [88.72, 88.73, -87.4], specials],
        Builtin.LOG: [np.geomspace(1e-45, 3e38, count - 6 - 2001), np.linspace(0.9, 1.1, 2001)],
        Builtin.TANH: [np.linspace(-12, 12, count - 12), np.geomspace(1e-30, 0.7, 6), specials],
    }
    cases, functions = [], []
    for fn, parts in values.items():
        points = np.concatenate([*parts, specials][: len(parts) + (fn is Builtin.LOG)])
        assert points.size == count, fn
        for width in (1, 16):
            case = builtin_case(fn, F32, width, count)
            case.arrays[1] = points.astype(np.float32)
            cases.append(case)
            functions.append(fn)
    for fn, case, result in zip(functions, cases, runner.run(cases), strict=True):
        exact = numpy_builtin(fn, [case.arrays[1]])
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = exact.astype(np.float32)
            ulp = np.spacing(np.abs(rounded)).astype(np.float64)
            error = np.abs(result[0].astype(np.float64) - exact) / ulp
        finite = np.isfinite(rounded) & np.isfinite(result[0])
        assert np.nanmax(error[finite]) <= 1.5, fn
        assert_same(result[0][~finite], rounded[~finite], what=fn.value)


def test_builtins_on_mixed_argument_types(runner: Runner) -> None:
    """Arguments are converted to the promoted type; literals are weak."""
    x = v("x").node
    cases = [
        unary_case(Call(Builtin.POW, (x, sb.const(2).node)), F32, F32),
        unary_case(Call(Builtin.MAX, (x, Cast(Type.value(F64), x))), F32, F64),
        unary_case(Call(Builtin.MAD, (x, sb.const(3).node, x)), DType.INT16, DType.INT16),
        unary_case(Call(Builtin.MIN, (x, sb.const(0.5).node)), DType.INT32, F32),
        unary_case(sb.clamp(x, -1, 100).node, DType.INT8, DType.INT8),
        unary_case(sb.clamp(x, -1.5, 2.5).node, F32, F32, 4),
        unary_case(sb.clamp(x, 3, 9).node, DType.UINT64, DType.UINT64),
    ]
    check(runner, cases, rtol=1e-6)


def test_float_builtins_under_fast_math(runner: Runner) -> None:
    """fast_math changes flags, not results beyond rounding (finite arguments)."""
    settings = cpu_settings(fast_math=True)
    cases = [builtin_case(fn, F32, 8) for fn in (Builtin.EXP, Builtin.MAD, Builtin.SQRT)]
    for case in cases:
        for array in case.arrays[1:]:
            array[~np.isfinite(array)] = 1.0
    got = runner.run(cases, settings)
    compare(cases, got, run_reference(cases), rtol=1e-5)


def test_exp_function_constants_are_consistent() -> None:
    from hal_llvm import render_math

    ln2 = render_math._LN2_HIGH + render_math._LN2_LOW
    assert abs(ln2 - np.log(2)) < 1e-12
    assert np.float32(render_math._LN2_HIGH) * 512 == 355  # 9 significant bits


def test_index_arithmetic(runner: Runner) -> None:
    """INDEX is i64 in LLVM but behaves as the reference's INDEX: signed, shift counts
    modulo 32, division truncating; mixed with narrower or unsigned types it promotes as
    rule 3 says (INDEX ranks like INT32; u32 outranks it)."""
    gid, x = sb.global_id(0), v("x")
    expressions = [
        (gid * 3 - 7) / 2,
        (gid * 3 - 7) % 4,
        gid << 33,
        -gid >> 1,
        sb.select(gid.lt(x), gid, x),
        gid + x,
        sb.call(Builtin.MAX, gid - 5, 2),
        sb.clamp(gid, 3, 5),
    ]
    cases = [
        unary_case(sb.cast(DType.INT64, expression), DType.UINT32, DType.INT64)
        for expression in expressions
    ]
    for case in cases:
        case.arrays[1] = np.arange(16, dtype=np.uint32) * 3 % 7
        case.arrays[0] = np.zeros(16, np.int64)
        case.grid = (16, 1, 1)
    check(runner, cases)
