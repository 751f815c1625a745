"""Every `Builtin` on the OpenCL device against the reference interpreter: float builtins on
f16 (storage), f32, f64 and float4; ABS, MAX, MIN and MAD on integers (ABS(MIN) wraps);
`Clamp`; and the `native_*` variants under `fast_math` (looser tolerance, design 12).
Tolerances: f32 rtol 1e-5 (a few ulp), f64 rtol 1e-12, f16 rtol 1e-2, integers exact."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import pytest

from semtree import builder as sb
from semtree.nodes import Builtin
from semtree.types import DType, Type
from tests.opencl.harness import (
    check_against_reference,
    edge_values,
    kernel,
    kernel_list,
    run_on_device,
    run_reference,
)

if TYPE_CHECKING:
    import hal
    from semtree.kernel import KernelInfo, KernelList

COUNT = 96
FLOAT_CASES = [(DType.FLOAT16, 1), (DType.FLOAT32, 1), (DType.FLOAT64, 1), (DType.FLOAT32, 4)]
INTEGER_CASES = [(DType.INT8, 1), (DType.UINT8, 1), (DType.INT32, 1), (DType.UINT32, 1)]
INTEGER_CASES += [(DType.INT64, 1), (DType.INT32, 4)]
INTEGER_BUILTINS = [Builtin.ABS, Builtin.MAX, Builtin.MIN, Builtin.MAD]


def builtin_kernel(dtype: DType, width: int, builtins: list[Builtin], tag: str = "") -> KernelInfo:
    """out_<fn>[i] = fn(a[i], b[i], c[i]) (as many arguments as fn takes), plus a clamp."""
    prefix = f"{tag}{dtype.short}x{width}"
    i = sb.global_id(0)
    a, b, c = (sb.var(f"{prefix}_{name}") for name in "abc")
    params, body = [], []
    for fn in builtins:
        name = f"{prefix}_{fn.value}"
        params.append((name, Type.ptr(dtype, width)))
        args = (a[i], b[i], c[i])[: fn.arity]
        body.append(sb.assign(sb.var(name)[i], sb.call(fn, *args)))
    params.append((f"{prefix}_clamp", Type.ptr(dtype, width)))
    body.append(sb.assign(sb.var(f"{prefix}_clamp")[i], sb.clamp(a[i], -2, 3)))
    params += [(f"{prefix}_{name}", Type.ptr(dtype, width, const=True)) for name in "abc"]
    return kernel(sb.function(f"builtins_{prefix}", params, body), COUNT, (COUNT // width,))


def float_inputs(dtype: DType, seed: int) -> np.ndarray:
    generator = np.random.default_rng(seed)
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0]
    values = np.concatenate([special, generator.uniform(-4, 4, COUNT - len(special))])
    return values.astype(dtype.numpy)


@pytest.fixture(scope="module")
def program() -> KernelList:
    infos = [builtin_kernel(dtype, width, list(Builtin)) for dtype, width in FLOAT_CASES]
    infos += [builtin_kernel(dtype, width, INTEGER_BUILTINS) for dtype, width in INTEGER_CASES]
    return kernel_list(*infos)


def inputs_for(program: KernelList) -> dict[str, np.ndarray]:
    inputs = {}
    for seed, name in enumerate(program.inputs):
        dtype = program.shapes[name].dtype
        if dtype.is_float:
            inputs[name] = float_inputs(dtype, seed)
        else:
            inputs[name] = edge_values(dtype, COUNT, seed)[seed % 2]
    return inputs


def test_every_builtin_agrees_with_the_reference(device: hal.Device, program: KernelList) -> None:
    check_against_reference(device, program, inputs_for(program))


def test_builtin_spellings(device: hal.Device, program: KernelList) -> None:
    library = device.compiler.build(program, device)
    float_source = library.source(1)  # float32 scalars
    max_min = ("tile_max_float(", "tile_min_float(", "tile_min_float(tile_max_float(")
    for name in ("fabs(", *max_min, "pow(", "round(", "1.0f / "):
        assert name in float_source
    # PoCL 3.0 calls these builtins out of line: the program spells them itself.
    for builtin in ("mad(", " fmax(", " fmin(", " max(", " min("):
        assert builtin not in float_source
    integer_source = library.source(6)  # int32 scalars
    assert "as_int(abs(" in integer_source and "tile_max_int(" in integer_source


def test_fast_math_uses_native_functions(device: hal.Device) -> None:
    """fast_math: native_exp/log/sqrt/recip for float, built with -cl-fast-relaxed-math;
    results within rtol 1e-3 on inputs inside each function's domain."""
    fast = type(device)(99, device.cl_device)  # a second handle on the same device
    fast._settings = dataclasses.replace(device.settings, fast_math=True)
    try:
        builtins = [Builtin.EXP, Builtin.LOG, Builtin.SQRT, Builtin.RECIP]
        program = kernel_list(builtin_kernel(DType.FLOAT32, 4, builtins, tag="fast_"))
        inputs = {
            name: np.random.default_rng(1).uniform(0.1, 4, COUNT).astype(np.float32)
            for name in program.inputs
        }
        library = fast.compiler.build(program, fast)
        assert "-cl-fast-relaxed-math" in library.options
        assert "native_exp(" in library.source(0) and "native_recip(" in library.source(0)
        got = run_on_device(fast, program, inputs, library)
        expected = run_reference(program, inputs)
        for name in program.outputs:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-3, err_msg=name)
    finally:
        fast.close()
