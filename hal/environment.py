"""On/off switches read from the environment, spelled the same way for every variable.

`flag("TILE_DISABLE_OPENCL")` is False when the variable is unset, empty or one of `0`,
`false`, `no`, `off`, and True for `1`, `true`, `yes`, `on` (any case, surrounding blanks
ignored) and for any other value: setting a switch to something unexpected turns it on.
Variables are read on every call, so a program may set them while it runs.
"""

from __future__ import annotations

import os

OFF = frozenset({"", "0", "false", "no", "off"})


def flag(name: str) -> bool:
    """Whether the switch `name` is on (module docstring)."""
    return os.environ.get(name, "").strip().lower() not in OFF
