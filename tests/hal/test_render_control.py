"""The LLVM renderer's statements, memory and module structure: loops, conditionals, early
returns, private and local arrays, pointer variables, vector memory, Select against Cond,
work-item ids, denormal flushing, parameter attributes, body sharing and refusals."""

from __future__ import annotations

import dataclasses

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from hal_llvm.grid import grid_symbols
from hal_llvm.render import KernelEmitter, render
from hal_llvm.render_math import Declarations
from semtree import builder as sb
from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList, KernelParam
from semtree.nodes import Cond, Param, UnsupportedNode
from semtree.types import DType, Region, TensorShape, Type, TypeBase
from tests.hal.render_harness import (
    Case,
    Runner,
    compare,
    cpu_settings,
    kernel_list,
    run_reference,
)
from tests.semtree.kernels import elementwise_vec4, group_sum, matmul_tile

F16, F32, F64 = DType.FLOAT16, DType.FLOAT32, DType.FLOAT64
I32, I64, U8, BOOL = DType.INT32, DType.INT64, DType.UINT8, DType.BOOLEAN
i, v = sb.global_id(0), sb.var
RANDOM = np.random.default_rng(7)


@pytest.fixture(scope="module")
def runner():
    runner = Runner()
    yield runner
    runner.close()


def check(runner: Runner, cases: list[Case], rtol: float = 0.0, **options: object) -> None:
    compare(cases, runner.run(cases, **options), run_reference(cases), rtol)


def floats(*shape: int) -> np.ndarray:
    return RANDOM.standard_normal(shape).astype(np.float32)


# ---- sample kernels -------------------------------------------------------------------------


def test_sample_kernels(runner: Runner) -> None:
    """The generator-shaped samples of tests/semtree/kernels.py, against numpy too."""
    a, b = floats(64), floats(64)
    left, right = floats(8, 12), floats(12, 16)
    cases = [
        Case(elementwise_vec4(64), [np.zeros(64, np.float32), a, b], (16, 1, 1)),
        Case(matmul_tile(8, 16, 12), [np.zeros((8, 16), np.float32), left, right], (2, 4, 1)),
        Case(group_sum(16, 1), [np.zeros(16, np.float32), a[:16]], (16, 1, 1)),
    ]
    got = runner.run(cases)
    compare(cases, got, run_reference(cases), rtol=1e-6)
    np.testing.assert_allclose(got[0][0], np.maximum(a * 2 + b, 0), rtol=1e-6)
    np.testing.assert_allclose(got[1][0], left @ right, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2][0], a[:16])


# ---- control flow -----------------------------------------------------------------------------


def test_loops_conditionals_and_early_return(runner: Runner) -> None:
    x, total, steps, n = v("x"), v("total"), v("steps"), v("n")
    j, out, source = v("j"), v("out"), v("in")
    collatz = sb.function(
        "collatz",
        [("out", Type.ptr(I32)), ("in", Type.ptr(I32, const=True))],
        [
            sb.declare(I32, "n", source[i]),
            sb.declare(I32, "steps", 0),
            sb.while_(
                n.gt(1),
                [
                    sb.if_((n & 1).eq(0), sb.assign(n, n / 2), sb.assign(n, n * 3 + 1)),
                    sb.assign(steps, steps + 1),
                ],
            ),
            sb.assign(out[i], steps),
        ],
    )
    early = sb.function(
        "early",
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        [
            sb.declare(F32, "x", source[i]),
            sb.if_(x.lt(0.0), [sb.assign(out[i], -1.0), sb.ret()]),
            sb.for_("j", 4, body=sb.if_(j.eq(2), sb.ret(), sb.assign(out[i], x + j))),
            sb.assign(out[i], 99.0),  # never reached: the loop returns at j == 2
        ],
    )
    strided = sb.function(
        "strided",
        [("out", Type.ptr(I64)), ("in", Type.ptr(I64, const=True))],
        [
            sb.declare(I64, "total", 0),
            sb.for_(
                "j",
                5,
                step=3,
                body=sb.for_("k", 2, body=sb.assign(total, total + j * source[i] + v("k"))),
            ),
            sb.for_("j", 0, body=sb.assign(total, -1)),  # zero trips
            sb.if_(total.gt(0), [], sb.assign(total, total * 2)),  # empty then-branch
            sb.barrier(),
            sb.assign(out[i], total),
        ],
    )
    cases = [
        Case(collatz, [np.zeros(40, np.int32), np.arange(1, 41, dtype=np.int32)]),
        Case(early, [np.zeros(16, np.float32), floats(16)]),
        Case(strided, [np.zeros(9, np.int64), np.arange(-4, 5, dtype=np.int64)]),
    ]
    check(runner, cases)


def test_private_and_local_arrays(runner: Runner) -> None:
    """Arrays live on the stack; `init` fills every element; LOCAL arrays are private with
    one work-item per group; long arrays are filled by a loop."""
    prefix, scratch, j = v("prefix"), v("scratch"), v("j")
    out, source = v("out"), v("in")
    function = sb.function(
        "prefix_sum",
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        [
            sb.declare(Type(TypeBase.VALUE, F32, array=8), "prefix", 0.0),
            sb.declare(Type(TypeBase.VALUE, I32, 1, 100, Region.LOCAL), "scratch", 3),
            sb.for_("j", 8, body=sb.assign(prefix[j], source[i * 8 + j])),
            sb.for_("j", 7, body=sb.assign(prefix[j + 1], prefix[j + 1] + prefix[j])),
            sb.assign(scratch[99], scratch[98] * 2),
            sb.for_(
                "j",
                8,
                body=sb.assign(out[i * 8 + j], prefix[j] + sb.cast(F32, scratch[99])),
            ),
        ],
    )
    vector_array = sb.function(
        "vector_array",
        [("out", Type.ptr(U8, 3)), ("in", Type.ptr(U8, 3, const=True))],
        [
            sb.declare(Type(TypeBase.VALUE, U8, 3, 4), "rows"),
            sb.for_("j", 4, body=sb.assign(v("rows")[j], source[i * 4 + j] + j)),
            sb.for_("j", 4, body=sb.assign(out[i * 4 + 3 - j], v("rows")[j])),
        ],
    )
    cases = [
        Case(function, [np.zeros(32, np.float32), floats(32)], (4, 1, 1)),
        Case(
            vector_array,
            [np.zeros(48, np.uint8), RANDOM.integers(0, 256, 48).astype(np.uint8)],
            (4, 1, 1),
        ),
    ]
    check(runner, cases)


def test_work_item_ids_in_three_dimensions(runner: Runner) -> None:
    ids = [sb.global_id(d) for d in range(3)]
    groups = [sb.group_id(d) for d in range(3)]
    linear = ids[0] + 5 * (ids[1] + 3 * ids[2])
    code = ids[0] + 100 * groups[1] + 10000 * ids[2] + sb.local_id(0) + sb.local_id(2)
    function = sb.function(
        "ids", [("out", Type.ptr(I64))], sb.assign(v("out")[linear], sb.cast(I64, code))
    )
    check(runner, [Case(function, [np.full(30, -1, np.int64)], (5, 3, 2))])


# ---- memory -----------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [2, 3, 4, 8, 16])
def test_vector_memory(runner: Runner, width: int) -> None:
    """Vector loads and stores of every memory form (packed: a width-3 vector is three
    scalars), vector arithmetic, comparisons into bool vectors, scalars broadcast."""
    a, b, s = v("a"), v("b"), v("s")
    out, mask, half, wide = v("out"), v("mask"), v("half"), v("wide")
    vector = Type.value(F32, width)
    function = sb.function(
        "vectors",
        [
            ("out", Type.ptr(F32, width)),
            ("mask", Type.ptr(BOOL, width)),
            ("half", Type.ptr(F16, width)),
            ("wide", Type.ptr(I64, width)),
            ("a_in", Type.ptr(F32, width, const=True)),
            ("b_in", Type.ptr(F16, width, const=True)),
            ("s_in", Type.ptr(F32, const=True)),
        ],
        [
            sb.declare(vector, "a", v("a_in")[i]),
            sb.declare(vector, "b", v("b_in")[i]),
            sb.declare(F32, "s", v("s_in")[i]),
            sb.assign(out[i], a * b + s),
            sb.assign(mask[i], sb.or_(a.lt(b), s.gt(0.0))),
            sb.assign(half[i], sb.select(mask[i], a, b * 2.0)),
            sb.assign(wide[i], sb.cast(Type.value(I64, width), a * 1000.0) >> 3),
        ],
    )
    count = 6
    cases = [
        Case(
            function,
            [
                np.zeros(count * width, np.float32),
                np.zeros(count * width, bool),
                np.zeros(count * width, np.float16),
                np.zeros(count * width, np.int64),
                floats(count * width),
                floats(count * width).astype(np.float16),
                floats(count),
            ],
            (count, 1, 1),
        )
    ]
    check(runner, cases, rtol=1e-6)


def test_pointer_variables_and_casts(runner: Runner) -> None:
    """Pointer arithmetic, pointer variables (assigned parameters too), a scalar pointer
    reinterpreted as a vector pointer, arrays of pointers, selects between pointers."""
    a, row, rows = v("a"), v("row"), v("rows")
    out = v("out")
    cptr = Type.ptr(F32, const=True)
    function = sb.function(
        "pointers",
        [("out", Type.ptr(F32)), ("quads", Type.ptr(F32, 4)), ("a", cptr), ("b", cptr)],
        [
            sb.declare(cptr, "row", a + i * 4),
            sb.declare(Type(TypeBase.POINTER_CONST, F32, array=2, region=Region.GLOBAL), "rows"),
            sb.assign(rows[0], row),
            sb.assign(rows[1], sb.select(i.lt(2), row + 2, row + 1)),
            sb.declare(Type.ptr(F32, 4, const=True), "quad", sb.cast(Type.ptr(F32, 4, True), a)),
            sb.assign(a, a - 1),
            sb.assign(
                out[i],
                rows[0][3] + rows[1][1] * 10 + a[1 + i * 4] * 1000 + v("b")[i] * 10000,
            ),
            sb.assign(v("quads")[i], v("quad")[3 - i] * 2.0),
            sb.declare(Type.ptr(F32), "target", out + 4 + i - 4),
            sb.assign(v("target")[0], out[i] + sb.cond(i.gt(1), rows[1][0], 0.5)),
        ],
    )
    arrays = [np.zeros(4, np.float32), np.zeros(16, np.float32), floats(16), floats(4)]
    case = Case(function, arrays, (4, 1, 1))
    check(runner, [case], rtol=1e-6)


# ---- Select and Cond ---------------------------------------------------------------------------


def test_select_and_cond(runner: Runner) -> None:
    """Cond reads only the chosen branch (here: out-of-range elements are never read);
    Select evaluates both; vector conditions choose lane by lane."""
    x, out, source = v("x"), v("out"), v("in")
    n = 10
    guarded = sb.function(
        "guarded",
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        [
            sb.assign(out[i], sb.cond(i.lt(n), source[i], sb.cond(i.lt(n + 2), 1.0, -1.0))),
            sb.assign(out[i], out[i] + sb.select(i.lt(n), 1.0, sb.cast(F32, i))),
        ],
    )
    vector = Type.value(F32, 4)
    lanes = sb.function(
        "lanes",
        [
            ("out", Type.ptr(F32, 4)),
            ("in", Type.ptr(F32, 4, const=True)),
            ("other", Type.ptr(F32, 4, const=True)),
        ],
        [
            sb.declare(vector, "x", source[i]),
            sb.assign(
                out[i],
                sb.cond(x.gt(0.0), v("other")[i] * 2.0, sb.select(x.lt(-1.0), x, 7)),
            ),
            sb.assign(out[i], out[i] + sb.cond(x.gt(0.0), 1, 0)),
        ],
    )
    count = 16
    cases = [
        Case(guarded, [np.zeros(count, np.float32), floats(n)], (count, 1, 1)),
        Case(lanes, [np.zeros(4 * count, np.float32), floats(4 * count), floats(4 * count)]),
    ]
    cases[1].grid = (count, 1, 1)
    check(runner, cases, rtol=1e-6)
    text = str(render(kernel_list(cases[:1]), cpu_settings()))
    assert "cond.then" in text  # the subscripting branch sits behind a branch


def test_cond_without_memory_access_is_a_select() -> None:
    function = sb.function(
        "pure", [("out", Type.ptr(F32))], sb.assign(v("out")[i], sb.cond(i.lt(3), 1.0, 2.0))
    )
    text = str(render(kernel_list([Case(function, [np.zeros(4, np.float32)])]), cpu_settings()))
    assert "cond.then" not in text
    assert "select" in text


# ---- denormals -------------------------------------------------------------------------------


def test_denormals_are_flushed_by_default_and_the_mode_restored(runner: Runner) -> None:
    a, b = v("a"), v("b")
    function = sb.function(
        "tiny",
        [
            ("out", Type.ptr(F32)),
            ("a", Type.ptr(F32, const=True)),
            ("b", Type.ptr(F32, const=True)),
        ],
        sb.assign(v("out")[i], a[i] * b[i]),
    )
    values = np.array([1e-20, 3e-30, 1e-38, 2.0], np.float32)
    factors = np.array([1e-20, 1.0, 0.5, 3e-39], np.float32)  # products: denormal but one
    case = Case(function, [np.zeros(4, np.float32), values, factors])
    exact = values * factors
    assert np.count_nonzero((exact != 0) & (np.abs(exact) < np.finfo(np.float32).tiny)) == 3
    for _ in range(2):  # the flushing kernel must leave the thread's mode as it found it
        flushed = runner.run([case], flush_denormals=True)[0][0]
        tiny = np.finfo(np.float32).tiny
        np.testing.assert_array_equal(flushed, np.where(np.abs(exact) < tiny, 0, exact))
        np.testing.assert_array_equal(runner.run([case])[0][0], exact)


# ---- module structure --------------------------------------------------------------------------


def _info(name: str, body, params, grid=(4, 1, 1), **extra) -> KernelInfo:
    return KernelInfo(name, KernelKind.SPECIAL, params, grid, (1, 1, 1), body, 0, 0, **extra)


def _copy_body(name: str = "copy4"):
    return sb.function(
        name,
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        sb.assign(v("out")[i], v("in")[i] + 1.0),
    )


def _params(out: str = "y", source: str = "x") -> tuple[KernelParam, KernelParam]:
    return (
        KernelParam(out, Direction.OUT, F32, (4,)),
        KernelParam(source, Direction.IN, F32, (4,)),
    )


def test_module_structure_and_determinism() -> None:
    """One `@K` + `@K__grid` per distinct body; ZERO/COPY kernels render nothing; the text
    is the same every time and LLVM verifies it; parameters carry noalias, align 64 and
    their size, except where the kernel list says two of them may share memory."""
    body = _copy_body()
    shapes = {name: TensorShape(F32, (4,)) for name in ("x", "y", "z", "w")}
    kernels = (
        KernelInfo(
            "zero",
            KernelKind.ZERO,
            (KernelParam("w", Direction.OUT, F32, (4,)),),
            (0, 0, 0),
            (0, 0, 0),
            None,
            0,
            0,
        ),
        _info("first", body, _params("y", "x")),
        _info("second", body, _params("z", "y")),
        _info("aliased", _copy_body("inplace"), _params("w", "x"), safe_self_aliases=[("w", "x")]),
    )
    kernel_list = KernelList(kernels, shapes, ("x",), ("z", "w"), ("y",))
    text = str(render(kernel_list, cpu_settings()))
    assert text == str(render(kernel_list, cpu_settings()))
    module = llvm.parse_assembly(text)
    module.verify()
    defined = sorted(function.name for function in module.functions if not function.is_declaration)
    assert defined == ["copy4", "copy4__grid", "inplace", "inplace__grid"]
    assert text.count("noalias") == 2  # copy4's two parameters; none for `inplace`
    assert "align 64 dereferenceable(16)" in text
    assert "ldmxcsr" in text
    assert "ldmxcsr" not in str(render(kernel_list, cpu_settings(), flush_denormals=False))


def test_empty_kernel_list_renders_an_empty_module() -> None:
    shapes = {"w": TensorShape(F32, (4,))}
    zero = KernelInfo(
        "zero", KernelKind.ZERO, (KernelParam("w", Direction.OUT, F32, (4,)),), (0, 0, 0),
        (0, 0, 0), None, 0, 0,
    )  # fmt: skip
    module = render(KernelList((zero,), shapes, (), ("w",), ()), cpu_settings())
    assert not [function for function in module.functions if not function.is_declaration]


def test_a_body_shared_by_launches_on_different_grids_gets_an_entry_per_grid() -> None:
    """One work-group function, one grid entry point per distinct grid (the fuzzer found a
    matmul body shared by a 2 x 17 and a 1 x 17 product refused)."""
    body = _copy_body()
    shapes = {name: TensorShape(F32, (4,)) for name in ("x", "y", "z", "w")}
    kernels = (
        _info("a", body, _params("y", "x")),
        _info("b", body, _params("z", "y"), (2, 2, 1)),
        _info("c", body, _params("w", "z")),
    )
    module = render(KernelList(kernels, shapes, ("x",), ("w",), ("y", "z")), cpu_settings())
    defined = {f.name for f in module.functions if not f.is_declaration}
    assert {"copy4__grid", "copy4__grid1"} <= defined
    assert "copy4__grid2" not in defined  # c launches a's grid: it shares a's entry point
    assert grid_symbols(kernels) == {
        0: ("copy4__grid", 0),
        1: ("copy4__grid1", 1),
        2: ("copy4__grid", 0),
    }


def test_refusals() -> None:
    """Non-pointer parameters."""
    body = _copy_body()
    scalar = dataclasses.replace(body, params=(*body.params, Param("n", Type.value(I32))))
    with pytest.raises(UnsupportedNode, match="buffer pointers"):
        KernelEmitter(Declarations(ir.Module()), scalar, cpu_settings(), [])


def test_unsupported_statement_fails_loudly() -> None:
    """A Return with a value has no meaning in a kernel (bodies return void)."""
    bad = sb.function("bad", [("out", Type.ptr(F32))], sb.ret(1.0), ret=Type.value(F32))
    case = Case(bad, [np.zeros(1, np.float32)])
    with pytest.raises(UnsupportedNode):
        render(kernel_list([case]), cpu_settings())


def test_logical_operators_do_not_short_circuit_but_are_exact(runner: Runner) -> None:
    a, b = v("a"), v("b")
    function = sb.function(
        "logic",
        [
            ("out", Type.ptr(BOOL)),
            ("a", Type.ptr(F32, const=True)),
            ("b", Type.ptr(I32, const=True)),
        ],
        sb.assign(
            v("out")[i],
            sb.or_(sb.and_(a[i], b[i]), sb.not_(a[i]), Cond(i.lt(2).node, b[i].node, a[i].node)),
        ),
    )
    values = np.array([0.0, np.nan, 1.5, 0.0, -0.0, 2.0], np.float32)
    integers = np.array([0, 0, 3, 5, 0, 0], np.int32)
    check(runner, [Case(function, [np.zeros(6, bool), values, integers])])
