"""tinygrad on PoCL as a timed peer of benchmarks/run.py (issue 12's yardstick).

tinygrad is not a dependency (`pip install tinygrad` into the venv). Its OpenCL backend
opens the first platform its OpenCL library lists, and pyopencl's bundled ICD loader, which
this process already uses, lists Oclgrind's simulator before PoCL. So tinygrad gets its own
copy of that loader (a second instance: a copy is a different file to the dynamic linker),
pointed at a directory that names PoCL alone while tinygrad opens its device. One call is
a TinyJit replay plus `synchronize()`, as ../shared/bench/README.md times tinygrad.
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


def _pocl_loader() -> Path | None:
    """A private copy of pyopencl's ICD loader that sees PoCL only, or None."""
    import pyopencl

    libs = Path(pyopencl.__file__).parent / ".libs"
    loaders = sorted(libs.glob("libOpenCL*.so*"))
    pocl = sorted(libs.glob("libpocl*.so*"))
    if not loaders or not pocl:
        return None
    home = Path(tempfile.mkdtemp(prefix="tile-tinygrad-"))
    (home / ".libs").mkdir()
    (home / "vendors").mkdir()
    (home / ".libs" / "pocl.icd").write_text(f"{pocl[0]}\n")
    loader = home / "libOpenCL.so.1"
    shutil.copy(loaders[0], loader)
    return loader


_DEVICE: str | None = None


def _open() -> str | None:
    """Open tinygrad's CL device on PoCL once; its name, or None without tinygrad or PoCL."""
    global _DEVICE
    if _DEVICE is not None:
        return _DEVICE or None
    _DEVICE = ""
    loader = _pocl_loader()
    if loader is None:
        return None
    os.environ["OPENCL_PATH"] = str(loader)
    saved = {k: os.environ.get(k) for k in ("PYOPENCL_HOME", "OCL_ICD_VENDORS")}
    os.environ["PYOPENCL_HOME"] = str(loader.parent)
    os.environ["OCL_ICD_VENDORS"] = str(loader.parent / "vendors")
    try:
        from tinygrad import Device

        name = Device["CL"].device_name
    except Exception:  # no tinygrad, or it cannot open PoCL: no tinygrad column
        return None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if not name.startswith("pthread"):
        return None
    _DEVICE = "CL"
    return _DEVICE


def tinygrad_call(
    expression: Callable[..., object] | None, arrays: dict[str, np.ndarray]
) -> Callable[[], None] | None:
    """A call of a tinygrad expression (tinygrad Tensors by name -> Tensor) on PoCL, inputs
    resident; None without an expression, tinygrad or PoCL."""
    if expression is None or _open() is None:
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
