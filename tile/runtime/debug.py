"""Debug output of the device layer: `TILE_DEBUG`, `TILE_DUMP_DIR` and the `tile` logger.

Place in the pipeline: beside it. The device layer (`tile.runtime.api`, `tile.runtime.invoke`,
`tile.runtime.device`) asks `enabled(n)` before it builds a message, so that the default costs one
environment look-up per call and nothing else.

- Everything goes through `logging.getLogger("tile")` (children `tile.*`), which has a
  `NullHandler`, so a library user sees nothing unless they ask.
- `TILE_DEBUG=n` asks. Messages of level <= n are produced: 1 devices opened and backends
  that failed; 2 per-kernel times (profiling is switched on) and compile and program-cache
  events; 3 tiling decisions; 4 generated code (semtree and device code). Level 1 logs at
  `INFO`, the others at `DEBUG`. When the application has not configured logging (the root
  logger has no handler), a `stderr` handler is added to the `tile` logger, so that
  `TILE_DEBUG=2 python script.py` prints without any set-up.
- `TILE_DUMP_DIR=dir` writes, per compiled program, its source (`.tile`), bound program
  (`.bound.txt`) and kernel list in semtree form (`.semtree.txt`); the backends add their
  own device code there (`.ll`, `.opt.ll`, `.s` for LLVM, `.cl` for OpenCL).

The variables are read on every check, so setting `os.environ["TILE_DEBUG"]` in a running
notebook takes effect at the next call.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from hal.environment import lookup

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from hal.interfaces import Event, Library
    from semtree.kernel import HardwareSettings, KernelInfo, KernelList
    from tile.bind.program import BoundProgram

LOGGER_NAME = "tile"
DEBUG_VARIABLE = "TILE_DEBUG"
DUMP_VARIABLE = "TILE_DUMP_DIR"

DEVICES, TIMES, TILING, CODE = 1, 2, 3, 4  # what each TILE_DEBUG level adds
MAX_LEVEL = CODE

log = logging.getLogger(LOGGER_NAME)

_lock = threading.Lock()
_parsed: tuple[str, int] = ("", 0)  # (raw value, level) of the last look-up
_handler: logging.Handler | None = None
_warned_bad_value = ""


def level() -> int:
    """The current `TILE_DEBUG` level, 0 to 4 (0 when unset or not a number)."""
    global _parsed
    raw = lookup(DEBUG_VARIABLE)
    cached_raw, cached_level = _parsed
    if raw == cached_raw:
        return cached_level
    value = _parse(raw)
    _parsed = (raw, value)
    if value:
        _attach_handler()
    return value


def enabled(wanted: int) -> bool:
    """True when `TILE_DEBUG` asks for messages of level `wanted`."""
    return level() >= wanted


def _parse(raw: str) -> int:
    global _warned_bad_value
    text = raw.strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        if _warned_bad_value != raw:
            _warned_bad_value = raw
            log.warning(
                "%s=%r is not a number from 0 to %d; ignored", DEBUG_VARIABLE, raw, MAX_LEVEL
            )
        return 0
    return max(0, min(MAX_LEVEL, value))


def _attach_handler() -> None:
    """Let debug messages through the `tile` logger, and print them to stderr unless the
    application configured logging itself."""
    global _handler
    with _lock:
        if log.level == logging.NOTSET or log.level > logging.DEBUG:
            log.setLevel(logging.DEBUG)
        if _handler is not None or logging.getLogger().handlers:
            return
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        log.addHandler(_handler)


def emit(wanted: int, message: str, *args: object) -> None:
    """Log `message % args` if `TILE_DEBUG` asks for level `wanted` (INFO for level 1,
    DEBUG above)."""
    if level() >= wanted:
        log.log(logging.INFO if wanted <= DEVICES else logging.DEBUG, message, *args)


# ---- progress -------------------------------------------------------------------------------

PROGRESS_AFTER = 1.0  # seconds of work before a progress line is printed
_progress_forced = False


@contextmanager
def progress_shown() -> Iterator[None]:
    """Print progress lines inside the block whatever `TILE_DEBUG` says (the command line)."""
    global _progress_forced
    before, _progress_forced = _progress_forced, True
    try:
        yield
    finally:
        _progress_forced = before


def progress_enabled() -> bool:
    return _progress_forced or level() >= DEVICES


def progress(what: str) -> AbstractContextManager[None]:
    """Around a compile or a wait: if it lasts more than PROGRESS_AFTER seconds and progress
    is on (the command line, or `TILE_DEBUG>=1`), print `tile: <what> ...` to stderr then, and
    `tile: <what>: <seconds> s` when it ends, so long work is never silent. (Off, it is a
    context that does nothing: every read of a tensor passes here.)"""
    return _progress(what) if progress_enabled() else _QUIET


_QUIET = nullcontext()


@contextmanager
def _progress(what: str) -> Iterator[None]:
    start = time.perf_counter()
    timer = threading.Timer(PROGRESS_AFTER, _progress_line, (f"tile: {what} ...",))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        elapsed = time.perf_counter() - start
        if elapsed >= PROGRESS_AFTER:
            _progress_line(f"tile: {what}: {elapsed:.1f} s")


def _progress_line(text: str) -> None:
    with suppress(OSError, ValueError):  # a closed stderr must not break the work
        print(text, file=sys.stderr, flush=True)


# ---- TILE_DUMP_DIR --------------------------------------------------------------------------


def dump_directory() -> Path | None:
    """The directory of `TILE_DUMP_DIR`, or None when it is unset."""
    raw = os.environ.get(DUMP_VARIABLE, "").strip()
    return Path(raw) if raw else None


def file_stem(*parts: str) -> str:
    """A file name made of `parts`, with anything but letters, digits, `_`, `-` and `.`
    replaced."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", ".".join(part for part in parts if part)) or "tile"


def dump(stem: str, files: dict[str, str]) -> list[Path]:
    """Write `{suffix: text}` as `<TILE_DUMP_DIR>/<stem><suffix>`; nothing when the variable
    is unset. A failure to write is logged, never raised: dumps must not break a run."""
    directory = dump_directory()
    if directory is None:
        return []
    written = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for suffix, text in files.items():
            path = directory / f"{stem}{suffix}"
            path.write_text(text if text.endswith("\n") else text + "\n")
            written.append(path)
    except OSError as error:
        log.warning("cannot write to %s=%s: %s", DUMP_VARIABLE, directory, error)
    if written:
        emit(TIMES, "wrote %s", ", ".join(str(path) for path in written))
    return written


# ---- what the device layer reports ----------------------------------------------------------

_reported_backends: set[str] = set()


def capabilities(settings: HardwareSettings) -> str:
    """A one-line summary of a device's settings (as `python -m tile devices` prints it):
    SIMD width in float32 lanes, work-group size, local memory if the generator stages
    operands there, the element types beyond the integers, fast math."""
    parts = [f"simd {settings.vec_size}", f"work-group {settings.max_work_group_size}"]
    if not settings.use_global:
        parts.append(f"local memory {settings.max_mem // 1024} KiB")
    types = ["f32"]
    if settings.fp64:
        types.append("f64")
    if settings.native_fp16:
        types.append("f16")
    parts.append("+".join(types))
    if settings.fast_math:
        parts.append("fast math")
    return ", ".join(parts)


def device_opened(device_id: str, kind: str, description: str, settings: HardwareSettings) -> None:
    """Level 1: a device was opened (its API object made, once per process)."""
    if level() >= DEVICES:
        emit(
            DEVICES, "opened %s (%s): %s; %s", device_id, kind, description, capabilities(settings)
        )


def backend_unavailable(backend: str, reason: str) -> None:
    """Level 1: a backend failed to load (reported once per backend and process)."""
    if level() >= DEVICES and backend not in _reported_backends:
        _reported_backends.add(backend)
        emit(DEVICES, "backend %s is unavailable: %s", backend, reason)


def program_compiled(
    device_id: str,
    label: str,
    stem: str,
    bound: BoundProgram,
    kernel_list: KernelList,
    library: Library,
    generate_seconds: float,
    total_seconds: float,
) -> None:
    """Levels 2 to 4 and TILE_DUMP_DIR, once a program is built: the compile event with its
    times, every kernel's tiling decision, the kernel list and the device code."""
    current = level()
    if current >= TIMES:
        count = len(kernel_list.kernels)
        emit(
            TIMES,
            "compiled %s for %s: %d kernel%s in %.1f ms (generate %.1f ms, build %.1f ms)",
            label,
            device_id,
            count,
            "" if count == 1 else "s",
            1000 * total_seconds,
            1000 * generate_seconds,
            1000 * (total_seconds - generate_seconds),
        )
    if current >= TILING:
        for kernel in kernel_list.kernels:
            emit(TILING, "%s", tiling_decision(kernel))
    if current >= CODE:
        emit(CODE, "kernel list of %s for %s:\n%s", label, device_id, kernel_list)
        for text in distinct_sources(library, len(kernel_list.kernels)):
            emit(CODE, "device code of %s on %s:\n%s", label, device_id, text)
    if dump_directory() is not None:
        dump(
            stem,
            {".tile": bound.source, ".bound.txt": str(bound), ".semtree.txt": str(kernel_list)},
        )


def tiling_decision(kernel: KernelInfo) -> str:
    """One line: what the generator chose for `kernel` (tile per output dimension, grid)."""
    outputs = [param for param in kernel.params if param.direction.value == "out"]
    shape = f"{outputs[0].dtype.short}{list(outputs[0].shape)}" if outputs else "-"
    tile = "x".join(str(size) for size in kernel.tile) or "-"
    return (
        f"tiling {kernel.name} ({kernel.kind.value}, writes {shape}): tile {tile}, "
        f"global {kernel.global_size}, local {kernel.local_size}"
    )


def distinct_sources(library: Library, count: int) -> list[str]:
    """The device code of kernels 0 to count-1 of `library`, each distinct text once."""
    return list(dict.fromkeys(library.source(index) for index in range(count)))


def watch_launches(
    device_id: str, kernel_list: KernelList, launches: Sequence[tuple[str, Event]]
) -> None:
    """Level 2: log every launch's time (and rate) once its event completes."""
    infos = {kernel.name: kernel for kernel in kernel_list.kernels}
    for name, event in launches:
        info = infos.get(name)
        event.add_done_callback(
            lambda done, name=name, info=info: _launch_done(device_id, name, info, done)
        )


def _launch_done(device_id: str, name: str, info: KernelInfo | None, event: Event) -> None:
    # Runs on a backend thread: never raise into it.
    try:
        failure = event.exception()
        if failure is not None:
            emit(TIMES, "kernel %s on %s failed: %s", name, device_id, failure)
            return
        nanoseconds = event.duration_ns()
        if nanoseconds is None:
            emit(TIMES, "kernel %s on %s: done (no time recorded)", name, device_id)
            return
        rates = ""
        if info is not None and nanoseconds > 0:
            rates = f", {info.flops / nanoseconds:.2f} GFLOP/s, {info.bytes / nanoseconds:.2f} GB/s"
        emit(TIMES, "kernel %s on %s: %.3f ms%s", name, device_id, nanoseconds / 1e6, rates)
    except Exception:  # a broken log handler must not break a device thread
        log.exception("reporting kernel %s", name)
