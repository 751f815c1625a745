"""The README's quick start: write a function, call it on numpy arrays, read the result."""

from __future__ import annotations

import numpy as np

import tile

matmul = tile.Function("""
function (A[M, K], B[K, N]) -> (C) {
  C[m, n: M, N] = +(A[m, k] * B[k, n]);
}""")
a, b = np.random.rand(4, 3).astype(np.float32), np.random.rand(3, 2).astype(np.float32)
c = matmul(a, b)["C"]  # inputs in the order the function declares them; runs asynchronously
print(c)  # reading a tensor waits for it
assert np.allclose(c.numpy(), a @ b, rtol=1e-5)
print("matches numpy:", c.shape, c.dtype)
