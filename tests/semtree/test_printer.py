"""CPrinter: golden text for the sample kernels, expression details, and the override hooks
the OpenCL renderer will use."""

from __future__ import annotations

import pytest

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Builtin,
    Expr,
    FloatConst,
    IntConst,
    Limit,
    LimitConst,
    Load,
    Lookup,
    Unary,
    UnOp,
    UnsupportedNode,
)
from semtree.printer import CPrinter
from semtree.types import DType, Region, Type, TypeBase
from tests.semtree.kernels import elementwise_vec4, group_sum, matmul_tile

F16, F32, F64, I32 = DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT32
v = sb.var

ELEMENTWISE = """\
void scale_add_relu(global float4* out, global const float4* a, global const float4* b) {
  if (get_global_id(0) < 16) {
    float4 x = a[get_global_id(0)] * 2.0 + b[get_global_id(0)];
    out[get_global_id(0)] = select(x, 0.0, x < 0.0);
  }
}
"""

MATMUL = """\
void matmul_tile(global float4* C, global const float* A, global const float4* B) {
  float4 agg[4];
  for (int agg_fill = 0; agg_fill < 4; agg_fill += 1) agg[agg_fill] = 0.0;
  for (int k = 0; k < 3; k += 1) {
    float4 b_row[2];
    for (int v = 0; v < 2; v += 1) {
      b_row[v] = B[k * 4 + get_global_id(0) * 2 + v];
    }
    for (int r = 0; r < 2; r += 1) {
      float a_value = A[(get_global_id(1) * 2 + r) * 3 + k];
      for (int v = 0; v < 2; v += 1) {
        agg[r * 2 + v] = mad(a_value, b_row[v], agg[r * 2 + v]);
      }
    }
  }
  for (int r = 0; r < 2; r += 1) {
    for (int v = 0; v < 2; v += 1) {
      C[(get_global_id(1) * 2 + r) * 4 + get_global_id(0) * 2 + v] = agg[r * 2 + v];
    }
  }
}
"""

GROUP_SUM = """\
void group_sum(global float* out, global const float* in) {
  local float tile[8];
  tile[get_local_id(0)] = get_global_id(0) < 100 ? in[get_global_id(0)] : 0.0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = 0; step < 3; step += 1) {
    int half_ = 4 >> step;
    if (get_local_id(0) < half_) {
      tile[get_local_id(0)] = tile[get_local_id(0)] + tile[get_local_id(0) + half_];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (get_local_id(0) == 0) {
    out[get_group_id(0)] = tile[0];
  }
}
"""


def test_golden_vectorised_elementwise_kernel() -> None:
    assert str(elementwise_vec4(64)) == ELEMENTWISE


def test_golden_matmul_register_tile() -> None:
    assert CPrinter().render(matmul_tile(4, 16, 3)) == MATMUL


def test_golden_local_memory_kernel() -> None:
    assert CPrinter().function(group_sum(100, 8)) == GROUP_SUM


def text(value: object) -> str:
    return str(sb.expr(value))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (lambda: v("a") + v("b") * v("c"), "a + b * c"),
        (lambda: (v("a") + v("b")) * v("c"), "(a + b) * c"),
        (lambda: v("a") - (v("b") - v("c")), "a - (b - c)"),
        (lambda: v("a") - v("b") - v("c"), "a - b - c"),
        (lambda: v("a") / (v("b") * v("c")), "a / (b * c)"),
        (lambda: (v("a") << 2) + 1, "(a << 2) + 1"),
        (lambda: v("a") & v("b") + 1, "a & (b + 1)"),
        (lambda: (v("a") & 1).eq(0), "(a & 1) == 0"),
        (lambda: v("a") | v("b") | v("c"), "a | b | c"),
        (lambda: sb.or_(sb.and_(v("a"), v("b")), v("c")), "(a && b) || c"),
        (lambda: sb.and_(v("a").lt(1), v("b").ge(2)), "a < 1 && b >= 2"),
        (lambda: -(v("a") + 1), "-(a + 1)"),
        (lambda: v("a") - -1, "a - -1"),
        (lambda: Unary(UnOp.NEG, IntConst(-1)), "-(-1)"),
        (lambda: Unary(UnOp.NEG, Unary(UnOp.NEG, Load(Lookup("a")))), "-(-a)"),
        (lambda: ~v("a") ^ 3, "~a ^ 3"),
        (lambda: sb.not_(v("a").lt(1)), "!(a < 1)"),
        (lambda: sb.cast(F32, v("a") + 1), "(float)(a + 1)"),
        (lambda: sb.cast(Type.value(I32, 4), v("a")), "(int4)a"),
        (lambda: sb.cast(Type.index(), v("a")[2]), "(int)a[2]"),
        (lambda: sb.cond(v("c"), v("a"), sb.cond(v("d"), 1, 2)), "c ? a : d ? 1 : 2"),
        (lambda: sb.cond(v("c"), v("a"), 0) + 1, "(c ? a : 0) + 1"),
        (lambda: sb.select(v("c"), v("a"), 0.5), "select(0.5, a, c)"),
        (lambda: sb.clamp(v("i"), 0, v("n") - 1), "clamp(i, 0, n - 1)"),
        (lambda: sb.call(Builtin.MAD, v("a"), v("b"), v("c")), "mad(a, b, c)"),
        (lambda: sb.call(Builtin.POW, v("a"), 2.0), "pow(a, 2.0)"),
        (lambda: v("p")[v("i")][v("j") * 2], "p[i][j * 2]"),
        (
            lambda: sb.global_id(1) + sb.group_id(2) + sb.local_id(0),
            "get_global_id(1) + get_group_id(2) + get_local_id(0)",
        ),
    ],
)
def test_expressions(expr: object, expected: str) -> None:
    assert text(expr()) == expected  # type: ignore[operator]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (IntConst(7), "7"),
        (IntConst(-(2**31)), "(-2147483647 - 1)"),
        (IntConst(2**31), "2147483648L"),
        (IntConst(-(2**31) - 1), "-2147483649L"),
        (IntConst(-(2**63)), "(-9223372036854775807L - 1)"),
        (IntConst(2**64 - 1), "18446744073709551615UL"),
        (FloatConst(0.5), "0.5"),
        (FloatConst(1.0), "1.0"),
        (FloatConst(1e-5), "1e-05"),
        (FloatConst(float("inf")), "INFINITY"),
        (FloatConst(float("-inf")), "-INFINITY"),
        (FloatConst(float("nan")), "NAN"),
        (LimitConst(Limit.MIN, F32), "-FLT_MAX"),
        (LimitConst(Limit.MAX, F64), "DBL_MAX"),
        (LimitConst(Limit.MAX, F16), "HALF_MAX"),
        (LimitConst(Limit.MIN, I32), "INT_MIN"),
        (LimitConst(Limit.MIN, DType.UINT8), "0"),
        (LimitConst(Limit.MAX, DType.UINT64), "ULONG_MAX"),
        (LimitConst(Limit.MIN, DType.INT8), "CHAR_MIN"),
        (LimitConst(Limit.ZERO, F32), "0.0f"),
        (LimitConst(Limit.ONE, F64), "1.0"),
        (LimitConst(Limit.ONE, I32), "1"),
        (LimitConst(Limit.ZERO, DType.UINT16), "(ushort)0"),
        (LimitConst(Limit.ONE, DType.BOOLEAN), "true"),
    ],
)
def test_literals_and_limits(value: Expr, expected: str) -> None:
    assert str(value) == expected


def test_negative_limits_are_parenthesised_after_unary_minus() -> None:
    assert str(Unary(UnOp.NEG, LimitConst(Limit.MIN, F32))) == "-(-FLT_MAX)"
    assert str(Binary(BinOp.SUB, Load(Lookup("a")), FloatConst(-2.0))) == "a - -2.0"


def test_statements() -> None:
    x = v("x")
    stmt = sb.block(
        sb.declare(Type.ptr(F32, 4, const=True), "row", v("in") + 4),
        sb.declare(Type(TypeBase.POINTER_CONST, F32, array=2, region=Region.GLOBAL), "rows"),
        sb.declare(Type(TypeBase.VALUE, DType.UINT8, 8, 4, Region.LOCAL), "bytes"),
        sb.declare(Type.value(DType.BOOLEAN), "flag", True),
        sb.if_(x.lt(0), sb.assign(x, 0), sb.if_(x.gt(9), sb.assign(x, 9), sb.ret())),
        sb.while_(x.gt(0), sb.assign(x, x - 1)),
        sb.for_("k", 4, 16, sb.barrier()),
        sb.ret(x),
    )
    assert str(stmt) == (
        "{\n"
        "  global const float4* row = in + 4;\n"
        "  global const float* rows[2];\n"
        "  local uchar8 bytes[4];\n"
        "  bool flag = true;\n"
        "  if (x < 0) {\n"
        "    x = 0;\n"
        "  } else if (x > 9) {\n"
        "    x = 9;\n"
        "  } else {\n"
        "    return;\n"
        "  }\n"
        "  while (x > 0) {\n"
        "    x = x - 1;\n"
        "  }\n"
        "  for (int k = 0; k < 64; k += 16) {\n"
        "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "  }\n"
        "  return x;\n"
        "}"
    )


def test_spans_become_comments_when_asked() -> None:
    function = sb.function(
        "k",
        [("out", Type.ptr(F32))],
        [
            sb.assign(v("out")[0], 1.0, span="O = 1.0"),
            sb.if_(1, [], sb.if_(0, [], span="inner"), span="outer"),
        ],
        Type.void(),
    )
    assert CPrinter(spans=True).function(function) == (
        "void k(global float* out) {\n"
        "  // O = 1.0\n"
        "  out[0] = 1.0;\n"
        "  // outer\n"
        "  if (1) {\n"
        "  } else {\n"
        "    // inner\n"
        "    if (0) {\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    assert "//" not in str(function)


class OpenCLish(CPrinter):
    """What a subclass overrides to print OpenCL C."""

    def function_qualifier(self) -> str:
        return "__kernel "

    def address_space(self, region: Region) -> str:
        return "" if region is Region.PRIVATE else f"__{region.value}"

    def builtin_name(self, fn: Builtin, args: tuple[Expr, ...]) -> str:
        if fn is Builtin.MAX and self.type_of(args[0]).is_float:
            return "fmax"
        return super().builtin_name(fn, args)

    def float_literal(self, value: float) -> str:
        return super().float_literal(value) + "f"


def test_hooks_retarget_the_printer() -> None:
    function = sb.function(
        "k",
        [("out", Type.ptr(F32)), ("n", Type.value(I32))],
        [
            sb.declare(Type(TypeBase.VALUE, F32, array=4, region=Region.LOCAL), "tile"),
            sb.assign(v("tile")[0], sb.call(Builtin.MAX, v("out")[0], 0.5)),
            sb.assign(v("n"), sb.call(Builtin.MAX, v("n"), 1)),
        ],
    )
    assert OpenCLish().function(function) == (
        "__kernel void k(__global float* out, int n) {\n"
        "  __local float tile[4];\n"
        "  tile[0] = fmax(out[0], 0.5f);\n"
        "  n = max(n, 1);\n"
        "}\n"
    )


def test_scope_tracking_follows_blocks_and_loops() -> None:
    seen: list[tuple[str, ...]] = []

    class Spy(CPrinter):
        def barrier(self) -> str:
            seen.append(tuple(sorted(self.scope)))
            return super().barrier()

    function = sb.function(
        "k",
        [("out", Type.ptr(F32))],
        [
            sb.block(sb.declare(F32, "inner"), sb.barrier()),
            sb.for_("j", 2, body=sb.barrier()),
            sb.barrier(),
        ],
    )
    Spy().function(function)
    assert seen == [("inner", "out"), ("j", "out"), ("out",)]


def test_unknown_nodes_fail_loudly() -> None:
    with pytest.raises(UnsupportedNode):
        CPrinter().render(object())  # type: ignore[arg-type]
