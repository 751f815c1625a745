"""Elementwise epilogues fused into the register-tiled vector path (`tile.lower.vector_epilogue`,
issue 11 item 2): which epilogues run on vectors, and that they compute what numpy does in
float64, at lane and tile edges, in the reference interpreter and on both shipped devices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile
from tests.lower.harness import LLVM_CPU, run_program
from tests.lower.test_vector import SETTINGS, rand, vector_kernels
from tests.shipped import SHIPPED, require_opencl

HEAD = "C[m, n: M, N] = +(A[m, k] * B[k, n]);"
# name -> (source, extra inputs by shape function, numpy epilogue of (c, inputs))
EPILOGUES = {
    "bias_relu": (
        f"function (A[M, K], B[K, N], Bias[N]) -> (O) {{ {HEAD} O = relu(C + Bias); }}",
        {"Bias": lambda m, n: (n,)},
        lambda c, x: np.maximum(c + x["Bias"], 0),
    ),
    "row_scale_residual": (
        f"function (A[M, K], B[K, N], S[M, ONE], R[M, N]) -> (O) {{ {HEAD} O = C * S - R; }}",
        {"S": lambda m, n: (m, 1), "R": lambda m, n: (m, n)},
        lambda c, x: c * x["S"] - x["R"],
    ),
    "clamp_scale": (
        f"function (A[M, K], B[K, N]) -> (O) {{ {HEAD} O = min(max(C, -0.5), 2.0) * 3; }}",
        {},
        lambda c, x: np.minimum(np.maximum(c, -0.5), 2.0) * 3,
    ),
    "leaky_two_outputs": (
        f"function (A[M, K], B[K, N]) -> (C, O) {{ {HEAD} O = C > 0 ? C : C * 0.125 + 1; }}",
        {},
        lambda c, x: np.where(c > 0, c, c * 0.125 + 1),
    ),
    "divide_negate": (
        f"function (A[M, K], B[K, N], D[N]) -> (O) {{ {HEAD} O = -(C / D); }}",
        {"D": lambda m, n: (n,)},
        lambda c, x: -(c / x["D"]),
    ),
}
SIZES = [(37, 29, 53), (64, 32, 64), (13, 7, 96), (5, 3, 16), (1, 4, 2), (17, 5, 33)]
TOLERANCE = 1e-4  # relative to the largest value: float32 sums of at most 65 products


def case(name: str, m: int, k: int, n: int, seed: int = 0) -> tuple[str, dict, np.ndarray]:
    """The source, the inputs and the float64 numpy value of O."""
    source, extra, reference = EPILOGUES[name]
    inputs = {"A": rand(m, k, seed=seed), "B": rand(k, n, seed=seed + 1)}
    for offset, (input_name, shape) in enumerate(extra.items()):
        value = rand(*shape(m, n), seed=seed + 2 + offset)
        inputs[input_name] = value + np.float32(3) if input_name == "D" else value
    c = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    wide = {key: value.astype(np.float64) for key, value in inputs.items()}
    return source, inputs, reference(c, wide)


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= TOLERANCE * (1 + np.abs(want).max())


@pytest.mark.parametrize("settings_", SETTINGS)
@pytest.mark.parametrize("name", sorted(EPILOGUES))
@pytest.mark.parametrize(("m", "k", "n"), SIZES)
def test_epilogues_run_on_vectors(settings_: object, name: str, m: int, k: int, n: int) -> None:
    source, inputs, want = case(name, m, k, n)
    assert len(vector_kernels(source, settings_, inputs)) == 1
    outputs = run_program(source, inputs, settings_)  # type: ignore[arg-type]
    close(outputs["O"], want)
    if "C" in outputs:
        close(outputs["C"], inputs["A"].astype(np.float64) @ inputs["B"])


def test_epilogues_the_vectors_cannot_hold_take_the_generic_path() -> None:
    a, b = rand(9, 8), rand(8, 16, seed=1)
    sources = {  # a math function, an integer result, a half input
        "exp": f"function (A[M, K], B[K, N]) -> (O) {{ {HEAD} O = exp(C * 0.1); }}",
        "as_int": f"function (A[M, K], B[K, N]) -> (O) {{ {HEAD} O = as_int(C, 32); }}",
        "half": f"function (A[M, K], B[K, N], H[N]) -> (O) {{ {HEAD} O = C + H; }}",
    }
    h = rand(16, seed=2).astype(np.float16)
    c = a.astype(np.float64) @ b
    wants = {"exp": np.exp(c * 0.1), "as_int": np.trunc(c), "half": c + h}
    for name, source in sources.items():
        inputs = {"A": a, "B": b, **({"H": h} if name == "half" else {})}
        assert not vector_kernels(source, LLVM_CPU, inputs), name
        got = run_program(source, inputs)["O"].astype(np.float64)
        assert np.abs(got - wants[name]).max() <= 1e-3 * (1 + np.abs(wants[name]).max()), name


@pytest.mark.parametrize("device", SHIPPED)
@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_fused_epilogues_on_the_devices(device: str, name: str) -> None:
    if device != "llvm_cpu.0":
        require_opencl()
    for m, k, n in [(1, 1, 1), (33, 65, 128), (100, 37, 77), (64, 64, 17)]:
        source, inputs, want = case(name, m, k, n, seed=m)
        outputs = tile.Function(source)(**inputs, device=device)
        close(outputs["O"].to_numpy(), want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(EPILOGUES)),
    m=st.integers(1, 70),
    k=st.integers(1, 40),
    n=st.integers(1, 70),
    seed=st.integers(0, 2**16),
)
def test_random_epilogues(name: str, m: int, k: int, n: int, seed: int) -> None:
    source, inputs, want = case(name, m, k, n, seed)
    close(run_program(source, inputs)["O"], want)
