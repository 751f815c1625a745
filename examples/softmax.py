"""Softmax over rows from softmax.tile, on every device that loaded, against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tile

softmax = tile.Function((Path(__file__).parent / "softmax.tile").read_text(), name="softmax")
x = np.random.default_rng(1).standard_normal((8, 1000)).astype(np.float32)
e = np.exp(x - x.max(axis=1, keepdims=True))
expected = e / e.sum(axis=1, keepdims=True)

for device in tile.devices():
    y = softmax(x, device=device)["Y"]  # the device is given by keyword only
    assert np.allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6), device.id
    print(f"{device.id}: rows sum to {y.numpy().sum(axis=1)[:3]} ...; matches numpy")
