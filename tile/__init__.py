"""Tile: a tensor compiler for the Tile contraction language.

The public API (design 9) lives in `tile.runtime.api` (devices, tensors) and
`tile.runtime.invoke` (functions, invokers, invocations, `run`) and is re-exported here with the
errors of `tile.errors` and `DType`. The front end (`tile.bind.function`, `tile.bind.binder`,
...) needs no device; the device layer (`tile.runtime.api`, `tile.runtime.device`,
`tile.runtime.cache`) talks to the HAL. README.md shows the API at work and ARCHITECTURE.md
the stages.

Citations in the docstrings: `spec 9.1` is section 9.1 of the Tile language specification,
`docs/TILE_LANGUAGE.md`; `design 8.10` is section 8.10 of the original design document,
`docs/DESIGN.md` (ARCHITECTURE.md describes what is built now where they differ).
"""

from __future__ import annotations

import logging

from semtree.types import DType, TensorShape
from tile import ops  # the op library; it gives Tensor its arithmetic operators
from tile._version import __version__
from tile.errors import (
    BackendCompileError,
    DeviceError,
    DeviceMismatch,
    DeviceNotFound,
    Diagnostic,
    ExecutionError,
    TileBindError,
    TileBundleError,
    TileError,
    TileGradientError,
    TileOutOfMemory,
    TileSyntaxError,
    TileTypeError,
    TileUnsupported,
    TileWarning,
)
from tile.runtime.api import Device, Tensor, device, devices
from tile.runtime.bundles import load
from tile.runtime.compiled import CompiledFunction, spec
from tile.runtime.gradient import GradientFunction, gradient, value_and_grad
from tile.runtime.invoke import Function, Invocation, Invoker, run

logging.getLogger("tile").addHandler(logging.NullHandler())

__all__ = [
    "BackendCompileError",
    "CompiledFunction",
    "DType",
    "Device",
    "DeviceError",
    "DeviceMismatch",
    "DeviceNotFound",
    "Diagnostic",
    "ExecutionError",
    "Function",
    "GradientFunction",
    "Invocation",
    "Invoker",
    "Tensor",
    "TensorShape",
    "TileBindError",
    "TileBundleError",
    "TileError",
    "TileGradientError",
    "TileOutOfMemory",
    "TileSyntaxError",
    "TileTypeError",
    "TileUnsupported",
    "TileWarning",
    "__version__",
    "device",
    "devices",
    "gradient",
    "load",
    "ops",
    "run",
    "spec",
    "value_and_grad",
]
