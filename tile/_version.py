"""`tile.__version__`: the version in pyproject.toml, read from the installed package's
metadata, or from pyproject.toml itself when the source tree is used without installing."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "tile-hal"


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        text = pyproject.read_text()
    except OSError:
        return "0+unknown"
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else "0+unknown"


__version__ = version()
