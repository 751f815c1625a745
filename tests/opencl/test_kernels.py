"""Whole kernels on the OpenCL device: loops, ifs, while, early return, private and local
arrays, barriers in multi-work-item work-groups (1-D and 2-D), vectors and boolean masks,
`Cond`/`Select` in every scalar/vector combination, pointer variables, arithmetic and casts.
Checked against the reference interpreter and, for the sample kernels, against numpy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from semtree import builder as sb
from semtree.nodes import Cond, Select
from semtree.types import DType, Region, Type, TypeBase
from tests.opencl.harness import check_against_reference, kernel, kernel_list, with_prefix
from tests.semtree.kernels import elementwise_vec4, group_sum, matmul_tile

if TYPE_CHECKING:
    import hal
    from semtree.kernel import KernelInfo, KernelList

F16, F32, I32 = DType.FLOAT16, DType.FLOAT32, DType.INT32
N = 64


def control_kernel() -> KernelInfo:
    """While, if / else-if chains, early return, stepped loops, private arrays (scalar and
    vector, with initialisers), a half variable (float in registers) and a bool variable."""
    i, x = sb.global_id(0), sb.var("x")
    source, out, steps = sb.var("ctl_in"), sb.var("ctl_out"), sb.var("ctl_steps")
    n, count, acc, flags = sb.var("n"), sb.var("count"), sb.var("acc"), sb.var("flags")
    vectors, h, k = sb.var("vectors"), sb.var("h"), sb.var("k")
    body = [
        sb.if_(  # the last two work-items stop at once
            i.ge(N - 2),
            [
                sb.assign(out[i], -5.0),
                sb.assign(steps[i], -5),
                sb.assign(sb.var("ctl_vec")[i], 2.0),
                sb.ret(),
            ],
        ),
        sb.declare(I32, "n", (sb.cast(I32, source[i]) & 63) + 1),  # 1 to 64: ends
        sb.declare(I32, "count", 0),
        sb.while_(
            n.ne(1),
            [
                sb.if_((n & 1).eq(0), sb.assign(n, n / 2), sb.assign(n, n * 3 + 1)),
                sb.assign(count, count + 1),
            ],
        ),
        sb.assign(steps[i], count),
        sb.declare(Type(TypeBase.VALUE, F32, array=5), "acc", 0.5),
        sb.declare(Type(TypeBase.VALUE, DType.BOOLEAN, array=4), "flags"),
        sb.declare(Type(TypeBase.VALUE, F32, 4, array=2), "vectors", 1.0),
        sb.for_("k", 4, 2, [sb.assign(acc[k / 2], acc[k / 2 + 1] + source[i] * k)]),
        sb.for_("k", 4, body=sb.assign(flags[k], (sb.cast(I32, source[i]) >> k).gt(2))),
        sb.assign(vectors[1], vectors[0] * acc[1]),
        sb.declare(F16, "h", source[i] / 3.0),  # half variable: float in registers
        sb.declare(F32, "x", 0.0),
        sb.if_(
            flags[0],
            sb.assign(x, acc[0]),
            sb.if_(flags[1], sb.assign(x, h), sb.if_(flags[2], sb.assign(x, -1.0))),
        ),
        sb.assign(out[i], x + acc[1]),
        sb.assign(sb.var("ctl_vec")[i], vectors[1]),
    ]
    params = [
        ("ctl_out", Type.ptr(F32)),
        ("ctl_steps", Type.ptr(I32)),
        ("ctl_vec", Type.ptr(F32, 4)),
        ("ctl_in", Type.ptr(F32, const=True)),
    ]
    sizes = {"ctl_out": N, "ctl_steps": N, "ctl_vec": 4 * N, "ctl_in": N}
    return kernel(sb.function("control", params, body), sizes, (N,))


def tiles_2d_kernel() -> KernelInfo:
    """4x2 work-groups transposing an 8x8 tile through local memory, with local arrays of
    int, bool and half, group and local ids in two dimensions, and barriers."""
    lx, ly = sb.local_id(0), sb.local_id(1)
    gx, gy = sb.group_id(0), sb.group_id(1)
    tile, seen, halves = sb.var("tile"), sb.var("seen"), sb.var("halves")
    source, out, marks = sb.var("t2_in"), sb.var("t2_out"), sb.var("t2_marks")
    row, column = gy * 2 + ly, gx * 4 + lx
    body = [
        sb.declare(Type(TypeBase.VALUE, I32, array=8, region=Region.LOCAL), "tile"),
        sb.declare(
            Type(TypeBase.VALUE, DType.BOOLEAN, array=8, region=Region.LOCAL), "seen", False
        ),
        sb.declare(Type(TypeBase.VALUE, F16, array=8, region=Region.LOCAL), "halves"),
        sb.assign(tile[ly * 4 + lx], source[row * 8 + column]),
        sb.assign(halves[ly * 4 + lx], sb.cast(F32, source[row * 8 + column]) / 7.0),
        sb.barrier(),
        sb.assign(seen[(ly * 4 + lx + 1) % 8], tile[ly * 4 + lx].gt(20)),
        sb.barrier(),
        sb.assign(out[column * 8 + row], tile[(1 - ly) * 4 + (3 - lx)] + tile[ly * 4 + lx]),
        sb.assign(marks[column * 8 + row], sb.select(seen[ly * 4 + lx], halves[lx], -1.0)),
    ]
    params = [
        ("t2_out", Type.ptr(I32)),
        ("t2_marks", Type.ptr(F32)),
        ("t2_in", Type.ptr(I32, const=True)),
    ]
    return kernel(sb.function("tiles_2d", params, body), N, (8, 8), (4, 2))


def choice_kernel() -> KernelInfo:
    """Cond and Select with scalar and vector conditions and branches, boolean vectors in
    memory and variables, a lazy vector Cond guarding an out-of-range read, pointers."""
    i = sb.global_id(0)
    a4, b, c = sb.var("ch_a4"), sb.var("ch_b"), sb.var("ch_c")
    o4, oi4, ob4, os = sb.var("ch_o4"), sb.var("ch_oi4"), sb.var("ch_ob4"), sb.var("ch_os")
    mask, pointer, wide = sb.var("mask"), sb.var("pointer"), sb.var("wide")
    count = N // 4
    body = [
        sb.declare(Type.boolean(4), "mask", a4[i].gt(b[i])),
        sb.assign(o4[i], sb.select(mask, a4[i], b[i])),  # vector mask, scalar branch
        # 0/1 numbers from a mask, two ways: Select and a Cast of the boolean vector
        sb.assign(oi4[i], sb.select(a4[i].lt(0.0), 1, 0) + sb.cast(Type.value(I32, 4), mask)),
        sb.assign(ob4[i], sb.and_(mask, sb.not_(a4[i].eq(0.0)), b[i].gt(-1.0))),
        sb.assign(o4[i + count], sb.select(b[i].gt(0.0), a4[i] * 2, c[i])),  # scalar cond
        sb.assign(
            o4[i + 2 * count],
            Cond(
                sb.and_(mask, i.lt(count - 1)).node,  # for the last work-item, the branch
                a4[i + 1].node,  # reads out of range: it must not be evaluated there
                sb.expr(7.5),
            ),
        ),
        sb.declare(Type.ptr(F32, const=True), "pointer", sb.var("ch_b") + 3),
        sb.declare(Type.ptr(F32, 4, const=True), "wide", sb.cast(Type.ptr(F32, 4, const=True), b)),
        sb.assign(o4[i + 3 * count], sb.cond(c[i], wide[i / 4], sb.clamp(a4[i], -1.0, c[i]))),
        sb.assign(os[i], sb.cond(i.lt(count - 3), pointer[i], -1.0)),
        sb.assign(os[i + count], Select(b[i].node, c[i].node, sb.expr(2))),
        sb.assign(os[i + 2 * count], sb.cast(F32, b[i].gt(0.0)) * c[i]),
    ]
    params = [
        ("ch_o4", Type.ptr(F32, 4)),
        ("ch_oi4", Type.ptr(I32, 4)),
        ("ch_ob4", Type.ptr(DType.BOOLEAN, 4)),
        ("ch_os", Type.ptr(F32)),
        ("ch_a4", Type.ptr(F32, 4, const=True)),
        ("ch_b", Type.ptr(F32, const=True)),
        ("ch_c", Type.ptr(F32, const=True)),
    ]
    sizes = {"ch_o4": 4 * N, "ch_oi4": N, "ch_ob4": N, "ch_os": 3 * count}
    sizes |= {"ch_a4": N, "ch_b": count, "ch_c": count}
    return kernel(sb.function("choices", params, body), sizes, (count,))


def vec4_kernel() -> KernelInfo:
    return kernel(with_prefix(elementwise_vec4(N), "v4_"), N, (N // 4,))


def matmul_kernel() -> KernelInfo:
    # C (4 x 16) = A (4 x 3) @ B (3 x 16): 2 row x 8 column tiles, so a 2 x 2 grid.
    sizes = {"mm_C": 4 * 16, "mm_A": 4 * 3, "mm_B": 3 * 16}
    return kernel(with_prefix(matmul_tile(4, 16, 3), "mm_"), sizes, (2, 2))


def group_sum_kernel() -> KernelInfo:
    # 100 values summed in work-groups of 8: 13 groups, the last partly out of range.
    sizes = {"gs_out": 13, "gs_in": 100}
    return kernel(with_prefix(group_sum(100, 8), "gs_"), sizes, (104,), (8,))


@pytest.fixture(scope="module")
def program() -> KernelList:
    return kernel_list(
        control_kernel(),
        tiles_2d_kernel(),
        choice_kernel(),
        vec4_kernel(),
        matmul_kernel(),
        group_sum_kernel(),
    )


@pytest.fixture(scope="module")
def results(device: hal.Device, program: KernelList) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(7)
    inputs: dict[str, np.ndarray] = {}
    for name in program.inputs:
        shape = program.shapes[name]
        values = generator.uniform(-8, 8, shape.size)
        if shape.dtype is I32:
            values = generator.integers(0, 40, shape.size)
        inputs[name] = values.astype(shape.dtype.numpy)
    inputs["ch_b"][:3] = [0.0, -0.0, np.nan]  # false, false and (NaN) true conditions
    inputs["ctl_in"][:4] = [0.0, 3.0, 63.0, 17.5]
    outputs = check_against_reference(device, program, inputs)
    outputs.update({f"input {name}": value for name, value in inputs.items()})
    return outputs


def test_kernels_agree_with_the_reference(results: dict[str, np.ndarray]) -> None:
    """The comparison itself happens in the fixture; here, a few values by hand."""
    assert results["ctl_steps"][:3].tolist() == [0, 2, 6]  # from n = 1, 4 and 64


def test_sample_kernels_agree_with_numpy(results: dict[str, np.ndarray]) -> None:
    a, b = results["input mm_A"].reshape(4, 3), results["input mm_B"].reshape(3, 16)
    np.testing.assert_allclose(results["mm_C"].reshape(4, 16), a @ b, rtol=1e-4, atol=1e-5)
    values = np.concatenate([results["input gs_in"], np.zeros(4, np.float32)])
    sums = values.reshape(13, 8).sum(axis=1)
    np.testing.assert_allclose(results["gs_out"], sums, rtol=1e-4, atol=1e-5)
    relu = np.maximum(results["input v4_a"] * 2 + results["input v4_b"], 0)
    np.testing.assert_allclose(results["v4_out"], relu, rtol=1e-5, atol=1e-6)


def test_transpose_through_local_memory(results: dict[str, np.ndarray]) -> None:
    tile = results["input t2_in"].reshape(8, 8)
    out = results["t2_out"].reshape(8, 8)  # out[column, row]
    assert out[0, 0] == tile[1, 3] + tile[0, 0]
