"""Gradients of the functions models are made of (issue 14's held-back kinds): convolutions with
strides, padding and dilation, pooling, softmax, layer norm, matmul chains, gathers, and every
contraction form the rules cover; checked against central differences in float64 and on both
shipped devices against the reference (tests.grad.check)."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.grad.check import numeric_check, on_device, prepare
from tests.shipped import SHIPPED, shipped_devices

RANDOM = np.random.default_rng(14)


def normal(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RANDOM.standard_normal(shape).astype(dtype)


def assert_gradient(source: str, of: str | None = None, **inputs: object) -> tile.GradientFunction:
    prepared = prepare(source, dict(inputs), of=of)
    problem = numeric_check(prepared)
    assert problem is None, f"{problem}\n{prepared.gradient.source}"
    shipped_devices()
    for device in SHIPPED:
        problem = on_device(prepared, device)
        assert problem is None, f"{device}: {problem}\n{prepared.gradient.source}"
    return prepared.gradient


CONV = """
function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
  OH = (H + 2 * P - D * (KH - 1) - 1) / S + 1;
  OW = (W + 2 * P - D * (KW - 1) - 1) / S + 1;
  O[n, y, x, co: N, OH, OW, CO] =
    +(I[n, S * y + D * ky - P, S * x + D * kx - P, ci] * K[ky, kx, ci, co]);
}"""


@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "size"),
    [(1, 0, 1, 7), (2, 1, 1, 9), (1, 2, 2, 8), (3, 1, 2, 11), (2, 0, 1, 1 + 2 * 2)],
)
def test_convolution_with_stride_padding_and_dilation(
    stride: int, padding: int, dilation: int, size: int
) -> None:
    source = CONV.replace("S *", f"{stride} *").replace("/ S", f"/ {stride}")
    source = source.replace("D *", f"{dilation} *").replace("P", str(padding))
    assert_gradient(source, I=normal(2, size, size - 1, 3), K=normal(3, 2, 3, 4))


def test_max_pool_routes_to_the_maximum_and_average_pool_spreads() -> None:
    source = """
function (I[N, H, W, C]) -> (M, A) {
  M[n, y, x, c: N, (H + 1) / 2, (W + 1) / 2, C] = >(I[n, 2 * y + i, 2 * x + j, c]), i < 2, j < 2;
  T[n, y, x, c: N, H - 2, W - 2, C] = +(I[n, y + i, x + j, c]), i < 3, j < 3;
  A = T / 9.0;
}"""
    image = normal(2, 7, 5, 3)
    assert_gradient(source, of="M", I=image)
    assert_gradient(source, of="A", I=image)


def test_softmax_written_out_and_as_the_builtin() -> None:
    written = """
function (X[N, C]) -> (Y) {
  M[n: N] = >(X[n, c]);
  Z = X - reshape(M, N, 1);
  P = exp(Z);
  S[n, 0: N, 1] = +(P[n, c]);
  Y = P / S;
}"""
    assert_gradient(written, X=normal(5, 7))
    builtin = """function (X[N, C]) -> (Y, L) {
  Y = builtin_softmax(X, N, C);
  L = builtin_logsoftmax(X, N, C);
}"""
    assert_gradient(builtin, of="Y", X=normal(4, 9))
    assert_gradient(builtin, of="L", X=normal(4, 9))


def test_layer_norm() -> None:
    source = """
function (X[N, C], G[C], B[C]) -> (Y) {
  S[n, 0: N, 1] = +(X[n, c]);
  Mean = S / C;
  D = X - Mean;
  Q[n, 0: N, 1] = +(D[n, c] * D[n, c]);
  Var = Q / C;
  Y = D / sqrt(Var + 0.001) * G + B;
}"""
    assert_gradient(source, X=normal(6, 10), G=normal(10), B=normal(10))


def test_matmul_chain_with_fan_out_and_an_unused_input() -> None:
    source = """
function (A[M, K], B[K, N], C[N, P], U[P]) -> (O) {
  AB[m, n: M, N] = +(A[m, k] * B[k, n]);
  R = tanh(AB);
  O1[m, p: M, P] = +(R[m, n] * C[n, p]);
  AA[m, j: M, M] = +(A[m, k] * A[j, k]);
  O2[m, p: M, P] = +(AA[m, j] * O1[j, p]);
  O = O1 + O2 * 0.5;
}"""
    gradient = assert_gradient(source, A=normal(3, 5), B=normal(5, 4), C=normal(4, 2), U=normal(2))
    a, b, c = normal(3, 5), normal(5, 4), normal(4, 2)
    outputs = gradient(A=a, B=b, C=c, U=np.ones(2, np.float32), DO=np.ones((3, 2), np.float32))
    assert np.all(np.asarray(outputs["DU"]) == 0)  # U is not used: zeros of its shape


def test_gather_scatter_and_reshape() -> None:
    source = """
function (V[R, C], I[K], E[K, C]) -> (O) {
  G = gather(V, I);
  S = scatter(E * G, I, V);
  O = reshape(S, C, R) * 2.0;
}"""
    index = np.array([2, 0, 2, 4], np.int32)  # a repeated row accumulates
    gradient = assert_gradient(source, V=normal(5, 3), I=index, E=normal(4, 3))
    assert set(gradient.gradients) == {"V", "E"}  # the integer index is not differentiated


@pytest.mark.parametrize(
    "body",
    [
        "O[i: N] = +(A[i, j] + B[j]);",  # + combination: the other operand's range counts
        "O[i: N] = *(A[i, j]);",  # product aggregation
        "O[j: M] = <(A[i, j]);",  # minimum
        "O[i, j: M, N] = =(A[j, i]);",  # assignment (transpose)
        "O[i: N + 2] = =(B2[i - 1]) default P;",  # padding into a default
        "O[2 * i: 2 * N] = +(B2[i]);",  # strided output: gaps are unwritten
        "O[i: N] = +(B2[k]), i - k < N;",  # cumulative sum
        "O[i: N] = +(A[i, j] == A[i, j] ? B[j]);",  # the conditional combination
        "O[i: N] = >(A[i, j] * B[j]);",  # the extreme of a product
        "O[j: M] = <(A[i, j] + B2[i]);",  # the extreme of a sum
        "O[i: N] = >(B2[i] == B2[i] ? A[i, j]);",  # the extreme of a conditional
        "O[i: N] = *(A[i, j] * B[j]);",  # the product of products
        "O[i: N] = *(A[i, j] + B[j]);",  # the product of sums
    ],
)
def test_contraction_forms(body: str) -> None:
    source = f"function (A[N, M], B[M], B2[N], P[Q]) -> (O) {{ {body} }}"
    n = 4
    assert_gradient(source, A=normal(n, 3) + 3, B=normal(3), B2=normal(n), P=normal(n + 2))


def test_elementwise_builtins() -> None:
    source = """
function (X[N], Y[N]) -> (O) {
  P = abs(X) + 0.5;
  T = exp(X) + log(P) + sqrt(P) + tanh(X) + sin(X) + cos(Y) + atan(X) + sinh(X) + cosh(Y);
  U = pow(P, Y) + pow(2, X) + sigmoid(X) + relu(X) + max(X, Y) + min(X, Y) + recip(P);
  V = asin(X / 10.0) + acos(Y / 10.0) + tan(X / 4.0) + asinh(X) + acosh(P + 1.0) + atanh(Y / 10.0);
  W = (X > 0 ? X * Y : -Y) + floor(X) + as_float(as_int(X, 32), 32) + reverse_grad(X, 0) * 0;
  O = T * U - V / (1.0 + W * W) + as_float(as_float(X, 16), 64);
}"""
    assert_gradient(source, X=normal(11), Y=normal(11))


def test_integer_inputs_get_zero_gradients_and_types_follow_the_inputs() -> None:
    source = "function (X[N], I[N], H[N], D[N]) -> (O) { O = X * I + H * D; }"
    gradient = tile.gradient(source)
    outputs = gradient(
        X=normal(5),
        I=np.arange(5, dtype=np.int32),
        H=normal(5, dtype="float16"),
        D=normal(5, dtype="float64"),
        DO=np.ones(5),
    )
    assert np.asarray(outputs["DI"]).dtype == np.int32
    assert np.all(np.asarray(outputs["DI"]) == 0)
    assert np.asarray(outputs["DH"]).dtype == np.float16
    assert np.asarray(outputs["DD"]).dtype == np.float64
    assert np.asarray(outputs["DX"]).tolist() == list(range(5))


def test_scalar_output_defaults_its_cotangent_to_one_and_value_and_grad() -> None:
    source = "function (A[N]) -> (L) { S = A * A; L[] = +(S[i]); }"
    a = normal(6)
    gradient = tile.gradient(source, wrt="A")
    assert gradient.scalar and gradient.cotangent == "DL"
    np.testing.assert_allclose(np.asarray(gradient(A=a)["DA"]), 2 * a, rtol=1e-6)
    both = tile.value_and_grad(source)
    outputs = both(A=a)
    np.testing.assert_allclose(float(np.asarray(outputs["L"])), float(a @ a), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(outputs["DA"]), 2 * a, rtol=1e-6)


def test_the_cotangent_must_have_the_output_shape() -> None:
    gradient = tile.gradient("function (A[N, M]) -> (O) { O[i: N - 1] = +(A[i + 1, j]); }")
    with pytest.raises(tile.TileError, match="cotangent_shape"):
        gradient(A=normal(4, 3), DO=normal(4))
    gradient = tile.gradient("function (A[N, M]) -> (O) { O[i, j: N, M] = =(A[i, j]); }")
    with pytest.raises(tile.TileBindError):
        gradient(A=normal(4, 3), DO=normal(3, 4))


def test_requests_that_cannot_be_differentiated_are_errors() -> None:
    source = "function (A[N], B[N]) -> (O, P) { O[i: N] = *(A[i] == B[j] ? B[j]); P = A; }"
    with pytest.raises(tile.TileGradientError, match="not supported") as error:
        tile.gradient(source, of="O")
    assert error.value.code == "E-GRAD" and error.value.line == 1
    with pytest.raises(tile.TileGradientError, match="not an output"):
        tile.gradient(source, of="Q")
    with pytest.raises(tile.TileGradientError, match="not an input"):
        tile.gradient(source, of="P", wrt="C")
    with pytest.raises(ValueError, match="2 outputs"):
        tile.gradient(source)


def test_the_gradient_source_is_ordinary_tile() -> None:
    source = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
    gradient = tile.gradient(source)
    again = tile.Function(gradient.source)  # parses and checks by itself
    assert again.inputs == ("A", "B", "DC") and again.outputs == ("DA", "DB")
    assert gradient.gradients == {"A": "DA", "B": "DB"}
    assert "G_A[m, k: M, K] = +(G_C[m, n] * B[k, n]);" in gradient.source


def test_ties_of_a_maximum_pass_the_whole_gradient_to_every_maximal_element() -> None:
    """The convention of docs/GRADIENTS.md (PlaidML's): no splitting, no single winner."""
    gradient = tile.gradient("function (X[N]) -> (M) { M[] = >(X[i]); }")
    shipped_devices()
    for device in SHIPPED:
        x = np.array([1.0, 3.0, -2.0, 3.0], np.float32)
        got = np.asarray(gradient(device=device, X=x)["DX"])
        assert got.tolist() == [0.0, 1.0, 0.0, 1.0], device
        pair = tile.gradient("function (A[N], B[N]) -> (O) { O = max(A, B); }")
        outputs = pair(device=device, A=x, B=x, DO=np.ones(4, np.float32))
        # max(a, b) is a < b ? b : a (spec 9.1): a tie goes to a
        assert np.asarray(outputs["DA"]).tolist() == [1.0] * 4
        assert np.asarray(outputs["DB"]).tolist() == [0.0] * 4
