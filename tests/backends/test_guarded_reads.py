"""Reads before the edge's test (`tile.lower.kernel.guarded_reads`): where a work-group's
tile may stick out of the shape, every element is tested against it; an input that no
partial dimension indexes (a row's maximum or sum, a column's shift) is read before that
test, once per loop level that changes it. Inside the test, LLVM left such a loop scalar
(exp(X - MX) over one row of 100003: 6x slower than over 100352).

What must hold: the answers, for elementwise chains with inputs broadcast along every
axis, at sizes 1, primes and 2^k +- 1 around the 1024-element tiles and 16-float vectors,
through the reference interpreter (outputs poisoned, reads out of bounds refused: reading a
partially indexed input early would read past its end) and on every shipped device against
float64 numpy; and the structure, that the broadcast input's load sits outside the test
and the partially indexed one inside it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tile
from semtree.nodes import Binary, BinOp, For, If, IntConst, Load, Lookup, Subscript, walk
from tests.lower.harness import LLVM_CPU, run_program, tiled
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program

ROWS = "function (X[M, N], Y[M, U]) -> (O) { O = exp(X - Y) / (Y * Y + 1.0); }"
COLUMNS = "function (X[M, N], Y[N]) -> (O) { O = max(X * Y, X + Y); }"
MIDDLE = "function (X[A, B, C], Y[A, U, C], Z[B, V]) -> (O) { O = (X - Y) * Z + Y; }"
SCALAR = "function (X[M, N], Y[U, V]) -> (O) { O = X / Y - 2.0 * Y; }"
SOFTMAX = (
    "function (X[M, N]) -> (O) { MX[m, 0: M, 1] = >(X[m, n]); E = exp(X - MX); "
    "S[m, 0: M, 1] = +(E[m, n]); O = E / S; }"
)
BIAS = (
    "function (A[M, K], B[K, N], D[M, U]) -> (O) { C[m, n: M, N] = +(A[m, k] * B[k, n]); "
    "O = relu(C - D); }"
)
SIZES = (1, 2, 3, 15, 17, 31, 1023, 1025)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def cases(
    rng: np.random.Generator, long: int, rows: int
) -> list[tuple[str, dict[str, np.ndarray], object]]:
    """(source, inputs, float64 answer) of random shapes; `long`: the longest row, `rows`:
    the most rows (the interpreter runs its loops in Python)."""

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    found = []
    widths = [s for s in SIZES if s <= long] + [long]
    for _ in range(4):
        m, n = int(rng.choice([s for s in SIZES if s <= rows])), int(rng.choice(widths))
        x, row, column = normal(m, n), normal(m, 1), normal(n)
        f = {k: v.astype(np.float64) for k, v in {"x": x, "r": row, "c": column}.items()}
        found.append((ROWS, {"X": x, "Y": row}, np.exp(f["x"] - f["r"]) / (f["r"] * f["r"] + 1.0)))
        found.append((COLUMNS, {"X": x, "Y": column}, np.maximum(f["x"] * f["c"], f["x"] + f["c"])))
        one = normal(1, 1)
        found.append((SCALAR, {"X": x, "Y": one}, f["x"] / one - 2.0 * one.astype(np.float64)))
        found.append((SOFTMAX, {"X": x}, softmax(f["x"])))
        a, b, c = int(rng.choice(SIZES[:3])), int(rng.choice(SIZES[:4])), int(rng.choice(widths))
        x3, y3, z3 = normal(a, b, c), normal(a, 1, c), normal(b, 1)
        want = (x3 - y3.astype(np.float64)) * z3 + y3
        found.append((MIDDLE, {"X": x3, "Y": y3, "Z": z3}, want))
        k = int(rng.choice(SIZES[:5]))
        lhs, rhs, shift = normal(m, k), normal(k, n), normal(m, 1)
        product = lhs.astype(np.float64) @ rhs
        found.append((BIAS, {"A": lhs, "B": rhs, "D": shift}, np.maximum(product - shift, 0)))
    return found


def close(got: np.ndarray, want: np.ndarray) -> bool:
    want = np.asarray(want, np.float64)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize("seed", range(3))
def test_elementwise_edges_match_numpy_in_the_interpreter(seed: int) -> None:
    wrong = []
    for source, inputs, want in cases(np.random.default_rng(seed), long=1025, rows=3):
        for settings in (LLVM_CPU, tiled(8)):
            got = run_program(source, inputs, settings)["O"].astype(np.float64)
            if not close(got, want):
                wrong.append((source, {k: v.shape for k, v in inputs.items()}))
    assert not wrong, wrong


@pytest.mark.parametrize("device_id", SHIPPED)
def test_elementwise_edges_match_numpy_on_the_devices(device_id: str) -> None:
    device = shipped_devices()[device_id]
    wrong = []
    for seed in range(3):
        for source, inputs, want in cases(np.random.default_rng(10 + seed), long=100003, rows=17):
            function = tile.Function(source)
            got = np.asarray(function(device=device, **inputs)["O"], np.float64)
            if not close(got, want):
                wrong.append((source, {k: v.shape for k, v in inputs.items()}))
    assert not wrong, f"wrong on {device_id}: {wrong}"


def loads(node: object, param: str) -> list[Load]:
    return [
        n
        for n in walk(node)  # type: ignore[arg-type]
        if isinstance(n, Load) and isinstance(n.ref, Subscript) and n.ref.base == Lookup(param)
    ]


def edge_tests(node: object, size: int) -> list[If]:
    """The `if` statements that test a coordinate against `size`."""
    return [
        n
        for n in walk(node)  # type: ignore[arg-type]
        if isinstance(n, If)
        and isinstance(n.cond, Binary)
        and n.cond.op is BinOp.LT
        and n.cond.rhs == IntConst(size)
    ]


def copies(node: object) -> list[If]:
    """The `if` statements that choose between two copies of the tile loops."""
    return [
        n
        for n in walk(node)  # type: ignore[arg-type]
        if isinstance(n, If)
        and n.other is not None
        and any(isinstance(inner, For) for inner in walk(n.then))
    ]


def whole_and_edge(node: object, size: int) -> tuple[object, object]:
    """The two copies of an elementwise body (`tile.lower.contract`): the one for tiles wholly
    inside the shape, without the edge's tests, and the one for the tile at the edge."""
    (split,) = copies(node)
    assert isinstance(split.cond, Binary) and split.cond.op is BinOp.LE
    assert split.cond.rhs == IntConst(size) and split.other is not None
    assert not edge_tests(split.then, size)  # no test in the whole tiles' copy
    return split.then, split.other


def test_the_broadcast_input_is_read_before_the_edge_test() -> None:
    width = 100003
    bound = tile.Function("function (X[M, N], Y[M, U]) -> (O) { O = exp(X - Y); }").bind(
        {"X": np.zeros((3, width), np.float32), "Y": np.zeros((3, 1), np.float32)}
    )
    (kernel,) = generate_program(bound, LLVM_CPU).kernels
    whole, edge = whole_and_edge(kernel.body, width)
    (test,) = edge_tests(edge, width)
    inside = {p.name: len(loads(test, p.name)) for p in kernel.body.params[1:]}
    (early,) = (name for name, count in inside.items() if count == 0)  # Y; X inside
    assert len(loads(edge, early)) == 1
    assert sorted(inside.values())[1] >= 1
    assert all(loads(whole, p.name) for p in kernel.body.params[1:])


def test_an_input_along_the_partial_axis_stays_inside_the_test() -> None:
    width = 100003
    bound = tile.Function(COLUMNS).bind(
        {"X": np.zeros((3, width), np.float32), "Y": np.zeros(width, np.float32)}
    )
    (kernel,) = generate_program(bound, LLVM_CPU).kernels
    _, edge = whole_and_edge(kernel.body, width)
    (test,) = edge_tests(edge, width)
    for param in kernel.body.params[1:]:
        assert len(loads(test, param.name)) == len(loads(edge, param.name)) >= 1


def test_tiles_that_divide_the_shape_have_one_copy() -> None:
    """Where every tile lies inside the shape, or on vector-loop devices (whose `widen` tests
    each vector itself), the body is written once."""
    vector_loops = replace(LLVM_CPU, vector_loops=True)
    for width, settings in ((100352, LLVM_CPU), (100003, vector_loops)):
        bound = tile.Function(COLUMNS).bind(
            {"X": np.zeros((3, width), np.float32), "Y": np.zeros(width, np.float32)}
        )
        (kernel,) = generate_program(bound, settings).kernels
        assert not copies(kernel.body), width
