"""A valid 2-D convolution (channels last: NHWC images, HWIO filters) from conv.tile,
checked against numpy on the default device (TILE_DEVICE, or device= below)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tile

conv = tile.Function((Path(__file__).parent / "conv.tile").read_text(), name="conv")
rng = np.random.default_rng(0)
images = rng.standard_normal((2, 16, 16, 3)).astype(np.float32)
filters = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)

out = conv(images, filters)["O"]
print(out.shape, out.dtype)  # (2, 14, 14, 8) float32

windows = np.lib.stride_tricks.sliding_window_view(images, (3, 3), axis=(1, 2))
expected = np.einsum("nyxcij,ijco->nyxo", windows, filters)
assert np.allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
print("matches numpy; max |diff|", float(np.abs(out.numpy() - expected).max()))
