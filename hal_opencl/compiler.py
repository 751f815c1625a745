"""Build and caching of OpenCL programs: KernelList -> OpenCLLibrary (design 6.3).

Place in the pipeline: `OpenCLCompiler.build(kernel_list, device)` checks what the device can
run (work-group sizes, local memory, float64), renders one program for the whole list
(`program.render_program`) and builds it with `cl.Program(context, source).build(options)`.
The executor then prepares kernels from the resulting `OpenCLLibrary`.

- Build options: `-cl-mad-enable` (left out under `settings.disable_mad`), plus
  `-cl-fast-relaxed-math` under `settings.fast_math`.
- Caches, fast to slow: the program cache in `tile`; the compiler's in-process map
  `(device id, sha256(source), options) -> BuiltProgram`, which holds a build only while a
  library uses it (identical kernels of different Tile programs share one build and its
  kernel objects; once `tile` evicts the last program using it, its device code is freed,
  issue 10); on disk, tile's store of checked driver caches and binaries (`driver_cache`).
- A program's kernel objects are created once, with `cl.Kernel(program, name)`; each has a
  lock, because a `cl.Kernel` holds its arguments between `set_args` and the enqueue.
  pyopencl generates a Python module per kernel object for `set_args` (with its caches off,
  as `driver_cache` sets them) and files the module's text in `linecache` under a new name
  each time, never removed: about 4 KB per kernel, for the life of the process (issue 10).
  `forget_invoker_lines` drops those entries once the kernels exist; only the source lines
  of those generated frames in a traceback are lost.
- On PoCL the compiler renews the device's context every `RENEW_EVERY` builds
  (`queue.DeviceQueue.renew`): PoCL keeps what every compile leaves in an LLVM context that
  it frees only with its last OpenCL context. Built programs follow the renewal: each is
  built again in the new context when a kernel of it is next launched.
- A failed build raises `BackendCompileError` with the driver's log and the generated source.
- `TILE_DUMP_DIR`: every program's source is written to `<dir>/<sha256 of source>.cl`.
"""

from __future__ import annotations

import hashlib
import json
import linecache
import logging
import os
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pyopencl as cl

from hal.errors import BackendCompileError, HalError, UnsupportedOnDevice
from hal.interfaces import Compiler, Library
from hal_opencl import driver_cache
from hal_opencl.build import build_log
from hal_opencl.program import ProgramSource, render_program
from hal_opencl.render import RenderOptions, hoisted_locals

if TYPE_CHECKING:
    from collections.abc import Callable

    from hal_opencl.device import OpenCLDevice
    from hal_opencl.queue import DeviceQueue
    from semtree.kernel import KernelList

    Renderer = Callable[[KernelList, RenderOptions], ProgramSource]


_EXPORT_FORMAT = 1
_log = logging.getLogger("hal_opencl.compiler")

# On a driver that keeps what every compile leaves until its last context is released (PoCL:
# `DeviceQueue.renew`), the context is renewed before a build once this many programs were
# built since the last renewal. A renewal parks every live buffer on the host and builds
# again each live program when next used (from the driver's cache: ~25 ms on PoCL).
RENEW_EVERY = 200


@dataclass(eq=False)
class BuiltProgram:
    """A built program with one kernel object (and its lock) per kernel.

    Once `renewable`, it lets go of its program when its queue renews the context and builds
    it again in the new one when a kernel of it is next asked for (`DeviceQueue.renew`)."""

    program: cl.Program | None
    kernels: dict[str, cl.Kernel]
    locks: dict[str, threading.Lock]
    seconds: float
    log: str = field(repr=False)
    park_order: ClassVar[int] = 2
    is_mapped: ClassVar[bool] = False
    _queue: DeviceQueue | None = field(default=None, repr=False)
    _generation: int = field(default=0, repr=False)
    _remake: Callable[[cl.Context], BuiltProgram] | None = field(default=None, repr=False)

    def renewable(
        self, queue: DeviceQueue, generation: int, remake: Callable[[cl.Context], BuiltProgram]
    ) -> None:
        """Follow `queue`'s renewals (built in the context of `generation`), building again
        with `remake(context)`."""
        self._queue, self._generation, self._remake = queue, generation, remake
        queue.hold(self)

    def park(self) -> None:
        self.program, self.kernels = None, {}

    def unpark(self, context: cl.Context) -> None:
        """Nothing yet: the program is built again when it is next used."""

    def kernel(self, name: str) -> tuple[cl.Kernel, threading.Lock]:
        """The kernel object `name` (of the queue's current context: call under its guard)
        and the lock that guards its arguments."""
        queue = self._queue
        if queue is not None and self._generation != queue.generation:
            assert self._remake is not None
            again = self._remake(queue.context)
            self.program, self.kernels = again.program, again.kernels
            self._generation = queue.generation
        return self.kernels[name], self.locks[name]


def build_program(
    context: cl.Context,
    cl_device: cl.Device,
    source: str,
    options: tuple[str, ...],
    kernel_names: tuple[str, ...],
    *,
    name: str = "program",
    device: str = "the OpenCL device",
) -> BuiltProgram:
    """Build `source` for one device and create its kernel objects; raise
    BackendCompileError (log and source attached) when the driver rejects it."""
    start = time.perf_counter()
    program = cl.Program(context, source)
    with warnings.catch_warnings():  # the log is kept on the result instead
        warnings.simplefilter("ignore", cl.CompilerWarning)
        try:
            program = driver_cache.build(program, context, cl_device, source, options)
        except cl.Error as error:
            log = build_log(program, cl_device).strip() or str(error)
            message = f"the OpenCL compiler of {device} rejected {name!r}"
            raise BackendCompileError(name, source, log, message) from error
    kernels = {kernel: cl.Kernel(program, kernel) for kernel in kernel_names}
    forget_invoker_lines()
    locks = {kernel: threading.Lock() for kernel in kernel_names}
    seconds = time.perf_counter() - start
    return BuiltProgram(program, kernels, locks, seconds, build_log(program, cl_device))


INVOKER_LINES = "<generated: 'pyopencl invoker for "  # how pyopencl names those entries


def forget_invoker_lines() -> None:
    """Drop the `linecache` entries of pyopencl's generated `set_args` modules (module
    docstring)."""
    for key in [key for key in list(linecache.cache) if str(key).startswith(INVOKER_LINES)]:
        linecache.cache.pop(key, None)


class OpenCLLibrary(Library):
    """The kernels of one KernelList on one OpenCL device (`built` is None when every kernel
    is a ZERO or COPY kernel, which need no code)."""

    def __init__(
        self,
        kernel_list: KernelList,
        program_source: ProgramSource,
        built: BuiltProgram | None,
        options: tuple[str, ...],
    ) -> None:
        self.kernel_list = kernel_list
        self.program_source = program_source
        self.built = built
        self.options = options

    def source(self, index: int) -> str:
        info = self.kernel_list.kernels[index]
        text = self.program_source.kernel_source(index)
        if text is None:
            return f"// {info.name}: {info.kind.value} kernel, run as a buffer fill or copy\n"
        return text

    def entry_point(self, index: int) -> str:
        """The name of kernel `index`'s `__kernel` function; HalError when it has none."""
        name = self.program_source.entry_points[index]
        if name is None or self.built is None:
            info = self.kernel_list.kernels[index]
            raise HalError(f"kernel {info.name!r} has no body and therefore no entry point")
        return name

    def entry(self, index: int) -> tuple[cl.Kernel, threading.Lock]:
        """The kernel object of kernel `index` and the lock that guards its arguments (call
        under the device queue's guard: the object is of its current context)."""
        name = self.entry_point(index)
        assert self.built is not None
        return self.built.kernel(name)

    @property
    def build_log(self) -> str:
        return "" if self.built is None else self.built.log


def _program_name(kernel_list: KernelList) -> str:
    names = [info.name for info in kernel_list.kernels]
    if not names:
        return "empty program"
    return names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"


def check_launches(kernel_list: KernelList, device: OpenCLDevice) -> None:
    """Raise UnsupportedOnDevice for work-groups or local memory the device cannot give."""
    capabilities = device.capabilities
    for info in kernel_list.kernels:
        local = tuple(info.local_size)
        count = local[0] * local[1] * local[2]
        too_wide = any(
            size > limit
            for size, limit in zip(local, capabilities.max_work_item_sizes, strict=True)
        )
        if count > capabilities.max_work_group_size or too_wide:
            raise UnsupportedOnDevice(
                f"kernel {info.name!r} has work-groups of {local}; {device.id} allows at most "
                f"{capabilities.max_work_group_size} work-items, "
                f"{tuple(capabilities.max_work_item_sizes)} per dimension"
            )
        if info.body is None:
            continue
        local_bytes = 0
        for declare in hoisted_locals(info.body):
            type_ = declare.type
            assert type_.dtype is not None
            lanes = 4 if type_.vec_width == 3 else type_.vec_width
            local_bytes += max(1, type_.array) * lanes * type_.dtype.itemsize
        if local_bytes > capabilities.local_memory:
            raise UnsupportedOnDevice(
                f"kernel {info.name!r} needs {local_bytes} bytes of local memory; {device.id} "
                f"has {capabilities.local_memory}"
            )


class OpenCLCompiler(Compiler):
    """KernelList -> OpenCLLibrary, sharing the builds that libraries still use."""

    def __init__(self, renderer: Renderer | None = None) -> None:
        self.renderer: Renderer = renderer or render_program
        self.builds = 0  # programs actually built (cache misses)
        self._renewed = 0  # `builds` when the device's context was last renewed
        self._cache: weakref.WeakValueDictionary[tuple[str, str, tuple[str, ...]], BuiltProgram]
        self._cache = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def build(self, kernel_list: KernelList, device: OpenCLDevice) -> OpenCLLibrary:  # type: ignore[override]
        if not hasattr(device, "queue") or not hasattr(device, "capabilities"):
            raise TypeError(f"an OpenCL compiler cannot build for {device!r}")
        check_launches(kernel_list, device)
        settings = device.settings
        render_options = RenderOptions.for_device(settings, f"{device.id} ({device.description})")
        program_source = self.renderer(kernel_list, render_options)
        options = ("-cl-mad-enable",) if not settings.disable_mad else ()
        if settings.fast_math:
            options += ("-cl-fast-relaxed-math",)
        return self._library(kernel_list, device, program_source, options)

    def export(self, library: Library) -> bytes:
        """The program's OpenCL C text, where each kernel is in it, and the build options
        (the driver's binary stays in the driver caches of `driver_cache`)."""
        if not isinstance(library, OpenCLLibrary):
            raise TypeError(f"an OpenCL compiler cannot export {library!r}")
        source = library.program_source
        exported = {
            "format": _EXPORT_FORMAT,
            "text": source.text,
            "entry_points": list(source.entry_points),
            "functions": source.functions,
            "options": list(library.options),
        }
        return json.dumps(exported, sort_keys=True).encode()

    def restore(self, kernel_list: KernelList, code: bytes, device: OpenCLDevice) -> OpenCLLibrary:  # type: ignore[override]
        """Build an exported program (no rendering; the driver's caches usually hold it)."""
        if not hasattr(device, "queue") or not hasattr(device, "capabilities"):
            raise UnsupportedOnDevice(f"OpenCL code cannot run on {device!r}")
        try:
            exported = json.loads(code)
            if exported["format"] != _EXPORT_FORMAT:
                raise HalError(f"OpenCL export format {exported['format']}, not {_EXPORT_FORMAT}")
            entry_points = tuple(exported["entry_points"])
            program_source = ProgramSource(exported["text"], entry_points, exported["functions"])
            options = tuple(exported["options"])
        except (ValueError, KeyError, TypeError) as error:
            raise HalError(f"not OpenCL code exported by tile: {error}") from error
        if len(entry_points) != len(kernel_list.kernels):
            raise HalError("the exported OpenCL program does not match its kernel list")
        check_launches(kernel_list, device)
        if "cl_khr_fp64" in program_source.text and not device.capabilities.fp64:
            raise UnsupportedOnDevice(f"the program uses float64, which {device.id} lacks")
        return self._library(kernel_list, device, program_source, options)

    def _library(
        self,
        kernel_list: KernelList,
        device: OpenCLDevice,
        program_source: ProgramSource,
        options: tuple[str, ...],
    ) -> OpenCLLibrary:
        names = tuple(dict.fromkeys(n for n in program_source.entry_points if n is not None))
        if not names:
            return OpenCLLibrary(kernel_list, program_source, None, options)
        digest = hashlib.sha256(program_source.text.encode()).hexdigest()
        _dump(program_source.text, digest)
        key = (device.id, digest, options)
        with self._lock:
            built = self._cache.get(key)
            if built is None:
                queue = device.queue
                due = self.builds - self._renewed >= RENEW_EVERY
                if due and getattr(device, "renews_context", False):
                    self._renew(queue)

                def remake(context: cl.Context) -> BuiltProgram:
                    return build_program(
                        context,
                        device.cl_device,
                        program_source.text,
                        options,
                        names,
                        name=_program_name(kernel_list),
                        device=f"{device.id} ({device.description})",
                    )

                with queue.guard:
                    context, generation = queue.context, queue.generation
                built = remake(context)  # a renewal meanwhile: built again when first used
                built.renewable(queue, generation, remake)
                self.builds += 1
                self._cache[key] = built
        return OpenCLLibrary(kernel_list, program_source, built, options)

    def _renew(self, queue: DeviceQueue) -> None:
        """Renew the device's context (`RENEW_EVERY`); a renewal that fails (the host short
        of memory to park the buffers in) leaves everything as it was, and is logged."""
        try:
            renewed = queue.renew()
        except Exception:
            _log.warning("renewing the OpenCL context of %s failed", queue.name, exc_info=True)
            renewed = False
        if renewed:
            self._renewed = self.builds

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


def _dump(source: str, digest: str) -> None:
    directory = os.environ.get("TILE_DUMP_DIR")
    if directory:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / f"{digest[:16]}.cl").write_text(source)
