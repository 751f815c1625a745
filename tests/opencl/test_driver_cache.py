"""A damaged or concurrently written cache never crashes a process (issue 10: garbage in
PoCL's kernel cache aborted it, so did a truncated cached `.so`; garbage in pyopencl's
invoker cache raised `sqlite3.DatabaseError`). Each case runs a program in a fresh process
with its own `TILE_CACHE_DIR`: it must exit 0 with the right result, and log each entry it
discards (`hal_opencl.driver_cache`, `hal.disk_cache`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import tile
from hal.disk_cache import Store
from tests.conftest import REPO
from tests.shipped import OPENCL, require_opencl

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
import numpy as np
import tile
a = np.arange(12, dtype=np.float32).reshape(3, 4)
b = np.arange(20, dtype=np.float32).reshape(4, 5)
c = tile.Function("function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }")
assert np.array_equal(np.asarray(c(A=a, B=b, device=sys.argv[1])["C"]), a @ b)
print("ok")
"""
DISCARDED = "discarded a corrupt cache entry"
DRIVERS = ("pocl", "intel")  # PoCL's files, and a program binary (drivers without a cache)


def usable(driver: str) -> str:
    """The selector of `driver`; skips where it is not installed or cannot build here."""
    require_opencl()
    try:
        tile.device(f"opencl:{driver}")
    except tile.TileError as error:
        pytest.skip(f"{driver} is not usable here: {error}")
    return f"opencl:{driver}"


def start(cache: Path, device: str, **variables: str) -> subprocess.Popen[str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("POCL_CACHE_DIR", "TILE_POCL_RUN_DIR", "PYOPENCL_NO_CACHE")
    }
    environment.update(TILE_CACHE_DIR=str(cache / "tile"), XDG_CACHE_HOME=str(cache / "xdg"))
    environment.update(variables)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, device],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(cache: Path, device: str, **variables: str) -> str:
    """Run SCRIPT; assert it exited 0 with the right result; return its stderr."""
    process = start(cache, device, **variables)
    stdout, stderr = process.communicate(timeout=180)
    assert process.returncode == 0 and stdout.strip() == "ok", stderr
    return stderr


def store(cache: Path) -> Path:
    return cache / "tile" / "opencl" / "store"


def manifests(cache: Path) -> dict[Path, list[str]]:
    """The digests each stored program names, by manifest."""
    found = {}
    for path in (store(cache) / "manifests").rglob("*.json"):
        value = json.loads(path.read_text())
        found[path] = [value["binary"]] if "binary" in value else list(value["files"].values())
    return found


@pytest.fixture(scope="module", params=DRIVERS)
def populated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache after one run on the driver: the probes' programs and the matmul's."""
    device = usable(request.param)
    cache = tmp_path_factory.mktemp(request.param)
    run(cache, device)
    assert len(manifests(cache)) >= 2
    if request.param == "pocl":  # the kernel PoCL compiled at the launch was kept too
        texts = [path.read_text() for path in manifests(cache)]
        assert any(".so" in text for text in texts), texts
    (cache / "device").write_text(device)
    return cache


def garbage(path: Path) -> None:
    path.write_bytes(os.urandom(max(64, path.stat().st_size)))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("damage", ["garbage blobs", "truncated blobs", "garbage manifests"])
def test_a_damaged_entry_is_discarded_and_rebuilt(
    populated: Path, tmp_path: Path, damage: str
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(populated, cache)
    device = (cache / "device").read_text()
    stored = manifests(cache)
    for manifest, digests in stored.items():
        if damage == "garbage manifests":
            garbage(manifest)
        for digest in digests if damage != "garbage manifests" else ():
            blob = store(cache) / "blobs" / digest[:2] / digest
            (garbage if damage == "garbage blobs" else truncate)(blob)
    # The first run's PoCL directory is left over, with garbage in it; it is deleted.
    [stale] = (cache / "tile" / "opencl" / "pocl-runs").iterdir()
    for path in stale.rglob("*"):
        if path.is_file():
            garbage(path)
    stderr = run(cache, device)
    assert stderr.count(DISCARDED) == len(stored), stderr  # once per entry
    assert not stale.exists()
    assert DISCARDED not in run(cache, device)  # the rebuilt entries are sound
    assert len(manifests(cache)) == len(stored)


def test_garbage_in_pyopencl_caches_is_ignored(tmp_path: Path) -> None:
    require_opencl()
    invoker = find_spec("pyopencl.invoker")
    assert invoker is not None and invoker.origin is not None
    identifier = re.search(r'"(pyopencl-invoker-cache-[^"]+)"', Path(invoker.origin).read_text())
    assert identifier is not None
    version = ".".join(str(part) for part in sys.version_info)
    pytools = tmp_path / "xdg" / "pytools"
    pytools.mkdir(parents=True)
    (pytools / f"pdict-v5-{identifier[1]}-{version}.sqlite").write_bytes(os.urandom(8192))
    assert "damaged" not in run(tmp_path, OPENCL)  # pyopencl's caches are off
    # Turned on by the user: the damaged invoker cache is reported, and turned off.
    assert "pyopencl's invoker cache is damaged" in run(tmp_path, OPENCL, PYOPENCL_NO_CACHE="0")


@pytest.mark.parametrize("driver", DRIVERS)
def test_processes_building_one_program_at_once_share_a_fresh_cache(
    tmp_path: Path, driver: str
) -> None:
    device = usable(driver)
    processes = [start(tmp_path, device) for _ in range(4)]
    for process in processes:
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0 and stdout.strip() == "ok", stderr
        assert DISCARDED not in stderr
    assert DISCARDED not in run(tmp_path, device)
    checked = Store(store(tmp_path))
    for digests in manifests(tmp_path).values():
        for digest in digests:
            assert checked.get(digest) is not None


def test_a_program_from_a_stored_binary_knows_its_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """pyopencl's kernel objects read their program's `_source`; a program made from a
    binary had none, so the lookup became `clCreateKernel("_source")`, an API error that
    Oclgrind reports (`make oclgrind`). Driven through the binary path of drivers without a
    cache of their own, on the tests' device."""
    import pyopencl as cl

    from hal_opencl import driver_cache

    device = require_opencl()
    monkeypatch.setattr(driver_cache, "POCL_PLATFORM", "no such platform")
    monkeypatch.setattr(driver_cache, "_store", Store(tmp_path / "store"))
    context = cl.Context([device.cl_device])  # type: ignore[attr-defined]
    source = "__kernel void twice(__global float *x) { x[get_global_id(0)] *= 2; }"
    programs = [
        driver_cache.build(cl.Program(context, source), context, device.cl_device, source)  # type: ignore[attr-defined]
        for _ in range(2)
    ]
    assert programs[1] is not programs[0]  # the second is made from the stored binary
    looked_up: list[str] = []
    original = cl.Program.__getattr__

    def lookup(program: cl.Program, name: str) -> object:
        looked_up.append(name)
        return original(program, name)

    monkeypatch.setattr(cl.Program, "__getattr__", lookup)
    cl.Kernel(programs[1], "twice")
    assert looked_up == []
