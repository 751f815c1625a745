"""The OpenCL renderer (design 6.2): golden programs, each also built (and run against
the reference interpreter) on the OpenCL device, and spelling details that need no device.

Golden files live in `tests/golden/<case>.cl` and are compared exactly. After a deliberate
change, regenerate them with `TILE_UPDATE_GOLDEN=1 pytest tests/opencl/test_render.py` and
review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import hal
from hal_opencl import RenderOptions, render_program
from hal_opencl.render import OpenCLRenderer
from semtree import builder as sb
from semtree.nodes import Builtin, Cast, FloatConst, IntConst, LimitConst, UnsupportedNode
from semtree.nodes import Limit as LimitKind
from semtree.types import DType, Region, Type, TypeBase
from tests.opencl.golden_cases import CASES
from tests.opencl.harness import check_against_reference, kernel, kernel_list

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("TILE_UPDATE_GOLDEN") == "1"
OPTIONS = RenderOptions(device="golden")  # PoCL-like: half as storage, double available


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_source(case: str) -> None:
    text = render_program(CASES[case](), OPTIONS).text
    path = GOLDEN / f"{case}.cl"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with TILE_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{case}: rendering changed (TILE_UPDATE_GOLDEN=1)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_source_builds_and_runs(device: hal.Device, case: str) -> None:
    """Each golden program builds on the device and computes what the reference does."""
    program = CASES[case]()
    generator = np.random.default_rng(3)
    inputs = {}
    for name, shape in program.shapes.items():  # outputs too: some kernels work in place
        if shape.dtype.is_bool:
            inputs[name] = generator.integers(0, 2, shape.size).astype(bool)
        elif shape.dtype.is_float:
            inputs[name] = generator.uniform(0.1, 4, shape.size).astype(shape.dtype.numpy)
        else:
            inputs[name] = generator.integers(-60, 60, shape.size).astype(shape.dtype.numpy)
    if "b" in inputs:  # a zero makes one boolean_masks comparison true
        inputs["b"][0] = 0.0
    if device.settings.native_fp16 == OPTIONS.native_fp16:
        library = device.compiler.build(program, device)
        assert library.program_source.text == (GOLDEN / f"{case}.cl").read_text()  # type: ignore[attr-defined]
    check_against_reference(device, program, inputs)


def test_rendering_is_deterministic() -> None:
    for make in CASES.values():
        assert render_program(make(), OPTIONS).text == render_program(make(), OPTIONS).text


def expression(value: object, scope: dict[str, Type], options: RenderOptions = OPTIONS) -> str:
    renderer = OpenCLRenderer(options)
    renderer.scope = scope
    return renderer.value(sb.expr(value)).code  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "dtype", "text"),
    [
        (300, DType.INT8, "(char)44"),
        (-1, DType.UINT32, "UINT_MAX"),
        (7, DType.UINT32, "7u"),
        (2**31, DType.INT32, "INT_MIN"),
        (5, DType.INT64, "5L"),
        (2**64 - 1, DType.UINT64, "ULONG_MAX"),
        (2.0, DType.FLOAT32, "2.0f"),
        (0.1, DType.FLOAT32, "0.1f"),
        (0.1, DType.FLOAT64, "0.1"),
        (1.1, DType.FLOAT16, "1.0996094f"),  # rounded to half, held as float
        (float("nan"), DType.INT16, "(short)0"),  # float to integer: NaN gives 0
        (1e10, DType.INT8, "(char)127"),  # and saturates
        (float("inf"), DType.FLOAT64, "(double)INFINITY"),
    ],
)
def test_cast_literals(value: float, dtype: DType, text: str) -> None:
    literal = FloatConst(value) if isinstance(value, float) else IntConst(value)
    assert expression(Cast(Type.value(dtype), literal), {}) == text


def test_limits() -> None:
    assert expression(LimitConst(LimitKind.MIN, DType.FLOAT32), {}) == "-FLT_MAX"
    assert expression(LimitConst(LimitKind.MAX, DType.INT16), {}) == "(short)32767"
    assert expression(LimitConst(LimitKind.MAX, DType.FLOAT16), {}) == "65504.0f"
    assert expression(LimitConst(LimitKind.ONE, DType.FLOAT64), {}) == "1.0"


def test_weak_literals_take_the_element_type() -> None:
    scope = {"c": Type.value(DType.INT8, 4), "u": Type.value(DType.UINT32)}
    assert expression(sb.var("c") >> 3, scope) == "c >> (char)3"
    assert expression(sb.var("u").lt(-1), scope) == "u < UINT_MAX"


def test_clamp_is_defined_for_any_bounds() -> None:
    """min(max(x, lo), hi), never OpenCL's clamp (undefined for lo > hi): -2 in uchar is 254."""
    scope = {"u": Type.value(DType.UINT8), "f": Type.value(DType.FLOAT32, 4)}
    clamped = expression(sb.clamp(sb.var("u"), -2, 3), scope)
    assert clamped == "tile_min_uchar(tile_max_uchar(u, (uchar)254), (uchar)3)"
    clamped = expression(sb.clamp(sb.var("f"), 2.5, -1.5), scope)
    assert clamped == "tile_min_float4(tile_max_float4(f, (float4)(2.5f)), (float4)(-1.5f))"


def test_native_half_and_mad_options() -> None:
    scope = {"h": Type.value(DType.FLOAT16), "f": Type.value(DType.FLOAT32)}
    native = RenderOptions(native_fp16=True)
    assert expression(sb.var("h") * 0.5, scope, native) == "h * (half)0.5f"
    assert expression(sb.cast(DType.FLOAT16, sb.var("f")), scope, native) == "(half)f"
    product = sb.var("f") * sb.var("f") + 1.0
    assert expression(product, scope) == "f * f + 1.0f"  # contracted to an fma by the compiler
    mad = sb.call(Builtin.MAD, sb.var("f"), sb.var("f"), 1.0)
    assert expression(mad, scope) == "f * f + 1.0f"
    element = sb.var("f")[0]
    fused = sb.assign(element, sb.call(Builtin.MAD, element, element, 1.0))
    function = sb.function("mads", [("f", Type.ptr(DType.FLOAT32))], fused)
    program = kernel_list(kernel(function, 1, (1,)))
    pragma = "#pragma OPENCL FP_CONTRACT OFF"
    assert pragma not in render_program(program, OPTIONS).text
    assert pragma in render_program(program, RenderOptions(disable_mad=True)).text


def test_pragmas_and_unsupported_float64() -> None:
    i, out = sb.global_id(0), sb.var("out")
    function = sb.function("doubles", [("out", Type.ptr(DType.FLOAT64))], sb.assign(out[i], 1))
    program = kernel_list(kernel(function, 4, (4,)))
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in render_program(program, OPTIONS).text
    with pytest.raises(hal.UnsupportedOnDevice, match=r"opencl\.7.*float64.*doubles"):
        render_program(program, RenderOptions(fp64=False, device="opencl.7"))
    halves = sb.function("halves", [("out", Type.ptr(DType.FLOAT16))], sb.assign(out[i], 1))
    text = render_program(kernel_list(kernel(halves, 4, (4,))), RenderOptions(native_fp16=True))
    assert "cl_khr_fp16 : enable" in text.text and "cl_khr_fp64" not in text.text


def test_restrict_and_aliases() -> None:
    text = render_program(CASES["integer_semantics"](), OPTIONS).text
    assert "__global char* a8," in text and "__global const char* b8)" in text
    assert "__global int* restrict a32" in text


def test_local_declarations_are_hoisted_once() -> None:
    local = Type(TypeBase.VALUE, DType.FLOAT32, array=4, region=Region.LOCAL)
    i, out = sb.global_id(0), sb.var("out")
    twice = sb.function(
        "twice",
        [("out", Type.ptr(DType.FLOAT32))],
        [
            sb.if_(i.lt(1), [sb.declare(local, "tile"), sb.assign(out[i], 1.0)]),
            sb.if_(i.lt(2), [sb.declare(local, "tile"), sb.assign(out[i], 2.0)]),
        ],
    )
    with pytest.raises(UnsupportedNode, match="more than once"):
        render_program(kernel_list(kernel(twice, 4, (4,))), OPTIONS)


def test_packed_vectors_of_native_half() -> None:
    """Width-3 half buffers use vload3/vstore3 when half is native, vload_half3 otherwise."""
    i, h = sb.global_id(0), sb.var("h")
    function = sb.function(
        "halves3", [("h", Type.ptr(DType.FLOAT16, 3))], sb.assign(h[i], h[i] * 2.0)
    )
    program = kernel_list(kernel(function, 12, (4,)))
    native = render_program(program, RenderOptions(native_fp16=True)).text
    assert "vstore3(vload3((int)get_global_id(0), h) * (half)2.0f" in native
    emulated = render_program(program, OPTIONS).text
    assert "vstore_half3(vload_half3((int)get_global_id(0), h) * 2.0f" in emulated
