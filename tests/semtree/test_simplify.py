"""semtree.simplify: each rewrite on small examples, then a property test that simplify() and
form_mad() never change what the reference interpreter computes, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Builtin,
    Call,
    Cast,
    Clamp,
    Cond,
    Expr,
    FloatConst,
    Function,
    IdKind,
    IndexExpr,
    IntConst,
    Limit,
    LimitConst,
    Load,
    Lookup,
    Select,
    SemtreeTypeError,
    Subscript,
    Unary,
    UnOp,
)
from semtree.simplify import form_mad, simplify
from semtree.types import DType, Type
from semtree.typing import check_function, type_of
from tests.reference import InterpreterError, run
from tests.semtree.kernels import group_sum, matmul_tile

F16, F32, F64 = DType.FLOAT16, DType.FLOAT32, DType.FLOAT64
I8, I32, I64, U32 = DType.INT8, DType.INT32, DType.INT64, DType.UINT32
v, gid = sb.var, sb.global_id(0)

PARAMS = [
    ("out", Type.ptr(F32)),
    ("f", Type.ptr(F32, const=True)),
    ("q", Type.ptr(I8)),
    ("n", Type.index()),
]


def body_of(*stmts: object) -> str:
    """The simplified body, one statement per line, without the function header."""
    function = sb.function("k", PARAMS, list(stmts))  # type: ignore[arg-type]
    check_function(function, False)
    text = str(simplify(function, native_fp16=False))
    return "\n".join(line.strip() for line in text.splitlines()[1:-1])


def store(value: object) -> object:
    return sb.assign(v("out")[0], value)  # type: ignore[arg-type]


# ---- folding ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (sb.const(2) * 3 + 1, "out[0] = 7;"),
        (sb.const(7) / 2 - sb.const(-7) / 2, "out[0] = 6;"),
        (sb.const(5) / 0, "out[0] = 0;"),
        (sb.const(2**31 - 1) + 1, "out[0] = (-2147483647 - 1);"),
        (sb.const(1) << 33, "out[0] = 2;"),
        (sb.const(1.5) * 2, "out[0] = 3.0;"),
        (sb.const(1.0) / 0.0, "out[0] = INFINITY;"),
        (sb.const(3).lt(4), "out[0] = true;"),
        (sb.and_(1, 0), "out[0] = false;"),
        (sb.cast(I8, 300), "out[0] = (char)300;"),  # a cast of a literal is already a constant
        (sb.cast(F32, sb.cast(I8, 300)), "out[0] = 44.0;"),
        (sb.cast(I32, sb.const(2.9) * 1), "out[0] = 2;"),
        (sb.cast(I8, sb.const(1000.0) + 0.5), "out[0] = 127;"),  # saturates
        (-sb.cast(I32, 5) * 2, "out[0] = -10;"),
        (sb.clamp(sb.const(12), 0, 9), "out[0] = 9;"),
        (sb.select(sb.const(3).gt(2), 1.5, 2), "out[0] = 1.5;"),
        (sb.limit(Limit.MAX, I8) + 1, "out[0] = -128;"),
        (sb.limit(Limit.MAX, F16) * 2, "out[0] = 131008.0;"),  # f16 is f32 when emulated
    ],
)
def test_constant_folding(value: object, expected: str) -> None:
    assert body_of(store(value)) == expected


def test_folded_constants_keep_their_type() -> None:
    q0 = v("q")[0]
    # `q0 + (2 * 3)` is an i32 addition; `q0 + 6` would be an i8 one.
    assert body_of(sb.assign(q0, q0 + sb.const(2) * 3)) == "q[0] = q[0] + (int)6;"
    assert body_of(sb.assign(q0, q0 * (sb.const(1) + 1))) == "q[0] = q[0] * (int)2;"
    assert body_of(sb.assign(q0, sb.cast(I8, q0) + (sb.const(1) + 1))) == "q[0] = q[0] + (int)2;"
    assert body_of(store(v("f")[0] + (sb.const(1.0) + 1.0))) == "out[0] = f[0] + 2.0;"
    assert body_of(store(v("n") + (sb.const(1) + 1))) == "out[0] = n + 2;"


def test_index_overflow_is_not_folded() -> None:
    big = sb.cast(Type.index(), 2**30) * 4
    assert body_of(store(big)) == "out[0] = (int)1073741824 << 2;"


# ---- identities ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (v("n") + 0, "out[0] = n;"),
        (0 + v("n"), "out[0] = n;"),
        (v("n") - 0, "out[0] = n;"),
        (v("n") * 1, "out[0] = n;"),
        (1 * v("n"), "out[0] = n;"),
        (v("n") / 1, "out[0] = n;"),
        (v("n") * 0, "out[0] = 0;"),
        (0 * v("n"), "out[0] = 0;"),
        (0 / v("n"), "out[0] = 0;"),
        (v("n") % 1, "out[0] = 0;"),
        (v("q")[0] + 256, "out[0] = q[0];"),  # 256 is 0 as an i8
        (v("f")[0] - 0.0, "out[0] = f[0];"),
        (v("f")[0] * 1.0, "out[0] = f[0];"),
        (v("f")[0] / 1, "out[0] = f[0];"),
        (v("f")[0] + 0.0, "out[0] = f[0] + 0.0;"),  # -0.0 + 0.0 is +0.0
        (v("f")[0] * 0.0, "out[0] = f[0] * 0.0;"),  # NaN, infinities
        (0 - v("n"), "out[0] = 0 - n;"),
        (1 / v("n"), "out[0] = 1 / n;"),
        (v("q")[0] + sb.cast(I32, 0), "out[0] = q[0] + (int)0;"),  # the i32 addition widens
        (sb.cast(DType.BOOLEAN, v("n")) + 0, "out[0] = (bool)n + 0;"),
    ],
)
def test_identities(value: object, expected: str) -> None:
    assert body_of(store(value)) == expected


# ---- conditions and control flow ----------------------------------------------------------------


def test_constant_conditions() -> None:
    assert body_of(store(sb.select(1, v("n"), 2.5))) == "out[0] = (float)n;"
    assert body_of(store(sb.cond(0, 1, v("f")[0]))) == "out[0] = f[0];"
    assert body_of(sb.if_(sb.const(1).lt(2), store(1.0), store(2.0))) == "out[0] = 1.0;"
    assert body_of(sb.if_(0, store(1.0), store(2.0))) == "out[0] = 2.0;"
    assert body_of(sb.if_(0, store(1.0))) == ""
    assert body_of(sb.while_(sb.const(1).gt(2), store(1.0))) == ""
    assert body_of(sb.if_(1, [sb.declare(F32, "t", v("f")[0]), store(v("t"))])) == (
        "{\nfloat t = f[0];\nout[0] = t;\n}"
    )


def test_empty_statements_vanish() -> None:
    assert body_of(sb.block(sb.block()), sb.for_("j", 0, body=store(1.0))) == ""
    assert body_of(sb.if_(v("n").lt(2), []), sb.for_("j", 4, body=[])) == ""
    assert body_of(sb.if_(v("n").lt(2), [], store(1.0))) == (
        "if (n < 2) {\n} else {\nout[0] = 1.0;\n}"
    )
    assert body_of(sb.while_(v("n").lt(2), [])) == "while (n < 2) {\n}"  # may never end: kept


# ---- propagation --------------------------------------------------------------------------------


def test_constant_and_alias_declarations_are_propagated() -> None:
    stmts = [
        sb.declare(Type.index(), "width", 16),
        sb.declare(Type.index(), "row", v("n")),
        sb.declare(F32, "scale", 0.5),
        sb.declare(F32, "unused", v("f")[3]),
        store(v("f")[v("row") * v("width")] * v("scale")),
    ]
    assert body_of(*stmts) == "out[0] = f[n * 16] * 0.5;"


def test_propagation_converts_to_the_declared_type() -> None:
    stmts = [sb.declare(I8, "small", 300), sb.assign(v("q")[0], v("q")[1] + v("small"))]
    assert body_of(*stmts) == "q[0] = q[1] + 44;"  # 300 as an i8, next to an i8
    stmts = [sb.declare(F64, "third", sb.const(1.0) / 3), store(v("third"))]
    third = float(np.float32(1.0) / np.float32(3.0))  # an f32 division, exact as f64 and f32
    assert body_of(*stmts) == f"out[0] = {third!r};"


@pytest.mark.parametrize(
    "stmts",
    [
        [sb.declare(F32, "t", 1.0), sb.assign(v("t"), 2.0), store(v("t"))],
        [sb.declare(F32, "t", v("f")[0]), store(v("t"))],
        [sb.declare(F32, "t", v("f")[0] + 1), store(v("t"))],
        [
            sb.block(sb.declare(F32, "t", 1.0), store(v("t"))),
            sb.declare(F32, "t", 2.0),
            store(v("t")),
        ],
        [sb.declare(Type.value(F32), "alias", v("n")), store(v("alias"))],  # converts: kept
    ],
)
def test_what_is_not_propagated(stmts: list) -> None:
    text = body_of(*stmts)
    assert "float t" in text or "float alias" in text


def test_chains_of_dead_declarations_disappear() -> None:
    stmts = [
        sb.declare(F32, "a", v("f")[0]),
        sb.declare(F32, "b", v("a")),
        sb.declare(F32, "c", v("b")),
        store(1.0),
    ]
    assert body_of(*stmts) == "out[0] = 1.0;"


# ---- strength reduction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (gid * 8, "get_global_id(0) << 3"),
        (4 * gid, "get_global_id(0) << 2"),
        (gid / 16, "get_global_id(0) >> 4"),
        (gid % 32, "get_global_id(0) & 31"),
        ((gid * 3 + sb.local_id(1)) / 2, "(get_global_id(0) * 3 + get_local_id(1)) >> 1"),
        ((gid & v("n")) % 4, "get_global_id(0) & n & 3"),
        (v("n") * 8, "n * 8"),  # a parameter may be negative
        ((gid - 1) / 2, "(get_global_id(0) - 1) / 2"),
        (gid * 6, "get_global_id(0) * 6"),
        (sb.cast(I32, gid) * 8, "(int)get_global_id(0) * 8"),  # not INDEX
        (8 / gid, "8 / get_global_id(0)"),
    ],
)
def test_strength_reduction(value: object, expected: str) -> None:
    assert body_of(store(value)) == f"out[0] = {expected};"


def test_loop_counters_are_non_negative() -> None:
    loop = sb.for_("j", 4, 2, store(v("f")[v("j") * 4 + v("j") % 8]))
    assert body_of(loop) == ("for (int j = 0; j < 8; j += 2) {\nout[0] = f[(j << 2) + (j & 7)];\n}")


# ---- form_mad -----------------------------------------------------------------------------------


def mad_of(value: object, native_fp16: bool = False) -> str:
    function = sb.function(
        "k",
        [("out", Type.ptr(F32)), ("a", Type.ptr(F32)), ("h", Type.ptr(F16)), ("i", Type.ptr(I32))],
        store(value),
    )
    text = str(form_mad(function, native_fp16=native_fp16))
    return text.splitlines()[1].strip()


def test_form_mad() -> None:
    a, h, i = v("a"), v("h"), v("i")
    assert mad_of(a[0] + a[1] * a[2]) == "out[0] = mad(a[1], a[2], a[0]);"
    assert mad_of(a[1] * a[2] + a[0]) == "out[0] = mad(a[1], a[2], a[0]);"
    assert mad_of(a[1] * 2.0 + 1.0) == "out[0] = mad(a[1], 2.0, 1.0);"
    assert mad_of(a[0] + sb.cast(F32, a[1] * a[2])) == "out[0] = mad(a[1], a[2], a[0]);"
    assert mad_of((a[0] * a[1] + a[2]) * a[3] + a[4]) == (
        "out[0] = mad(mad(a[0], a[1], a[2]), a[3], a[4]);"
    )
    assert mad_of(i[0] + i[1] * i[2]) == "out[0] = i[0] + i[1] * i[2];"  # floats only
    assert mad_of(a[0] - a[1] * a[2]) == "out[0] = a[0] - a[1] * a[2];"
    # A half product is rounded to half before a float sum: not a MAD when half is native.
    assert mad_of(a[0] + h[0] * h[1], native_fp16=True) == "out[0] = a[0] + h[0] * h[1];"
    assert mad_of(a[0] + h[0] * h[1], native_fp16=False) == "out[0] = mad(h[0], h[1], a[0]);"
    assert mad_of(a[0] + sb.cast(F32, h[0] * h[1]), native_fp16=True) == (
        "out[0] = a[0] + (float)(h[0] * h[1]);"
    )


def test_sample_kernels_survive() -> None:
    for function in (matmul_tile(4, 16, 3), group_sum(100, 8)):
        simpler = form_mad(simplify(function, native_fp16=False), native_fp16=False)
        check_function(simpler, False)
    text = str(simplify(matmul_tile(4, 16, 3), native_fp16=False))
    assert "agg[(r << 1) + v]" in text and "B[(k << 2) + (get_global_id(0) << 1) + v]" in text


# ---- property: simplify and form_mad preserve the reference semantics --------------------------

BUFFERS = {
    "fa": F32,
    "da": F64,
    "ha": F16,
    "ia": I32,
    "ba": I8,
    "ua": U32,
    "la": I64,
}
SIZE = 8


def load(name: str) -> Expr:
    return Load(Subscript(Lookup(name), IndexExpr(IdKind.GLOBAL, 0)))


LEAVES = st.one_of(
    st.sampled_from([load(name) for name in BUFFERS]),
    st.sampled_from([IndexExpr(IdKind.GLOBAL, 0), IndexExpr(IdKind.LOCAL, 0), Load(Lookup("j"))]),
    st.sampled_from([0, 1, -1, 2, 3, 4, 8, 16, 255, 256, 2**31 - 1, -(2**31), 2**40]).map(IntConst),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 2.5, -3.0, 1e30, float("inf"), float("nan")]).map(
        FloatConst
    ),
    st.builds(LimitConst, st.sampled_from(list(Limit)), st.sampled_from([I8, U32, F32, F16])),
)
TYPES = st.sampled_from(
    [Type.value(dtype) for dtype in (I8, I32, U32, I64, F16, F32, F64, DType.BOOLEAN)]
    + [Type.index()]
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.builds(Binary, st.sampled_from(list(BinOp)), children, children),
        st.builds(Unary, st.sampled_from(list(UnOp)), children),
        st.builds(Cast, TYPES, children),
        st.builds(Select, children, children, children),
        st.builds(Cond, children, children, children),
        st.builds(Clamp, children, children, children),
        st.builds(lambda a, b, c: Call(Builtin.MAD, (a, b, c)), children, children, children),
        st.builds(lambda a, b: Call(Builtin.MAX, (a, b)), children, children),
    )


EXPRESSIONS = st.recursive(LEAVES, _extend, max_leaves=10)


def kernel_for(first: Expr, second: Expr, native_fp16: bool) -> Function | None:
    """out[i * 3 + j] = second, inside a loop over j, after `t = first` (second may use t)."""
    scope = {name: Type.ptr(dtype) for name, dtype in BUFFERS.items()} | {"j": Type.index()}
    try:
        first_type = type_of(first, scope, native_fp16)
        second_type = type_of(second, {**scope, "t": first_type}, native_fp16)
    except SemtreeTypeError:
        return None
    if not (first_type.is_numeric and second_type.is_numeric):
        return None
    out = Type.ptr(DType.INT64 if second_type.is_index else second_type.dtype)  # type: ignore[arg-type]
    params = [("out", out), *((name, Type.ptr(dtype)) for name, dtype in BUFFERS.items())]
    body = sb.for_(
        "j",
        3,
        body=[
            sb.declare(first_type, "t", first),
            sb.declare(Type.index(), "unit", 1),
            sb.assign(v("out")[gid * 3 + v("j") * v("unit")], second),
        ],
    )
    return sb.function("k", params, body)


def results(function: Function, native_fp16: bool) -> tuple[np.ndarray, ...] | None:
    rng = np.random.default_rng(5)
    arrays = []
    for dtype in BUFFERS.values():
        raw = rng.integers(-300, 300, SIZE) * (0.25 if dtype.is_float else 1)
        arrays.append(raw.astype(dtype.numpy))
    out_dtype = function.params[0].type.dtype
    out = np.zeros(SIZE * 3, out_dtype.numpy)  # type: ignore[union-attr]
    try:
        run(function, [out, *arrays], (SIZE, 1, 1), (4, 1, 1), native_fp16=native_fp16)
    except InterpreterError:
        return None
    return (out, *arrays)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(first=EXPRESSIONS, second=EXPRESSIONS, native_fp16=st.booleans(), use_t=st.booleans())
def test_simplify_and_form_mad_preserve_results(
    first: Expr, second: Expr, native_fp16: bool, use_t: bool
) -> None:
    if use_t:
        second = Binary(BinOp.ADD, second, Load(Lookup("t")))
    function = kernel_for(first, second, native_fp16)
    assume(function is not None)
    assert function is not None
    expected = results(function, native_fp16)
    assume(expected is not None)
    simpler = simplify(function, native_fp16=native_fp16)
    check_function(simpler, native_fp16)
    fused = form_mad(simpler, native_fp16=native_fp16)
    for candidate in (simpler, fused):
        got = results(candidate, native_fp16)
        assert got is not None, str(candidate)
        for old, new in zip(expected, got, strict=True):
            # Floats compare as values: the sign of a zero out of fmin/fmax (MAX, MIN, Clamp)
            # is unspecified (numpy's own vector and scalar loops differ).
            same = (
                np.array_equal(old, new, equal_nan=True)
                if old.dtype.kind == "f"
                else old.tobytes() == new.tobytes()
            )
            assert same, f"{function}\n{candidate}"
