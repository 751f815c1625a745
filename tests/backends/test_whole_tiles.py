"""Whole tiles without the edge's tests (`tile.lower.contract`, `whole_tile`): where a
work-group's tile may stick out of the shape, the reduction loops are written twice, and the
work-groups whose tile lies inside the shape run the copy without the tests of each element
against it (a column max over 4096 x 3024 on llvm_cpu.0: 2.0 ms with masked loads in every
group, 1.0 without; AMD Zen 5).

What must hold: both copies give the answers, so shapes put some groups on each side of the
edge (sizes 1, primes and 2^k +- 1 around tiles of 16 and 64 columns), compared with float64
numpy through the reference interpreter (outputs poisoned, reads out of bounds refused) and
on every shipped device; and the structure, that the copy for whole tiles tests no
coordinate against the shape, and that short reductions are not copied.
"""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.nodes import Binary, BinOp, For, If, IntConst, Lanes, walk
from tests.lower.harness import LLVM_CPU, run_program, tiled
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program
from tile.lower.kernel import MIN_WHOLE_TUPLES

COLUMNS = "function (X[M, N]) -> (O) {{ O[n: N] = {agg}(X[m, n]); }}"
MATVEC_T = "function (A[M, N], X[M]) -> (O) { O[n: N] = +(A[m, n] * X[m]); }"
MIDDLE = "function (X[A, B, C]) -> (O) {{ O[a, c: A, C] = {agg}(X[a, b, c]); }}"
# A guard on the reduction only (rows below 5) and a strided read (a derived variable).
GUARDED = "function (X[M, N]) -> (O) { O[n: N] = >(X[m, n]), m < 5; }"
STRIDED = "function (X[M, N]) -> (O) { O[n: N] = +(X[2 * m, n]); }"
REDUCE = {"+": np.sum, ">": np.max, "<": np.min}
WIDTHS = (1, 15, 17, 63, 65, 127, 129, 193)


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


def spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values of both signs (no ties for a max or a min)."""
    count = int(np.prod(shape))
    return ((rng.permutation(count) - count / 2) / 7).reshape(shape).astype(np.float32)


def cases(rng: np.random.Generator) -> list[tuple[str, dict[str, np.ndarray], np.ndarray, float]]:
    """(source, inputs, float64 answer, tolerance relative to the sum of magnitudes)."""
    found = []
    for agg, reduce in REDUCE.items():
        exact = 0.0 if agg != "+" else 1e-5
        for width in WIDTHS:
            x = spread(rng, (9, width))
            want = reduce(x.astype(np.float64), 0)
            found.append((COLUMNS.format(agg=agg), {"X": x}, want, exact))
        x = spread(rng, (3, 31, 65))
        found.append((MIDDLE.format(agg=agg), {"X": x}, reduce(x.astype(np.float64), 1), exact))
    for width in (17, 129, 3001):
        a, v = spread(rng, (33, width)), spread(rng, (33,))
        want = v.astype(np.float64) @ a.astype(np.float64)
        found.append((MATVEC_T, {"A": a, "X": v}, want, 1e-5))
    x = spread(rng, (31, 65))
    found.append((GUARDED, {"X": x}, np.max(x[:5].astype(np.float64), 0), 0.0))
    found.append((STRIDED, {"X": x}, np.sum(x[::2].astype(np.float64), 0), 1e-5))
    return found


def close(got: np.ndarray, want: np.ndarray, inputs: dict[str, np.ndarray], tol: float) -> bool:
    scale = max(1.0, float(sum(np.abs(v.astype(np.float64)).sum() for v in inputs.values())))
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= tol * scale))


def test_both_copies_match_numpy_in_the_interpreter() -> None:
    wrong = []
    for source, inputs, want, tol in cases(np.random.default_rng(11)):
        got = run_program(source, inputs, LLVM_CPU)["O"].astype(np.float64)
        if not close(got, want, inputs, tol):
            wrong.append((source, {k: v.shape for k, v in inputs.items()}))
    assert not wrong, wrong


@pytest.mark.parametrize("device_id", SHIPPED)
def test_both_copies_match_numpy_on_the_devices(
    device_id: str, devices: dict[str, tile.Device]
) -> None:
    wrong = []
    for source, inputs, want, tol in cases(np.random.default_rng(12)):
        function = tile.Function(source)
        got = np.asarray(function(device=devices[device_id], **inputs)["O"], np.float64)
        if not close(got, want, inputs, tol):
            wrong.append((source, {k: v.shape for k, v in inputs.items()}))
    assert not wrong, f"wrong on {device_id}: {wrong}"


def checks_edges(node: object, size: int) -> bool:
    """Whether `node` tests elements against the shape: a comparison `coordinate < size`, or
    vector loads and stores counted up to the edge (`Lanes.count`)."""
    return any(
        (isinstance(n, Binary) and n.op is BinOp.LT and n.rhs == IntConst(size))
        or (isinstance(n, Lanes) and n.count is not None)
        for n in walk(node)  # type: ignore[arg-type]
    )


def versions(source: str, shape: tuple[int, int]) -> list[If]:
    """The `if` statements of the program's kernels whose two branches each hold a loop and
    whose condition tests a tile's end against the shape's (`base + tile <= size`)."""
    bound = tile.Function(source.format(agg=">")).bind({"X": np.zeros(shape, np.float32)})
    found = []
    for kernel in generate_program(bound, LLVM_CPU).kernels:
        for node in walk(kernel.body):
            if isinstance(node, If) and node.other is not None:
                loops = [any(isinstance(n, For) for n in walk(b)) for b in (node.then, node.other)]
                test = node.cond
                if all(loops) and isinstance(test, Binary) and test.op is BinOp.LE:
                    found.append(node)
    return found


def test_the_whole_copy_tests_no_column_against_the_shape() -> None:
    width = 3 * 64 + 5
    (version,) = versions(COLUMNS, (100, width))
    assert version.cond.rhs == IntConst(width)  # type: ignore[union-attr]
    assert not checks_edges(version.then, width)
    assert checks_edges(version.other, width)


def test_a_whole_shape_and_a_short_reduction_keep_one_copy() -> None:
    assert versions(COLUMNS, (100, 4 * 64)) == []  # every tile whole
    assert versions(COLUMNS, (MIN_WHOLE_TUPLES - 1, 3 * 64 + 5)) == []  # too short to copy
    assert versions(COLUMNS, (MIN_WHOLE_TUPLES, 3 * 64 + 5)) != []


# The register-tiled products (`tile.lower.vector`): where the row's last column tile sticks
# out, the reduction loops are written twice and the tiles inside the row load B uncounted.
PRODUCT = "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
PRODUCT_TT = "function (A[K, M], B[N, K]) -> (C) { C[m, n: M, N] = +(A[k, m] * B[n, k]); }"
DENSE = (
    "function (A[M, K], B[K, N], D[N]) -> (R) {"
    " C[m, n: M, N] = +(A[m, k] * B[k, n]); R = relu(C + D); }"
)
PADDED = (
    "function (I[N, H, W, CI], F[KH, KW, CI, CO]) -> (O) {"
    " O[n, y, x, co: N, H, W, CO] = +(I[n, y + ky - 1, x + kx - 1, ci] * F[ky, kx, ci, co]); }"
)


def products(
    rng: np.random.Generator, interpreted: bool = False
) -> list[tuple[str, dict[str, np.ndarray], np.ndarray]]:
    """(source, inputs, float64 answer) of products whose width leaves a ragged column tile,
    one of them reducing over 1149. The interpreter, which runs the loops in Python, takes 21
    there and transposed operands at two widths only (their transpositions' blocks cost it
    seconds each): the edges are the same."""
    long = 21 if interpreted else 1149
    found = []
    for m, k, n in ((1, 8, 17), (5, 33, 23), (16, long, 81), (7, 40, 100), (3, 9, 25)):
        a, b = spread(rng, (m, k)), spread(rng, (k, n))
        want = a.astype(np.float64) @ b.astype(np.float64)
        found.append((PRODUCT, {"A": a, "B": b}, want))
        if not interpreted or n in (17, 81):
            a_t, b_t = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
            found.append((PRODUCT_TT, {"A": a_t, "B": b_t}, want))
        d = spread(rng, (n,))
        dense = np.maximum(want + d.astype(np.float64), 0.0)
        found.append((DENSE, {"A": a, "B": b, "D": d}, dense))
    image, kernel = spread(rng, (2, 5, 6, 7)), spread(rng, (3, 3, 7, 19))
    padded = np.pad(image.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((2, 5, 6, 19))
    for dy in range(3):
        for dx in range(3):
            window = padded[:, dy : dy + 5, dx : dx + 6, :]
            want += np.tensordot(window, kernel[dy, dx].astype(np.float64), axes=([3], [0]))
    found.append((PADDED, {"I": image, "F": kernel}, want))
    return found


def test_products_match_numpy_in_the_interpreter() -> None:
    wrong = []
    for source, inputs, want in products(np.random.default_rng(13), interpreted=True):
        for settings in (LLVM_CPU, tiled(8)):
            got = next(iter(run_program(source, inputs, settings).values())).astype(np.float64)
            if not close(got, want, inputs, 1e-5):
                wrong.append((source, {k: v.shape for k, v in inputs.items()}))
    assert not wrong, wrong


@pytest.mark.parametrize("device_id", SHIPPED)
def test_products_match_numpy_on_the_devices(
    device_id: str, devices: dict[str, tile.Device]
) -> None:
    wrong = []
    for source, inputs, want in products(np.random.default_rng(14)):
        outputs = tile.Function(source)(device=devices[device_id], **inputs)
        got = np.asarray(next(iter(outputs.values())), np.float64)
        if not close(got, want, inputs, 1e-5):
            wrong.append((source, {k: v.shape for k, v in inputs.items()}))
    assert not wrong, f"wrong on {device_id}: {wrong}"


def product_versions(shape_k: int, width: int) -> list[If]:
    """The `if`s of a product's kernels that choose between two reduction loops."""
    inputs = {"A": np.zeros((16, shape_k), np.float32), "B": np.zeros((shape_k, width), np.float32)}
    bound = tile.Function(PRODUCT).bind(inputs)
    found = []
    for kernel in generate_program(bound, tiled(8)).kernels:
        for node in walk(kernel.body):
            if isinstance(node, If) and node.other is not None:
                loops = [any(isinstance(n, For) for n in walk(b)) for b in (node.then, node.other)]
                if all(loops) and isinstance(node.cond, Binary) and node.cond.op is BinOp.LE:
                    found.append(node)
    return found


def test_a_products_inside_tiles_load_b_uncounted() -> None:
    (version,) = product_versions(1149, 81)
    assert version.cond.rhs == IntConst(81)  # type: ignore[union-attr]
    counted = [
        [n.count is not None for n in walk(b) if isinstance(n, Lanes)]
        for b in (version.then, version.other)
    ]
    assert counted[0] and not any(counted[0])
    assert any(counted[1])
    assert product_versions(1149, 96) == []  # 4 tiles of 3 vectors: none sticks out
    assert product_versions(MIN_WHOLE_TUPLES - 1, 81) == []  # too short to copy
