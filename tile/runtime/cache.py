"""The program cache (design 8.9): compile each (source, input signature, device,
settings) once, and parse each source text once.

Place in the pipeline: the device layer asks the cache before binding, so a call whose
signature was seen before costs a key and a dictionary look-up; only a miss binds, generates
kernels and builds them.

- `ProgramKey` is the key: a hash of the source (and the `floatx` it was parsed with), the
  input signature, the device id and the device settings' fingerprint. Output shapes follow
  from the inputs, so they are not part of it.
- `input_signature` turns call inputs into the key's hashable form: a tensor contributes its
  dtype and dims; a scalar constant contributes its type and *value* (it is compiled in, spec
  6.3; floats by their exact bit pattern, so that -0.0 and NaN key correctly).
- `LRUCache` is a thread-safe least-recently-used map whose `get_or_build` builds a missing
  entry exactly once even when several threads ask for it at the same time: the first caller
  builds, the others wait on a future. Failures are not cached.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable

Key = TypeVar("Key")
Value = TypeVar("Value")

# An input's contribution to a key: ("tensor", dtype.str, dims) or ("constant", type, value).
SignatureEntry = tuple[str, str, "tuple[int, ...] | int | float | str"]

PROGRAM_CACHE_SIZE = 128
FUNCTION_CACHE_SIZE = 256


@dataclass(frozen=True, slots=True)
class ProgramKey:
    source_hash: str  # sha256 of the source text and its floatx
    inputs: tuple[tuple[str, SignatureEntry], ...]  # (input name, signature entry), sorted
    device_id: str
    settings: str  # HardwareSettings.fingerprint()
    # Hashed once: every cached call looks its program up by this key.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = (self.source_hash, self.inputs, self.device_id, self.settings)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        # Made again where it is unpickled: a string's hash differs between processes.
        return (ProgramKey, (self.source_hash, self.inputs, self.device_id, self.settings))


def source_hash(source: str, floatx: str = "float32") -> str:
    """The sha256 of a source text parsed with `floatx` (which types float constants)."""
    return hashlib.sha256(f"{floatx}\n{source}".encode()).hexdigest()


def tensor_entry(dtype: np.dtype, dims: tuple[int, ...]) -> SignatureEntry:
    return ("tensor", dtype.str, dims)  # e.g. "<f4": cheaper to get than the name


def constant_entry(value: object) -> SignatureEntry:
    """A scalar constant's entry: its type and exact value. A 0-d array or numpy scalar keeps
    its dtype; a Python bool, int or float its Python type (binding types those, spec 6.3).
    Anything else (an error the binder will report) is keyed by type and identity."""
    if isinstance(value, np.ndarray | np.generic):
        item = value.item() if value.ndim == 0 else id(value)
        return ("constant", value.dtype.name, _exact(item))
    if isinstance(value, bool | int | float):
        return ("constant", type(value).__name__, _exact(value))
    return ("constant", type(value).__name__, id(value))


def _exact(value: object) -> int | float | str:
    # Floats compare equal across signs of zero and never equal as NaN: key by the bits.
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, bool | int):
        return int(value)
    return repr(value)


def input_signature(entries: Iterable[tuple[str, SignatureEntry]]) -> tuple:
    """The key form of a call's inputs: (name, entry) pairs sorted by name."""
    return tuple(sorted(entries))


class LRUCache(Generic[Key, Value]):
    """A thread-safe LRU map that builds each missing entry once (see the module docstring).

    `hits`, `misses` and `builds` count look-ups that found a finished entry, look-ups that
    did not, and builds that succeeded, since the cache was made or last cleared.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a cache needs room for at least one entry, not {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, Value | Future[Value]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.builds = 0

    def get(self, key: Key) -> Value | None:
        """The finished entry for `key` (now the most recently used), or None. Every cached
        call looks its program up here: the lock is taken without `with` (a third of its cost)."""
        lock = self._lock
        lock.acquire()
        try:
            entries = self._entries
            entry = entries.get(key)
            if entry is None or entry.__class__ is Future:
                return None
            entries.move_to_end(key)
            self.hits += 1
            return entry
        finally:
            lock.release()

    def get_or_build(self, key: Key, build: Callable[[], Value]) -> Value:
        """The entry for `key`; if there is none, `build()` it (once, whoever asks)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if not isinstance(entry, Future):
                    self.hits += 1
                    return entry
                pending: Future[Value] | None = entry
            else:
                pending = None
                future: Future[Value] = Future()
                self._entries[key] = future
                self.misses += 1
        if pending is not None:
            return pending.result()  # built by another thread; raises its failure
        try:
            value = build()
        except BaseException as error:
            with self._lock:
                if self._entries.get(key) is future:
                    del self._entries[key]
            future.set_exception(error)
            raise
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            self.builds += 1
            self._evict()
        future.set_result(value)
        return value

    def _evict(self) -> None:
        # Oldest first; entries still being built are skipped (their builders insert them).
        excess = len(self._entries) - self.capacity
        if excess <= 0:
            return
        for key in [k for k, v in self._entries.items() if not isinstance(v, Future)][:excess]:
            del self._entries[key]

    def clear(self) -> None:
        """Forget every finished entry and reset the counts (entries being built finish
        normally)."""
        with self._lock:
            for key in [k for k, v in self._entries.items() if not isinstance(v, Future)]:
                del self._entries[key]
            self.hits = self.misses = self.builds = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and not isinstance(entry, Future)

    def holds(self, key: Key, value: Value) -> bool:
        """Whether `value` is the finished entry of `key` (no hit counted, no LRU change)."""
        with self._lock:
            return self._entries.get(key) is value
