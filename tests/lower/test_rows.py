"""Row-fused kernels (`tile.lower.rows`): which runs of kernels become one kernel per row, and
that the fused kernels compute what numpy does in float64 at sizes on lane and tile edges —
through the reference interpreter with poisoned outputs (plain and with vector loops), and on
both shipped devices against the reference evaluator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tile
from semtree.kernel import HardwareSettings, KernelKind
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program
from tile.lower.rows import FEW_ROWS_LENGTH

SOFTMAX = """function (X[M, N]) -> (O) {
    MX[m, 0: M, 1] = >(X[m, n]);
    E = exp(X - MX);
    S[m, 0: M, 1] = +(E[m, n]);
    O = E / S;
}"""
LAYERNORM = """function (X[M, N], G[N]) -> (O) {
    S[m, 0: M, 1] = +(X[m, n]);
    MU = S / N;
    D = X - MU;
    Q[m, 0: M, 1] = +(D[m, n] * D[m, n]);
    O = G * D / sqrt(Q / N + 0.00001);
}"""
LOGSOFTMAX_3D = """function (X[B, H, N]) -> (O) {
    MX[b, h, 0: B, H, 1] = >(X[b, h, n]);
    E = exp(X - MX);
    S[b, h, 0: B, H, 1] = +(E[b, h, n]);
    O = X - MX - log(S);
}"""
COLUMN_SOFTMAX = """function (X[M, N]) -> (O) {
    MX[0, n: 1, N] = >(X[m, n]);
    E = exp(X - MX);
    S[0, n: 1, N] = +(E[m, n]);
    O = E / S;
}"""
SHIFTED = """function (X[M, N]) -> (O) {
    E = exp(X);
    S[m, 0: M, 1] = +(E[m + 1, n]);
    O = S * 2.0;
}"""
WIDE = replace(LLVM_CPU, vec_size=8, vector_loops=True, reduction_steps=False)  # OpenCL CPU
GPU = HardwareSettings.opencl_gpu(
    max_work_group_size=256,
    max_work_item_sizes=(256, 256, 256),
    local_mem_size=32768,
    max_compute_units=4,
)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    d = x - x.mean(axis=-1, keepdims=True)
    return g * d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)


def _logsoftmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def fused_steps(source: str, inputs: dict, settings: HardwareSettings = LLVM_CPU) -> list[int]:
    """The steps of each row-fused kernel of the program."""
    kernel_list = generate_program(tile.Function(source).bind(inputs), settings)
    steps = []
    for kernel in kernel_list.kernels:
        first = kernel.comments.splitlines()[0] if kernel.comments else ""
        if first.startswith("row-fused:"):
            assert kernel.kind is KernelKind.CONTRACTION
            steps.append(int(first.split()[1]))
    return steps


def test_which_runs_fuse() -> None:
    rng = np.random.default_rng(0)
    x = _rand(rng, 64, 100)
    assert fused_steps(SOFTMAX, {"X": x}) == [4]
    assert fused_steps(SOFTMAX, {"X": x}, WIDE) == [4]
    assert len(fused_steps(LAYERNORM, {"X": x, "G": _rand(rng, 100)})) == 1
    assert fused_steps(LOGSOFTMAX_3D, {"X": _rand(rng, 4, 8, 30)}) == [4]
    assert fused_steps(COLUMN_SOFTMAX, {"X": x}) == []  # its reductions run down columns
    assert fused_steps(SHIFTED, {"X": x}) == []  # a row reads the next row's values
    assert fused_steps(SOFTMAX, {"X": _rand(rng, 1, 100)}) == [4]  # one core does it at once
    cores = LLVM_CPU.goal_groups // 4
    assert cores > 1
    few_long = _rand(rng, cores - 1, FEW_ROWS_LENGTH + 1)
    assert fused_steps(SOFTMAX, {"X": few_long}) == []  # a core left idle on a long row
    assert fused_steps(SOFTMAX, {"X": few_long[:, :-1]}) == [4]
    assert fused_steps(SOFTMAX, {"X": _rand(rng, cores, FEW_ROWS_LENGTH + 1)}) == [4]
    assert fused_steps(SOFTMAX, {"X": x}, GPU) == []  # GPU-style kernels are not fused


SIZES = [1, 2, 7, 8, 9, 31, 33, 64, 65, 257, 1000]


@pytest.mark.parametrize("settings", [LLVM_CPU, WIDE], ids=["llvm_cpu", "vector_loops"])
@pytest.mark.parametrize("n", SIZES)
def test_fused_rows_match_numpy(n: int, settings: HardwareSettings) -> None:
    rng = np.random.default_rng(n)
    x, g = _rand(rng, 17, n), _rand(rng, n)
    assert fused_steps(SOFTMAX, {"X": x}, settings) == ([4] if n > 1 else [2])
    got = run_program(SOFTMAX, {"X": x}, settings)["O"]
    np.testing.assert_allclose(got, _softmax(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    got = run_program(LAYERNORM, {"X": x, "G": g}, settings)["O"]
    want = _layernorm(x.astype(np.float64), g.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    x3 = _rand(rng, 3, 6, n)
    got = run_program(LOGSOFTMAX_3D, {"X": x3}, settings)["O"]
    np.testing.assert_allclose(got, _logsoftmax(x3.astype(np.float64)), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize(
    ("m", "n"),
    [(1, 1), (1, 4099), (1, 300007), (3, 17), (16, 1), (17, 9), (33, 64), (40, 1000), (5000, 3)],
)
def test_fused_rows_on_devices(device_id: str, m: int, n: int, devices: dict) -> None:
    rng = np.random.default_rng(m * n)
    cases = [
        Case("softmax", SOFTMAX, {"X": _rand(rng, m, n)}),
        Case("layernorm", LAYERNORM, {"X": _rand(rng, m, n), "G": _rand(rng, n)}),
        Case("logsoftmax", LOGSOFTMAX_3D, {"X": _rand(rng, 2, m, n)}),
        Case("columns", COLUMN_SOFTMAX, {"X": _rand(rng, m, n)}),
    ]
    for case in cases:
        outcome = check(case, devices[device_id])
        assert outcome.kind == "ok", f"{case.family} {m}x{n}: {outcome}"


# Temporaries held in place (`tile.lower.rows.in_place`): E is read after O's step (so it
# cannot live in O, but can in P), read by a kernel outside the run, or a program output.
LATE = """function (X[M, N]) -> (O, P) {
    MX[m, 0: M, 1] = >(X[m, n]);
    E = exp(X - MX);
    S[m, 0: M, 1] = +(E[m, n]);
    O = E / S;
    T[m, 0: M, 1] = +(O[m, n] * E[m, n]);
    P = T + E;
}"""
OUTSIDE = """function (X[M, N]) -> (O, Q) {
    MX[m, 0: M, 1] = >(X[m, n]);
    E = exp(X - MX);
    S[m, 0: M, 1] = +(E[m, n]);
    O = E / S;
    Q[n, m: N, M] = =(E[m, n]);
}"""
KEPT = SOFTMAX.replace("-> (O)", "-> (O, E)")


def _in_place_answers(x: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    o = e / e.sum(axis=1, keepdims=True)
    late = {"O": o, "P": (o * e).sum(axis=1, keepdims=True) + e}
    return {LATE: late, OUTSIDE: {"O": o, "Q": e.T}, KEPT: {"O": o, "E": e}, SOFTMAX: {"O": o}}


def test_which_temporaries_are_held_in_place() -> None:
    x = _rand(np.random.default_rng(5), 17, 33)
    temporaries = {
        source: generate_program(tile.Function(source).bind({"X": x}), LLVM_CPU).temporaries
        for source in (SOFTMAX, LATE, OUTSIDE)
    }
    assert temporaries[SOFTMAX] == ("S",)  # MX held in S, E in O
    assert "E" not in temporaries[LATE] and "E" in temporaries[OUTSIDE]
    (kernel,) = generate_program(tile.Function(SOFTMAX).bind({"X": x}), LLVM_CPU).kernels
    assert [param.name for param in kernel.params] == ["S", "O", "X"]


@pytest.mark.parametrize("shape", [(1, 1), (17, 33), (5, 1025)])
def test_temporaries_held_in_place_match_numpy(shape: tuple[int, int]) -> None:
    x = _rand(np.random.default_rng(shape[1]), *shape)
    for source, answers in _in_place_answers(x).items():
        for settings in (LLVM_CPU, WIDE):
            got = run_program(source, {"X": x}, settings)
            for name, want in answers.items():
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device_id", SHIPPED)
def test_temporaries_held_in_place_on_devices(device_id: str, devices: dict) -> None:
    x = _rand(np.random.default_rng(7), 40, 1000)
    for source, answers in _in_place_answers(x).items():
        outputs = tile.Function(source)(device=devices[device_id], X=x)
        for name, want in answers.items():
            np.testing.assert_allclose(np.asarray(outputs[name]), want, rtol=1e-5, atol=1e-6)
