"""OpenCL back end: semtree kernels as OpenCL C, built and run through pyopencl (design 6).

Place in the pipeline: the registry calls `make_driver()`, which enumerates every OpenCL
platform and device (`opencl.0`, ...). A device's compiler renders a `KernelList` as one
OpenCL C program (`render.py`, `program.py`: pure) and builds it (`compiler.py`); its executor
runs kernels, copies and fills on an in-order queue ordered by events (`executor.py`,
`queue.py`, `events.py`) over buffers (`memory.py`).

Importing this package imports neither pyopencl nor the kernel IR: `make_driver()` imports
pyopencl, and the renderer names below are loaded on first use. So a machine without OpenCL
imports everything and runs on `llvm_cpu.0`, and listing devices stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hal_opencl.device import OpenCLDriver
    from hal_opencl.program import ProgramSource, render_program
    from hal_opencl.render import OpenCLRenderer, RenderOptions

_LAZY = {
    "OpenCLRenderer": "hal_opencl.render",
    "RenderOptions": "hal_opencl.render",
    "ProgramSource": "hal_opencl.program",
    "render_program": "hal_opencl.program",
}


def make_driver() -> OpenCLDriver:
    """The registry's entry point for the "opencl" backend (imports pyopencl). The drivers'
    caches are set up first (`driver_cache.prepare`), before pyopencl or a driver loads."""
    importlib.import_module("hal_opencl.driver_cache").prepare()
    return importlib.import_module("hal_opencl.device").make_driver()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hal_opencl' has no attribute {name!r}")


__all__ = ["OpenCLRenderer", "ProgramSource", "RenderOptions", "make_driver", "render_program"]
