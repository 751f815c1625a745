"""The driver registry: finds backends by name, lazily, and lists the devices that loaded.

Place in the pipeline (ARCHITECTURE.md 5.4): the device layer of `tile` asks the registry
for devices; the registry imports a backend package only when asked (`importlib`, inside
`try`) and calls its `make_driver()`. A backend that fails to import or to start is recorded
with its reason and never stops the others, so a broken OpenCL installation cannot break
`llvm_cpu.0`. Drivers and failures are cached for the life of the process under one lock.

`TILE_DISABLE_OPENCL=1` (or `true`, `yes`, `on`) skips the OpenCL backend without importing it.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hal.environment import flag
from hal.errors import DeviceUnavailableError, UnknownBackendError

if TYPE_CHECKING:
    from hal.interfaces import Device, Driver

# Registry name -> backend package. Insertion order is enumeration order: llvm_cpu.0 first.
_BACKENDS: dict[str, str] = {"llvm": "hal_llvm", "opencl": "hal_opencl"}

# Backends that an environment switch (hal.environment.flag: 1, true, yes, on) turns off.
_DISABLE_VARIABLES: dict[str, str] = {"opencl": "TILE_DISABLE_OPENCL"}

_lock = threading.RLock()
_drivers: dict[str, Driver] = {}
_failures: dict[str, DeviceUnavailableError] = {}


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """Why one backend contributed no devices."""

    backend: str  # registry name
    reason: str  # one line, for listings next to the devices that did load
    error: DeviceUnavailableError = field(compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.backend}: {self.reason}"


def backend_names() -> tuple[str, ...]:
    """The registry names of every known backend, in enumeration order."""
    return tuple(_BACKENDS)


def get_driver(name: str) -> Driver:
    """The driver of backend `name`, imported and started on first use and then cached.

    Raises UnknownBackendError for a name no backend has, and DeviceUnavailableError
    (chaining the original exception) when the backend cannot be imported or started.
    A failure is cached too: the same error is raised again without a second attempt.
    """
    if name not in _BACKENDS:
        raise UnknownBackendError(name, _BACKENDS)
    with _lock:
        if name in _drivers:
            return _drivers[name]
        if name in _failures:
            raise _failures[name]
        try:
            driver = _load(name, _BACKENDS[name])
        except DeviceUnavailableError as error:
            _failures[name] = error
            raise
        _drivers[name] = driver
        return driver


def _load(name: str, module_name: str) -> Driver:
    variable = _DISABLE_VARIABLES.get(name)
    if variable is not None and flag(variable):
        raise DeviceUnavailableError(name, f"disabled by {variable}={os.environ[variable]}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise DeviceUnavailableError(
            name, f"cannot import {module_name}: {type(error).__name__}: {error}"
        ) from error
    make_driver = getattr(module, "make_driver", None)
    if not callable(make_driver):
        raise DeviceUnavailableError(
            name, f"backend package {module_name} has no make_driver() (not implemented yet)"
        )
    try:
        return make_driver()
    except DeviceUnavailableError as error:
        if error.backend != name:
            raise DeviceUnavailableError(
                name, error.reason, unsupported_host=error.unsupported_host
            ) from error
        raise
    except Exception as error:
        raise DeviceUnavailableError(
            name, f"{module_name}.make_driver() failed: {type(error).__name__}: {error}"
        ) from error


# Named as in ARCHITECTURE.md 5.4; it shadows the builtin, which this module does not use.
def enumerate() -> tuple[list[Device], list[BackendFailure]]:
    """Every device of every backend that loads, in order (`llvm_cpu.0` first), and one
    failure record per backend that did not. Never raises for a broken backend."""
    devices: list[Device] = []
    failures: list[BackendFailure] = []
    with _lock:
        for name in _BACKENDS:
            try:
                driver = get_driver(name)
                devices.extend(driver.devices())
            except DeviceUnavailableError as error:
                failures.append(BackendFailure(name, error.reason, error))
            except Exception as error:
                # A driver that loaded but fails to list its devices is reported, not raised.
                wrapped = DeviceUnavailableError(
                    name, f"listing devices failed: {type(error).__name__}: {error}"
                )
                wrapped.__cause__ = error
                failures.append(BackendFailure(name, wrapped.reason, wrapped))
    return devices, failures


def failures() -> list[BackendFailure]:
    """The failures recorded so far (only backends that were asked for)."""
    with _lock:
        return [BackendFailure(name, error.reason, error) for name, error in _failures.items()]


def find_device(device_id: str) -> Device:
    """The device with id `device_id` (e.g. "llvm_cpu.0"). Raises DeviceUnavailableError,
    listing the devices and the backend failures, when no loaded device has that id."""
    devices, problems = enumerate()
    for device in devices:
        if device.id == device_id:
            return device
    known = ", ".join(device.id for device in devices) or "none"
    detail = "; ".join(str(problem) for problem in problems)
    reason = f"no device {device_id!r} (devices: {known})"
    raise DeviceUnavailableError("registry", f"{reason}; {detail}" if detail else reason)


def reset() -> None:
    """Forget cached drivers and failures, so the next request loads the backends again
    (for tests, and for retrying after the environment changed). Devices already handed
    out stay usable."""
    with _lock:
        _drivers.clear()
        _failures.clear()
