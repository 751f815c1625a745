"""Programs the program cache evicts release their device code and buffers, on both shipped
devices (issue 10: memory grew without bound once the cache evicted: llvm_cpu.0 kept every
O3 pass pipeline, opencl.0 kept 256 built programs beyond the cache's 128).
`benchmarks/memory.py` measures the resident size over 1,000 shapes; here the cache holds 3
programs and weak references show what survives."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import weakref
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

import tile
from tests.shipped import SHIPPED, require_opencl
from tile.runtime.cache import LRUCache

# Three kernels and a temporary (S) per program.
SOURCE = """
function (A[N, M], B[M]) -> (C, D) {
  S[n: N] = +(A[n, m] * B[m]);
  C[k: 1] = +(S[n]);
  D[m: M] = >(A[n, m]);
}"""
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "memory.py"
KEPT = 3
SHAPES = 10


@pytest.mark.parametrize("device", SHIPPED)
def test_evicted_programs_free_code_and_buffers(device: str) -> None:
    if device.startswith("opencl"):
        require_opencl()
    runtime = tile.device(device).runtime
    saved, runtime.programs = runtime.programs, LRUCache(KEPT)
    function = tile.Function(SOURCE)
    random = np.random.default_rng(0)
    held: list[list[weakref.ref]] = []  # per program: what must go with it
    try:
        for index in range(SHAPES):
            a = random.random((3 + index, 4), dtype=np.float32)
            b = random.random(4, dtype=np.float32)
            outputs = function(device=device, A=a, B=b)
            assert np.allclose(np.asarray(outputs["C"]), (a @ b).sum(), rtol=1e-5)
            del outputs
            program = list(runtime.programs._entries.values())[-1]  # the one just used
            assert not isinstance(program, Future)
            library = program.library
            code = getattr(library, "jit", None) or getattr(library, "built", None)
            assert code is not None and program.temporaries
            objects = [library, code, *(state.buffer for state in program.temporaries)]
            held.append([weakref.ref(thing) for thing in objects])
            del program, library, code, objects
        gc.collect()
        alive = [sum(ref() is not None for ref in refs) for refs in held]
        assert alive[:-KEPT] == [0] * (SHAPES - KEPT), alive
        assert all(alive[-KEPT:]), alive
    finally:
        runtime.programs = saved


def test_memory_benchmark_compiles_every_shape_on_a_new_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """benchmarks/memory.py measures each device on a new, empty TILE_CACHE_DIR: shapes that
    an earlier run stored in the usual cache would skip the driver's compiler and change
    what is measured. `--cache user` keeps the usual one."""
    spec = importlib.util.spec_from_file_location("memory_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    monkeypatch.setenv("TILE_CACHE_DIR", str(tmp_path / "usual"))
    seen: list[tuple[str, list[str]]] = []

    def fake_run(command: list[str], **options: object) -> subprocess.CompletedProcess[str]:
        directory = options["env"]["TILE_CACHE_DIR"]  # type: ignore[index]
        contents = sorted(os.listdir(directory)) if os.path.isdir(directory) else ["absent"]
        seen.append((directory, contents))
        return subprocess.CompletedProcess(command, 0, '{"rss_1": 1.0, "rss_2": 2.0}\n', "")

    monkeypatch.setattr(benchmark.subprocess, "run", fake_run)
    assert benchmark.run_child("llvm_cpu.0", 2, 1, "fresh") == {"rss_1": 1.0, "rss_2": 2.0}
    assert benchmark.run_child("llvm_cpu.0", 2, 1, "user") == {"rss_1": 1.0, "rss_2": 2.0}
    (fresh, contents), (usual, _) = seen
    assert fresh != str(tmp_path / "usual") and contents == []
    assert not os.path.exists(fresh)  # removed after the run
    assert usual == str(tmp_path / "usual")
