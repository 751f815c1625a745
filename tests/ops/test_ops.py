"""Every op of tile.ops against NumPy (float64 references) on both shipped devices, sizes at
lane and tile edges; and a small CNN built with tile.ops compiling to one Function."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.ops import reference
from tests.shipped import SHIPPED, shipped_devices
from tile import ops

RANDOM = np.random.default_rng(16)


def normal(*shape: int) -> np.ndarray:
    return RANDOM.standard_normal(shape).astype(np.float32)


def check(
    outputs: dict[str, ops.Value], inputs: dict[str, np.ndarray], expected: dict, rtol: float = 2e-5
) -> tile.Function:
    fn = ops.function(**outputs)
    shipped_devices()
    for device in SHIPPED:
        got = fn(device=device, **inputs)
        for name, want in expected.items():
            want = np.asarray(want)
            value = np.asarray(got[name])
            assert value.shape == want.shape, (device, name, value.shape, want.shape)
            scale = max(1.0, float(np.abs(want).max(initial=0)))
            np.testing.assert_allclose(
                value, want, rtol=rtol, atol=rtol * scale, err_msg=f"{device} {name}"
            )
    return fn


def test_elementwise_ops_operators_and_broadcasting() -> None:
    a, b = normal(5, 7), normal(7)
    A, B = ops.input("A", (5, "N")), ops.input("B", ("N",))  # noqa: N806 (Tile's names)
    outputs = {
        "S": A + B * 2 - 1.5 / (ops.abs(B) + 1),
        "P": -(A**2.0) + ops.maximum(A, B) - ops.minimum(A, 0.25),
        "M": ops.exp(A)
        + ops.log(ops.abs(A) + 1)
        + ops.sqrt(ops.abs(B))
        + ops.tanh(A)
        + ops.sigmoid(A),
        "R": ops.relu(A) + ops.gelu(A),
        "W": ops.where(A > B, A, B) + ops.cast(A >= 0.0, "float32") + ops.cast(A < B, "float32"),
    }
    relu = np.maximum(a, 0)
    gelu = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3)))
    expected = {
        "S": a + b * 2 - 1.5 / (np.abs(b) + 1),
        "P": -(a**2.0) + np.maximum(a, b) - np.minimum(a, 0.25),
        "M": np.exp(a)
        + np.log(np.abs(a) + 1)
        + np.sqrt(np.abs(b))
        + np.tanh(a)
        + 1 / (1 + np.exp(-a)),
        "R": relu + gelu,
        "W": np.where(a > b, a, b) + (a >= 0) + (a < b),
    }
    check(outputs, {"A": a, "B": b}, expected, rtol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (8, 33)])
def test_reductions(shape: tuple[int, int]) -> None:
    x = normal(2, *shape)
    X = ops.input("X", (2, *shape))  # noqa: N806
    outputs = {
        "S": ops.sum(X), "S1": ops.sum(X, axis=1), "M": ops.mean(X, axis=(0, 2), keepdims=True),
        "MX": ops.max(X, axis=-1), "MN": ops.min(X, axis=0), "P": ops.prod(X * 0.5 + 1, axis=2),
        "AX": ops.argmax(X, axis=2), "AN": ops.argmin(X, axis=1),
    }  # fmt: skip
    expected = {
        "S": x.sum(dtype=np.float64), "S1": x.sum(axis=1), "M": x.mean(axis=(0, 2), keepdims=True),
        "MX": x.max(axis=-1), "MN": x.min(axis=0), "P": np.prod(x * 0.5 + 1, axis=2),
        "AX": x.argmax(axis=2), "AN": x.argmin(axis=1),
    }  # fmt: skip
    check(outputs, {"X": x}, expected, rtol=1e-4)


def test_argmax_takes_the_first_of_ties() -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    X = ops.input("X", (2, 4))  # noqa: N806
    check({"A": ops.argmax(X), "B": ops.argmin(X)}, {"X": x}, {"A": [1, 0], "B": [3, 0]})


@pytest.mark.parametrize(
    ("left", "right"), [((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((2, 1, 4, 5), (3, 5, 6))]
)
def test_matmul(left: tuple[int, ...], right: tuple[int, ...]) -> None:
    a, b = normal(*left), normal(*right)
    A, B = ops.input("A", left), ops.input("B", right)  # noqa: N806
    check(
        {"C": A @ B, "D": ops.matmul(A, B)}, {"A": a, "B": b}, {"C": a @ b, "D": a @ b}, rtol=1e-5
    )


def test_layout_ops() -> None:
    x, y = normal(3, 4, 5), normal(3, 2, 5)
    index = np.array([[2, 0], [1, 1]], np.int32)
    X, Y, I = ops.input("X", (3, 4, 5)), ops.input("Y", (3, 2, 5)), ops.input("I", (2, 2))  # noqa: N806, E741
    outputs = {
        "R": ops.reshape(X, (4, -1)), "T": ops.transpose(X), "T2": ops.transpose(X, (1, 0, 2)),
        "C": ops.concatenate([X, Y, X], axis=1), "P": ops.pad(X, [(1, 0), (0, 2), (1, 1)]),
        "G": ops.gather(X, I), "G1": ops.gather(X, I, axis=2),
        "B": ops.broadcast_to(ops.sum(Y, axis=1, keepdims=True), (2, 3, 4, 5)),
    }  # fmt: skip
    expected = {
        "R": x.reshape(4, -1), "T": x.transpose(), "T2": x.transpose(1, 0, 2),
        "C": np.concatenate([x, y, x], axis=1), "P": np.pad(x, [(1, 0), (0, 2), (1, 1)]),
        "G": x[index], "G1": np.take(x, index, axis=2),
        "B": np.broadcast_to(y.sum(axis=1, keepdims=True), (2, 3, 4, 5)),
    }  # fmt: skip
    check(outputs, {"X": x, "Y": y, "I": index}, expected, rtol=1e-5)


@pytest.mark.parametrize(
    ("size", "kernel", "strides", "padding", "dilation", "groups"),
    [
        ((9, 8), (3, 3), 1, "valid", 1, 1),
        ((9, 8), (3, 2), 2, "same", 1, 1),
        ((11, 7), (3, 3), (2, 1), [(2, 1), (0, 3)], 2, 1),
        ((8, 8), (3, 3), 1, "same", 1, 2),
        ((17,), (5,), 3, "same", 1, 1),
        ((5, 6, 4), (2, 3, 2), 1, "valid", 1, 1),
    ],
)
def test_conv_and_conv_transpose(size, kernel, strides, padding, dilation, groups) -> None:
    spatial = len(size)
    per = lambda v: [v] * spatial if isinstance(v, int) else list(v)  # noqa: E731
    x, w = normal(2, *size, 4), normal(*kernel, 4 // groups, 6)
    X, W = ops.input("X", ("N", *size, 4)), ops.input("W", (*kernel, 4 // groups, 6))  # noqa: N806
    y = ops.conv(X, W, strides, padding, dilation, groups)
    want = reference.conv(x, w, per(strides), padding, per(dilation), groups)
    check({"Y": y}, {"X": x, "W": w}, {"Y": want}, rtol=1e-4)
    if groups == 1:
        t = normal(*kernel, 3, 6)
        T = ops.input("T", (*kernel, 3, 6))  # noqa: N806
        back = ops.conv_transpose(ops.input("Y", tuple(want.shape)), T, strides, padding, dilation)
        want_back = reference.conv_transpose(
            want.astype(np.float32), t, per(strides), padding, per(dilation)
        )
        check({"Z": back}, {"Y": want.astype(np.float32), "T": t}, {"Z": want_back}, rtol=1e-4)


@pytest.mark.parametrize(
    ("size", "window", "strides", "padding"),
    [((7, 9), 2, None, "valid"), ((7, 9), 3, 2, "same"), ((13,), 4, 3, "same")],
)
def test_pooling(size, window, strides, padding) -> None:
    x = normal(2, *size, 3)
    X = ops.input("X", (2, *size, 3))  # noqa: N806
    spatial = len(size)
    win = [window] * spatial
    step = win if strides is None else [strides] * spatial
    expected = {
        "M": reference.pool(x, win, step, padding, "max"),
        "A": reference.pool(x, win, step, padding, "avg"),
    }
    outputs = {
        "M": ops.max_pool(X, window, strides, padding),
        "A": ops.avg_pool(X, window, strides, padding),
    }
    check(outputs, {"X": x}, expected, rtol=1e-5)


def test_softmax_normalisation_and_losses() -> None:
    x, g, b = normal(6, 10), normal(10), normal(10)
    mean, var = normal(10), np.abs(normal(10)) + 0.5
    labels = np.array([3, 0, 9, 1, 1, 5], np.int32)
    X, G, B = ops.input("X", ("N", "C")), ops.input("G", ("C",)), ops.input("B", ("C",))  # noqa: N806
    MU, VAR, L = ops.input("MU", ("C",)), ops.input("VAR", ("C",)), ops.input("L", ("N",))  # noqa: N806
    Y = ops.input("Y", ("N", "C"))  # noqa: N806
    y = normal(6, 10)
    probabilities_y = np.exp(y - y.max(1, keepdims=True))
    probabilities_y /= probabilities_y.sum(1, keepdims=True)
    shifted = x - x.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    centred = x - x.mean(axis=-1, keepdims=True)
    outputs = {
        "S": ops.softmax(X), "S0": ops.softmax(X, axis=0), "LS": ops.log_softmax(X),
        "LN": ops.layer_norm(X, weight=G, bias=B), "BN": ops.batch_norm(X, MU, VAR, G, B),
        "CE": ops.cross_entropy(X, L), "CP": ops.cross_entropy(X, ops.softmax(Y)),
        "MSE": ops.mse_loss(X, Y),
    }  # fmt: skip
    expected = {
        "S": np.exp(logp), "S0": np.exp(x) / np.exp(x).sum(axis=0), "LS": logp,
        "LN": centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + 1e-5) * g + b,
        "BN": (x - mean) / np.sqrt(var + 1e-5) * g + b,
        "CE": -logp[np.arange(6), labels].mean(),
        "CP": -(probabilities_y * logp).sum() / 6,
        "MSE": ((x - y) ** 2).mean(),
    }  # fmt: skip
    inputs = {"X": x, "G": g, "B": b, "MU": mean, "VAR": var, "L": labels, "Y": y}
    check(outputs, inputs, expected, rtol=1e-4)


def test_a_small_cnn_is_one_function_and_matches_numpy() -> None:
    x, w1, dense = normal(3, 12, 12, 1), normal(3, 3, 1, 8) * 0.5, normal(6 * 6 * 8, 10) * 0.1
    X = ops.input("X", ("N", 12, 12, 1))  # noqa: N806
    W1, D = ops.input("W1", (3, 3, 1, 8)), ops.input("D", (288, 10))  # noqa: N806
    hidden = ops.max_pool(ops.relu(ops.conv(X, W1, padding="same")), 2)
    probabilities = ops.softmax(ops.reshape(hidden, ("N", 288)) @ D)
    conv = reference.conv(x, w1, [1, 1], "same", [1, 1])
    pooled = reference.pool(np.maximum(conv, 0), [2, 2], [2, 2], "valid", "max")
    logits = pooled.reshape(3, 288) @ dense
    want = np.exp(logits - logits.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    fn = check({"P": probabilities}, {"X": x, "W1": w1, "D": dense}, {"P": want}, rtol=1e-4)
    assert fn.source.count("function") == 1 and "max_pool" not in fn.source
    assert isinstance(fn, tile.Function) and fn.inputs == ("X", "W1", "D")


def test_errors_are_clear() -> None:
    A = ops.input("A", (3, 4))  # noqa: N806
    with pytest.raises(ops.OpsError, match="inner dimension"):
        A @ ops.input("B", (3, 4))
    with pytest.raises(ops.OpsError, match="do not broadcast"):
        A + ops.input("C", (5,))
    with pytest.raises(ops.OpsError, match="out of range"):
        ops.sum(A, axis=2)
    with pytest.raises(ops.OpsError, match="upper-case"):
        ops.input("a", (3,))
    with pytest.raises(tile.TileError, match="assert"):
        ops.function(S=ops.sum(A))(A=normal(3, 5))  # the declared size 4 is checked
