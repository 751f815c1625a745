"""Float `>` and `<` aggregations as a comparison and a choice (`tile.lower.ops.aggregate`):
`acc = x > acc ? x : acc`, one `maxps` on x86, where C's `fmax` also tests the accumulator for
NaN (a row max over 419 columns on llvm_cpu.0 took 2-3x the row sum's time; AMD Zen 3).

What must hold: the answers are those of before. A NaN among the values is passed over (the
maximum of the others, C's `fmax`), infinities count as values, and no identity leaks: checked
against float64 numpy (`fmax`/`fmin` reductions) over the last, first and middle axes and in
total, at sizes 1, primes and 2^k +- 1 around the vector widths, through the poisoning
interpreter with the CPU and the GPU presets and on every shipped device. The structure: no
float MAX or MIN call is left in an aggregation, so no backend renders one.
"""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.nodes import Builtin, Call, Select, walk
from tests.gpu.settings import POCL_GPU
from tests.lower.harness import LLVM_CPU, run_program
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program

SOURCES = {
    "last": "function (X[A, B, C]) -> (O) {{ O[a, b: A, B] = {agg}(X[a, b, c]); }}",
    "first": "function (X[A, B, C]) -> (O) {{ O[b, c: B, C] = {agg}(X[a, b, c]); }}",
    "middle": "function (X[A, B, C]) -> (O) {{ O[a, c: A, C] = {agg}(X[a, b, c]); }}",
    "total": "function (X[A, B, C]) -> (O) {{ O[] = {agg}(X[a, b, c]); }}",
}
AXES = {"last": 2, "first": 0, "middle": 1, "total": None}
SHAPES = ((1, 1, 1), (3, 2, 7), (2, 3, 9), (5, 1, 33), (4, 3, 419), (17, 2, 8), (31, 65, 3))
# The interpreter runs each kernel's loops in Python: the same edges, in less work.
INTERPRETED = ((1, 1, 1), (3, 2, 7), (2, 3, 9), (5, 1, 33), (2, 3, 129), (17, 2, 8), (7, 65, 3))
REDUCE = {">": np.fmax, "<": np.fmin}


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


def values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values with an infinity of each sign and a NaN among them, where there is room:
    no slice along any axis is all NaN (what such a slice gives is left to the device)."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    if flat.size >= 8:
        spots = rng.choice(flat.size, 3, replace=False)
        flat[spots] = (np.inf, -np.inf, np.nan)
        if any(np.isnan(np.fmax.reduce(x, axis=axis)).any() for axis in range(x.ndim)):
            flat[spots[2]] = 0.5  # an axis of one element: its slice would be all NaN
    return x


def cases(
    seed: int, shapes: tuple[tuple[int, int, int], ...] = SHAPES
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(source, X, float64 answer)."""
    rng = np.random.default_rng(seed)
    found = []
    for shape in shapes:
        x = values(rng, shape)
        for name, source in SOURCES.items():
            for agg, reduce in REDUCE.items():
                want = reduce.reduce(x.astype(np.float64), axis=AXES[name])
                found.append((source.format(agg=agg), x, np.asarray(want)))
    return found


def agree(got: np.ndarray, want: np.ndarray) -> bool:
    """Exactly equal (a max or min picks one of the values), infinities included."""
    return got.shape == want.shape and bool(np.all(got.astype(np.float64) == want))


@pytest.mark.parametrize("settings", [LLVM_CPU, POCL_GPU], ids=["cpu", "gpu"])
def test_answers_match_numpy_in_the_interpreter(settings: object) -> None:
    wrong = [
        (source, x.shape)
        for source, x, want in cases(31, INTERPRETED)
        if not agree(run_program(source, {"X": x}, settings)["O"], want)  # type: ignore[arg-type]
    ]
    assert not wrong, wrong


@pytest.mark.parametrize("device_id", SHIPPED)
def test_answers_match_numpy_on_the_devices(
    device_id: str, devices: dict[str, tile.Device]
) -> None:
    wrong = []
    for source, x, want in cases(32):
        got = np.asarray(tile.Function(source)(device=devices[device_id], X=x)["O"])
        if not agree(got, want):
            wrong.append((source, x.shape))
    assert not wrong, f"wrong on {device_id}: {wrong}"


@pytest.mark.parametrize("settings", [LLVM_CPU, POCL_GPU], ids=["cpu", "gpu"])
def test_no_float_max_or_min_call_is_aggregated(settings: object) -> None:
    for name in ("last", "first"):
        for agg in REDUCE:
            source = SOURCES[name].format(agg=agg)
            bound = tile.Function(source).bind({"X": np.zeros((64, 3, 419), np.float32)})
            bodies = [k.body for k in generate_program(bound, settings).kernels]  # type: ignore[arg-type]
            nodes = [n for body in bodies for n in walk(body)]
            calls = [n for n in nodes if isinstance(n, Call) and n.fn in (Builtin.MAX, Builtin.MIN)]
            assert not calls, (source, calls)
            assert any(isinstance(n, Select) for n in nodes), source
