"""Conversions on the OpenCL device against the reference interpreter (rule 8, spec 5.4):
every dtype to every dtype (and to INDEX), scalar and vector; float to integer truncates and
saturates (NaN gives 0); integers wrap; anything to bool is `!= 0`; half rounds to nearest
even. Also literals in every type (weak typing, rule 4), limits, and implicit conversions in
stores. All kernels form one program."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from semtree import builder as sb
from semtree.nodes import Cast, FloatConst, IntConst, Limit, LimitConst
from semtree.types import DType, Type
from tests.opencl.harness import (
    check_against_reference,
    edge_values,
    kernel,
    kernel_list,
    run_on_device,
)

if TYPE_CHECKING:
    import hal
    from semtree.kernel import KernelInfo, KernelList

COUNT = 240
ALL = list(DType)
INDEX_SOURCES = [DType.BOOLEAN, DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32]
VECTOR_SOURCES = [DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.UINT8, DType.BOOLEAN]
SPECIAL_FLOATS = [np.nan, -0.5, 0.5, -2.7, 2.7, 127.5, 128.0, 255.9, 256.0, -129.0, 300.5]
SPECIAL_FLOATS += [65504.0, 65520.0, 1e-8, 3e9, -3e9, 1e19, -1e19, 4e9, 2.0**31, -(2.0**31)]


def cast_kernel(source: DType, width: int) -> KernelInfo:
    """out_<target>[i] = (target) a[i] for every target dtype, and INDEX (stored as i32) for
    sources whose values all fit INDEX."""
    prefix = f"cast_{source.short}x{width}"
    i, a = sb.global_id(0), sb.var(f"{prefix}_a")
    params, body = [], []
    for target in ALL:
        name = f"{prefix}_to_{target.short}"
        params.append((name, Type.ptr(target, width)))
        body.append(sb.assign(sb.var(name)[i], Cast(Type.value(target, width), a[i].node)))
    if width == 1 and source in INDEX_SOURCES:  # INDEX values must fit in 32 bits (rule 10)
        name = f"{prefix}_to_index"
        params.append((name, Type.ptr(DType.INT32)))
        body.append(sb.assign(sb.var(name)[i], Cast(Type.index(), a[i].node)))
    params.append((f"{prefix}_a", Type.ptr(source, width, const=True)))
    return kernel(sb.function(prefix, params, body), COUNT, (COUNT // width,))


def broadcast_kernel() -> KernelInfo:
    """Scalars converted into vectors: a cast that widens, and stores that convert."""
    i = sb.global_id(0)
    a, b = sb.var("broadcast_a"), sb.var("broadcast_b")
    params = [
        ("broadcast_f4", Type.ptr(DType.FLOAT32, 4)),
        ("broadcast_i4", Type.ptr(DType.INT32, 4)),
        ("broadcast_h4", Type.ptr(DType.FLOAT16, 4)),
        ("broadcast_c8", Type.ptr(DType.INT8, 8)),
        ("broadcast_a", Type.ptr(DType.FLOAT64, const=True)),
        ("broadcast_b", Type.ptr(DType.INT16, const=True)),
    ]
    body = [
        sb.assign(sb.var("broadcast_f4")[i], Cast(Type.value(DType.FLOAT32, 4), a[i].node)),
        sb.assign(sb.var("broadcast_i4")[i], a[i]),  # store: float64 -> int32x4 saturates
        sb.assign(sb.var("broadcast_h4")[i], Cast(Type.value(DType.FLOAT16, 4), a[i].node)),
        sb.assign(sb.var("broadcast_c8")[i], b[i] * 3),
    ]
    return kernel(
        sb.function("broadcast", params, body),
        {"broadcast_a": 60, "broadcast_b": 60, "broadcast_f4": 240, "broadcast_i4": 240}
        | {"broadcast_h4": 240, "broadcast_c8": 480},
        (60,),
    )


LITERALS = [0, 1, -1, 7, 300, -129, 2**31, 2**40, 2**63, 0.5, -2.7, 1e10, 1.1, float("nan")]


def literal_kernel() -> KernelInfo:
    """Stores of literals and limits into every dtype (the store target is the literal's
    context), casts of literals, and literals as weak operands."""
    params, body = [], []
    for dtype in ALL:
        values = [IntConst(v) if isinstance(v, int) else FloatConst(v) for v in LITERALS]
        values += [LimitConst(which, dtype) for which in Limit]
        values += [Cast(Type.value(dtype), FloatConst(1.1)), Cast(Type.value(dtype), IntConst(-1))]
        name = f"literal_{dtype.short}"
        params.append((name, Type.ptr(dtype)))
        body += [sb.assign(sb.var(name)[index], value) for index, value in enumerate(values)]
        weak = f"weak_{dtype.short}"
        params.append((weak, Type.ptr(DType.BOOLEAN)))
        operand = sb.var(name)[0]
        if not dtype.is_bool:
            body.append(sb.assign(sb.var(weak)[0], (operand + 1).gt(operand)))
            body.append(sb.assign(sb.var(weak)[1], (operand * 0.5).lt(1)))
        else:
            body += [sb.assign(sb.var(weak)[0], operand), sb.assign(sb.var(weak)[1], operand)]
    size = len(LITERALS) + len(Limit) + 2
    counts = {name: (size if name.startswith("literal") else 2) for name, _ in params}
    return kernel(sb.function("literals", params, body), counts, (1,))


@pytest.fixture(scope="module")
def program() -> KernelList:
    infos = [cast_kernel(source, 1) for source in ALL]
    infos += [cast_kernel(source, 4) for source in VECTOR_SOURCES]
    return kernel_list(*infos, broadcast_kernel(), literal_kernel())


def _values(dtype: DType, seed: int) -> np.ndarray:
    values, _ = edge_values(dtype, COUNT, seed)
    if dtype.is_float:  # values around every integer range's edges
        with np.errstate(over="ignore"):  # beyond half's range: infinity, as intended
            special = np.array(SPECIAL_FLOATS).astype(dtype.numpy)
        values[: special.size] = special
    return values


def test_casts_agree_with_the_reference(device: hal.Device, program: KernelList) -> None:
    inputs = {}
    for seed, name in enumerate(program.inputs):
        shape = program.shapes[name]
        inputs[name] = _values(shape.dtype, seed)[: shape.size]
    check_against_reference(device, program, inputs)


def test_saturating_float_to_integer(device: hal.Device) -> None:
    program = kernel_list(cast_kernel(DType.FLOAT32, 1))
    values = np.resize(np.array([np.nan, -2.7, 2.7, 300.5, -300.5, 3e9, -1.0], np.float32), COUNT)
    got = run_on_device(device, program, {"cast_f32x1_a": values})
    assert got["cast_f32x1_to_i32"][:7].tolist() == [0, -2, 2, 300, -300, 2**31 - 1, -1]
    assert got["cast_f32x1_to_u8"][:7].tolist() == [0, 0, 2, 255, 0, 255, 0]
    assert got["cast_f32x1_to_i8"][:7].tolist() == [0, -2, 2, 127, -128, 127, -1]
    assert got["cast_f32x1_to_bool"][:7].tolist() == [True, True, True, True, True, True, True]


def test_float64_to_half_rounds_once(device: hal.Device) -> None:
    """A cast from double to half rounds directly (no double rounding through float)."""
    program = kernel_list(cast_kernel(DType.FLOAT64, 1))
    tie = 1.0 + 2.0**-11 + 2.0**-40  # just above a half tie: rounds up directly, down via f32
    values = np.resize(np.array([tie, 65519.0, 65520.0, 1e-8], np.float64), COUNT)
    got = run_on_device(device, program, {"cast_f64x1_a": values})["cast_f64x1_to_f16"]
    with np.errstate(over="ignore"):
        expected = np.array([tie, 65519.0, 65520.0, 1e-8]).astype(np.float16)
    np.testing.assert_array_equal(got[:4], expected)
    assert got[0] == np.float16(1.0 + 2.0**-10)


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16])
def test_every_half_loads_as_numpy_converts_it(device: hal.Device, width: int) -> None:
    """Half loads on a device without native half go through the program's own conversion
    (`arithmetic.half_load`): all 65536 bit patterns (subnormals, infinities, NaNs, -0) give
    numpy's float32, bit for bit (NaNs as NaNs)."""
    count = 1 << 16
    name = f"half_bits_x{width}"
    i, source, target = sb.global_id(0), sb.var(f"{name}_in"), sb.var(f"{name}_out")
    function = sb.function(
        name,
        [
            (f"{name}_out", Type.ptr(DType.FLOAT32, width)),
            (f"{name}_in", Type.ptr(DType.FLOAT16, width, const=True)),
        ],
        [sb.assign(target[i], source[i])],
    )
    program = kernel_list(kernel(function, count, (count // width,)))
    halves = np.arange(count, dtype=np.uint16).view(np.float16)
    library = device.compiler.build(program, device)
    if not device.settings.native_fp16:
        assert "tile_half_to_float" in library.source(0)
    got = run_on_device(device, program, {f"{name}_in": halves}, library)[f"{name}_out"]
    want = halves.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def _float_to_half_cases() -> np.ndarray:
    """float32 values around every finite half: the half itself, the ties to its neighbours
    (to nearest even) and the floats just either side of each tie; then the limits: the
    overflow threshold 65520, infinities, NaNs, float subnormals and the subnormal halves."""
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    following = np.append(halves[1:], 65536.0)  # 65520, the tie above 65504, overflows
    ties = ((halves + following) / 2).astype(np.float32)
    up, down = np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))
    special = np.array(
        [
            np.inf,
            np.nan,
            65504,
            65519.996,
            65520,
            65536,
            1e10,
            3e38,
            2.0**-25,
            2.0**-26,
            1.5 * 2.0**-24,
            2.0**-14 - 2.0**-25,
            1e-40,
            1.4e-45,
            0.0,
        ],
        np.float32,
    )
    special = np.append(
        special, np.array([0x7FC00001, 0x7F800001, 0x7FBFFFFF], np.uint32).view(np.float32)
    )
    values = np.concatenate([halves.astype(np.float32), ties, up, down, special])
    return np.concatenate([values, -values])


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16])
def test_half_stores_round_as_numpy_does(device: hal.Device, width: int) -> None:
    """Half stores on a device without native half go through the program's own conversion
    (`arithmetic.half_store`): around every half, at its ties, and at the limits (overflow,
    infinities, NaNs, subnormals of both types), numpy's float16, bit for bit (NaNs as NaNs).
    At most as wide as the generator's vectors on the device: PoCL on AMD Zen 4 compiles for a
    processor without AVX-512 (`hal_opencl.device.compiled_width`), where LLVM 14 gets a store
    of 16 halves wrong, and the generator there emits no vector wider than 8."""
    width = min(width, device.settings.vec_size)
    values = _float_to_half_cases()
    count = -(-values.size // 64) * 64
    values = np.resize(values, count)
    name = f"half_store_x{width}"
    i, source, target = sb.global_id(0), sb.var(f"{name}_in"), sb.var(f"{name}_out")
    function = sb.function(
        name,
        [
            (f"{name}_out", Type.ptr(DType.FLOAT16, width)),
            (f"{name}_in", Type.ptr(DType.FLOAT32, width, const=True)),
        ],
        [sb.assign(target[i], source[i])],
    )
    program = kernel_list(kernel(function, count, (count // width,)))
    library = device.compiler.build(program, device)
    if not device.settings.native_fp16:
        assert "tile_float_to_half" in library.source(0)
    got = run_on_device(device, program, {f"{name}_in": values}, library)[f"{name}_out"]
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
