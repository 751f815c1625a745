"""Property test of the LLVM renderer: random well-typed expression trees over every dtype,
scalars and vectors, computed by the device and by the reference interpreter, must agree
bit for bit.

The trees use only operations that round correctly on both sides (arithmetic, comparisons,
conversions, select/cond/clamp, sqrt/floor/ceil/round/abs/min/max/recip/mad), and the
device is built with `disable_mad` so that no multiply-add is fused: then every result is
exactly specified and any difference is a renderer bug.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
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
from semtree.types import DType, Type
from semtree.typing import result_type, type_of
from tests.hal.render_harness import Case, Runner, compare, cpu_settings, run_reference
from tests.reference import InterpreterError

WIDTH = 4  # the one vector width in these trees (widths may not be mixed)
ITEMS = 24  # work-items per kernel
VARIABLES = {
    "a_i32": Type.value(DType.INT32),
    "a_u8": Type.value(DType.UINT8),
    "a_i8": Type.value(DType.INT8),
    "a_u16": Type.value(DType.UINT16),
    "a_i64": Type.value(DType.INT64),
    "a_u64": Type.value(DType.UINT64),
    "a_u32": Type.value(DType.UINT32),
    "a_bool": Type.value(DType.BOOLEAN),
    "a_f16": Type.value(DType.FLOAT16),
    "a_f32": Type.value(DType.FLOAT32),
    "a_f64": Type.value(DType.FLOAT64),
    "v_f32": Type.value(DType.FLOAT32, WIDTH),
    "v_i16": Type.value(DType.INT16, WIDTH),
    "v_u32": Type.value(DType.UINT32, WIDTH),
}
# Every variable is also readable straight from its buffer (a subscript: a lazy Cond).
SCOPE = {
    **VARIABLES,
    **{f"in_{name}": Type.ptr(t.dtype, t.vec_width, const=True) for name, t in VARIABLES.items()},  # type: ignore[arg-type]
}
EXACT_BUILTINS = [
    Builtin.ABS,
    Builtin.CEIL,
    Builtin.FLOOR,
    Builtin.MAD,
    Builtin.MAX,
    Builtin.MIN,
    Builtin.RECIP,
    Builtin.ROUND,
    Builtin.SQRT,
]
INTEGER_LITERALS = [0, 1, -1, 2, 3, 7, 31, 32, 33, 63, 64, 255, -128, 2**31 - 1, -(2**31)]
INTEGER_LITERALS += [2**32, 2**63 - 1, -(2**63), 2**64 - 1]
FLOAT_LITERALS = [0.0, -0.0, 0.5, 1.5, -2.5, 3.0, 1e10, -1e30, 65504.0, float("inf"), float("nan")]


def input_values(type_: Type, random: np.random.Generator) -> np.ndarray:
    dtype = type_.dtype
    assert dtype is not None
    count = ITEMS * type_.vec_width
    if dtype is DType.BOOLEAN:
        return random.integers(0, 2, count).astype(bool)
    if dtype.is_float:
        special = np.array([0.0, -0.0, 1.0, -1.5, 0.5, np.nan, np.inf, -np.inf, 1e6, 2.5])
        values = random.standard_normal(count) * 10.0 ** random.integers(-2, 4, count)
        values[: len(special)] = special
        with np.errstate(over="ignore"):
            return values.astype(dtype.numpy)
    special = [0, 1, int(dtype.max), int(dtype.min), 2, 5]
    values = random.integers(
        int(dtype.min), int(dtype.max), count, endpoint=True, dtype=dtype.numpy
    )
    values[: len(special)] = special
    return values


_GID = IndexExpr(IdKind.GLOBAL, 0)
_NAMES = sorted(VARIABLES)
_VARIABLE = st.sampled_from(_NAMES).map(lambda name: Load(Lookup(name)))
_ELEMENT = st.sampled_from(_NAMES).map(lambda name: Load(Subscript(Lookup(f"in_{name}"), _GID)))
# Mostly variables, so that most operations see run-time values of every dtype.
LEAVES = st.one_of(
    _VARIABLE,
    _VARIABLE,
    _VARIABLE,
    _ELEMENT,
    _ELEMENT,
    st.sampled_from(INTEGER_LITERALS).map(IntConst),
    st.sampled_from(FLOAT_LITERALS).map(FloatConst),
    st.builds(LimitConst, st.sampled_from(list(Limit)), st.sampled_from(list(DType))),
    st.just(_GID),
)
KINDS = ["binary"] * 4 + ["unary", "cast", "select", "clamp", "call"]


Typed = tuple[Expr, Type]


def _typed(candidate: Expr, children: tuple[Typed, ...]) -> Typed | None:
    """`candidate` with its type, given its operands' (one level of typing: cheap)."""
    try:
        types = tuple(type_ for _, type_ in children)
        return candidate, result_type(candidate, types, SCOPE, False)
    except SemtreeTypeError:
        return None


@st.composite
def typed_expressions(draw: st.DrawFn, depth: int = 4) -> Typed:
    """A well-typed expression and its type. Operators are drawn among those the operands'
    types allow; a node that still breaks the typing rules is replaced by its first
    operand."""
    if depth == 0 or draw(st.integers(0, 5)) == 0:
        leaf = draw(LEAVES)
        return leaf, type_of(leaf, SCOPE, False)
    child = _subtrees(depth - 1)
    kind = draw(st.sampled_from(KINDS))
    first = draw(child)
    children: tuple[Typed, ...] = (first,)
    options: list[Typed | None]
    match kind:
        case "unary":
            options = [_typed(Unary(op, first[0]), children) for op in UnOp]
        case "binary":
            children = (first, draw(child))
            operands = (first[0], children[1][0])
            options = [_typed(Binary(op, *operands), children) for op in BinOp]
        case "cast":
            dtype = draw(st.sampled_from(list(DType)))
            width = draw(st.sampled_from([1, 1, WIDTH]))
            target = Type.index() if draw(st.integers(0, 9)) == 0 else Type.value(dtype, width)
            options = [_typed(Cast(target, first[0]), children)]
        case "select":
            children = (first, draw(child), draw(child))
            node = draw(st.sampled_from([Select, Cond]))
            options = [_typed(node(*(item[0] for item in children)), children)]
        case "clamp":
            children = (first, draw(child), draw(child))
            options = [_typed(Clamp(*(item[0] for item in children)), children)]
        case _:
            fn = draw(st.sampled_from(EXACT_BUILTINS))
            children = (first, *(draw(child) for _ in range(fn.arity - 1)))
            options = [_typed(Call(fn, tuple(item[0] for item in children)), children)]
    valid = [option for option in options if option is not None]
    return draw(st.sampled_from(valid)) if valid else first


@functools.cache
def _subtrees(depth: int) -> st.SearchStrategy[Typed]:
    return typed_expressions(depth)


def expression_case(typed: Typed, seed: int) -> Case:
    expr, type_ = typed
    if type_.is_index:
        expr, type_ = Cast(Type.value(DType.INT64), expr), Type.value(DType.INT64)
    assert type_.dtype is not None
    names = sorted(VARIABLES)
    gid = sb.global_id(0)
    function = sb.function(
        "expression",
        [("out", Type.ptr(type_.dtype, type_.vec_width))]
        + [(f"in_{name}", SCOPE[f"in_{name}"]) for name in names],
        [
            *(sb.declare(VARIABLES[name], name, sb.var(f"in_{name}")[gid]) for name in names),
            sb.assign(sb.var("out")[gid], expr),
        ],
    )
    random = np.random.default_rng(seed)
    inputs = [input_values(VARIABLES[name], random) for name in names]
    output = np.zeros(ITEMS * type_.vec_width, type_.dtype.numpy)
    return Case(function, [output, *inputs], (ITEMS, 1, 1))


@pytest.fixture(scope="module")
def runner():
    runner = Runner()
    yield runner
    runner.close()


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(trees=st.lists(typed_expressions(), min_size=2, max_size=4), seed=st.integers(0, 2**16))
def test_random_expressions_match_the_reference(runner: Runner, trees: list[Typed], seed: int):
    cases = [expression_case(tree, seed + number) for number, tree in enumerate(trees)]
    try:
        want = run_reference(cases)
    except InterpreterError:
        reject()  # an INDEX value left [-2^31, 2^31): undefined by rule 10
    got = runner.run(cases, cpu_settings(disable_mad=True))
    compare(cases, got, want)
