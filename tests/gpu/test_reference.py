"""GPU-style kernels (`tile.lower.gpu.generate`) through the reference interpreter: no device
needed.

The interpreter runs every work-item of a grid in lockstep, checks that whole work-groups
reach each barrier, and reports a data race on local memory (an element one work-item wrote,
touched by another before a barrier), so a kernel that passes here is correct on a device
that runs its work-items in any order.

* every shared case (spec/cases and conformance/cases) under the GPU preset of a common GPU
  and under `SMALL_GPU` (8 work-items, 256 bytes of local memory), compared with the expected
  outputs exactly as `shared/conformance/run.py` compares them;
* random contractions (`tests.lower.strategies`) against the specification;
* the shape of the kernels: operands staged in local memory between barriers for matmuls,
  convolutions and reductions; work-groups of `threads` work-items everywhere;
* the checks themselves: a kernel with a barrier removed is reported as racy.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import tile
from semtree.kernel import KernelKind
from semtree.nodes import Barrier, Block, Declare, Node, rewrite, walk
from semtree.types import Region
from tests.gpu.settings import MID_GPU, SMALL_GPU, TYPICAL_GPU
from tests.lower.harness import run_kernel_list, run_program
from tests.lower.strategies import contractions, reference_contraction
from tests.lower.test_conformance import CASES, RUNNER
from tests.reference import InterpreterError
from tile.lower.generate import generate_program

if TYPE_CHECKING:
    from pathlib import Path

    from semtree.kernel import HardwareSettings, KernelInfo, KernelList

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"


def _params() -> list[object]:
    return [
        pytest.param(path, hardware, id=f"{label}-{path.stem}")
        for path in CASES
        for label, hardware in (("gpu", TYPICAL_GPU), ("small", SMALL_GPU))
    ]


@pytest.mark.parametrize(("path", "hardware"), _params())
def test_case(path: Path, hardware: HardwareSettings) -> None:
    assert RUNNER is not None
    case = json.loads(path.read_text())
    case["_dir"] = str(path.parent)
    inputs, expected = RUNNER.load_arrays(case)
    outputs = run_program(case["source"], inputs, hardware)
    tolerance = case.get("tolerance", {"rtol": 0.0, "atol": 0.0})
    for name, spec in case["outputs"].items():
        ok, message, _ = RUNNER.compare_output(
            name, outputs[name], expected[name], spec, tolerance, False
        )
        assert ok, message


def _quarters(shape: tuple[int, ...], dtype: str) -> st.SearchStrategy[np.ndarray]:
    size = int(np.prod(shape))
    elements = st.integers(-3, 3) if dtype == "int32" else st.integers(-8, 8).map(lambda k: k / 4)
    return st.lists(elements, min_size=size, max_size=size).map(
        lambda items: np.array(items, dtype=dtype).reshape(shape)
    )


@hypothesis_settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    contractions(),
    st.sampled_from(["float32", "int32"]),
    st.sampled_from([SMALL_GPU, MID_GPU, TYPICAL_GPU]),
    st.data(),
)
def test_random_contraction_matches_the_specification(
    case: object, dtype: str, hardware: HardwareSettings, data: st.DataObject
) -> None:
    inputs = {
        name: data.draw(_quarters(shape, dtype), label=name)
        for name, shape in case.shapes.items()  # type: ignore[attr-defined]
    }
    try:
        bound = tile.Function(case.source).bind(inputs)  # type: ignore[attr-defined]
    except tile.TileError:
        assume(False)
        return
    (op,) = [op for op in bound.ops if op.contraction is not None]
    expected, counts = reference_contraction(bound, op, inputs)
    got = run_program(case.source, inputs, hardware)["O"]  # type: ignore[attr-defined]
    compared = counts <= 1 if case.agg == "=" else np.ones(got.shape, bool)  # type: ignore[attr-defined]
    if dtype == "int32":
        wrapped = np.array([((int(v) + 2**31) % 2**32) - 2**31 for v in expected.flat])
        assert np.array_equal(got.reshape(-1)[compared.reshape(-1)], wrapped[compared.reshape(-1)])
        return
    want = expected.astype(np.float64)
    if case.agg == "*":  # type: ignore[attr-defined]
        assert np.allclose(got[compared], want[compared], rtol=1e-5, atol=1e-30)
    else:  # sums of quarters are exact in any order
        assert np.array_equal(got[compared], want[compared].astype(np.float32))


# ---- the kernels' shape ------------------------------------------------------------------------


def _kernels(source: str, hardware: HardwareSettings, **shapes: tuple[int, ...]) -> KernelList:
    inputs = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    return generate_program(tile.Function(source).bind(inputs), hardware)


def _local_arrays(kernel: KernelInfo) -> list[str]:
    assert kernel.body is not None
    return [
        node.name
        for node in walk(kernel.body)
        if isinstance(node, Declare) and node.type.region is Region.LOCAL
    ]


def _barriers(kernel: KernelInfo) -> int:
    assert kernel.body is not None
    return sum(isinstance(node, Barrier) for node in walk(kernel.body))


@pytest.mark.parametrize(
    ("source", "shapes"),
    [
        (MATMUL, {"A": (40, 24), "B": (24, 33)}),
        (
            """function (I[N, H, W, CI], F[KH, KW, CI, CO]) -> (O) {
                O[n, x, y, co: N, H - KH + 1, W - KW + 1, CO] =
                    +(I[n, x + i, y + j, ci] * F[i, j, ci, co]);
            }""",
            {"I": (1, 9, 9, 3), "F": (3, 3, 3, 8)},
        ),
        ("function (A[M, N]) -> (S) { S[m: M] = +(A[m, n]); }", {"A": (6, 100)}),
        ("function (A[M, N]) -> (S) { S[n: N] = >(A[m, n]); }", {"A": (100, 6)}),
    ],
    ids=["matmul", "conv2d", "sum_rows", "max_columns"],
)
def test_ordinary_contractions_stage_operands_between_barriers(
    source: str, shapes: dict[str, tuple[int, ...]]
) -> None:
    (kernel,) = _kernels(source, TYPICAL_GPU, **shapes).kernels
    assert kernel.kind is KernelKind.CONTRACTION
    assert kernel.local_size == (256, 1, 1)
    assert any(name.startswith("tile_") for name in _local_arrays(kernel))
    assert _barriers(kernel) >= 1


def test_every_kernel_uses_whole_work_groups() -> None:
    source = """function (A[M, K], B[K, N], C[N]) -> (R, T) {
        P[m, n: M, N] = +(A[m, k] * B[k, n]);
        R = relu(P + C);
        T[n, m: N, M] = =(A[m, n]);
    }"""
    kernel_list = _kernels(source, TYPICAL_GPU, A=(7, 7), B=(7, 5), C=(5,))
    kinds = [kernel.kind for kernel in kernel_list.kernels]
    assert kinds == [KernelKind.CONTRACTION, KernelKind.CONTRACTION]
    for kernel in kernel_list.kernels:
        assert kernel.local_size == (256, 1, 1)
        assert kernel.global_size[0] % 256 == 0
    transpose = kernel_list.kernels[1]
    assert not _local_arrays(transpose) and not _barriers(transpose)  # nothing to share


def test_a_missing_barrier_is_reported_as_a_race() -> None:
    inputs = {"A": np.ones((9, 70), np.float32), "B": np.ones((70, 3), np.float32)}
    hardware = replace(MID_GPU, threads=16, max_mem=1024)
    kernel_list = generate_program(tile.Function(MATMUL).bind(inputs), hardware)
    (kernel,) = kernel_list.kernels
    assert np.array_equal(run_kernel_list(kernel_list, inputs)["C"], np.full((9, 3), 70.0))
    for skipped in range(_barriers(kernel)):
        seen = []

        def drop(node: Node, skipped: int = skipped, seen: list[int] = seen) -> Node | None:
            if isinstance(node, Barrier):
                seen.append(1)
                if len(seen) - 1 == skipped:
                    return Block(())
            return None

        racy = replace(kernel, body=rewrite(kernel.body, drop))  # type: ignore[arg-type]
        with pytest.raises(InterpreterError, match="data race"):
            run_kernel_list(replace(kernel_list, kernels=(racy,)), inputs)


def test_two_dimensional_grids(monkeypatch: pytest.MonkeyPatch) -> None:
    """More work-groups than one grid row holds: the groups are numbered across two grid
    dimensions and the padding groups do nothing (the limit is lowered to reach this)."""
    monkeypatch.setattr("tile.lower.gpu.layout.INDEX_LIMIT", 8 * 6)
    monkeypatch.setattr("tile.lower.gpu.generate.INDEX_LIMIT", 8 * 5)
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (37, 5)).astype(np.float32)
    b = rng.integers(-3, 4, (5, 17)).astype(np.float32)
    source = """function (A[M, K], B[K, N]) -> (C, D) {
        C[m, n: M, N] = +(A[m, k] * B[k, n]);
        D = -A;
    }"""
    kernel_list = generate_program(tile.Function(source).bind({"A": a, "B": b}), SMALL_GPU)
    assert all(kernel.global_size[1] > 1 for kernel in kernel_list.kernels)
    outputs = run_kernel_list(kernel_list, {"A": a, "B": b})
    assert np.array_equal(outputs["C"], a @ b)
    assert np.array_equal(outputs["D"], -a)
