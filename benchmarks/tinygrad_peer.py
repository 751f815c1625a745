"""tinygrad on an OpenCL CPU driver as a timed peer of benchmarks/run.py (issue 12's yardstick).

tinygrad is not a dependency (`pip install tinygrad` into the venv). Its OpenCL backend
opens the first platform its OpenCL library lists, and pyopencl's bundled ICD loader, which
this process already uses, lists Oclgrind's simulator before PoCL. So tinygrad gets its own
copy of that loader (a second instance: a copy is a different file to the dynamic linker),
pointed at a directory that names one driver alone while tinygrad opens its device: PoCL, or
Intel's CPU runtime when the tile device measured is on it (`driver_of`). One process opens
one of them. One call is a TinyJit replay plus `synchronize()`, as ../shared/bench/README.md
times tinygrad.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable


def driver_of(device: object) -> str:
    """The OpenCL CPU driver tinygrad runs on next to a tile device: "intel" for a device on
    Intel's CPU runtime, else "pocl"."""
    return "intel" if "Intel(R) OpenCL" in str(getattr(device, "description", "")) else "pocl"


def _library(driver: str) -> Path | None:
    """The driver's OpenCL library, or None where it is not installed."""
    if driver == "intel":
        from hal_opencl.vendors import intel_library

        return intel_library()
    import pyopencl

    pocl = sorted((Path(pyopencl.__file__).parent / ".libs").glob("libpocl*.so*"))
    return pocl[0] if pocl else None


def _loader(driver: str) -> Path | None:
    """A private copy of pyopencl's ICD loader that sees `driver` only, or None."""
    import pyopencl

    loaders = sorted((Path(pyopencl.__file__).parent / ".libs").glob("libOpenCL*.so*"))
    library = _library(driver)
    if not loaders or library is None:
        return None
    home = Path(tempfile.mkdtemp(prefix="tile-tinygrad-"))
    (home / ".libs").mkdir()
    (home / "vendors").mkdir()
    (home / ".libs" / f"{driver}.icd").write_text(f"{library}\n")
    loader = home / "libOpenCL.so.1"
    shutil.copy(loaders[0], loader)
    return loader


_OPENED: dict[str, bool] = {}  # the driver tinygrad opened (or failed to), at most one


def _open(driver: str) -> bool:
    """Open tinygrad's CL device on `driver` once; False without tinygrad or the driver, or
    where this process opened tinygrad on the other driver."""
    if _OPENED:
        return _OPENED.get(driver, False)
    _OPENED[driver] = False
    loader = _loader(driver)
    if loader is None:
        return False
    os.environ["OPENCL_PATH"] = str(loader)
    saved = {k: os.environ.get(k) for k in ("PYOPENCL_HOME", "OCL_ICD_VENDORS")}
    os.environ["PYOPENCL_HOME"] = str(loader.parent)
    os.environ["OCL_ICD_VENDORS"] = str(loader.parent / "vendors")
    try:
        from tinygrad import Device

        name = Device["CL"].device_name
    except Exception:  # no tinygrad, or it cannot open the driver: no tinygrad column
        return False
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    _OPENED[driver] = driver != "pocl" or name.startswith("pthread")
    return _OPENED[driver]


def tinygrad_call(
    expression: Callable[..., object] | None,
    arrays: dict[str, np.ndarray],
    driver: str = "pocl",
) -> Callable[[], None] | None:
    """A call of a tinygrad expression (tinygrad Tensors by name -> Tensor) on `driver`
    ("pocl" or "intel"), inputs resident; None without an expression, tinygrad or the
    driver."""
    if expression is None or not _open(driver):
        return None
    from tinygrad import Device, Tensor, TinyJit

    inputs = {n: Tensor(np.ascontiguousarray(a), device="CL").realize() for n, a in arrays.items()}
    jit = TinyJit(lambda **kw: expression(**kw).realize())  # type: ignore[attr-defined]

    def call() -> None:
        jit(**inputs)
        Device["CL"].synchronize()

    for _ in range(3):  # TinyJit captures on its second call and replays from the third
        call()
    return call
