"""Sliding windows over NCHW images for the layout tests (`test_relayout`, `test_channels`):
random window parameters that Tile accepts, and a float64 reference tap by tap."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Callable

# Random windows: `fitted` makes the image large enough for them.
WINDOWS = {
    "k": st.integers(1, 4),
    "stride": st.integers(1, 3),
    "dilation": st.integers(1, 2),
    "pad": st.integers(0, 2),
    "h": st.integers(1, 12),
    "w": st.integers(1, 12),
}


def fitted(
    k: int, stride: int, dilation: int, pad: int, size: tuple[int, int]
) -> tuple[int, int] | None:
    """`size` grown to hold one window, or None where some output row or column would lie in
    the padding alone (Tile reports that contraction as E-EMPTY)."""
    span = (k - 1) * dilation + 1
    size = (max(size[0], span - 2 * pad), max(size[1], span - 2 * pad))
    for extent in size:
        rows = (extent + 2 * pad - span) // stride + 1
        taps = [[stride * y - pad + dilation * i for i in range(k)] for y in range(rows)]
        if not all(any(0 <= tap < extent for tap in row) for row in taps):
            return None
    return size


def drawn_size(k: int, stride: int, dilation: int, pad: int, h: int, w: int) -> tuple[int, int]:
    """`fitted` for a draw of `WINDOWS`: a draw it refuses is rejected (`assume`)."""
    size = fitted(k, stride, dilation, pad, (h, w))
    assume(size is not None)
    assert size is not None
    return size


def by_taps(
    image: np.ndarray,
    k: int,
    stride: int,
    dilation: int,
    pad: int,
    tap: Callable[[np.ndarray, int, int], np.ndarray],
) -> np.ndarray:
    """The sum over the k x k taps of `tap(window, i, j)`, in float64, where `window` is the
    zero-padded NCHW `image` seen from tap (i, j) at every output position."""
    padded = np.pad(image.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    span = (k - 1) * dilation + 1
    oh = (padded.shape[2] - span) // stride + 1
    ow = (padded.shape[3] - span) // stride + 1
    total: np.ndarray | float = 0.0
    for i in range(k):
        for j in range(k):
            y0, x0 = i * dilation, j * dilation
            window = padded[:, :, y0 : y0 + stride * oh : stride, x0 : x0 + stride * ow : stride]
            total = total + tap(window, i, j)
    return np.asarray(total)
