"""Errors of the hardware abstraction layer: what a backend reports to the device layer.

Every HAL failure derives from `HalError`. The device layer of `tile` translates these into
the user-facing errors of `tile.errors`; backends raise only these (and `ValueError` /
`TypeError` for plain misuse of an API, such as a copy past the end of a buffer).

- `BackendCompileError`: the device compiler rejected generated code; carries the driver's
  log and the generated source so the message says where.
- `UnsupportedOnDevice`: a kernel needs something the device lacks (float64 without
  `cl_khr_fp64`, work-groups larger than one work-item on the CPU).
- `DependencyFailed`: an operation did not run because an event it depended on failed;
  `cause` is that failure, so a chain of dependents leads back to the original error.
- `DeviceUnavailableError`: a backend could not start (import error, no platform).
- `UnknownBackendError`: a registry name that no backend has.
- `ExecutionError`: an operation started and failed while running.
- `OutOfMemoryError`: an allocation that the device cannot make (more than it allows in one
  buffer, more than the host has, or the driver or the host ran out of memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

# How much of a generated source a BackendCompileError prints; the full text stays on the
# exception's `source` attribute.
_SOURCE_EXCERPT_LINES = 40


class HalError(Exception):
    """Base of every error raised by the HAL and its backends."""


class BackendCompileError(HalError):
    """The device compiler rejected the code generated for a kernel (or a whole program).

    `kernel` names the kernel (or the program when the failure is not tied to one kernel),
    `source` is the complete generated code and `log` the compiler's diagnostic output.
    """

    def __init__(self, kernel: str, source: str, log: str, message: str | None = None) -> None:
        self.kernel = kernel
        self.source = source
        self.log = log
        self.message = message or f"the device compiler rejected {kernel!r}"
        super().__init__(self._describe())

    def _describe(self) -> str:
        lines = self.source.splitlines()
        shown = lines[:_SOURCE_EXCERPT_LINES]
        numbered = "\n".join(f"{number:5d} | {text}" for number, text in enumerate(shown, 1))
        if len(lines) > len(shown):
            numbered += f"\n      ... ({len(lines) - len(shown)} more lines)"
        parts = [self.message]
        if self.log.strip():
            parts.append("compiler log:\n" + self.log.rstrip())
        if numbered:
            parts.append("generated source:\n" + numbered)
        return "\n".join(parts)


class UnsupportedOnDevice(HalError):  # noqa: N818 (the name is part of the HAL contract)
    """A kernel asks for a feature or a launch shape the device does not support."""


class DependencyFailed(HalError):  # noqa: N818 (the name is part of the HAL contract)
    """An operation was skipped because one of the events it waited for failed.

    `cause` is the failure of that event (itself possibly a `DependencyFailed`); it is also
    set as `__cause__`, so tracebacks show the whole chain. `root_cause` walks to the end.
    """

    def __init__(self, cause: BaseException, operation: str = "an operation") -> None:
        self.cause = cause
        self.operation = operation
        super().__init__(f"{operation} did not run because a dependency failed: {cause}")
        self.__cause__ = cause

    @property
    def root_cause(self) -> BaseException:
        """The first failure of the chain, the one that was not itself a dependency failure."""
        failure: BaseException = self
        while isinstance(failure, DependencyFailed):
            failure = failure.cause
        return failure


class DeviceUnavailableError(HalError):
    """A backend (or one of its devices) cannot be used in this process.

    `backend` is the registry name and `reason` a one-line explanation suitable for
    listing next to the devices that did load. `unsupported_host` marks a backend that is
    installed and lists devices whose compiler cannot generate code for this machine's
    processor (PoCL 3.0, built on LLVM 14, rejects CPUs newer than LLVM 14 knows).
    """

    def __init__(self, backend: str, reason: str, *, unsupported_host: bool = False) -> None:
        self.backend = backend
        self.reason = reason
        self.unsupported_host = unsupported_host
        super().__init__(f"backend {backend!r} is unavailable: {reason}")


class UnknownBackendError(HalError, LookupError):
    """A registry name that no backend has; the message lists the known names."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(known)
        super().__init__(f"unknown backend {name!r}; known backends: {', '.join(self.known)}")


class ExecutionError(HalError):
    """An operation started on the device and failed while running."""


class OutOfMemoryError(HalError):
    """Device `device` cannot allocate `size` bytes; `reason` says why, in a few words."""

    def __init__(self, device: str, size: int, reason: str) -> None:
        self.device = device
        self.size = size
        self.reason = reason
        super().__init__(f"{device} cannot allocate {size} bytes: {reason}")
