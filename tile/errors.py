"""Errors of the Tile compiler (spec 11): every diagnostic has a code, a position and a caret.

A `TileError` carries one or more `Diagnostic`s, the first of which gives the error its
`code`, `line`, `column` and `message`; `str()` shows all of them, each with its source line
and a caret. Front-end passes collect diagnostics in a `DiagnosticSink` so that every
independent error of a program is reported at once (at least one per statement).

The device layer (design 8.10) adds `DeviceError` and its subclasses: failures that
belong to a device, a compiled program or a run rather than to a place in the source. They
have a code too (`E-DEVICE`, `E-UNSUPPORTED`, `E-COMPILE`, `E-EXEC`, `E-MEMORY`) and line and
column 0 ("no position"); HAL failures reach users as these, with the HAL exception chained.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from tile.lang.syntax import Span

SYNTAX_CODES = frozenset({"E-LEX", "E-SYNTAX", "E-LIMIT"})
BIND_CODES = frozenset({"E-BIND"})


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One error or warning: code (`E-SHAPE`, `W-PREC`), message, 1-based position."""

    code: str
    message: str
    line: int
    column: int
    source_line: str = ""

    def __str__(self) -> str:
        kind = "warning" if self.code.startswith("W-") else "error"
        head = f"{kind}[{self.code}] {self.line}:{self.column}: {self.message}"
        if not self.source_line:
            return head
        text = self.source_line.expandtabs(4)
        # The caret column counts characters of the raw line; tabs widen it.
        caret = len(self.source_line[: max(self.column - 1, 0)].expandtabs(4))
        gutter = " " * len(str(self.line))
        return f"{head}\n {self.line} | {text}\n {gutter} | {' ' * caret}^"


class TileWarning(UserWarning):
    """A warning about a Tile program (`W-PREC`, `W-DEAD`, ...), issued through Python's
    `warnings` when a `Function` is built; its text is the diagnostic with its caret, and
    `diagnostic` is the `Diagnostic` itself (also listed on `Function.warnings`)."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(str(diagnostic))
        self.diagnostic = diagnostic


def warn(diagnostic: Diagnostic) -> None:
    """Issue `diagnostic` as a TileWarning attributed to the first caller outside `tile`
    (so Python's filters show each warning once per place in the user's code)."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(TileWarning(diagnostic), stacklevel=level)


def source_line(source: str, line: int) -> str:
    # Only line feeds end lines, as for positions (spec 2.1); `splitlines` would also split at
    # a lone carriage return, a form feed and others, and show the wrong line.
    lines = source.split("\n")
    return lines[line - 1].removesuffix("\r") if 1 <= line <= len(lines) else ""


def diagnostic(code: str, message: str, span: Span | None, source: str) -> Diagnostic:
    """A diagnostic at `span` (line 1, column 1 when the position is unknown)."""
    line, column = (span.line, span.column) if span is not None else (1, 1)
    return Diagnostic(code, message, line, column, source_line(source, line))


class TileError(Exception):
    """Base of every error the compiler reports about a user's program or request."""

    def __init__(self, diagnostics: Diagnostic | Iterable[Diagnostic]) -> None:
        items = (diagnostics,) if isinstance(diagnostics, Diagnostic) else tuple(diagnostics)
        if not items:
            raise ValueError("a TileError needs at least one diagnostic")
        self.diagnostics: tuple[Diagnostic, ...] = items
        super().__init__(str(self))

    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    @property
    def message(self) -> str:
        return self.diagnostics[0].message

    @property
    def line(self) -> int:
        return self.diagnostics[0].line

    @property
    def column(self) -> int:
        return self.diagnostics[0].column

    def __str__(self) -> str:
        text = "\n".join(str(d) for d in self.diagnostics)
        if len(self.diagnostics) > 1:
            text += f"\n({len(self.diagnostics)} errors)"
        return text


class TileSyntaxError(TileError):
    """E-LEX and E-SYNTAX: the text is not a Tile function."""


class TileTypeError(TileError):
    """Semantic errors: names, shapes, types, constants, index variables, contractions."""


class TileBindError(TileTypeError):
    """E-BIND: the inputs given to `Function.bind` do not fit the function's header."""


class TileGradientError(TileError):
    """E-GRAD: a gradient was asked of something that is not an output, with respect to
    something that is not an input, or through a statement with no gradient rule."""


def make_error(diagnostics: Iterable[Diagnostic]) -> TileError:
    """The error class that fits the first diagnostic's code."""
    items = tuple(diagnostics)
    code = items[0].code
    if code in SYNTAX_CODES:
        return TileSyntaxError(items)
    if code in BIND_CODES:
        return TileBindError(items)
    return TileTypeError(items)


class DiagnosticSink:
    """Collects the diagnostics of one pass over one source text."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[Diagnostic] = []
        self.warnings: list[Diagnostic] = []

    def error(self, code: str, message: str, span: Span | None) -> None:
        self.errors.append(diagnostic(code, message, span, self.source))

    def warn(self, code: str, message: str, span: Span | None) -> None:
        self.warnings.append(diagnostic(code, message, span, self.source))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            ordered = sorted(self.errors, key=lambda d: (d.line, d.column))
            raise make_error(ordered)


# ---- device layer (design 8.10) -------------------------------------------------------


class DeviceError(TileError):
    """Base of the device layer's errors. Built from a plain message (no source position,
    line and column 0) or, where the failure has one, from diagnostics."""

    default_code = "E-DEVICE"

    def __init__(self, message: str | Diagnostic | Iterable[Diagnostic]) -> None:
        if isinstance(message, str):
            message = Diagnostic(self.default_code, message, 0, 0)
        super().__init__(message)

    def __str__(self) -> str:
        first = self.diagnostics[0]
        if len(self.diagnostics) == 1 and first.line == 0:
            return f"error[{first.code}]: {first.message}"
        return super().__str__()


class TileUnsupported(DeviceError):  # noqa: N818 (the name is part of the public API)
    """The program needs something this version or this device does not offer (float64
    without `cl_khr_fp64`, a language feature the generator does not handle yet)."""

    default_code = "E-UNSUPPORTED"


class TileBundleError(DeviceError):
    """A file given to `tile.load` is not a sound bundle (not one, damaged, another format)."""

    default_code = "E-BUNDLE"


class BackendCompileError(DeviceError):
    """The device compiler rejected the generated code. `kernel`, `source` (the complete
    generated code) and `log` (the compiler's output) come from the HAL's error."""

    default_code = "E-COMPILE"

    def __init__(self, message: str, *, kernel: str = "", source: str = "", log: str = "") -> None:
        self.kernel = kernel
        self.source = source
        self.log = log
        super().__init__(message)


class DeviceNotFound(DeviceError, LookupError):  # noqa: N818 (the name is part of the public API)
    """No device has the requested id or prefix; the message lists the available ids."""

    def __init__(self, message: str, available: Iterable[str] = ()) -> None:
        self.available = tuple(available)
        super().__init__(message)


class DeviceMismatch(DeviceError, ValueError):  # noqa: N818 (the name is part of the public API)
    """Tensors of one call live on different devices, or not on the device asked for."""


class ExecutionError(DeviceError):
    """A kernel, copy or host transfer failed while running. The HAL failure is chained as
    `__cause__`; `root_cause` is the first failure of a chain of dependencies."""

    default_code = "E-EXEC"

    @property
    def root_cause(self) -> BaseException | None:
        failure = self.__cause__
        while failure is not None and getattr(failure, "cause", None) is not None:
            failure = failure.cause  # type: ignore[attr-defined] (hal.DependencyFailed)
        return failure


class TileOutOfMemory(DeviceError, MemoryError):  # noqa: N818 (the name is part of the public API)
    """A tensor that cannot exist: more elements than generated code can index (2^31 - 1), or
    more bytes than its device can allocate (host or device memory). Names the tensor (when
    it has a name), its shape, element type and bytes; `device` is None for the element limit,
    which holds on every device. The HAL failure, if any, is chained."""

    default_code = "E-MEMORY"

    def __init__(
        self,
        reason: str,
        *,
        tensor: str | None,
        shape: tuple[int, ...],
        dtype: str,
        nbytes: int,
        device: str | None = None,
    ) -> None:
        self.tensor = tensor
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.device = device
        named = f"tensor '{tensor}'" if tensor else "a tensor"
        where = f" on {device}" if device else ""
        super().__init__(
            f"cannot allocate {named} {dtype}{list(shape)} ({_size(nbytes)}){where}: {reason}"
        )


def _size(nbytes: int) -> str:
    """`17179869184 bytes, 16.0 GiB`: exact, and readable from 1 KiB up."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    exponent = min((nbytes.bit_length() - 1) // 10, 6)
    return f"{nbytes} bytes, {nbytes / 1024**exponent:.1f} {'KMGTPE'[exponent - 1]}iB"
