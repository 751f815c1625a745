"""tile's cache on disk: where it is, and entries that are checked before use (issue 10).

- `cache_directory()`: `TILE_CACHE_DIR` when set, else `$XDG_CACHE_HOME/tile`, else
  `~/.cache/tile`. The OpenCL back end keeps its drivers' caches under it.
- `atomic_write(path, data)`: writes a temporary file beside `path` and renames it over
  `path`, so that a reader sees the old bytes or the new ones, never a part, however many
  processes write the same entry at once.
- `Store`: content-addressed blobs (a file named by the sha256 of its bytes) and JSON
  manifests that name them. Every read is checked: a blob whose bytes do not hash to its
  name (`CorruptEntryError`), or a manifest that is not the JSON object it should be, is corrupt.
  A corrupt entry is deleted and logged once (a warning on the `tile` logger, `discard`), and
  the caller rebuilds it. Reading and writing never raise `OSError`: an entry that cannot be
  read is missing, one that cannot be written is not written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

CACHE_DIR_VARIABLE = "TILE_CACHE_DIR"

log = logging.getLogger("tile")

_discarded: set[str] = set()
_discarded_lock = threading.Lock()


def cache_directory() -> Path:
    """The root of tile's cache (module docstring); it may not exist yet."""
    configured = os.environ.get(CACHE_DIR_VARIABLE, "").strip()
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "tile"


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

    def drop_manifest(self, key: str, reason: str) -> None:
        """Discard the manifest `key`, whose entry turned out to be corrupt."""
        discard(self._manifest_path(key), reason)
