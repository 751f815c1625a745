"""The measured search of tiles and its memory (`tile.runtime.tune`, issue 11 item 4,
issue 12 item 5): it keeps the fastest candidate, unless the gain is within the noise; it
remembers it on disk, per device, and a later search takes it without measuring; a search
that runs out of time remembers nothing and its program is not stored; and on both shipped
devices every candidate tile computes the product (poisoned outputs, float64 reference)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.test_tuning import BATCHED, EPILOGUE, MATVEC, NN, POOL, ROW_MAX, TN
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program
from tile.lower.tuning import Tuning
from tile.runtime import tune

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def tuning_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """TILE_TUNE on, the cache in `tmp_path`, nothing remembered in the process."""
    monkeypatch.setenv("TILE_TUNE", "1")
    monkeypatch.setenv("TILE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILE_CACHE", raising=False)
    tune.forget()
    yield tmp_path
    tune.forget()


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


def matrices(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(s).astype(np.float32) for name, s in shapes.items()}


def bound_nn(m: int = 100, k: int = 40, n: int = 200):
    return tile.Function(NN).bind(matrices({"A": (m, k), "B": (k, n)}))


def site_of(device: tile.Device, bound) -> tune.Site:  # type: ignore[name-defined]
    tuning = Tuning()
    generate_program(bound, device.runtime.device.settings, tuning=tuning)
    (site,) = tuning.sites.values()
    return site


class FakeTimes:
    """A measure that gives the candidates these times, in the order the search builds them
    (the candidates' order), and counts the builds."""

    def __init__(self, times: list[float]) -> None:
        self.times, self.built = times, 0

    def __call__(self, runtime, kernel_list, site, buffers):
        seconds = self.times[self.built]
        self.built += 1
        return lambda: seconds


def main_tile(kernel_list, site) -> tuple[int, ...]:
    (info,) = [info for info in kernel_list.kernels if info.name == site.kernel]
    return info.tile


def test_the_fastest_tile_is_kept_and_remembered_on_disk(tuning_on: Path) -> None:
    device = tile.device("llvm_cpu.0")
    runtime, bound = device.runtime, bound_nn()
    site = site_of(device, bound)
    times = [1.0] * len(site.candidates)
    times[2] = 0.5
    fake = FakeTimes(times)
    kernel_list, complete = tune.generate(runtime, bound, "nn", measure=fake)
    assert complete and fake.built == len(site.candidates)
    chosen = site.candidates[2]
    settings = runtime.device.settings
    want = generate_program(bound, settings, tuning=Tuning({site.key: chosen}))
    assert (
        main_tile(kernel_list, site)
        == main_tile(want, site)
        != main_tile(generate_program(bound, settings), site)
    )
    assert list((tuning_on / "tuning").rglob("*.json"))  # on disk
    tune.forget()  # a new process: read from disk, nothing measured
    assert tune.recall(runtime, site.key) == chosen
    again = FakeTimes([])
    kernel_list, complete = tune.generate(runtime, bound, "nn", measure=again)
    assert complete and again.built == 0
    assert main_tile(kernel_list, site) == main_tile(want, site)


def test_a_gain_within_the_noise_keeps_the_cost_models_tile(tuning_on: Path) -> None:
    device = tile.device("llvm_cpu.0")
    bound = bound_nn(64, 30, 96)
    site = site_of(device, bound)
    times = [1.0] + [tune.MARGIN + 0.01] * (len(site.candidates) - 1)
    tune.generate(device.runtime, bound, "nn", measure=FakeTimes(times))
    assert tune.recall(device.runtime, site.key) == site.candidates[0]


def test_a_search_out_of_time_remembers_nothing(
    tuning_on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILE_TUNE_BUDGET", "0")
    device = tile.device("llvm_cpu.0")
    bound = bound_nn(50, 20, 70)
    site = site_of(device, bound)
    fake = FakeTimes([1.0] * len(site.candidates))
    kernel_list, complete = tune.generate(device.runtime, bound, "nn", measure=fake)
    assert not complete and fake.built == 0
    assert tune.recall(device.runtime, site.key) is None
    assert main_tile(kernel_list, site) == main_tile(
        generate_program(bound, device.runtime.device.settings), site
    )
    # Through a call: the right answer, and no program on disk (the next process searches).
    x = matrices({"A": (50, 20), "B": (20, 70)}, seed=1)
    got = tile.Function(NN)(device=device, **x)["C"].numpy()
    np.testing.assert_allclose(got, x["A"].astype(np.float64) @ x["B"], rtol=1e-5, atol=1e-5)
    assert not list((tuning_on / "programs").rglob("*.json"))


def test_a_bad_budget_is_named() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILE_TUNE_BUDGET", "soon")
        with pytest.raises(ValueError, match="TILE_TUNE_BUDGET"):
            tune.budget()


@pytest.mark.parametrize("device_id", SHIPPED)
def test_a_real_search_on_the_device(
    device_id: str, devices: dict[str, tile.Device], tuning_on: Path
) -> None:
    device = devices[device_id]
    device.clear_cache()
    x = matrices({"A": (61, 45), "B": (45, 333)}, seed=2)
    got = tile.Function(NN)(device=device, **x)["C"].numpy()
    np.testing.assert_allclose(got, x["A"].astype(np.float64) @ x["B"], rtol=1e-5, atol=1e-5)
    site = site_of(device, tile.Function(NN).bind(x))
    tune.forget()
    assert tune.recall(device.runtime, site.key) in site.candidates  # read from disk
    assert list((tuning_on / "programs").rglob("*.json"))  # the tuned program is stored
    device.clear_cache()


CASES = [
    (NN, {"A": (9, 515), "B": (515, 1030)}),  # reduction-blocked on llvm_cpu
    (TN, {"A": (31, 17), "B": (31, 63)}),
    (BATCHED, {"A": (3, 7, 9), "B": (3, 9, 45)}),
    (EPILOGUE, {"A": (17, 13), "B": (13, 47), "S": (47,)}),
    (MATVEC, {"A": (33, 1031), "X": (1031,)}),  # generic kernels from here
    (ROW_MAX, {"A": (17, 1023)}),
    (POOL, {"I": (2, 14, 6, 37)}),
]


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize(
    ("source", "shapes"),
    CASES,
    ids=["nn", "tn", "batched", "epilogue", "matvec", "rowmax", "pool"],
)
def test_every_candidate_on_the_device(
    device_id: str,
    source: str,
    shapes: dict[str, tuple[int, ...]],
    devices: dict[str, tile.Device],
    tuning_on: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TILE_CACHE", "0")  # remembered in the process only, no stored programs
    device = devices[device_id]
    x = matrices(shapes, seed=sum(map(sum, shapes.values())))
    site = site_of(device, tile.Function(source).bind(x))
    try:
        for candidate in site.candidates:
            tune.forget()
            tune.remember(device.runtime, site.key, candidate, {})
            device.clear_cache()
            outcome = check(Case("tuned", source, x), device)
            assert outcome.kind == "ok", (candidate, outcome)
    finally:
        device.clear_cache()


# A contraction whose kernels read what earlier kernels wrote (fuzz seed 20261208, case 127:
# the search once built them as a list of their own that read unwritten temporaries).
AFTER_OTHERS = """function (X[X0, X1], W[W0, W1]) -> (T4) {
  T0 = log(abs((X + X)) + 0.5);
  T1[i, j: 9, 11] = +(X[i, k] * W[k, j]);
  T2 = T0 - T1;
  T4[i, 0: 9, 1] = >(T2[i, j]);
}"""


@pytest.mark.parametrize("device_id", SHIPPED)
def test_a_contraction_after_other_kernels_is_searched(
    device_id: str, devices: dict[str, tile.Device], tuning_on: Path
) -> None:
    device = devices[device_id]
    device.clear_cache()
    x = {"X": matrices({"X": (9, 11)})["X"].astype(np.float16), "W": matrices({"W": (11, 11)})["W"]}
    try:
        outcome = check(Case("after others", AFTER_OTHERS, x), device)
        assert outcome.kind == "ok", outcome
        assert list((tuning_on / "tuning").rglob("*.json"))  # searched and remembered
    finally:
        device.clear_cache()
