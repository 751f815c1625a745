"""NumPy references for the ops of tile.ops that numpy lacks: convolutions and pooling in
channels-last layout, written with explicit loops over the kernel (float64)."""

from __future__ import annotations

import itertools

import numpy as np


def _padding(sizes, kernel, strides, dilation, padding):
    """(before, after) per spatial axis and output sizes, TensorFlow's rules for "same"."""
    pairs, outputs = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilation, strict=True):
        span = d * (k - 1) + 1
        if padding == "valid":
            lo = hi = 0
        elif padding == "same":
            out = -(-size // s)
            total = max((out - 1) * s + span - size, 0)
            lo, hi = total // 2, total - total // 2
        else:
            lo, hi = padding[len(pairs)]
        pairs.append((lo, hi))
        outputs.append((size + lo + hi - span) // s + 1)
    return pairs, outputs


def conv(x, w, strides, padding, dilation, groups=1):
    x, w = x.astype(np.float64), w.astype(np.float64)
    spatial = x.ndim - 2
    kernel = w.shape[:spatial]
    pairs, outputs = _padding(x.shape[1:-1], kernel, strides, dilation, padding)
    padded = np.pad(x, [(0, 0), *pairs, (0, 0)])
    ci_group, co = w.shape[-2], w.shape[-1]
    co_group = co // groups
    out = np.zeros((x.shape[0], *outputs, co))
    for position in itertools.product(*(range(k) for k in kernel)):
        window = tuple(
            slice(p * d, p * d + (o - 1) * s + 1, s)
            for p, d, o, s in zip(position, dilation, outputs, strides, strict=True)
        )
        patch = padded[(slice(None), *window, slice(None))]
        for g in range(groups):
            part = patch[..., g * ci_group : (g + 1) * ci_group]
            weights = w[(*position, slice(None), slice(g * co_group, (g + 1) * co_group))]
            out[..., g * co_group : (g + 1) * co_group] += part @ weights
    return out


def conv_transpose(x, w, strides, padding, dilation):
    """The adjoint of `conv` (w: [*kernel, CO, CI])."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    spatial = x.ndim - 2
    kernel = w.shape[:spatial]
    full = [
        (n - 1) * s + d * (k - 1) + 1
        for n, s, d, k in zip(x.shape[1:-1], strides, dilation, kernel, strict=True)
    ]
    if padding == "valid":
        pairs = [(0, 0)] * spatial
    elif padding == "same":
        pairs = []
        for f, n, s in zip(full, x.shape[1:-1], strides, strict=True):
            total = max(f - n * s, 0)
            pairs.append((total // 2, total - total // 2))
    else:
        pairs = list(padding)
    out = np.zeros((x.shape[0], *full, w.shape[-2]))
    for position in itertools.product(*(range(k) for k in kernel)):
        window = tuple(
            slice(p * d, p * d + (n - 1) * s + 1, s)
            for p, d, n, s in zip(position, dilation, x.shape[1:-1], strides, strict=True)
        )
        out[(slice(None), *window, slice(None))] += x @ w[position].T
    crop = tuple(slice(lo, f - hi) for (lo, hi), f in zip(pairs, full, strict=True))
    return out[(slice(None), *crop, slice(None))]


def pool(x, window, strides, padding, kind):
    x = x.astype(np.float64)
    spatial = x.ndim - 2
    pairs, outputs = _padding(x.shape[1:-1], window, strides, [1] * spatial, padding)
    fill = -np.inf if kind == "max" else 0.0
    padded = np.pad(x, [(0, 0), *pairs, (0, 0)], constant_values=fill)
    ones = np.pad(np.ones_like(x), [(0, 0), *pairs, (0, 0)])
    result = np.full((x.shape[0], *outputs, x.shape[-1]), fill)
    count = np.zeros_like(result)
    for position in itertools.product(*(range(k) for k in window)):
        index = tuple(
            slice(p, p + (o - 1) * s + 1, s)
            for p, o, s in zip(position, outputs, strides, strict=True)
        )
        patch = padded[(slice(None), *index, slice(None))]
        if kind == "max":
            result = np.maximum(result, patch)
        else:
            result = result + patch
            count = count + ones[(slice(None), *index, slice(None))]
    return result if kind == "max" else result / count
