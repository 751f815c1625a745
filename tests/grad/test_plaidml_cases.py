"""PlaidML's three autodiff cases of the conformance corpus (family `gradient`), reproduced by
differentiating their forward programs: each case holds the Tile text PlaidML's `op.gradients`
wrote and its result; `tile.gradient` of the forward function must give the same numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tile
from tests.conftest import SHARED
from tests.shipped import SHIPPED, shipped_devices

FORWARD = {
    # op.gradients(op.summation(op.relu(op.matmul(A, B)), [0, 1]), [A])
    "grad_relu_matmul_wrt_a": (
        """function (XA[M, K], XB[K, N]) -> (L) {
  C[i, j: M, N] = +(XA[i, k] * XB[k, j]);
  R = relu(C);
  L[] = +(R[i, j]);
}""",
        {"XA": "XDA"},
    ),
    # op.gradients(op.summation(3 * X * X + exp(X)), [X])
    "grad_polynomial_exp": (
        """function (XX[M, N]) -> (L) {
  Y = 3.0 * XX * XX + exp(XX);
  L[] = +(Y[i, j]);
}""",
        {"XX": "XDX"},
    ),
    # op.gradients(sum of the matmul of the members of tuple(A, B)), [A])
    "grad_tuple_element": (
        """function (XA[M, K], XB[K, N]) -> (L) {
  T = tuple(XA, XB);
  P = element(T, 0);
  Q = element(T, 1);
  C[i, j: M, N] = +(P[i, k] * Q[k, j]);
  L[] = +(C[i, j]);
}""",
        {"XA": "XDA"},
    ),
}


@pytest.mark.parametrize("device", SHIPPED)
@pytest.mark.parametrize("name", sorted(FORWARD))
def test_plaidml_gradient_cases(name: str, device: str) -> None:
    shipped_devices()
    path = SHARED / "conformance" / "cases" / f"{name}.json"
    case = json.loads(path.read_text())
    assert case["family"] == "gradient"
    source, wanted = FORWARD[name]
    with np.load(path.with_suffix(".npz")) as data:
        inputs = {key: data["input__" + key] for key in case["inputs"]}
        expected = {key: data["expected__" + key] for key in case["outputs"]}
    gradient = tile.gradient(source, wrt=tuple(wanted))
    outputs = gradient(device=device, **inputs)  # a scalar output: the cotangent is 1
    tolerance = case["tolerance"]
    for input_name, output_name in wanted.items():
        np.testing.assert_allclose(
            np.asarray(outputs[gradient.gradients[input_name]]),
            expected[output_name],
            rtol=tolerance["rtol"],
            atol=tolerance["atol"],
        )
