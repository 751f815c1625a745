"""The measured search of tiles, and its memory on disk (issue 11 item 4, issue 12 item 5; the
choices themselves, register tiles and generic kernels' work-group tiles: `tile.lower.tuning`).

`TILE_TUNE=1` turns it on; it is read when a program is compiled. Then `generate` makes the
program's kernels with the tiles remembered for this device, and, for each contraction that
has a choice and none remembered (a shape seen for the first time), it measures the
candidate tiles and keeps the fastest:

* each candidate's kernels (the contraction's kernel and those it brings, `Site.owns`) are
  generated, built and run alone, on buffers of zeros the search allocates (no user data is
  read or written), one after the other, waiting for each run;
* every candidate runs in each of `ROUNDS` rounds, taking turns, so that a busy moment of the
  machine touches them all; a round runs a candidate `REPEATS` times or for `ROUND_SECONDS`,
  whichever is longer, and its best time counts; the fastest, where it is not the cost
  model's tile, then takes turns with that one alone for `ROUNDS` more rounds;
* a tile other than the cost model's is chosen only when it takes less than `MARGIN` times
  the cost model's time: noise does not move the choice;
* the whole search of one program stops at `TILE_TUNE_BUDGET` seconds (default
  `DEFAULT_BUDGET`). A contraction whose first round did not finish keeps the cost model's
  tile and nothing is remembered for it; the program is then not stored in the disk cache,
  so the next process searches on.

The memory is a store under the cache directory (`tuning/`, `hal.disk_cache.Store`): one
manifest per contraction, keyed by the device's code identity (CPU model and compiler, or
OpenCL driver and version), its settings and the contraction's structural key, holding the
tile and the times measured. `TILE_CACHE=0` keeps it in the process. A program compiled with
tuning on is stored in the program cache apart from one compiled without it
(`tile.runtime.store.program_digest`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from hal.disk_cache import Store, cache_directory, cache_enabled
from hal.environment import flag, lookup
from hal.errors import HalError
from semtree.kernel import Direction
from tile.runtime import debug
from tile.runtime.device import Contents

if TYPE_CHECKING:
    from collections.abc import Callable

    from semtree.kernel import KernelInfo, KernelList
    from tile.bind.program import BoundProgram
    from tile.lower.tuning import Site, Tile
    from tile.runtime.device import BufferState, DeviceRuntime

    # A candidate's kernels made ready to time: (runtime, kernels, site, buffers the search
    # shares between candidates) -> a function giving the best time of one round, in seconds.
    Measure = Callable[
        [DeviceRuntime, KernelList, Site, dict[tuple[str, int], BufferState]],
        Callable[[], float],
    ]

TUNE_VARIABLE = "TILE_TUNE"
BUDGET_VARIABLE = "TILE_TUNE_BUDGET"
DEFAULT_BUDGET = 10.0  # seconds of search per program
ROUNDS = 5
REPEATS = 3
ROUND_SECONDS = 0.02
MARGIN = 0.95
FORMAT = "tile-tuning-1"

_remembered: dict[str, Tile | None] = {}  # manifest key -> tile, this process's reads


def enabled() -> bool:
    """Whether `TILE_TUNE` asks for the search."""
    return flag(TUNE_VARIABLE)


def budget() -> float:
    """Seconds of search per program (`TILE_TUNE_BUDGET`)."""
    text = lookup(BUDGET_VARIABLE).strip()
    try:
        return max(0.0, float(text)) if text else DEFAULT_BUDGET
    except ValueError:
        raise ValueError(f"{BUDGET_VARIABLE} must be a number of seconds, not {text!r}") from None


def generate(
    runtime: DeviceRuntime,
    bound: BoundProgram,
    label: str,
    *,
    measure: Measure | None = None,
) -> tuple[KernelList, bool]:
    """The kernels of `bound` with the tiles remembered or found by measuring
    (module docstring), and whether every contraction with a choice has one remembered."""
    from tile.lower.generate import generate_program
    from tile.lower.tuning import Tuning

    settings = runtime.device.settings
    tuning = Tuning()
    kernel_list = generate_program(bound, settings, tuning=tuning)  # finds the sites
    if not tuning.sites:
        return kernel_list, True
    for key in tuning.sites:
        tile = recall(runtime, key)
        if tile is not None:
            tuning.chosen[key] = tile
    deadline = time.perf_counter() + budget()
    complete = True
    for site in tuning.sites.values():
        if site.key in tuning.chosen:
            continue
        with debug.progress(f"measuring tiles of {label} on {runtime.device.id}"):
            times = search(runtime, bound, tuning.chosen, site, deadline, measure or _timer)
        if times is None:
            complete = False
            continue
        tile = choose(site, times)
        tuning.chosen[site.key] = tile
        remember(runtime, site.key, tile, times)
        debug.emit(
            debug.TIMES,
            "tuned %s on %s: tile %s (%s)",
            site.kernel,
            runtime.device.id,
            "x".join(map(str, tile)),
            ", ".join(f"{'x'.join(map(str, c))} {1000 * t:.3f} ms" for c, t in times.items()),
        )
    models = {key: site.candidates[0] for key, site in tuning.sites.items()}
    if all(tuning.chosen.get(key, tile) == tile for key, tile in models.items()):
        return kernel_list, complete  # the cost model's tiles: generated already
    return generate_program(bound, settings, tuning=Tuning(dict(tuning.chosen))), complete


def search(
    runtime: DeviceRuntime,
    bound: BoundProgram,
    chosen: dict[str, Tile],
    site: Site,
    deadline: float,
    measure: Measure,
) -> dict[Tile, float] | None:
    """The best time of each candidate tile of `site` (the other sites keep `chosen`), or
    None when `deadline` passed before every candidate was built and run once."""
    from tile.lower.generate import generate_program
    from tile.lower.tuning import Tuning

    settings = runtime.device.settings
    buffers: dict[tuple[str, int], BufferState] = {}
    timers: dict[Tile, Callable[[], float]] = {}
    for tile in site.candidates:
        if time.perf_counter() > deadline:
            return None
        kernel_list = generate_program(bound, settings, tuning=Tuning({**chosen, site.key: tile}))
        try:
            timers[tile] = measure(runtime, kernel_list, site, buffers)
        except HalError as error:  # a tile the driver refuses is not a candidate
            debug.emit(debug.TIMES, "tile %s not measured: %s", tile, error)
    if site.candidates[0] not in timers:
        return None
    best = dict.fromkeys(timers, float("inf"))
    for round_ in range(ROUNDS):
        if round_ and time.perf_counter() > deadline:
            break
        for tile, timer in timers.items():
            best[tile] = min(best[tile], timer())
    # A candidate ahead of the cost model's tile meets it again, alone, before it counts.
    default = site.candidates[0]
    fastest = min(best, key=best.__getitem__)
    for _ in range(ROUNDS if fastest != default else 0):
        if time.perf_counter() > deadline:
            break
        for tile in (default, fastest):
            best[tile] = min(best[tile], timers[tile]())
    return best


def choose(site: Site, times: dict[Tile, float]) -> Tile:
    """The fastest tile, unless it is within the noise (`MARGIN`) of the cost model's."""
    default = site.candidates[0]
    fastest = min(times, key=times.__getitem__)
    return fastest if times[fastest] < MARGIN * times[default] else default


def _timer(
    runtime: DeviceRuntime,
    kernel_list: KernelList,
    site: Site,
    buffers: dict[tuple[str, int], BufferState],
) -> Callable[[], float]:
    """Build `site`'s kernels of `kernel_list` alone and return a function that runs them on
    buffers of zeros and gives their best time in seconds over one round (module docstring).
    `buffers`: by name and size, shared by the candidates of one search."""
    device = runtime.device
    kernels = tuple(info for info in kernel_list.kernels if site.owns(info.name))
    library = device.compiler.build(_alone(kernel_list, kernels), device)
    prepared = [device.executor.prepare(library, index) for index in range(len(kernels))]
    launches = []
    for kernel in prepared:
        params = []
        for param in kernel.info.params:
            shape = kernel_list.shapes[param.name]
            state = buffers.get((param.name, shape.nbytes))
            if state is None:
                state = runtime.allocate(shape.nbytes, Contents.of(param.name, shape))
                device.executor.fill_zero(state.buffer).wait()
                buffers[param.name, shape.nbytes] = state
            params.append(state.buffer)
        launches.append((kernel, params))

    def run() -> float:
        start = time.perf_counter()
        event = None
        for kernel, buffers in launches:
            event = kernel.run(buffers, [] if event is None else [event])
        assert event is not None
        event.wait()
        return time.perf_counter() - start

    run()  # built, warmed

    def one_round() -> float:
        times = [run() for _ in range(REPEATS)]
        while sum(times) < ROUND_SECONDS:
            times.append(run())
        return min(times)

    return one_round


def _alone(kernel_list: KernelList, kernels: tuple[KernelInfo, ...]) -> KernelList:
    """`kernels` of `kernel_list` as a list of their own: the temporaries they read before
    they write them (what the program's earlier kernels compute) are its inputs."""
    written: set[str] = set()
    read_first: dict[str, None] = {}
    for info in kernels:
        for param in info.params:
            unwritten = param.direction is Direction.IN and param.name not in written
            if unwritten and param.name in kernel_list.temporaries:
                read_first[param.name] = None
        written.update(info.outputs)
    return replace(
        kernel_list,
        kernels=kernels,
        inputs=(*kernel_list.inputs, *read_first),
        temporaries=tuple(t for t in kernel_list.temporaries if t not in read_first),
    )


# ---- memory -----------------------------------------------------------------------------------


def _manifest_key(runtime: DeviceRuntime, key: str) -> str | None:
    identity = runtime.device.code_identity
    if identity is None:  # code that is not the default back end's: nothing is remembered
        return None
    parts = (FORMAT, identity, runtime.fingerprint, key)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _store() -> Store:
    return Store(cache_directory() / "tuning")


def recall(runtime: DeviceRuntime, key: str) -> Tile | None:
    """The tile remembered for contraction `key` on this device, if any."""
    manifest_key = _manifest_key(runtime, key)
    if manifest_key is None:
        return None
    if manifest_key in _remembered or not cache_enabled():
        return _remembered.get(manifest_key)
    manifest = _store().manifest(manifest_key)
    tile = None
    if manifest is not None:
        value = manifest.get("tile")
        if isinstance(value, list) and value and all(type(v) is int and v > 0 for v in value):
            tile = tuple(value)
    _remembered[manifest_key] = tile
    return tile


def remember(runtime: DeviceRuntime, key: str, tile: Tile, times: dict[Tile, float]) -> None:
    """Keep `tile` for contraction `key` on this device, in the process and on disk."""
    manifest_key = _manifest_key(runtime, key)
    if manifest_key is None:
        return
    _remembered[manifest_key] = tile
    if cache_enabled():
        measured = {"x".join(map(str, c)): round(1e6 * t, 1) for c, t in times.items()}
        value = {"tile": list(tile), "contraction": key, "microseconds": measured}
        _store().write_manifest(manifest_key, {**value, "device": runtime.device.id})


def forget() -> None:
    """Drop what this process read or found (the disk keeps it): for tests."""
    _remembered.clear()
