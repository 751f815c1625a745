"""tile's gradients against torch.autograd, where PyTorch is installed (it is not a dependency:
without it this module is skipped; tests/grad/test_functions.py checks the same functions
against central differences everywhere)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.shipped import SHIPPED, shipped_devices

torch = pytest.importorskip("torch")
functional = torch.nn.functional
RANDOM = np.random.default_rng(7)


def normal(*shape: int) -> np.ndarray:
    return RANDOM.standard_normal(shape).astype(np.float32)


def compare(source: str, reference, wrt: tuple[str, ...], **inputs: np.ndarray) -> None:
    """tile.gradient of `source`'s only output against torch's for `reference(**tensors)`."""
    tensors = {
        name: torch.tensor(value, dtype=torch.float64, requires_grad=name in wrt)
        for name, value in inputs.items()
    }
    value = reference(**tensors)
    cotangent = normal(*value.shape)
    (value * torch.tensor(cotangent, dtype=torch.float64)).sum().backward()
    gradient = tile.gradient(source, wrt=wrt)
    shipped_devices()
    for device in SHIPPED:
        outputs = gradient(device=device, **inputs, **{gradient.cotangent: cotangent})
        for name in wrt:
            want = tensors[name].grad.numpy()
            got = np.asarray(outputs[gradient.gradients[name]])
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale, err_msg=name)


@pytest.mark.parametrize(("stride", "padding", "dilation"), [(1, 1, 1), (2, 1, 1), (2, 2, 2)])
def test_conv2d(stride: int, padding: int, dilation: int) -> None:
    source = f"""
function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {{
  OH = (H + 2 * {padding} - {dilation} * (KH - 1) - 1) / {stride} + 1;
  OW = (W + 2 * {padding} - {dilation} * (KW - 1) - 1) / {stride} + 1;
  O[n, y, x, co: N, OH, OW, CO] = +(I[n, {stride} * y + {dilation} * ky - {padding},
      {stride} * x + {dilation} * kx - {padding}, ci] * K[ky, kx, ci, co]);
}}"""

    def reference(I, K):  # noqa: N803, E741 (Tile's names)
        nchw = I.permute(0, 3, 1, 2)
        kernel = K.permute(3, 2, 0, 1)
        out = functional.conv2d(nchw, kernel, stride=stride, padding=padding, dilation=dilation)
        return out.permute(0, 2, 3, 1)

    compare(source, reference, ("I", "K"), I=normal(2, 9, 8, 3), K=normal(3, 3, 3, 4))


def test_max_pool_and_softmax_and_layer_norm() -> None:
    pool = """function (I[N, H, W, C]) -> (O) {
  O[n, y, x, c: N, H / 2, W / 2, C] = >(I[n, 2 * y + i, 2 * x + j, c]), i < 2, j < 2;
}"""
    compare(
        pool,
        lambda I: functional.max_pool2d(I.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1),  # noqa: N803, E741
        ("I",),
        I=normal(2, 6, 8, 3),
    )
    softmax = "function (X[N, C]) -> (Y) { Y = builtin_softmax(X, N, C); }"
    compare(softmax, lambda X: torch.softmax(X, dim=1), ("X",), X=normal(5, 7))  # noqa: N803
    norm = """function (X[N, C], G[C], B[C]) -> (Y) {
  S[n, 0: N, 1] = +(X[n, c]);
  D = X - S / C;
  Q[n, 0: N, 1] = +(D[n, c] * D[n, c]);
  Y = D / sqrt(Q / C + 0.00001) * G + B;
}"""
    compare(
        norm,
        lambda X, G, B: functional.layer_norm(X, (X.shape[1],), G, B, eps=1e-5),  # noqa: N803
        ("X", "G", "B"),
        X=normal(4, 10),
        G=normal(10),
        B=normal(10),
    )


def test_mlp_with_cross_entropy_and_an_embedding() -> None:
    source = """
function (E[V, D], I[N], W[D, C], Y[N, C]) -> (L) {
  X = gather(E, I);
  Z[n, c: N, C] = +(X[n, d] * W[d, c]);
  P = builtin_logsoftmax(relu(Z), N, C);
  T[] = +(Y[n, c] * P[n, c]);
  L = -T / N;
}"""
    index = np.array([3, 1, 3, 0, 5], np.int32)
    labels = np.eye(4, dtype=np.float32)[[0, 2, 1, 3, 0]]

    def reference(E, I, W, Y):  # noqa: N803, E741
        logits = torch.relu(E[I.long()] @ W)
        return -(Y * torch.log_softmax(logits, dim=1)).sum() / len(I)

    compare(source, reference, ("E", "W"), E=normal(6, 3), I=index, W=normal(3, 4), Y=labels)
