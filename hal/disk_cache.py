"""tile's cache on disk: where it is, and entries that are checked before use (issues 10, 13).

- `cache_directory()`: `TILE_CACHE_DIR` when set, else the platform's user cache directory
  (`platformdirs`: `$XDG_CACHE_HOME/tile` or `~/.cache/tile` on Linux). `TILE_CACHE=0` turns
  the cache off (`cache_enabled()`): nothing is read or written. The OpenCL back end keeps its
  drivers' caches under it, tile's runtime its compiled programs.
- `atomic_write(path, data)`: writes a temporary file beside `path` and renames it over
  `path`, so that a reader sees the old bytes or the new ones, never a part, however many
  processes write the same entry at once.
- `Store`: content-addressed blobs (a file named by the sha256 of its bytes) and JSON
  manifests that name them. Every read is checked: a blob whose bytes do not hash to its
  name (`CorruptEntryError`), or a manifest that is not the JSON object it should be, is corrupt.
  A corrupt entry is deleted and logged once (a warning on the `tile` logger, `discard`), and
  the caller rebuilds it. Reading and writing never raise `OSError`: an entry that cannot be
  read is missing, one that cannot be written is not written.
- Size: every store under the cache directory shares one budget, `TILE_CACHE_MAX_MB` (default
  2048). Reading a manifest marks it used (its mtime); `evict` deletes the least recently used
  manifests until the stores fit, then the blobs no manifest names. A process evicts after its
  first write and every 64th after that. `usage()` and `clear()` serve `python -m tile cache`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import platformdirs

CACHE_DIR_VARIABLE = "TILE_CACHE_DIR"
CACHE_SWITCH_VARIABLE = "TILE_CACHE"
CACHE_LIMIT_VARIABLE = "TILE_CACHE_MAX_MB"
DEFAULT_LIMIT_MB = 2048
EVICT_EVERY = 64  # writes between evictions in one process
_DIGEST = re.compile(r"[0-9a-f]{64}")
_ORPHAN_GRACE_SECONDS = 300  # a blob written just before its manifest is not an orphan yet

log = logging.getLogger("tile")

_discarded: set[str] = set()
_discarded_lock = threading.Lock()


def cache_directory() -> Path:
    """The root of tile's cache (module docstring); it may not exist yet."""
    configured = os.environ.get(CACHE_DIR_VARIABLE, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_cache_dir("tile", appauthor=False))


def cache_enabled() -> bool:
    """False when `TILE_CACHE` is 0, no, false or off: nothing is read from or written to disk."""
    value = os.environ.get(CACHE_SWITCH_VARIABLE, "").strip().lower()
    return value not in {"0", "no", "false", "off"}


def cache_limit() -> int:
    """The stores' budget in bytes (`TILE_CACHE_MAX_MB`, default 2048 MB)."""
    text = os.environ.get(CACHE_LIMIT_VARIABLE, "").strip()
    try:
        megabytes = float(text) if text else DEFAULT_LIMIT_MB
    except ValueError:
        raise ValueError(f"{CACHE_LIMIT_VARIABLE} must be a number of MB, not {text!r}") from None
    return max(0, int(megabytes * 2**20))


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def discard(path: Path, reason: str) -> None:
    """Delete the corrupt cache file `path` and log it (once per path and process)."""
    with contextlib.suppress(OSError):
        path.unlink()
    with _discarded_lock:
        if str(path) in _discarded:
            return
        _discarded.add(str(path))
    log.warning("discarded a corrupt cache entry %s (%s); it is rebuilt", path, reason)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class CorruptEntryError(Exception):
    """A stored blob whose bytes do not match their checksum (it has been deleted)."""


class Store:
    """Blobs and manifests under `root` (module docstring). Methods never raise OSError:
    an unreadable entry is missing, an unwritable one is not written."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest[:2] / digest

    def _manifest_path(self, key: str) -> Path:
        return self.root / "manifests" / key[:2] / f"{key}.json"

    def put(self, data: bytes) -> str:
        """Store `data` (unless a sound copy is there) and return its digest."""
        digest = sha256(data)
        path = self._blob_path(digest)
        with contextlib.suppress(OSError):
            try:
                sound = path.read_bytes() == data
            except OSError:
                sound = False
            if not sound:
                atomic_write(path, data)
        return digest

    def get(self, digest: str) -> bytes | None:
        """The blob `digest`, or None when it is missing; CorruptEntryError (the blob deleted)
        when its bytes do not match `digest`."""
        path = self._blob_path(digest)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if sha256(data) != digest:
            with contextlib.suppress(OSError):
                path.unlink()
            raise CorruptEntryError(f"{len(data)} bytes that do not match their checksum")
        return data

    def manifest(self, key: str) -> dict | None:
        """The manifest `key`, or None when it is missing or corrupt (then discarded)."""
        path = self._manifest_path(key)
        try:
            text = path.read_bytes()
        except OSError:
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
        try:
            value = json.loads(text)
        except ValueError:  # also UnicodeDecodeError
            value = None
        if not isinstance(value, dict) or value.get("key") != key:
            discard(path, "not a manifest")
            return None
        return value

    def write_manifest(self, key: str, value: dict) -> None:
        """Write the manifest `key` (it records its key, which `manifest` checks)."""
        data = json.dumps({**value, "key": key}, sort_keys=True).encode()
        with contextlib.suppress(OSError):
            atomic_write(self._manifest_path(key), data)
        _note_write()

    def drop_manifest(self, key: str, reason: str) -> None:
        """Discard the manifest `key`, whose entry turned out to be corrupt."""
        discard(self._manifest_path(key), reason)


# ---- size, eviction, inspection -------------------------------------------------------------

_writes = 0
_writes_lock = threading.Lock()


def _note_write() -> None:
    global _writes
    with _writes_lock:
        due = _writes % EVICT_EVERY == 0
        _writes += 1
    if due:
        evict()


def _stores(root: Path) -> list[Path]:
    """The stores under `root`: directories holding `manifests/` or `blobs/`. Other processes
    create and delete directories under `root` meanwhile (PoCL's run directories, evicted
    blobs): `os.walk` passes over one that vanished mid-walk, where `Path.glob` raised."""
    found = []
    for directory, subdirectories, _ in os.walk(root):
        if "manifests" in subdirectories or "blobs" in subdirectories:
            found.append(Path(directory))
            subdirectories.clear()  # a store holds no other store
    return sorted(found)


def _files(directory: Path) -> list[tuple[Path, os.stat_result]]:
    """The files under `directory` with their status, leaving out any that vanished."""
    result = []
    for parent, _, names in os.walk(directory):
        for name in names:
            path = Path(parent, name)
            with contextlib.suppress(OSError):
                info = path.stat()
                if stat.S_ISREG(info.st_mode):
                    result.append((path, info))
    return result


def usage(root: Path | None = None) -> dict[str, dict[str, int]]:
    """Per store under the cache directory (by its path relative to it): its `entries`
    (manifests), `blobs` and `bytes`."""
    root = cache_directory() if root is None else root
    report = {}
    for store in _stores(root):
        manifests = _files(store / "manifests")
        blobs = _files(store / "blobs")
        size = sum(info.st_size for _, info in manifests + blobs)
        name = store.relative_to(root).as_posix()
        report[name] = {"entries": len(manifests), "blobs": len(blobs), "bytes": size}
    return report


def clear(root: Path | None = None) -> int:
    """Delete every store under the cache directory; the bytes freed. (Directories a running
    process uses for its driver, such as PoCL's, are left to that process.)"""
    root = cache_directory() if root is None else root
    freed = 0
    for store in _stores(root):
        for name in ("manifests", "blobs"):
            for _, info in _files(store / name):
                freed += info.st_size
            shutil.rmtree(store / name, ignore_errors=True)
    return freed


def evict(root: Path | None = None, limit: int | None = None) -> int:
    """Delete least recently used manifests until every store under `root` fits `limit`
    bytes together, then blobs no manifest names; the bytes freed. Never raises OSError.
    Concurrent processes may evict at once: a manifest whose blob went is a miss for them."""
    if not cache_enabled():
        return 0
    root = cache_directory() if root is None else root
    limit = cache_limit() if limit is None else limit
    manifests: list[tuple[Path, os.stat_result]] = []
    blobs: dict[str, tuple[Path, os.stat_result]] = {}
    for store in _stores(root):
        manifests += _files(store / "manifests")
        blobs.update((path.name, (path, info)) for path, info in _files(store / "blobs"))
    total = sum(info.st_size for _, info in manifests) + sum(i.st_size for _, i in blobs.values())
    if total <= limit:
        return 0
    names: dict[Path, set[str]] = {}
    for path, _ in manifests:
        try:
            names[path] = set(_DIGEST.findall(path.read_text())) & blobs.keys()
        except (OSError, ValueError):
            names[path] = set()
    # Oldest first, each manifest taking away its own bytes and those of its blobs that no
    # newer manifest names.
    users: dict[str, int] = {}
    for digest_set in names.values():
        for digest in digest_set:
            users[digest] = users.get(digest, 0) + 1
    freed = 0
    manifests.sort(key=lambda item: item[1].st_mtime)
    for path, info in manifests:
        if total - freed <= limit:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            freed += info.st_size
            for digest in names[path]:
                users[digest] -= 1
                if users[digest] == 0:
                    freed += _unlink(blobs[digest][0])
    now = time.time()
    for digest, (path, info) in blobs.items():
        orphan = users.get(digest, 0) == 0 and path.exists()
        if orphan and now - info.st_mtime > _ORPHAN_GRACE_SECONDS:
            freed += _unlink(path)
    return freed


def _unlink(path: Path) -> int:
    try:
        size = path.stat().st_size
        path.unlink()
    except OSError:
        return 0
    return size
