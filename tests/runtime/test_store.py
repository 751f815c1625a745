"""tile's disk cache of compiled programs and front ends (`tile.runtime.store`, issue 13 item 1).

Each case runs programs in fresh processes with a `TILE_CACHE_DIR` of its own: the second
process must load what the first stored (no parsing, no compiling: Lark is never imported),
every result must match a float64 numpy reference, and a damaged entry must be discarded,
logged and rebuilt, never crash or give a wrong answer.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from hal import disk_cache
from hal.errors import HalError, UnsupportedOnDevice
from hal_llvm.compiler import export_library, restore_library
from tests.conftest import REPO
from tests.shipped import SHIPPED, require_opencl
from tile.runtime import store

if TYPE_CHECKING:
    from pathlib import Path

# Runs matmul and a softmax-like chain at odd sizes on argv[1]; prints what it did as JSON:
# whether Lark was imported and how many programs were compiled (not loaded).
SCRIPT = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
import numpy as np
import tile
from tile.runtime import execute
compiled = []
original = execute.compile_program
def counting(*args, **kwargs):
    compiled.append(1)
    return original(*args, **kwargs)
execute.compile_program = counting
import tile.runtime.invoke as invoke
invoke.compile_program = counting
rng = np.random.default_rng(int(sys.argv[2]))
matmul = tile.Function(
    "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }")
chain = tile.Function(
    "function (X[N, C], S) -> (Y, M) { M[n: N] = >(X[n, c]); Y = X * S - 1; }")
worst = 0.0
for m, k, n in [(1, 1, 1), (17, 31, 7), (33, 65, 129)]:
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = matmul(a, b, device=sys.argv[1])["C"].to_numpy().astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    worst = max(worst, float(np.abs(got - want).max() / (1 + np.abs(want).max())))
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = chain(x, 2.0, device=sys.argv[1])
    worst = max(worst, float(np.abs(out["Y"].to_numpy() - (x.astype(np.float64) * 2 - 1)).max()))
    worst = max(worst, float(np.abs(out["M"].to_numpy() - x.astype(np.float64).max(axis=1)).max()))
print(json.dumps({"lark": "lark" in sys.modules, "compiled": len(compiled), "worst": worst}))
"""
TOLERANCE = 1e-5  # relative to the largest value: float32 sums of at most 65 products


def run(cache: Path, device: str, seed: int = 1, **variables: str) -> tuple[dict, str]:
    """SCRIPT in a fresh process on `cache`; asserts it exited 0 with right results."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("POCL_CACHE_DIR", "TILE_POCL_RUN_DIR", "TILE_DUMP_DIR")
    }
    environment.update(TILE_CACHE_DIR=str(cache), **variables)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, device, str(seed)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["worst"] < TOLERANCE, report
    return report, done.stderr


@pytest.fixture(params=SHIPPED)
def device(request: pytest.FixtureRequest) -> str:
    if request.param != "llvm_cpu.0":
        require_opencl()
    return request.param


def test_a_new_process_loads_programs_and_front_ends_without_compiling(
    tmp_path: Path, device: str
) -> None:
    first, _ = run(tmp_path, device)
    assert first["compiled"] == 6 and first["lark"]
    second, _ = run(tmp_path, device, seed=2)  # other values, same shapes: the same programs
    assert second == {**second, "compiled": 0, "lark": False}


def test_the_cache_can_be_turned_off(tmp_path: Path) -> None:
    first, _ = run(tmp_path, "llvm_cpu.0", TILE_CACHE="0")
    second, _ = run(tmp_path, "llvm_cpu.0", TILE_CACHE="0")
    assert first["compiled"] == second["compiled"] == 6
    assert not (tmp_path / "programs").exists()


def blobs(cache: Path) -> list[Path]:
    return sorted((cache / "programs" / "blobs").rglob("*"))


@pytest.mark.parametrize("damage", ["garbage", "truncate", "empty"])
def test_a_damaged_blob_is_discarded_and_rebuilt(tmp_path: Path, device: str, damage: str) -> None:
    run(tmp_path, device)
    for path in (p for p in blobs(tmp_path) if p.is_file()):
        data = path.read_bytes()
        replacement = {"garbage": os.urandom(len(data)), "truncate": data[: len(data) // 2]}
        path.write_bytes(replacement.get(damage, b""))
    report, stderr = run(tmp_path, device)
    assert report["compiled"] == 6 and report["lark"]
    assert "discarded a corrupt cache entry" in stderr
    again, _ = run(tmp_path, device)  # rebuilt and stored again
    assert again["compiled"] == 0


def test_damaged_manifests_and_plans_are_discarded(tmp_path: Path) -> None:
    run(tmp_path, "llvm_cpu.0")
    manifests = sorted((tmp_path / "programs" / "manifests").rglob("*.json"))
    assert len(manifests) == 8  # 6 programs, 2 front ends
    manifests[0].write_text("{not json")
    # A sound blob whose bytes are a pickle of something that would run code when loaded.
    hostile = store_blob(tmp_path, pickle.dumps(os.system))
    for path in manifests[1:]:
        entry = json.loads(path.read_text())
        for field in ("plan", "front_end"):
            if field in entry:
                entry[field] = hostile
        path.write_text(json.dumps(entry))
    report, stderr = run(tmp_path, "llvm_cpu.0")
    assert report["compiled"] == 6
    assert "discarded a corrupt cache entry" in stderr


def store_blob(cache: Path, data: bytes) -> str:
    return disk_cache.Store(cache / "programs").put(data)


def test_four_processes_racing_on_an_empty_cache_all_get_right_results(
    tmp_path: Path, device: str
) -> None:
    environment = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR",)}
    environment["TILE_CACHE_DIR"] = str(tmp_path)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, device, str(seed)],
            cwd=REPO,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        assert json.loads(stdout.strip().splitlines()[-1])["worst"] < TOLERANCE
    report, _ = run(tmp_path, device, seed=9)
    assert report["compiled"] == 0


def test_plans_name_only_ir_classes() -> None:
    assert store.loads(store.dumps((1, "x", np.dtype("float32")))) == (1, "x", np.dtype("f4"))
    for hostile in (pickle.dumps(os.system), pickle.dumps(print), b"garbage", b""):
        with pytest.raises(ValueError, match="not a plan"):
            store.loads(hostile)


def test_keys_separate_what_changes_the_code() -> None:
    from tile.runtime.cache import ProgramKey, tensor_entry

    f32 = tensor_entry(np.dtype("float32"), (3, 4))
    key = ProgramKey("s", (("A", f32),), "llvm_cpu.0", "settings")
    digests = {
        store.program_digest(key, "cpu"),
        store.program_digest(key, "another cpu"),
        store.program_digest(ProgramKey("t", key.inputs, "llvm_cpu.0", "settings"), "cpu"),
        store.program_digest(ProgramKey("s", key.inputs, "llvm_cpu.0", "other"), "cpu"),
        store.program_digest(
            ProgramKey("s", (("A", tensor_entry(np.dtype("f4"), (3, 5))),), "x", "settings"), "cpu"
        ),
    }
    assert len(digests) == 5
    # The device id is not part of it: identical devices share their programs.
    same = ProgramKey("s", key.inputs, "llvm_cpu.1", "settings")
    assert store.program_digest(same, "cpu") == store.program_digest(key, "cpu")


def test_llvm_code_for_a_cpu_with_other_features_is_refused() -> None:
    cpu = tile.device("llvm_cpu.0")
    fn = tile.Function("function (A[N]) -> (B) { B = A * 3; }")
    fn(np.ones(5, np.float32), device=cpu)["B"].to_numpy()
    program = next(iter(cpu.runtime.programs._entries.values()))
    code = export_library(program.library)
    magic = b"tile-llvm-object\n"
    size = int.from_bytes(code[len(magic) : len(magic) + 8], "little")
    header = json.loads(code[len(magic) + 8 : len(magic) + 8 + size])
    header["features"].append("avx9000")
    data = json.dumps(header).encode()
    forged = magic + len(data).to_bytes(8, "little") + data + code[len(magic) + 8 + size :]
    with pytest.raises(UnsupportedOnDevice, match="avx9000"):
        restore_library(program.kernel_list, forged)
    with pytest.raises(HalError):
        restore_library(program.kernel_list, b"not an export")
    restored = restore_library(program.kernel_list, code)
    assert restored.jit is not None and restored.jit.object_code == program.library.jit.object_code


def test_eviction_keeps_the_most_recently_used(tmp_path: Path) -> None:
    programs = disk_cache.Store(tmp_path / "programs")
    for index in range(6):
        digest = programs.put(bytes([index]) * 1000)
        programs.write_manifest(f"{index:064x}", {"plan": digest})
        path = tmp_path / "programs" / "manifests" / "00" / f"{index:064x}.json"
        os.utime(path, (1000 + index, 1000 + index))
    for blob in (tmp_path / "programs" / "blobs").rglob("*"):
        if blob.is_file():
            os.utime(blob, (1, 1))  # old enough to be deleted once no manifest names it
    programs.manifest(f"{0:064x}")  # used now: the newest
    freed = disk_cache.evict(tmp_path, limit=3500)
    assert freed > 0
    kept = {int(p.stem, 16) for p in (tmp_path / "programs" / "manifests").rglob("*.json")}
    assert kept == {0, 4, 5}
    remaining = [p for p in (tmp_path / "programs" / "blobs").rglob("*") if p.is_file()]
    assert len(remaining) == 3
    usage = disk_cache.usage(tmp_path)["programs"]
    assert usage["entries"] == 3 and usage["blobs"] == 3 and usage["bytes"] <= 3500


def test_the_cache_command_reports_and_clears(tmp_path: Path) -> None:
    run(tmp_path, "llvm_cpu.0")
    environment = {**os.environ, "TILE_CACHE_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "tile", "cache"]
    info = subprocess.run(
        [*command, "info", "--json"], env=environment, capture_output=True, text=True, check=True
    )
    report = json.loads(info.stdout)
    assert report["directory"] == str(tmp_path) and report["stores"]["programs"]["entries"] == 8
    cleared = subprocess.run(
        [*command, "clear"], env=environment, capture_output=True, text=True, check=True
    )
    assert "freed" in cleared.stdout
    assert disk_cache.usage(tmp_path) == {}
    report, _ = run(tmp_path, "llvm_cpu.0")
    assert report["compiled"] == 6
