"""Compiled programs and checked front ends on disk, shared by every process (issue 13).

Place in the pipeline: a program-cache miss (`tile.runtime.invoke`) asks `load_program` before
binding anything; only when the disk has nothing does it bind, generate and build, then
`save_program` stores the result. `Function(source)` asks `load_front_end` before parsing,
so a process whose programs are all on disk never imports Lark.

- Where: `<tile cache>/programs`, a `hal.disk_cache.Store` (checksummed blobs, atomic writes,
  least-recently-used eviction under one size budget; `TILE_CACHE=0` turns it off).
- Keys: a program's is the sha256 of the source (and its floatx), the input signature, the
  device settings' fingerprint, the device's `code_identity` (driver and its version, CPU model
  and features), tile's version and `code_digest()`, a digest of tile's own code, so that a
  changed compiler never meets programs an older one built. A device whose `code_identity` is
  None (a custom renderer) is never cached. Programs compiled with `TILE_TUNE` on (register
  tiles from `tile.runtime.tune`) are keyed apart.
- Entries: a manifest naming two blobs, the plan (kernel list and schedule) and the device
  code (`Compiler.export`). A blob that fails its checksum, a plan that does not unpickle, or
  code the device refuses is discarded, logged once, and the program is built again.
- Plans are pickles read by `loads`, which builds only classes of the IR modules it knows
  (`semtree`, the schedule, tile's syntax and diagnostics) and numpy dtypes: a damaged or
  planted file cannot call anything else.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hal.disk_cache import CorruptEntryError, Store, cache_directory, cache_enabled
from hal.errors import HalError
from tile._version import __version__
from tile.runtime import tune

if TYPE_CHECKING:
    from hal.interfaces import Device as HalDevice
    from hal.interfaces import Library
    from semtree.kernel import KernelList
    from tile.lower.schedule import Schedule
    from tile.runtime.cache import ProgramKey

log = logging.getLogger("tile")

FORMAT = 1  # of entries and bundles; part of every key
_CODE_PACKAGES = ("tile", "semtree", "hal", "hal_llvm", "hal_opencl")
_PLAN_MODULES = frozenset(
    {
        "tile.lower.schedule",
        "tile.bind.program",
        "tile.lang.syntax",
        "tile.lang.builtins",
        "tile.errors",
        "numpy",
        "numpy.dtypes",
    }
)


# ---- restricted pickles ---------------------------------------------------------------------


class _PlanUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if not (module.startswith("semtree.") or module in _PLAN_MODULES):
            raise pickle.UnpicklingError(f"a plan may not name {module}.{name}")
        found = super().find_class(module, name)
        if not isinstance(found, type):
            raise pickle.UnpicklingError(f"a plan may only name classes, not {module}.{name}")
        return found


def dumps(value: object) -> bytes:
    """A plan (kernel list, schedule, syntax tree) as bytes for `loads`."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """What `dumps` wrote; `ValueError` for anything else (damaged, or naming a class outside
    the IR modules)."""
    try:
        return _PlanUnpickler(io.BytesIO(data)).load()
    except Exception as error:  # pickle raises many kinds for damaged input
        raise ValueError(f"not a plan tile wrote: {error}") from error


# ---- keys -----------------------------------------------------------------------------------


@functools.cache
def code_digest() -> str:
    """A digest of tile's version and of its own Python files and grammar (what generates
    programs): their names, sizes and modification times, which a stat gives at no cost (any
    edit, checkout or reinstall changes them)."""
    digest = hashlib.sha256(__version__.encode())
    root = Path(__file__).resolve().parents[2]
    for package in _CODE_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in {".py", ".lark"}:
                info = path.stat()
                digest.update(f"{path.relative_to(root).as_posix()} {info.st_size} ".encode())
                digest.update(f"{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def program_digest(key: ProgramKey, identity: str) -> str:
    """The disk key of a program: everything its code depends on (module docstring)."""
    parts = [FORMAT, code_digest(), key.source_hash, repr(key.inputs), key.settings, identity]
    if tune.enabled():  # register tiles remembered or measured: stored apart
        parts.append("tuned")
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _store() -> Store | None:
    return Store(cache_directory() / "programs") if cache_enabled() else None


# ---- programs -------------------------------------------------------------------------------


def save_program(
    key: ProgramKey,
    device: HalDevice,
    kernel_list: KernelList,
    schedule: Schedule,
    library: Library,
) -> None:
    """Store a program just built (quietly nothing where the cache is off, the device's code
    cannot be exported, or the disk cannot be written)."""
    store, identity = _store(), device.code_identity
    if store is None or identity is None:
        return
    try:
        code = device.compiler.export(library)
    except HalError as error:
        log.debug("program not stored: %s", error)
        return
    plan = store.put(dumps((kernel_list, schedule)))
    code_blob = store.put(code)
    store.write_manifest(program_digest(key, identity), {"plan": plan, "code": code_blob})


def load_program(key: ProgramKey, device: HalDevice) -> tuple[KernelList, Schedule, Library] | None:
    """The stored program of `key` on `device`, its library restored, or None."""
    store, identity = _store(), device.code_identity
    if store is None or identity is None:
        return None
    digest = program_digest(key, identity)
    manifest = store.manifest(digest)
    if manifest is None:
        return None
    try:
        plan, code = _blob(store, manifest, "plan"), _blob(store, manifest, "code")
        kernel_list, schedule = loads(plan)
        library = device.compiler.restore(kernel_list, code, device)
    except (ValueError, TypeError, HalError, CorruptEntryError) as error:
        store.drop_manifest(digest, str(error))
        return None
    return kernel_list, schedule, library


def _blob(store: Store, manifest: dict, name: str) -> bytes:
    digest = manifest.get(name)
    if not isinstance(digest, str):
        raise ValueError(f"the manifest names no {name}")
    data = store.get(digest)
    if data is None:
        raise ValueError(f"its {name} is missing")
    return data


# ---- front ends -----------------------------------------------------------------------------


def _front_end_digest(source: str) -> str:
    return hashlib.sha256(
        json.dumps([FORMAT, code_digest(), "front end", source]).encode()
    ).hexdigest()


def load_front_end(source: str) -> Any | None:
    """The stored (syntax tree, warnings) of a source text that parsed and checked, or None."""
    store = _store()
    if store is None:
        return None
    digest = _front_end_digest(source)
    manifest = store.manifest(digest)
    if manifest is None:
        return None
    try:
        return loads(_blob(store, manifest, "front_end"))
    except (ValueError, CorruptEntryError) as error:
        store.drop_manifest(digest, str(error))
        return None


def save_front_end(source: str, front_end: object) -> None:
    store = _store()
    if store is not None:
        blob = store.put(dumps(front_end))
        store.write_manifest(_front_end_digest(source), {"front_end": blob})
