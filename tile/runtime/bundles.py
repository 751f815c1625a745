"""`tile.load`: a saved bundle, of a `CompiledFunction` (`tile.runtime.compiled`) or of a
`DynamicFunction` (`tile.runtime.dynamic`, whose header has a `dynamic` entry)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tile.runtime.compiled import load_compiled, read_bundle
from tile.runtime.dynamic import load_dynamic

if TYPE_CHECKING:
    import os

    from tile.runtime.api import Device, DeviceLike  # noqa: F401 (pdoc resolves DeviceLike here)
    from tile.runtime.compiled import CompiledFunction
    from tile.runtime.dynamic import DynamicFunction


def load(
    path: str | os.PathLike[str], device: DeviceLike = None
) -> CompiledFunction | DynamicFunction:
    """A bundle `save` wrote, ready to run on `device` (None: the device it was compiled for),
    without the parser or the LLVM optimiser. Raises TileBundleError for a file that is not a
    sound bundle, TileUnsupported when its code cannot run on the device (another backend, a
    CPU without the features it uses)."""
    where = Path(path)
    header, members = read_bundle(where)
    if "dynamic" in header:
        return load_dynamic(where, header, members, device)
    return load_compiled(where, header, members, device)
