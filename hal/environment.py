"""On/off switches read from the environment, spelled the same way for every variable.

`flag("TILE_DISABLE_OPENCL")` is False when the variable is unset, empty or one of `0`,
`false`, `no`, `off`, and True for `1`, `true`, `yes`, `on` (any case, surrounding blanks
ignored) and for any other value: setting a switch to something unexpected turns it on.
Variables are read on every call, so a program may set them while it runs.
"""

from __future__ import annotations

import os

OFF = frozenset({"", "0", "false", "no", "off"})

# os.environ's own storage and codecs (CPython's `os._Environ`), read directly by `lookup`.
_ENVIRON = os.environ
_DATA = getattr(_ENVIRON, "_data", None)
_ENCODE = getattr(_ENVIRON, "encodekey", None)
_DECODE = getattr(_ENVIRON, "decodevalue", None)
_KEYS: dict[str, object] = {}  # each name as os.environ's storage spells it
_KEY_TUPLES: dict[tuple[str, ...], tuple[object, ...]] = {}  # the same for `unset`


def lookup(name: str) -> str:
    """`os.environ.get(name, "")`, for variables read on every call (a launch reads two).

    The Mapping path costs 0.7 µs for an unset variable (it raises and catches KeyError);
    looking in the dictionary behind `os.environ` costs 0.05 µs and sees every change made
    through `os.environ`, as `os.environ.get` does."""
    environ = os.environ
    if environ is not _ENVIRON or _DATA is None or _ENCODE is None or _DECODE is None:
        return environ.get(name, "")
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _ENCODE(name)
    raw = _DATA.get(key)
    return "" if raw is None else _DECODE(raw)


def unset(names: tuple[str, ...]) -> bool:
    """Whether every variable of `names` is unset or empty: one look-up per name, for a hot
    path that changes when any of them is set (it then reads them properly)."""
    if os.environ is not _ENVIRON or _DATA is None or _ENCODE is None:
        return not any(os.environ.get(name) for name in names)
    keys = _KEY_TUPLES.get(names)
    if keys is None:
        keys = _KEY_TUPLES[names] = tuple(_ENCODE(name) for name in names)
    get = _DATA.get
    for key in keys:  # noqa: SIM110 (a loop: a third of `any(map(...))`'s cost for two names)
        if get(key):  # an empty value, as bytes or str, is unset too
            return False
    return True


def flag(name: str) -> bool:
    """Whether the switch `name` is on (module docstring)."""
    return lookup(name).strip().lower() not in OFF
