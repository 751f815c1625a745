"""`Clamp` is min(max(x, lo), hi) in the operands' common type on both shipped devices, for
any bounds: negative ones, ones out of the value type's range (converted to it, so they wrap)
and lo > hi, where OpenCL's own `clamp` is undefined (Intel's OpenCL gave 254 for
`clamp(uchar, -2, 3)`, whose answer is 3). Checked against numpy, not the reference
interpreter, so the test also pins the meaning."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from semtree import builder as sb
from semtree.types import DType, Type
from tests.opencl.harness import kernel, kernel_list, run_on_device
from tests.shipped import require_opencl

COUNT = 64
# (value type, vector width, lo, hi): literal bounds; None means a tensor of the value type.
CASES = [
    (DType.UINT8, 1, -2, 3),
    (DType.UINT8, 4, -2, 3),
    (DType.UINT8, 1, 3, -2),
    (DType.UINT8, 1, 300, -300),
    (DType.UINT8, 1, 200, 100),
    (DType.UINT8, 1, -1.5, 2.5),  # a float literal makes the common type f32
    (DType.INT8, 1, -2, 3),
    (DType.INT8, 4, 3, -2),
    (DType.INT8, 1, -200, 200),
    (DType.INT8, 1, 130, -130),
    (DType.FLOAT32, 1, -2, 3),
    (DType.FLOAT32, 4, 2.5, -1.5),
    (DType.FLOAT32, 1, 1e30, -1e30),
    (DType.UINT8, 1, None, None),
    (DType.INT8, 4, None, None),
    (DType.FLOAT32, 1, None, None),
]


def common_type(dtype: DType, lo: object, hi: object) -> np.dtype:
    """Literals are weak: they take the value's type, except that a float literal makes an
    integer value float32 (semtree typing rules 3 and 4)."""
    if not dtype.is_float and any(isinstance(b, float) for b in (lo, hi)):
        return np.dtype(np.float32)
    return dtype.numpy


def converted(value: object, common: np.dtype) -> np.ndarray:
    """A bound in the common type: integers wrap modulo 2^w, floats round (to inf)."""
    if isinstance(value, int) and common.kind in "iu":
        return np.array(value, np.int64).astype(common)
    with np.errstate(over="ignore"):
        return np.array(value, np.float64).astype(common)


def expected(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.fmin(np.fmax(x, lo), hi)  # a NaN x gives lo, then min(lo, hi)
    return np.minimum(np.maximum(x, lo), hi)


def values(dtype: DType, seed: int) -> np.ndarray:
    generator = np.random.default_rng(seed)
    if dtype.is_float:
        special = [np.nan, np.inf, -np.inf, -0.0, 0.0, -2.0, 3.0, 2.5, -1.5, 1e30]
        rest = generator.uniform(-6, 6, COUNT - len(special))
        return np.concatenate([special, rest]).astype(dtype.numpy)
    info = np.iinfo(dtype.numpy)
    return generator.integers(info.min, info.max, COUNT, endpoint=True, dtype=dtype.numpy)


@pytest.fixture(scope="module", params=["llvm", "opencl"])
def device(request: pytest.FixtureRequest) -> hal.Device:
    if request.param == "opencl":
        return require_opencl()
    return hal.get_driver("llvm").default_device()


def test_clamp_is_min_of_max_for_any_bounds(device: hal.Device) -> None:
    infos, inputs, wanted = [], {}, {}
    for number, (dtype, width, lo, hi) in enumerate(CASES):
        i = sb.global_id(0)
        out, x, low, high = (sb.var(f"c{number}_{name}") for name in ("out", "x", "lo", "hi"))
        x_values = values(dtype, number)
        params = [(f"c{number}_out", None), (f"c{number}_x", None)]
        if lo is None:
            bounds = (low[i], high[i])
            lows, highs = values(dtype, 100 + number), values(dtype, 200 + number)
            inputs |= {f"c{number}_lo": lows, f"c{number}_hi": highs}
            params += [(f"c{number}_lo", None), (f"c{number}_hi", None)]
            common = dtype.numpy
        else:
            bounds = (lo, hi)
            common = common_type(dtype, lo, hi)
            lows, highs = converted(lo, common), converted(hi, common)
        result = DType.of(common)
        typed = [
            (name, Type.ptr(result if name.endswith("out") else dtype, width, const=k > 0))
            for k, (name, _) in enumerate(params)
        ]
        body = [sb.assign(out[i], sb.clamp(x[i], *bounds))]
        function = sb.function(f"clamp{number}", typed, body)
        infos.append(kernel(function, COUNT, (COUNT // width,)))
        inputs[f"c{number}_x"] = x_values
        wanted[f"c{number}_out"] = expected(x_values.astype(common), lows, highs)
    got = run_on_device(device, kernel_list(*infos), inputs)
    for name, want in wanted.items():
        np.testing.assert_array_equal(got[name].reshape(-1), want, err_msg=name)


def test_uchar_clamp_minus_two_three_is_three(device: hal.Device) -> None:
    """The reported case: every uchar clamped to (254, 3) in uchar is 3."""
    i, out, x = sb.global_id(0), sb.var("out"), sb.var("x")
    body = [sb.assign(out[i], sb.clamp(x[i], -2, 3))]
    params = [("out", Type.ptr(DType.UINT8)), ("x", Type.ptr(DType.UINT8, const=True))]
    info = kernel(sb.function("clamp_uchar", params, body), 256, (256,))
    got = run_on_device(device, kernel_list(info), {"x": np.arange(256, dtype=np.uint8)})
    assert got["out"].tolist() == [3] * 256
