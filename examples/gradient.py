"""Gradients: tile.gradient turns a Tile function into the Tile function of its gradient
(docs/GRADIENTS.md); here of a squared error, checked against the closed form."""

from __future__ import annotations

import numpy as np

import tile

loss = tile.Function("""
function (X[N, K], W[K, M], T[N, M]) -> (L) {
  Y[n, m: N, M] = +(X[n, k] * W[k, m]);
  D = Y - T;
  L[] = +(D[n, m] * D[n, m]);
}""")
grad = tile.gradient(loss, of="L", wrt="W")  # inputs X, W, T (and DL, 1 when left out)
print(grad.source)

rng = np.random.default_rng(2)
x, w, t = (rng.standard_normal(shape).astype(np.float32) for shape in ((5, 4), (4, 3), (5, 3)))
dw = grad(x, w, t)["DW"].numpy()
expected = 2 * x.T @ (x @ w - t)
assert np.allclose(dw, expected, rtol=1e-4, atol=1e-4)
print("dL/dW matches the closed form 2 X^T (XW - T):\n", dw)
