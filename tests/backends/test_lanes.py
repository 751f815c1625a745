"""`semtree.Lanes`: a vector at any element of a buffer, with ragged edges masked, on both
shipped devices and in the reference interpreter (issue 11 item 1: vector kernels for sizes
that are not a multiple of the vector width).

Each work-item copies row `r` of an `R x N` matrix (N not a multiple of the width) in vectors
of `width` at element offsets `r * N + v * width`, the last one counted, and scales it; the
elements between rows and past the end must stay untouched (poisoned buffers), and a count at
or below 0 (a vector wholly past the edge) must read and write nothing. A second kernel sums
counted loads whose count the work-item computes, including negative ones.
"""

from __future__ import annotations

import numpy as np
import pytest

import hal
from semtree import builder as sb
from semtree.nodes import Param, SemtreeTypeError
from semtree.types import DType, Type, TypeBase
from tests.opencl.harness import check_against_reference, kernel, kernel_list
from tests.shipped import SHIPPED, require_opencl

F32 = DType.FLOAT32


# The widths each device is asked for: llvm_cpu up to AVX-512's 16; OpenCL up to 8, where tile's
# OpenCL CPU settings stop (PoCL 3.0's LLVM 14 aborts on vectors of 16 floats, "Do not know how
# to scalarize this operator's operand", even for a plain vload16).
WIDTHS = {"llvm_cpu.0": (2, 4, 8, 16), SHIPPED[1]: (2, 4, 8)}
CASES = [(device, width) for device in SHIPPED for width in WIDTHS[device]]


def _hal_device(name: str) -> hal.Device:
    if name.startswith("llvm"):
        return hal.get_driver("llvm").default_device()
    return require_opencl()


def _scaled_rows(size: int, width: int) -> sb.Function:
    """dst[r, :] = 2 * src[r, :] for the row r of the work-group, in vectors of `width` at
    element offsets (rows are `size` apart, any size), the last one counted; then a vector
    wholly past the row (count <= 0), which must read and write nothing."""
    row = sb.global_id(0)
    source, target = sb.var("src"), sb.var("dst")
    body = []
    for v in range(-(-size // width) + 1):
        start = row * size + v * width
        count = size - v * width
        counted = None if count >= width else count
        load = sb.lanes(source, start, width, counted)
        body.append(sb.assign(sb.lanes(target, start, width, counted), load * 2))
    params = [Param("dst", Type.ptr(F32, 1)), Param("src", Type.ptr(F32, 1, const=True))]
    return sb.function(f"scaled_rows_{width}", params, body)


def _counted_loads(width: int) -> sb.Function:
    """dst[g, :] = the first g - 2 elements of src from element g, zeros after them (for
    g <= 2, all zeros: nothing read), stored as a whole vector."""
    group = sb.global_id(0)
    load = sb.lanes(sb.var("src"), group, width, group - 2)
    body = [sb.assign(sb.lanes(sb.var("dst"), group * width, width), load)]
    params = [Param("dst", Type.ptr(F32, 1)), Param("src", Type.ptr(F32, 1, const=True))]
    return sb.function(f"counted_loads_{width}", params, body)


@pytest.mark.parametrize(("device_id", "width"), CASES)
@pytest.mark.parametrize("size", [1, 3, 7, 17, 31])
def test_lanes_copy_ragged_rows(device_id: str, width: int, size: int) -> None:
    device = _hal_device(device_id)
    rows = 3
    info = kernel(
        _scaled_rows(size, width),
        {"dst": rows * size, "src": rows * size},
        (rows,),
    )
    program = kernel_list(info)
    values = np.random.default_rng(size * width).uniform(-4, 4, rows * size)
    outputs = check_against_reference(device, program, {"src": values.astype(np.float32)})
    got = outputs["dst"]
    np.testing.assert_array_equal(got, 2 * values.astype(np.float32))


@pytest.mark.parametrize(("device_id", "width"), CASES)
def test_counted_loads_zero_the_lanes_they_skip(device_id: str, width: int) -> None:
    device = _hal_device(device_id)
    items = width + 4
    info = kernel(_counted_loads(width), {"dst": items * width, "src": 2 * items}, (items,))
    values = np.arange(1, 2 * items + 1, dtype=np.float32)
    got = check_against_reference(device, kernel_list(info), {"src": values})["dst"]
    want = np.zeros((items, width), np.float32)
    for g in range(items):
        count = min(max(g - 2, 0), width)
        want[g, :count] = values[g : g + count]
    np.testing.assert_array_equal(got.reshape(items, width), want)


def _filled_loads(width: int, fill: float) -> sb.Function:
    """As `_counted_loads`, the lanes past the count given `fill` (a reduction's identity)."""
    group = sb.global_id(0)
    load = sb.lanes(sb.var("src"), group, width, group - 2, sb.const(fill, F32))
    body = [sb.assign(sb.lanes(sb.var("dst"), group * width, width), load)]
    params = [Param("dst", Type.ptr(F32, 1)), Param("src", Type.ptr(F32, 1, const=True))]
    return sb.function(f"filled_loads_{width}", params, body)


@pytest.mark.parametrize(("device_id", "width"), CASES)
@pytest.mark.parametrize("fill", [-np.inf, np.inf, 2.5])
def test_counted_loads_fill_the_lanes_they_skip(device_id: str, width: int, fill: float) -> None:
    device = _hal_device(device_id)
    items = width + 4
    info = kernel(_filled_loads(width, fill), {"dst": items * width, "src": 2 * items}, (items,))
    values = np.arange(1, 2 * items + 1, dtype=np.float32)
    got = check_against_reference(device, kernel_list(info), {"src": values})["dst"]
    want = np.full((items, width), fill, np.float32)
    for g in range(items):
        count = min(max(g - 2, 0), width)
        want[g, :count] = values[g : g + count]
    np.testing.assert_array_equal(got.reshape(items, width), want)


def test_a_fill_needs_a_counted_access() -> None:
    with pytest.raises(SemtreeTypeError, match="fill need a count"):
        sb.lanes(sb.var("src"), 0, 4, None, 1.0)


def _private_lanes(width: int) -> sb.Function:
    """Lanes of a private array (`tile.lower.widen.widen_lanes`): each work-item loads 2 x
    `width` elements into `acc` as two vectors, adds the upper half to the lower one, and
    stores the lower half and then an element of the upper half as a scalar."""
    group = sb.global_id(0)
    acc = sb.var("acc")
    source, target = sb.var("src"), sb.var("dst")
    body = [
        sb.declare(Type(TypeBase.VALUE, F32, 1, 2 * width), "acc", 0.0),
        sb.assign(sb.lanes(acc, 0, width), sb.lanes(source, group * 2 * width, width)),
        sb.assign(sb.lanes(acc, width, width), sb.lanes(source, group * 2 * width + width, width)),
        sb.assign(sb.lanes(acc, 0, width), sb.lanes(acc, 0, width) + sb.lanes(acc, width, width)),
        sb.assign(sb.lanes(target, group * (width + 1), width), sb.lanes(acc, 0, width)),
        sb.assign(target[group * (width + 1) + width], acc[width + 1]),
    ]
    params = [Param("dst", Type.ptr(F32, 1)), Param("src", Type.ptr(F32, 1, const=True))]
    return sb.function(f"private_lanes_{width}", params, body)


@pytest.mark.parametrize(("device_id", "width"), CASES)
def test_lanes_of_private_arrays(device_id: str, width: int) -> None:
    device = _hal_device(device_id)
    items = 5
    info = kernel(
        _private_lanes(width), {"dst": items * (width + 1), "src": items * 2 * width}, (items,)
    )
    values = np.random.default_rng(width).uniform(-4, 4, items * 2 * width).astype(np.float32)
    got = check_against_reference(device, kernel_list(info), {"src": values})["dst"]
    halves = values.reshape(items, 2, width)
    want = np.concatenate([halves[:, 0] + halves[:, 1], halves[:, 1, 1:2]], axis=1)
    np.testing.assert_array_equal(got.reshape(items, width + 1), want)


def test_an_access_of_no_lanes_goes_to_element_zero() -> None:
    """llvm_cpu: a counted access's element index is `select(count > 0, index, 0)`: one of no
    lanes may lie far past its buffer (the rows of an edge tile past the shape), and a masked-off
    lane on a page never written costs a microcode assist, 0.45 ms a launch in a packed
    transposition (`hal_llvm.render_lanes.lanes_index`). What it computes is checked above."""
    from hal_llvm.render import render
    from tests.hal.render_harness import Case, cpu_settings
    from tests.hal.render_harness import kernel_list as llvm_kernels

    group = sb.global_id(0)
    far = sb.lanes(sb.var("src"), group * 1_000_003, 8, group - 2)
    body = [sb.assign(sb.lanes(sb.var("dst"), group * 999_983, 8, 3 - group), far)]
    params = [Param("dst", Type.ptr(F32, 1)), Param("src", Type.ptr(F32, 1, const=True))]
    case = Case(sb.function("far", params, body), [np.zeros(64, np.float32)] * 2)
    text = str(render(llvm_kernels([case]), cpu_settings()))
    guarded = text.count("icmp sgt i64") >= 2 and text.count(", i64 0\n") >= 2
    assert guarded and "llvm.masked.store" in text and "llvm.masked.load" in text
