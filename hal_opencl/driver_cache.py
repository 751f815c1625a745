"""The OpenCL drivers' caches on disk, directed by tile so that no damaged or half-written
entry crashes a process (issue 10).

Everything lives under `<tile cache>/opencl` (`hal.disk_cache.cache_directory`). What is
shared between processes is tile's store, `store/` (`hal.disk_cache.Store`): per program,
keyed by platform, device, driver version, build options and source, a manifest that names
checked blobs. `build(program, context, device, source, options)` builds through it:

- PoCL caches each program it builds in its cache directory (`POCL_CACHE_DIR`) as
  `XX/HASH/program.bc`, and each kernel it compiles for a launch as
  `XX/HASH/<kernel>/<shape>/<kernel>.so`. It loads those files unchecked and aborts the
  process on a damaged one (garbage in `program.bc`; "dlopen ... invalid ELF header" for a
  truncated `.so`); an abort inside the driver cannot be caught, so no such file may reach
  it. `prepare()`, before the driver loads, points `POCL_CACHE_DIR` at a directory of this
  process alone, `pocl-runs/<pid>-...`, locked (`flock`) while the process lives; run
  directories whose process has gone are deleted by the next process that starts. A build
  first copies the program's files, each checked against its checksum, from the store into
  that directory, where PoCL finds them, then builds the program from source (PoCL's cache
  makes that 20 to 30 ms), and notes which directory PoCL used. It stores no binary: asked
  for a program's binary (`CL_PROGRAM_BINARIES`), PoCL compiles every kernel of it once
  more, for any work-group size, code that no launch runs (each launch compiles its own,
  for its work-group size, into its cache), and that doubled the cold build of a program
  (0.27 s to 0.49 s for three small kernels, 2026-11-27), against a warm build of 2 ms
  from a binary instead of about 25 from source. At exit
  (`PoclRun.save`, registered before any queue, so it runs after they have finished) the
  files PoCL wrote for the noted programs, kernels compiled at launch included, go to the
  store.
- Other drivers (Intel's CPU runtime, ...) keep no cache of their own: the program's binary
  (`CL_PROGRAM_BINARIES`) goes to the store after a build from source, and a later build of
  the same program creates it from that binary once the binary passed its check (a binary
  the driver still rejects is discarded too).

Blobs are written before the manifest that names them, each atomically (a temporary
renamed), so processes that build the same program at once never see a partial entry. An
entry that fails a check is discarded, logged once (a warning on the `tile` logger), and
the program is built from source.

pyopencl's caches: `prepare()` sets `PYOPENCL_NO_CACHE=1` (unless set), so that pyopencl's
binary cache (which tile's store replaces) and its sqlite "invoker" cache stay off. Where
they are on all the same (the user's choice, or pyopencl imported before tile), a damaged
invoker cache made every `cl.Kernel` raise `sqlite3.DatabaseError`: `prepare()` imports the
invoker first, and on that error logs it once and turns pyopencl's caches off for the process.

A user's own `POCL_CACHE_DIR` is left alone (and unchecked); one a parent process's tile set
(`TILE_POCL_RUN_DIR` says which) is replaced by the child's own. A process that loaded PoCL
before tile did keeps PoCL's default directory; the copies then simply go unused.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hal.disk_cache import CorruptEntryError, Store, cache_directory, cache_enabled
from hal_opencl.malloc import mapped_large_allocations

try:
    import fcntl
except ImportError:  # not POSIX: PoCL keeps its own cache
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyopencl as cl

POCL_PLATFORM = "Portable Computing Language"
POCL_VARIABLE = "POCL_CACHE_DIR"
RUN_VARIABLE = "TILE_POCL_RUN_DIR"  # what tile set POCL_CACHE_DIR to (children inherit both)
STALE_SECONDS = 3600.0  # a run directory without a lock this old was abandoned half made
_ENTRY = re.compile(r"[A-Za-z0-9_]+/[A-Za-z0-9_]+")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_NOT_SAVED = ("last_accessed",)

log = logging.getLogger("tile")


class PoclRun:
    """This process's PoCL directory, filled from and saved to the store (module docstring)."""

    def __init__(self, store: Store, run: Path, lock_fd: int) -> None:
        self.store = store
        self.run = run
        self._lock_fd = lock_fd  # held open: the flock marks the directory as in use
        self._lock = threading.Lock()
        self._noted: dict[str, tuple[str, dict[str, str]]] = {}  # key -> (entry, files)

    def build(
        self,
        program: cl.Program,
        context: cl.Context,
        cl_device: cl.Device,
        key: str,
        options: Sequence[str],
    ) -> cl.Program:
        """`program` built from source, PoCL's files of it restored first (PoCL then finds
        the program and the kernels compiled at launch in its cache). No binary is asked
        for: module docstring."""
        with self._lock:
            restored = self._restore(key)
            before = self._entries()
            program.build(options=list(options), devices=[cl_device])
            new = self._entries() - before
            if len(new) == 1:
                self._noted[key] = (new.pop(), {})
            elif restored is not None:
                self._noted[key] = restored
            return program

    def _entries(self) -> set[str]:
        """PoCL's program directories in this process's directory, as "XX/HASH"."""
        found: set[str] = set()
        with contextlib.suppress(OSError):
            for group in os.scandir(self.run):
                if group.is_dir() and not group.name.startswith("."):
                    found.update(f"{group.name}/{e.name}" for e in os.scandir(group) if e.is_dir())
        return found

    def _restore(self, key: str) -> tuple[str, dict[str, str]] | None:
        """Copy the stored files of `key` into this process's directory, checked."""
        manifest = self.store.manifest(key)
        if manifest is None:
            return None
        entry, files = manifest.get("entry"), manifest.get("files")
        if not _valid(entry, files):
            self.store.drop_manifest(key, "not a manifest of PoCL's files")
            return None
        assert isinstance(entry, str) and isinstance(files, dict)
        target = self.run / entry
        if target.exists():  # built earlier in this process: PoCL has it
            return entry, files
        contents: dict[str, bytes] = {}
        for name, digest in files.items():
            try:
                data = self.store.get(digest)
            except CorruptEntryError as error:
                self.store.drop_manifest(key, f"its file {name}: {error}")
                return None
            if data is None:
                self.store.drop_manifest(key, f"its file {name} is missing")
                return None
            contents[name] = data
        staging = self.run / f".restore-{key}"
        try:
            staging.mkdir()
            for name, data in contents.items():
                path = staging / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            target.parent.mkdir(exist_ok=True)
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            return None
        return entry, files

    def save(self) -> None:
        """Store the files PoCL wrote for every program noted in this process."""
        with self._lock:
            noted = list(self._noted.items())
        for key, (entry, restored) in noted:
            try:
                files = self._collect(self.run / entry)
            except OSError:
                continue
            if files and files != restored:
                self.store.write_manifest(key, {"entry": entry, "files": files})

    def _collect(self, base: Path) -> dict[str, str]:
        files: dict[str, str] = {}
        for path in sorted(base.rglob("*")):
            name = path.relative_to(base).as_posix()
            if path.is_file() and path.name not in _NOT_SAVED and _valid_name(name):
                files[name] = self.store.put(path.read_bytes())
        return files


def _program_key(cl_device: cl.Device, source: str, options: Sequence[str]) -> str:
    platform = cl_device.platform
    identity = [platform.name, platform.version, cl_device.name, cl_device.driver_version]
    text = json.dumps([*identity, list(options), source])
    return hashlib.sha256(text.encode()).hexdigest()


def _valid_name(name: str) -> bool:
    return all(_PART.fullmatch(part) for part in name.split("/"))


def _valid(entry: object, files: object) -> bool:
    return (
        isinstance(entry, str)
        and _ENTRY.fullmatch(entry) is not None
        and isinstance(files, dict)
        and all(
            isinstance(name, str)
            and _valid_name(name)
            and isinstance(digest, str)
            and _DIGEST.fullmatch(digest) is not None
            for name, digest in files.items()
        )
    )


_store: Store | None = None  # None until prepared, or where the cache cannot be written
_pocl: PoclRun | None = None  # None where tile does not direct PoCL's cache
_prepare_lock = threading.Lock()
_DIGEST = re.compile(r"[0-9a-f]{64}")


def prepare() -> None:
    """Set the drivers' caches up (module docstring); call before the OpenCL driver loads.
    A problem leaves the drivers' defaults in place and is logged at debug level."""
    global _store, _pocl
    os.environ.setdefault("PYOPENCL_NO_CACHE", "1")
    with _prepare_lock:
        try:
            if _store is None:
                root = _root()
                root.mkdir(parents=True, exist_ok=True)
                _store = Store(root / "store")
                _pocl = _pocl_run(_store, root / "pocl-runs")
        except OSError as error:
            log.debug("no OpenCL cache on disk: %s", error)
    _check_invoker_cache()


def _root() -> Path:
    """`<tile cache>/opencl`; with the cache off (`TILE_CACHE=0`) a directory of this process
    alone, deleted at exit, so that PoCL still never reads another process's files."""
    if cache_enabled():
        return cache_directory() / "opencl"
    root = Path(tempfile.mkdtemp(prefix="tile-opencl-"))
    atexit.register(shutil.rmtree, root, True)  # registered first: runs after the saves
    return root


def _pocl_run(store: Store, runs: Path) -> PoclRun | None:
    """This process's own PoCL directory, named by POCL_CACHE_DIR; None when the user chose
    one (not a parent tile process) or where it cannot be made."""
    current = os.environ.get(POCL_VARIABLE, "")
    if fcntl is None or (current and current != os.environ.get(RUN_VARIABLE)):
        return None
    try:
        runs.mkdir(exist_ok=True)
        _remove_stale(runs)
        run, lock_fd = _new_run(runs)
    except OSError as error:
        log.debug("PoCL keeps its own cache: %s", error)
        return None
    os.environ[POCL_VARIABLE] = os.environ[RUN_VARIABLE] = str(run)
    pocl = PoclRun(store, run, lock_fd)
    atexit.register(pocl.save)
    return pocl


def _check_invoker_cache() -> None:
    """Open pyopencl's invoker cache now, if its caches are on; a damaged one turns them off
    (module docstring)."""
    import pyopencl as cl  # only now: PYOPENCL_NO_CACHE is read when pyopencl is imported

    if getattr(cl, "_PYOPENCL_NO_CACHE", True) or "pyopencl.invoker" in sys.modules:
        return
    try:
        importlib.import_module("pyopencl.invoker")
    except sqlite3.DatabaseError as error:
        log.warning("pyopencl's invoker cache is damaged (%s); its caches are off", error)
        cl._PYOPENCL_NO_CACHE = True  # type: ignore[attr-defined]
        importlib.import_module("pyopencl.invoker")


def _new_run(runs: Path) -> tuple[Path, int]:
    """A new run directory, locked before other processes can see it under its final name."""
    staging = Path(tempfile.mkdtemp(prefix=".new-", dir=runs))
    lock_fd = os.open(staging / "lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    run = runs / f"{os.getpid()}-{staging.name.removeprefix('.new-')}"
    staging.rename(run)
    return run, lock_fd


def _remove_stale(runs: Path) -> None:
    """Delete the run directories of processes that have exited."""
    for run in runs.iterdir():
        lock_fd = None
        if not run.name.startswith(".new-"):  # a new one's lock may not be taken yet
            with contextlib.suppress(OSError):
                lock_fd = os.open(run / "lock", os.O_RDWR)
        if lock_fd is None:  # being made right now, or abandoned half made (then old)
            with contextlib.suppress(OSError):
                if time.time() - run.stat().st_mtime > STALE_SECONDS:
                    shutil.rmtree(run, ignore_errors=True)
            continue
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its process still runs
        else:
            shutil.rmtree(run, ignore_errors=True)
        finally:
            os.close(lock_fd)


def build(
    program: cl.Program,
    context: cl.Context,
    cl_device: cl.Device,
    source: str,
    options: Sequence[str] = (),
) -> cl.Program:
    """Build `source` (`program`, made from it in `context`) for `cl_device` through tile's
    store (module docstring); returns the built program: `program`, or one made from a
    stored binary. A failed build from source raises the driver's error, as
    `program.build` does, and `program` keeps its log."""

    store = _store
    if store is None:
        with mapped_large_allocations():
            return program.build(options=list(options), devices=[cl_device])
    key = _program_key(cl_device, source, options)
    if cl_device.platform.name.strip() == POCL_PLATFORM:
        with mapped_large_allocations():  # PoCL's buffers fragmented the heap (hal_opencl.malloc)
            if _pocl is None:
                return program.build(options=list(options), devices=[cl_device])
            return _pocl.build(program, context, cl_device, key, options)
    cached = _from_binary(store, key, context, cl_device, options)
    if cached is not None:
        # pyopencl's kernel objects read their program's `_source`, which only a program
        # made from source has; on one from a binary the attribute lookup became a kernel
        # lookup (`clCreateKernel("_source")`: an API error that Oclgrind reports).
        cached._source = source  # type: ignore[attr-defined]
        return cached
    program.build(options=list(options), devices=[cl_device])
    _save_binary(store, key, program)
    return program


def _save_binary(store: Store, key: str, program: cl.Program) -> None:
    """Store the binary of a program just built from source (never raises for it)."""
    import pyopencl as cl

    with contextlib.suppress(cl.Error):
        binaries = program.get_info(cl.program_info.BINARIES)
        if len(binaries) == 1 and binaries[0]:
            store.write_manifest(key, {"binary": store.put(bytes(binaries[0]))})


def _from_binary(
    store: Store, key: str, context: cl.Context, cl_device: cl.Device, options: Sequence[str]
) -> cl.Program | None:
    """The program `key` built from its stored binary, or None (then discarded if damaged)."""
    import pyopencl as cl

    manifest = store.manifest(key)
    if manifest is None:
        return None
    digest = manifest.get("binary")
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        store.drop_manifest(key, "not a manifest of a program binary")
        return None
    try:
        binary = store.get(digest)
    except CorruptEntryError as error:
        store.drop_manifest(key, f"its binary: {error}")
        return None
    if binary is None:
        store.drop_manifest(key, "its binary is missing")
        return None
    try:
        return cl.Program(context, [cl_device], [binary]).build(
            options=list(options), devices=[cl_device]
        )
    except cl.Error as error:
        store.drop_manifest(key, f"the driver rejects its binary: {error}")
        return None
