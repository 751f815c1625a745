"""`semtree.Shuffle`: lanes picked from two vectors (OpenCL's `shuffle2`, LLVM's
`shufflevector`), on both shipped devices and in the reference interpreter, for every width the
device is asked for, several element types and random masks (with lanes repeated and skipped).
`tile.lower.transpose` builds its register transposes of 8 x 8 blocks from it.

Each work-item loads two vectors of `width` from its part of `src`, shuffles them with the
mask and stores the result (`len(mask)` lanes) to its part of `dst`; the numpy reference is
the same gather from the concatenated pair.
"""

from __future__ import annotations

import numpy as np
import pytest

from semtree import builder as sb
from semtree.nodes import Param, SemtreeTypeError, Shuffle
from semtree.types import DType, Type
from semtree.typing import check_function
from tests.backends.test_lanes import WIDTHS, _hal_device
from tests.opencl.harness import check_against_reference, kernel, kernel_list
from tests.shipped import SHIPPED

DTYPES = {DType.FLOAT32: np.float32, DType.INT32: np.int32, DType.FLOAT16: np.float16}
CASES = [
    (device, width, out) for device in SHIPPED for width in WIDTHS[device] for out in WIDTHS[device]
]


def _shuffled(dtype: DType, width: int, mask: tuple[int, ...]) -> sb.Function:
    group = sb.global_id(0)
    source, target = sb.var("src"), sb.var("dst")
    first = sb.expr(sb.lanes(source, group * 2 * width, width))
    second = sb.expr(sb.lanes(source, group * 2 * width + width, width))
    picked = Shuffle(first, second, mask)
    body = [sb.assign(sb.lanes(target, group * len(mask), len(mask)), picked)]
    params = [Param("dst", Type.ptr(dtype, 1)), Param("src", Type.ptr(dtype, 1, const=True))]
    return sb.function(f"shuffled_{width}_{len(mask)}", params, body)


@pytest.mark.parametrize(("device_id", "width", "out"), CASES)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_shuffles_pick_the_masks_lanes(device_id: str, width: int, out: int, dtype: DType) -> None:
    device = _hal_device(device_id)
    rng = np.random.default_rng(width * 100 + out)
    mask = tuple(int(lane) for lane in rng.integers(0, 2 * width, out))
    items = 3
    info = kernel(
        _shuffled(dtype, width, mask), {"dst": items * out, "src": items * 2 * width}, (items,)
    )
    values = rng.uniform(-100, 100, items * 2 * width).astype(DTYPES[dtype])
    got = check_against_reference(device, kernel_list(info), {"src": values})["dst"]
    want = values.reshape(items, 2 * width)[:, list(mask)]
    np.testing.assert_array_equal(got.reshape(items, out), want)


def test_shuffles_are_typed() -> None:
    """Two vectors of one type and lanes within them; never booleans, scalars or pointers."""
    source = sb.var("src")
    vector = sb.expr(sb.lanes(source, 0, 4))
    other = sb.expr(sb.lanes(sb.var("other"), 0, 4))
    params = [
        Param("dst", Type.ptr(DType.FLOAT32, 1)),
        Param("src", Type.ptr(DType.FLOAT32, 1, const=True)),
        Param("other", Type.ptr(DType.INT32, 1, const=True)),
    ]

    def typed(value: Shuffle) -> None:
        body = [sb.assign(sb.lanes(sb.var("dst"), 0, len(value.mask)), value)]
        check_function(sb.function("shuffle", params, body), native_fp16=False)

    typed(Shuffle(vector, vector, (7, 0, 3, 4)))
    for wrong, message in (
        (Shuffle(vector, vector, (8, 0, 1, 2)), "lane 8"),
        (Shuffle(vector, other, (0, 1, 2, 3)), "shuffle of"),
        (Shuffle(sb.expr(source[0]), sb.expr(source[1]), (0, 1)), "shuffle of"),
    ):
        with pytest.raises(SemtreeTypeError, match=message):
            typed(wrong)
    for mask in ((), (0,), (0, 1, 2), (0, -1)):
        with pytest.raises(SemtreeTypeError, match="shuffle mask"):
            Shuffle(vector, vector, mask)
