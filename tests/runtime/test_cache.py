"""The program cache: one compile per (source, signature, device, settings), constants keyed
by exact value, Function objects cached by source, failures not cached, thread safety."""

from __future__ import annotations

import pickle
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal.errors import BackendCompileError as HalCompileError
from hal.errors import UnsupportedOnDevice
from tile.runtime.cache import LRUCache, ProgramKey, constant_entry
from tile.runtime.invoke import function_for

if TYPE_CHECKING:
    from tests.runtime.fakes import FakeDevice, FakeGenerator

COPY = "function (A, K) -> (O) { O = A; }"


def run_copy(device: tile.Device, values: np.ndarray, k: object = 1) -> None:
    tile.run(COPY, {"A": values, "K": k}, device=device)


def test_compile_once_per_signature(cpu: tile.Device, generator: FakeGenerator) -> None:
    programs = cpu.runtime.programs
    run_copy(cpu, np.zeros(3, np.float32))
    run_copy(cpu, np.ones(3, np.float32))  # other values, same signature
    assert len(generator.calls) == 1 and programs.builds == 1 and programs.hits >= 1
    run_copy(cpu, np.zeros(4, np.float32))  # shape
    run_copy(cpu, np.zeros(3, np.float64))  # dtype
    run_copy(cpu, np.zeros((3, 1), np.float32))  # rank
    assert len(generator.calls) == 4
    run_copy(cpu, np.zeros(3, np.float32), 2)  # a constant's value
    run_copy(cpu, np.zeros(3, np.float32), 2.0)  # its type
    run_copy(cpu, np.zeros(3, np.float32), np.array(2, np.int8))  # its dtype
    run_copy(cpu, np.zeros(3, np.float32), True)  # bool is not int
    assert len(generator.calls) == 8
    run_copy(cpu, np.zeros(3, np.float32), np.array(2, np.int8))
    assert len(generator.calls) == 8


def test_float_constants_are_keyed_by_their_bits(
    cpu: tile.Device, generator: FakeGenerator
) -> None:
    for value in (0.0, -0.0, float("nan"), float("nan"), 0.0):
        run_copy(cpu, np.zeros(2, np.float32), value)
    assert len(generator.calls) == 3
    assert constant_entry(0.0) != constant_entry(-0.0)
    assert constant_entry(np.float32("nan")) == constant_entry(np.float32("nan"))


def test_tensor_and_array_inputs_share_programs(cpu: tile.Device, generator: FakeGenerator) -> None:
    values = np.arange(3, dtype=np.int16)
    run_copy(cpu, values)
    tile.Function(COPY)(A=tile.Tensor.from_numpy(values, cpu), K=1)
    assert len(generator.calls) == 1


def test_programs_are_per_device(
    cpu: tile.Device, fake: tile.Device, fake_hal: FakeDevice, generator: FakeGenerator
) -> None:
    run_copy(cpu, np.zeros(2, np.float32))
    run_copy(fake, np.zeros(2, np.float32))
    run_copy(fake, np.zeros(2, np.float32))
    assert len(generator.calls) == 2 and fake_hal.compiler.builds == 1
    assert generator.settings == [cpu.settings, fake.settings]


def test_an_invoker_reuses_its_program_without_looking_it_up(cpu: tile.Device) -> None:
    invoker = tile.Invoker(COPY, {"A": np.zeros(2, np.float32), "K": 1}, device=cpu)
    invoker.invoke()
    before = (cpu.runtime.programs.hits, cpu.runtime.programs.misses)
    invoker.set_input("A", np.ones(2, np.float32))  # same signature
    invoker.invoke()
    invoker.invoke()
    assert (cpu.runtime.programs.hits, cpu.runtime.programs.misses) == before
    invoker.set_input("K", 2)  # a new signature: looked up again
    invoker.invoke()
    assert cpu.runtime.programs.misses == before[1] + 1


def test_functions_are_cached_by_source() -> None:
    first = function_for("function (A) -> (B) { B = A; }")
    assert function_for("function (A) -> (B) { B = A; }") is first
    assert function_for(first) is first
    with pytest.raises(TypeError, match=r"str or a tile\.Function"):
        function_for(42)  # type: ignore[arg-type]
    with pytest.raises(tile.TileSyntaxError):
        function_for("function (A) -> (B) { B = A }")


def test_concurrent_callers_compile_once(
    cpu: tile.Device, generator: FakeGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = generator.__call__

    def slow(bound, settings):
        time.sleep(0.05)
        return real(bound, settings)

    monkeypatch.setattr(type(generator), "__call__", lambda self, b, s: slow(b, s))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            run_copy(cpu, np.zeros(5, np.uint8))
        except BaseException as error:  # pragma: no cover (reported below)
            errors.append(error)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(generator.calls) == 1


def test_build_failures_are_translated_and_not_cached(
    fake: tile.Device, fake_hal: FakeDevice
) -> None:
    fake_hal.compiler.failure = HalCompileError("fake_neg", "int x = ;", "line 1: oops")
    with pytest.raises(tile.BackendCompileError) as caught:
        run_copy(fake, np.zeros(2, np.float32))
    error = caught.value
    assert (
        error.source == "int x = ;" and error.log == "line 1: oops" and error.kernel == "fake_neg"
    )
    assert error.code == "E-COMPILE" and isinstance(error.__cause__, HalCompileError)
    fake_hal.compiler.failure = UnsupportedOnDevice("no float64 here")
    with pytest.raises(tile.TileUnsupported, match="no float64 here"):
        run_copy(fake, np.zeros(2, np.float32))
    fake_hal.compiler.failure = None
    run_copy(fake, np.zeros(2, np.float32))
    assert fake_hal.compiler.builds == 1


def test_lru_cache_evicts_the_least_recently_used() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.get_or_build("a", lambda: 1)
    cache.get_or_build("b", lambda: 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.get_or_build("c", lambda: 3)
    assert "b" not in cache and "a" in cache and "c" in cache and len(cache) == 2
    with pytest.raises(KeyError):
        cache.get_or_build("d", lambda: {}["missing"])
    assert "d" not in cache and cache.builds == 3
    cache.clear()
    assert (cache.hits, cache.misses, cache.builds) == (0, 0, 0)  # counts restart with it
    assert len(cache) == 0 and cache.get("a") is None
    with pytest.raises(ValueError):
        LRUCache(0)


def test_program_keys_hash_by_value_and_pickle() -> None:
    entry = ("tensor", "<f4", (3, 5))
    key = ProgramKey("s", (("A", entry),), "llvm_cpu.0", "settings")
    same = ProgramKey("s", (("A", ("tensor", "<f4", (3, 5))),), "llvm_cpu.0", "settings")
    assert key == same and hash(key) == hash(same) and {key: 1}[same] == 1
    assert key != ProgramKey("s", (("A", entry),), "llvm_cpu.0", "other")
    copy = pickle.loads(pickle.dumps(key))
    assert copy == key and hash(copy) == hash(key)
    assert repr(key).count("_hash=") == 1  # source_hash only: the cached hash is not shown
