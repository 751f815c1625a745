"""tile's cache directory and its checked store (hal.disk_cache, issue 10)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from unittest.mock import ANY

import pytest

from hal import disk_cache
from hal.disk_cache import CorruptEntryError, Store, atomic_write, cache_directory, sha256


def test_cache_directory_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TILE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == tmp_path / "xdg" / "tile"
    monkeypatch.setenv("TILE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_directory() == tmp_path / "mine"
    monkeypatch.delenv("TILE_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_directory() == tmp_path / ".cache" / "tile"


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "a" / "entry"
    atomic_write(path, b"old")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["entry"]


def test_blobs_are_checked(tmp_path: Path) -> None:
    store = Store(tmp_path)
    digest = store.put(b"kernel code")
    assert digest == sha256(b"kernel code") and store.get(digest) == b"kernel code"
    assert store.get(sha256(b"never stored")) is None
    [blob] = (tmp_path / "blobs").rglob(digest)
    blob.write_bytes(b"kernel cod")  # truncated
    with pytest.raises(CorruptEntryError, match="10 bytes"):
        store.get(digest)
    assert not blob.exists()  # discarded
    assert store.put(b"kernel code") == digest and store.get(digest) == b"kernel code"


def test_damaged_manifests_are_discarded_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tmp_path)
    store.write_manifest("k1", {"files": {"a": "b"}})
    assert store.manifest("k1") == {"files": {"a": "b"}, "key": "k1"}
    assert store.manifest("k2") is None
    [path] = (tmp_path / "manifests").rglob("k1.json")
    for damage in (b"\xff\xfe garbage", b'{"files": {"a"', b"[]", b'{"key": "k3"}'):
        path.write_bytes(damage)
        with caplog.at_level(logging.WARNING, logger="tile"):
            assert store.manifest("k1") is None
        assert not path.exists()
    warnings = [r for r in caplog.records if "discarded a corrupt cache entry" in r.message]
    assert len(warnings) == 1 and str(path) in warnings[0].message


def test_put_repairs_a_damaged_blob(tmp_path: Path) -> None:
    store = Store(tmp_path)
    digest = store.put(b"program")
    [blob] = (tmp_path / "blobs").rglob(digest)
    blob.write_bytes(b"garbage")
    assert store.put(b"program") == digest and blob.read_bytes() == b"program"


def test_inspection_passes_over_directories_that_vanish_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other processes delete their own directories under the cache (PoCL's run directories)
    while one inspects or evicts it: a directory gone between listing and reading is passed
    over (a CI failure: `Path.glob` raised FileNotFoundError out of `evict`)."""
    store = Store(tmp_path / "opencl" / "store")
    digest = store.put(b"kept")
    store.write_manifest("k", {"blob": digest})
    doomed = tmp_path / "opencl" / "pocl-runs" / "123-gone"
    (doomed / "ab" / "cdef").mkdir(parents=True)
    (doomed / "ab" / "cdef" / "program.bc").write_bytes(b"x")
    real_scandir = os.scandir

    def scandir_after_exit(path: object = ".") -> object:  # the owner exits just now
        if Path(str(path)).is_relative_to(doomed):
            shutil.rmtree(doomed, ignore_errors=True)
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir_after_exit)
    assert disk_cache.usage(tmp_path) == {
        "opencl/store": {"entries": 1, "blobs": 1, "bytes": ANY},
    }
    assert not doomed.exists()
    (doomed / "ab").mkdir(parents=True)
    assert disk_cache.evict(tmp_path, limit=10**9) == 0
    assert disk_cache.clear(tmp_path) > 0
    assert disk_cache.usage(tmp_path) == {}
