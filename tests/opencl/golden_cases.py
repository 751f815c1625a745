"""Kernel lists whose OpenCL C is pinned in `tests/golden/<case>.cl`: the printer's sample
kernels (vector elementwise, register-tiled matmul, local-memory reduction), one case per
family of OpenCL-specific spellings (integer semantics, half storage, boolean masks,
conversions), and programs as the generator writes them for an OpenCL CPU device (a
reduction in lanes, a padded convolution on the vector path, a split reduction)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from unittest import mock

import numpy as np

import tile
from semtree import builder as sb
from semtree.kernel import HardwareSettings
from semtree.nodes import Builtin, Cond, Limit
from semtree.types import DType, Region, Type, TypeBase
from tests.opencl.harness import kernel, kernel_list
from tests.semtree.kernels import elementwise_vec4, group_sum, matmul_tile
from tile.lower import split as gen_split
from tile.lower.generate import generate_program

if TYPE_CHECKING:
    from collections.abc import Callable

    from semtree.kernel import KernelList

F16, F32, F64 = DType.FLOAT16, DType.FLOAT32, DType.FLOAT64
I8, I32, I64, U16 = DType.INT8, DType.INT32, DType.INT64, DType.UINT16


def scale_add_relu() -> KernelList:
    return kernel_list(kernel(elementwise_vec4(64), 64, (16,)))


def matmul() -> KernelList:
    sizes = {"C": 64, "A": 12, "B": 48}
    return kernel_list(kernel(matmul_tile(4, 16, 3), sizes, (2, 2), comments="C = A @ B"))


def local_sum() -> KernelList:
    sizes = {"out": 13, "in": 100}
    return kernel_list(kernel(group_sum(100, 8), sizes, (104,), (8,)))


def integer_semantics() -> KernelList:
    """Wrapping arithmetic, guarded division, shifts modulo the width, on narrow, 32-bit,
    64-bit and vector integers; an in-place update whose parameters may alias."""
    i = sb.global_id(0)
    a8, b8, a32, b64 = sb.var("a8"), sb.var("b8"), sb.var("a32"), sb.var("b64")
    v4, u16, acc = sb.var("v4"), sb.var("u16"), sb.var("acc")
    body = [
        sb.assign(a8[i], (a8[i] + b8[i]) * 3 - (a8[i] << b8[i]), span="A8 = (A8 + B8) * 3 - ..."),
        sb.assign(a32[i], a32[i] / sb.cast(I32, b8[i]) + a32[i] % 7 - (a32[i] >> 33)),
        sb.assign(u16[i], -u16[i] * u16[i] / 3 + ~u16[i]),
        sb.declare(I64, "acc", sb.cast(I64, a32[i]) * b64[i]),
        sb.assign(b64[i], acc / b64[i] + sb.call(Builtin.ABS, acc) - sb.call(Builtin.MAX, acc, 5)),
        sb.assign(v4[i], v4[i] / (v4[i] - 1) + (v4[i] << 2) + sb.call(Builtin.MAD, v4[i], 3, 1)),
    ]
    params = [
        ("a8", Type.ptr(I8)),
        ("a32", Type.ptr(I32)),
        ("u16", Type.ptr(U16)),
        ("b64", Type.ptr(I64)),
        ("v4", Type.ptr(I32, 4)),
        ("b8", Type.ptr(I8, const=True)),
    ]
    function = sb.function("integer_semantics", params, body)
    info = kernel(
        function,
        {"a8": 16, "a32": 16, "u16": 16, "b64": 16, "v4": 64, "b8": 16},
        (16,),
        aliases=[("a8", "b8")],
        comments="integer corner cases\n(spec 7.4)",
    )
    return kernel_list(info)


def half_storage() -> KernelList:
    """Half buffers without cl_khr_fp16: vload_half / vstore_half (scalar, 4 and 3 lanes),
    half variables as float, casts to half that round (from float and from double)."""
    i = sb.global_id(0)
    h, h4, h3, d, x = sb.var("h"), sb.var("h4"), sb.var("h3"), sb.var("d"), sb.var("x")
    body = [
        sb.declare(F16, "x", h[i] * 0.5 + 1.0),  # a half variable holds a float
        sb.assign(h[i], sb.cast(F16, x * x) + sb.cast(F16, d[i])),
        sb.assign(h4[i], h4[i] * x + sb.call(Builtin.EXP, h4[i])),
        sb.assign(h3[i], sb.cast(Type.value(F16, 3), h3[i] / 3.0)),
        sb.assign(d[i], sb.limit(Limit.MAX, F16) + d[i]),
    ]
    params = [
        ("h", Type.ptr(F16)),
        ("h4", Type.ptr(F16, 4)),
        ("h3", Type.ptr(F16, 3)),
        ("d", Type.ptr(F64)),
    ]
    sizes = {"h": 16, "h4": 64, "h3": 48, "d": 16}
    return kernel_list(kernel(sb.function("half_storage", params, body), sizes, (16,)))


def boolean_masks() -> KernelList:
    """Vector comparisons as masks, booleans in memory and in a variable, select with a mask,
    a lazy vector Cond whose branch reads memory, logic between scalars and vectors."""
    i = sb.global_id(0)
    a, b, flags, picked, counts = (sb.var(n) for n in ("a", "b", "flags", "picked", "counts"))
    mask, seen = sb.var("mask"), sb.var("seen")
    body = [
        sb.declare(Type.boolean(4), "mask", sb.and_(a[i].gt(b[i]), sb.not_(seen[i]))),
        sb.assign(flags[i], sb.or_(mask, b[i].eq(0.0))),
        sb.assign(picked[i], sb.select(mask, a[i], sb.call(Builtin.SQRT, b[i]))),
        sb.assign(picked[i + 16], Cond(mask.node, a[i + 1].node, sb.expr(0.0))),
        sb.assign(counts[i], sb.select(a[i].lt(b[i]), 1, 0) + sb.cast(Type.value(I32, 4), mask)),
    ]
    params = [
        ("flags", Type.ptr(DType.BOOLEAN, 4)),
        ("picked", Type.ptr(F32, 4)),
        ("counts", Type.ptr(I32, 4)),
        ("a", Type.ptr(F32, 4, const=True)),
        ("b", Type.ptr(F32, const=True)),
        ("seen", Type.ptr(DType.BOOLEAN, 4, const=True)),
    ]
    sizes = {"flags": 64, "picked": 128, "counts": 64, "a": 68, "b": 16, "seen": 64}
    return kernel_list(kernel(sb.function("boolean_masks", params, body), sizes, (16,)))


def conversions() -> KernelList:
    """Saturating float to integer (NaN-safe helpers), integer to float, booleans to numbers,
    literals converted when rendered, limits, a local array declared in a nested block."""
    i = sb.global_id(0)
    f, f4, out, out4, scratch = (sb.var(n) for n in ("f", "f4", "out", "out4", "scratch"))
    local = Type(TypeBase.VALUE, F32, array=4, region=Region.LOCAL)
    body = [
        sb.assign(out[i], sb.cast(I8, f[i]) + sb.cast(I32, f[i].gt(1.5))),
        sb.assign(out4[i], sb.cast(Type.value(I32, 4), f4[i]) + sb.cast(I32, 300.7)),
        sb.assign(f[i], sb.cast(F32, out[i]) + sb.limit(Limit.MIN, F32) * 0.0),
        sb.if_(
            i.lt(4),
            [
                sb.declare(local, "scratch", 2.0),
                sb.assign(f4[i], sb.cast(Type.value(F32, 4), out4[i]) + scratch[i]),
            ],
        ),
    ]
    params = [
        ("out", Type.ptr(I32)),
        ("out4", Type.ptr(I32, 4)),
        ("f", Type.ptr(F32)),
        ("f4", Type.ptr(F32, 4)),
    ]
    sizes = {"out": 4, "out4": 16, "f": 4, "f4": 16}
    return kernel_list(kernel(sb.function("conversions", params, body), sizes, (4,), (4,)))


# The settings PoCL gets on an AVX2 host (8 floats per vector).
OPENCL_CPU = HardwareSettings.opencl_cpu(
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    max_compute_units=2,
    preferred_vector_width_float=8,
    global_mem_cacheline_size=64,
    extensions=("cl_khr_fp64",),
)


def generated(source: str, shapes: dict[str, tuple[int, ...]]) -> KernelList:
    inputs = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    return generate_program(tile.Function(source).bind(inputs), OPENCL_CPU)


def lane_reduction() -> KernelList:
    """Row maxima over 64 lanes, folded pairwise."""
    return generated("function (X[M, N]) -> (O) { O[m: M] = >(X[m, n]); }", {"X": (3, 128)})


def padded_convolution() -> KernelList:
    """The register-tiled vector path with guards: whole-tile and per-row variants."""
    source = """function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
        O[n, y, x, co: N, H, W, CO] = +(I[n, y + i - 1, x + j - 1, ci] * K[i, j, ci, co]);
    }"""
    return generated(source, {"I": (1, 5, 9, 3), "K": (3, 3, 3, 16)})


def split_sum() -> KernelList:
    """A sum to one element as partials over a temporary, then their total."""
    with mock.patch.object(gen_split, "MIN_SPLIT_TUPLES", 1024):
        return generated("function (X[N]) -> (O) { O[] = +(X[i]); }", {"X": (2048,)})


CASES: dict[str, Callable[[], KernelList]] = {
    "scale_add_relu": scale_add_relu,
    "matmul_tile": matmul,
    "group_sum": local_sum,
    "integer_semantics": integer_semantics,
    "half_storage": half_storage,
    "boolean_masks": boolean_masks,
    "conversions": conversions,
    "lane_reduction": lane_reduction,
    "padded_convolution": padded_convolution,
    "split_sum": split_sum,
}
