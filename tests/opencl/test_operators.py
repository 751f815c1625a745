"""Every BinOp and UnOp over every dtype, scalar and vector (widths 3 and 4), on the OpenCL
device, against the reference interpreter: wrap-around, `x / 0`, `MIN / -1`, shifts by the
width or more, NaN and infinities, mixed-signedness comparisons and INDEX arithmetic.

All kernels of this module are one KernelList, so PoCL builds one program."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from semtree import builder as sb
from semtree.nodes import Binary, BinOp, IdKind, IndexExpr, Unary, UnOp
from semtree.types import DType, Type

if TYPE_CHECKING:
    import hal
    from semtree.kernel import KernelInfo, KernelList

from tests.opencl.harness import (
    check_against_reference,
    edge_values,
    kernel,
    kernel_list,
    run_on_device,
)

COUNT = 240  # a multiple of 3, 4, 8 and 16
INTEGERS = [
    DType.INT8,
    DType.UINT8,
    DType.INT16,
    DType.UINT16,
    DType.INT32,
    DType.UINT32,
    DType.INT64,
    DType.UINT64,
]
FLOATS = [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64]
COMPARISONS = [BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE]
LOGICAL = [BinOp.LAND, BinOp.LOR]
INTEGER_OPS = [
    BinOp.ADD,
    BinOp.SUB,
    BinOp.MUL,
    BinOp.DIV,
    BinOp.MOD,
    BinOp.AND,
    BinOp.OR,
    BinOp.XOR,
    BinOp.SHL,
    BinOp.SHR,
]
FLOAT_OPS = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV]
BOOLEAN_OPS = [BinOp.AND, BinOp.OR, BinOp.XOR]
# Vector cases: (dtype, width).
VECTORS = [
    (DType.INT8, 4),
    (DType.UINT16, 4),
    (DType.INT32, 4),
    (DType.UINT32, 8),
    (DType.INT64, 4),
    (DType.FLOAT32, 4),
    (DType.FLOAT64, 2),
    (DType.FLOAT16, 4),
    (DType.BOOLEAN, 4),
    (DType.INT32, 3),
    (DType.FLOAT16, 3),
    (DType.BOOLEAN, 3),
]
MIXED = [
    (DType.INT32, DType.UINT32),
    (DType.INT8, DType.UINT8),
    (DType.INT64, DType.UINT64),
    (DType.INT32, DType.UINT64),
    (DType.UINT16, DType.INT8),
    (DType.INT16, DType.FLOAT32),
]


def binary_ops(dtype: DType) -> list[BinOp]:
    if dtype.is_bool:
        return BOOLEAN_OPS + COMPARISONS + LOGICAL
    if dtype.is_float:
        return FLOAT_OPS + COMPARISONS + LOGICAL
    return INTEGER_OPS + COMPARISONS + LOGICAL


def unary_ops(dtype: DType) -> list[UnOp]:
    if dtype.is_bool:
        return [UnOp.NOT]
    if dtype.is_float:
        return [UnOp.NEG, UnOp.NOT]
    return [UnOp.NEG, UnOp.BIT_NOT, UnOp.NOT]


def operator_kernel(dtype: DType, width: int) -> KernelInfo:
    """out_<op>[i] = a[i] <op> b[i] for every operator that applies to `dtype`."""
    prefix = f"{dtype.short}x{width}"
    i, a, b = sb.global_id(0), sb.var(f"{prefix}_a"), sb.var(f"{prefix}_b")
    params, body = [], []
    for op in binary_ops(dtype):
        result = DType.BOOLEAN if op.is_comparison or op.is_logical else dtype
        name = f"{prefix}_{op.name.lower()}"
        params.append((name, Type.ptr(result, width)))
        body.append(sb.assign(sb.var(name)[i], Binary(op, a[i].node, b[i].node)))
    for op in unary_ops(dtype):
        result = DType.BOOLEAN if op is UnOp.NOT else dtype
        name = f"{prefix}_{op.name.lower()}"
        params.append((name, Type.ptr(result, width)))
        body.append(sb.assign(sb.var(name)[i], Unary(op, a[i].node)))
    params += [
        (f"{prefix}_a", Type.ptr(dtype, width, const=True)),
        (f"{prefix}_b", Type.ptr(dtype, width, const=True)),
    ]
    function = sb.function(f"operators_{prefix}", params, body)
    return kernel(function, COUNT, (COUNT // width,))


def mixed_kernel() -> KernelInfo:
    """Comparisons and arithmetic between operands of different signedness and width."""
    i = sb.global_id(0)
    params, body = [], []
    for left, right in MIXED:
        prefix = f"{left.short}_{right.short}"
        a, b = sb.var(f"{prefix}_a"), sb.var(f"{prefix}_b")
        for op in [*COMPARISONS, BinOp.ADD]:
            name = f"{prefix}_{op.name.lower()}"
            result = DType.BOOLEAN if op.is_comparison else None
            common = right if right.rank > left.rank else left
            params.append((name, Type.ptr(result or common)))
            body.append(sb.assign(sb.var(name)[i], Binary(op, a[i].node, b[i].node)))
        # Literals are weak: -1 takes the unsigned type of the other operand.
        params.append((f"{prefix}_literal", Type.ptr(DType.BOOLEAN)))
        body.append(sb.assign(sb.var(f"{prefix}_literal")[i], b[i].gt(-1)))
    inputs = []
    for left, right in MIXED:
        prefix = f"{left.short}_{right.short}"
        inputs += [
            (f"{prefix}_a", Type.ptr(left, const=True)),
            (f"{prefix}_b", Type.ptr(right, const=True)),
        ]
    function = sb.function("mixed_operands", params + inputs, body)
    return kernel(function, COUNT, (COUNT,))


def index_kernel() -> KernelInfo:
    """INDEX arithmetic on work-item ids, including a divisor that is sometimes zero."""
    i = sb.Value(IndexExpr(IdKind.GLOBAL, 0))
    cases = {
        "index_affine": i * 3 + 1 - 100,
        "index_div": i / 7,
        "index_mod": i % 5,
        "index_div_zero": i / (i % 3),
        "index_mod_zero": i % (i % 4),
        "index_shl": i << 3,
        "index_shr": i >> 2,
        "index_bits": (i & 6) | (i ^ 5),
        "index_neg": -i,
        "index_shift_wide": i >> (i % 40),
    }
    params = [(name, Type.ptr(DType.INT32)) for name in cases]
    body = [sb.assign(sb.var(name)[i], value) for name, value in cases.items()]
    return kernel(sb.function("index_arithmetic", params, body), COUNT, (COUNT,))


@pytest.fixture(scope="module")
def program() -> KernelList:
    infos = [operator_kernel(dtype, 1) for dtype in [DType.BOOLEAN, *INTEGERS, *FLOATS]]
    infos += [operator_kernel(dtype, width) for dtype, width in VECTORS]
    return kernel_list(*infos, mixed_kernel(), index_kernel())


@pytest.fixture(scope="module")
def inputs(program: KernelList) -> dict[str, np.ndarray]:
    values = {}
    for seed, name in enumerate(program.inputs):
        shape = program.shapes[name]
        left, right = edge_values(shape.dtype, COUNT, seed // 2)
        values[name] = left if name.endswith("_a") else right
    return values


def test_every_operator_agrees_with_the_reference(
    device: hal.Device, program: KernelList, inputs: dict[str, np.ndarray]
) -> None:
    check_against_reference(device, program, inputs)


def test_integer_corner_cases_by_value(device: hal.Device) -> None:
    """The cases spec 7.4 names, checked against plain numbers rather than the reference."""
    info = operator_kernel(DType.INT32, 1)
    program = kernel_list(info)
    minimum = np.int32(-(2**31))
    a = np.array([7, -7, 7, -7, 5, minimum, minimum, 2**31 - 1, -7, 1, 1], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, -1, 2, 1, 32, 33], np.int32)
    a = np.resize(a, COUNT)
    b = np.resize(b, COUNT)
    got = run_on_device(device, program, {"i32x1_a": a, "i32x1_b": b})
    assert got["i32x1_div"][:6].tolist() == [3, -3, -3, 3, 0, minimum]
    assert got["i32x1_mod"][:6].tolist() == [1, -1, 1, -1, 0, 0]
    assert got["i32x1_mul"][7] == -2  # 2147483647 * 2 wraps
    assert got["i32x1_shr"][8] == -4  # arithmetic shift
    assert got["i32x1_shl"][9:11].tolist() == [1, 2]  # counts modulo 32
    assert got["i32x1_neg"][5] == minimum  # -MIN wraps to MIN
