"""Hardware abstraction layer: the interfaces every backend implements, events, errors and
the lazy driver registry (ARCHITECTURE.md 5).

The semtree contract types (`KernelList`, `KernelInfo`, `HardwareSettings`, ...) are
re-exported lazily, on first attribute access, so importing `hal` does not import the
kernel IR.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hal import registry
from hal.errors import (
    BackendCompileError,
    DependencyFailed,
    DeviceUnavailableError,
    ExecutionError,
    HalError,
    OutOfMemoryError,
    UnknownBackendError,
    UnsupportedOnDevice,
)
from hal.events import (
    CompletedEvent,
    FailedEvent,
    SettableEvent,
    dependency_failure,
    wait_all,
)
from hal.interfaces import (
    Arena,
    Buffer,
    Compiler,
    Device,
    DeviceKind,
    DeviceSet,
    Driver,
    Event,
    Executor,
    Kernel,
    Library,
)
from hal.registry import BackendFailure, get_driver

if TYPE_CHECKING:
    from semtree.kernel import (
        Direction,
        HardwareSettings,
        KernelInfo,
        KernelKind,
        KernelList,
        KernelParam,
    )

_SEMTREE_NAMES = frozenset(
    {"Direction", "HardwareSettings", "KernelInfo", "KernelKind", "KernelList", "KernelParam"}
)


def __getattr__(name: str) -> Any:
    if name in _SEMTREE_NAMES:
        return getattr(importlib.import_module("semtree.kernel"), name)
    raise AttributeError(f"module 'hal' has no attribute {name!r}")


__all__ = [
    "Arena",
    "BackendCompileError",
    "BackendFailure",
    "Buffer",
    "Compiler",
    "CompletedEvent",
    "DependencyFailed",
    "Device",
    "DeviceKind",
    "DeviceSet",
    "DeviceUnavailableError",
    "Direction",
    "Driver",
    "Event",
    "ExecutionError",
    "Executor",
    "FailedEvent",
    "HalError",
    "HardwareSettings",
    "Kernel",
    "KernelInfo",
    "KernelKind",
    "KernelList",
    "KernelParam",
    "Library",
    "OutOfMemoryError",
    "SettableEvent",
    "UnknownBackendError",
    "UnsupportedOnDevice",
    "dependency_failure",
    "get_driver",
    "registry",
    "wait_all",
]
