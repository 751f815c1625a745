"""Which OpenCL platforms tile lists, in which order, and how a selector names one (issue 10).

The ICD loader returns platforms in an order of its own, and installing a driver can change
it (Oclgrind's wheel came first and became `opencl.0`). So device ids do not follow the
loader: platforms are ranked PoCL first, then Intel's CPU runtime, then every other platform
by name, and devices are numbered in that order. Platforms made for debugging or emulation
(Oclgrind, Intel's FPGA emulator) are *hidden*: left out of the default list and numbered
after every listed device, so installing one never moves an id; a selector that names one
(`opencl:oclgrind`) brings it in.

A platform's *key* is a short name for selectors: `pocl`, `intel`, `intel-gpu`, `intel-fpga`,
`oclgrind`, else its name in lower case with dashes (`nvidia-cuda`). A selector matches a key
exactly, or its first words (`nvidia` matches `nvidia-cuda`); exact matches win.
This module is pure: it sees platform names only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

P = TypeVar("P")

# (words in the lower-case platform name, key); the first rule that matches wins.
_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("portable computing language",), "pocl"),
    (("pocl",), "pocl"),
    (("oclgrind",), "oclgrind"),
    (("intel", "fpga"), "intel-fpga"),
    (("intel", "graphics"), "intel-gpu"),
    (("intel",), "intel"),
)
RANK = {"pocl": 0, "intel": 1}  # every other key ranks after these, by name
HIDDEN = frozenset({"oclgrind", "intel-fpga"})  # debugging and emulation platforms


def platform_key(name: str) -> str:
    """The selector key of the platform called `name` (module docstring)."""
    lowered = name.lower()
    for words, key in _RULES:
        if all(word in lowered for word in words):
            return key
    return re.sub(r"[^a-z0-9]+", "-", lowered).strip("-") or "unnamed"


def order_platforms(platforms: Sequence[P], name: Callable[[P], str]) -> tuple[list[P], list[P]]:
    """The platforms to list and the hidden ones, each in id order (module docstring)."""

    def rank(platform: P) -> tuple[int, str, str]:
        key = platform_key(name(platform))
        return RANK.get(key, len(RANK)), key, name(platform)

    ordered = sorted(platforms, key=rank)  # stable: equal platforms keep the loader's order
    listed = [p for p in ordered if platform_key(name(p)) not in HIDDEN]
    hidden = [p for p in ordered if platform_key(name(p)) in HIDDEN]
    return listed, hidden


def matches(selector: str, keys: Sequence[str]) -> list[int]:
    """Positions of the keys a selector names: exact matches, else keys that start with it
    followed by a dash."""
    wanted = selector.strip().lower()
    exact = [n for n, key in enumerate(keys) if key == wanted]
    return exact or [n for n, key in enumerate(keys) if key.startswith(wanted + "-")]
