"""The `llvm_cpu.0` device: driver, executor and prepared kernels of the LLVM backend (7).

Place in the pipeline: the registry calls `make_driver()`; the driver exposes one device
for the host CPU. Its compiler (`compiler.py`) turns a KernelList into an `LLVMLibrary`;
its executor allocates `CpuBuffer`s (`memory.py`), prepares kernels and queues copies and
fills; its runtime (`runtime.py`) runs every launch in submission order on the thread pool.

`LLVMKernel.run` does no per-work-group Python: it checks the buffers, builds the ctypes
parameter array (or reuses its last launch's, for the same buffers), and queues one job.
ZERO and COPY kernels (no body) are a `memset` / `memmove` job.
"""

from __future__ import annotations

import ctypes
import importlib
import math
from typing import TYPE_CHECKING

from hal.errors import HalError
from hal.interfaces import Device, DeviceKind, DeviceSet, Driver, Executor, Kernel
from hal_llvm.compiler import LLVMCompiler, LLVMLibrary, host, llvm_version
from hal_llvm.memory import ALIGNMENT, CpuArena, CpuBuffer
from hal_llvm.pool import NativePool, available
from hal_llvm.runtime import SLICES_PER_THREAD, CpuRuntime, estimated_seconds
from hal_llvm.slices import group_entry, group_table, slice_runner
from hal_llvm.split import native_address

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hal.interfaces import Buffer, Event, Library
    from hal_llvm.compiler import Renderer
    from hal_llvm.host import HostCpu
    from semtree.kernel import HardwareSettings, KernelParam

    GroupGrid = tuple[int, int, int, int]  # (entry address, params address, groups, slices)


def param_bytes(param: KernelParam) -> int:
    """Bytes a kernel may touch through `param`: the whole tensor."""
    return math.prod(param.shape) * param.dtype.itemsize


def _as_cpu_buffer(buffer: Buffer, role: str) -> CpuBuffer:
    if not isinstance(buffer, CpuBuffer):
        raise TypeError(f"{role} must be a buffer of an llvm_cpu device, not {buffer!r}")
    return buffer


def _grid_args(
    array: ctypes.Array[ctypes.c_void_p], groups: int
) -> tuple[ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]:
    """A grid entry point's arguments for all of `groups` over parameter array `array`."""
    return ctypes.c_void_p(ctypes.addressof(array)), ctypes.c_int64(0), ctypes.c_int64(groups)


class LLVMKernel(Kernel):
    """One prepared kernel of an LLVMLibrary: its entry point and launch parameters."""

    def __init__(self, runtime: CpuRuntime, library: LLVMLibrary, index: int) -> None:
        info = library.kernel_list.kernels[index]
        self.info = info
        self.library = library
        self._runtime = runtime
        self._sizes = tuple(param_bytes(param) for param in info.params)
        self._groups = math.prod(info.global_size)
        self._label = f"kernel {info.name}"
        # The buffer addresses of the last launch and their parameter array (`_bind`).
        self._binding: tuple[tuple[int, ...], ctypes.Array[ctypes.c_void_p]] | None = None
        # The parameter array of the launches that run at once (`CpuRuntime.launch_now`
        # fills it while it has the queue to itself, so they never share it).
        self._inline_array = (ctypes.c_void_p * max(1, len(info.params)))()
        self._inline_args = _grid_args(self._inline_array, self._groups)
        self._entry: Callable[[int, int, int], None] | None = None
        # Compared by value: the backend reads KernelKind without importing semtree.kernel.
        self._trivial = info.kind.value if info.body is None else None
        if self._trivial is None:
            self._entry = library.grid_entry(index)
        elif self._trivial not in ("zero", "copy"):
            raise HalError(f"kernel {info.name!r} of kind {self._trivial!r} has no body")
        # The entry point's machine address; None for one without a body, or a test's.
        self._address = None if self._entry is None else native_address(self._entry)
        self.native = self._address is not None  # whether it may run in a group (`grid`)
        self._split = runtime.should_split(self._groups, info.flops, info.bytes)
        self._inline = runtime.may_inline(info.flops, info.bytes)

    def _check(self, params: Sequence[Buffer]) -> list[int]:
        """The addresses of `params`, once each is checked to be a buffer of this device
        large enough for its parameter. On every launch: the passing path is kept free of
        formatting and generators."""
        sizes = self._sizes
        if len(params) != len(sizes):
            raise ValueError(f"{self._label} takes {len(sizes)} buffers, {len(params)} were given")
        addresses = []
        for buffer, size in zip(params, sizes, strict=False):  # equal lengths (checked)
            if not isinstance(buffer, CpuBuffer) or buffer.size < size:
                self._reject(params)
            addresses.append(buffer.address)  # type: ignore[attr-defined] (checked)
        return addresses

    def _reject(self, params: Sequence[Buffer]) -> None:
        # Raise for the first of `params` that is not a large enough buffer of this device.
        for index, buffer in enumerate(params):
            role = f"parameter {self.info.params[index].name!r} of {self._label}"
            checked = _as_cpu_buffer(buffer, role)
            if checked.size < self._sizes[index]:
                raise ValueError(
                    f"{role} needs {self._sizes[index]} bytes; the buffer has {checked.size}"
                )

    def _bind(self, addresses: tuple[int, ...]) -> ctypes.Array[ctypes.c_void_p]:
        # The array of the last launch when it had the same buffers (an Invoker with bound
        # outputs), else a new one: making one costs less than keeping several (a call's
        # outputs are new buffers every time). The pair is replaced whole, so threads racing
        # here only make an array more.
        last = self._binding
        if last is not None and last[0] == addresses:
            return last[1]
        array = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
        self._binding = (addresses, array)
        return array

    def run(
        self,
        params: Sequence[Buffer],
        deps: Sequence[Event] = (),
        *,
        profile: bool = False,
        batch: int = 1,
    ) -> Event:
        return self._launch(params, self._check(params), deps, profile, batch)

    def run_fitted(self, params: Sequence[Buffer], deps: Sequence[Event] = ()) -> Event:
        addresses = [buffer.address for buffer in params]  # type: ignore[attr-defined]
        return self._launch(params, addresses, deps, False, 1)

    def _launch(
        self,
        params: Sequence[Buffer],
        addresses: list[int],
        deps: Sequence[Event],
        profile: bool,
        batch: int,
    ) -> Event:
        entry = self._entry
        groups, split, inline, runtime = self._groups, self._split, self._inline, self._runtime
        if batch != 1 and entry is not None:  # the third grid extent times `batch` (Kernel.run)
            if batch < 0:
                raise ValueError(f"{self._label}: a batch of {batch} blocks")
            info = self.info
            groups *= batch
            split = runtime.should_split(groups, info.flops * batch, info.bytes * batch)
            inline = runtime.may_inline(info.flops * batch, info.bytes * batch)
        if inline and not deps and entry is not None:
            # What a cached call's launch usually is: run at once, no job.
            array = self._inline_array
            event = runtime.launch_now(
                entry,
                array,
                addresses,
                self._inline_args if batch == 1 else _grid_args(array, groups),
                split=split,
                label=self._label,
                profile=profile,
            )
            if event is not None:
                return event
        buffers = tuple(params)  # what a queued job keeps alive
        if self._trivial == "zero":
            address, size = addresses[0], self._sizes[0]
            return runtime.submit(
                lambda: ctypes.memset(address, 0, size),
                deps,
                label=self._label,
                keep_alive=buffers,
                profile=profile,
            )
        if self._trivial == "copy":
            target, source = addresses[0], addresses[1]
            size = min(self._sizes[0], self._sizes[1])
            return runtime.submit(
                lambda: ctypes.memmove(target, source, size),
                deps,
                label=self._label,
                keep_alive=buffers,
                profile=profile,
            )
        assert entry is not None
        array = self._bind(tuple(addresses))
        params, run_grid = ctypes.addressof(array), runtime.run_grid

        def launch() -> None:
            run_grid(entry, params, groups, split=split)

        return runtime.submit(
            launch,
            deps,
            label=self._label,
            # The array holds raw addresses only: the job must own the buffers (and the
            # JIT code) until it completes (PERFORMANCE.md 4.3).
            keep_alive=(buffers, array, self.library),
            profile=profile,
            inline=inline,
        )

    def grid(self, params: Sequence[Buffer]) -> tuple[GroupGrid, object]:
        """This kernel's launch over `params` as one of a group (`LLVMExecutor.run_together`;
        `native` kernels only): (entry address, parameter array address, work-groups, slices),
        slices of at most four per compute thread where the launch is worth splitting, else
        one; and what the job must keep alive."""
        array = self._bind(tuple(self._check(params)))
        slices = min(self._groups, SLICES_PER_THREAD * self._runtime.threads) if self._split else 1
        grid = (self._address, ctypes.addressof(array), self._groups, slices)
        return grid, (tuple(params), array, self.library)

    def __repr__(self) -> str:
        return f"<LLVMKernel {self.info.name} over {self._groups} work-groups>"


class LLVMExecutor(Executor):
    """Buffers, copies, fills and kernel preparation for one LLVM device."""

    buffer_alignment = ALIGNMENT
    makes_views = True
    host_memory = True

    def __init__(self, device: LLVMDevice, runtime: CpuRuntime) -> None:
        self.device = device
        self.runtime = runtime

    def allocate(self, size: int) -> CpuBuffer:
        return CpuBuffer.allocate(self.device, size)

    def allocator(self, size: int) -> Callable[[], CpuBuffer]:
        return CpuBuffer.allocator(self.device, size)

    def make_arena(self, size: int) -> CpuArena:
        return CpuArena(self.device, size)

    def prepare(self, library: Library, index: int) -> LLVMKernel:
        if not isinstance(library, LLVMLibrary):
            raise TypeError(f"an llvm_cpu device cannot run {library!r}")
        return LLVMKernel(self.runtime, library, index)

    def copy(
        self,
        src: Buffer,
        src_offset: int,
        dst: Buffer,
        dst_offset: int,
        size: int,
        deps: Sequence[Event] = (),
    ) -> Event:
        source = _as_cpu_buffer(src, "the copy source")
        target = _as_cpu_buffer(dst, "the copy destination")
        for buffer, offset, role in ((source, src_offset, "source"), (target, dst_offset, "dest")):
            if offset < 0 or size < 0 or offset + size > buffer.size:
                raise ValueError(
                    f"copy {role} range [{offset}, {offset + size}) leaves a buffer of "
                    f"{buffer.size} bytes"
                )
        source_address, target_address = source.address + src_offset, target.address + dst_offset
        return self.runtime.submit(
            lambda: ctypes.memmove(target_address, source_address, size),
            deps,
            label=f"copy of {size} bytes",
            keep_alive=(source, target),
            inline=self.runtime.may_inline(0, 2 * size),  # a short copy on an idle queue
        )

    def together(self, kernels: Sequence[Kernel]) -> bool:
        """Whether one job should run the kernels side by side (7.4): where one of them would
        run long on one thread (one work-group, or not split, and an estimate over the split
        threshold) and the others hold enough work to run beside it. Kernels that each fill
        the threads, or that are short, gain less than a group's waking of the helpers."""
        runtime = self.runtime
        if runtime.threads < 2 or len(kernels) < 2:
            return False
        if not all(isinstance(kernel, LLVMKernel) and kernel.native for kernel in kernels):
            return False
        threshold = runtime.split_seconds
        alone: float | None = None  # the longest estimate of a kernel that runs on one thread
        total = 0.0
        for kernel in kernels:
            seconds = estimated_seconds(kernel.info.flops, kernel.info.bytes)
            total += seconds
            if not kernel._split and seconds >= threshold:  # type: ignore[attr-defined]
                alone = seconds if alone is None else max(alone, seconds)
        return alone is not None and total - alone >= threshold

    def run_together(
        self,
        launches: Sequence[tuple[Kernel, Sequence[Buffer]]],
        deps: Sequence[Event] = (),
        *,
        profile: bool = False,
    ) -> list[Event]:
        """One job that runs the kernels side by side on the compute threads (the caller has
        asked `together` once for them); one by one when profiled, so that each kernel has
        its own time."""
        if profile:
            return super().run_together(launches, deps, profile=profile)
        grids, kept = [], []
        for kernel, params in launches:
            grid, keep = kernel.grid(params)  # type: ignore[attr-defined] (together)
            grids.append(grid)
            kept.append(keep)
        table = group_table(grids)
        rows = len(table) // 4
        runtime = self.runtime
        entry, address, run_grid = group_entry(), ctypes.addressof(table), runtime.run_grid
        flops = sum(kernel.info.flops for kernel, _ in launches)
        traffic = sum(kernel.info.bytes for kernel, _ in launches)
        names = ", ".join(kernel.info.name for kernel, _ in launches)
        event = runtime.submit(
            lambda: run_grid(entry, address, rows, split=True),
            deps,
            label=f"kernels {names}",
            # The table, the buffers, parameter arrays and JIT code (PERFORMANCE.md 4.3).
            keep_alive=(table, kept),
            inline=runtime.may_inline(flops, traffic),
        )
        return [event] * len(launches)

    def view(self, buffer: Buffer, offset: int, size: int) -> CpuBuffer | None:
        source = _as_cpu_buffer(buffer, "a view's buffer")
        if offset % ALIGNMENT or offset < 0 or size < 0 or offset + size > source.size:
            return None
        return CpuBuffer(self.device, source.storage[offset : offset + size])

    def fill_zero(self, dst: Buffer, deps: Sequence[Event] = ()) -> Event:
        target = _as_cpu_buffer(dst, "the fill destination")
        address, size = target.address, target.size
        return self.runtime.submit(
            lambda: ctypes.memset(address, 0, size),
            deps,
            label=f"zero fill of {size} bytes",
            keep_alive=target,
        )


class LLVMDevice(Device):
    """The host CPU as a device: JIT-compiled kernels on a pool of one thread per core."""

    def __init__(
        self,
        cpu: HostCpu,
        index: int = 0,
        *,
        settings: HardwareSettings | None = None,
        renderer: Renderer | None = None,
        threads: int | None = None,
    ) -> None:
        self.id = f"llvm_cpu.{index}"
        self.description = f"CPU (via LLVM): {cpu.name}"
        self.kind = DeviceKind.CPU
        self.host = cpu
        self._settings = settings  # None: the Appendix C preset, built on first use
        self.runtime = CpuRuntime(
            self.id,
            threads or cpu.cores,
            runner=slice_runner,
            pool=NativePool if available() else None,
        )
        self.compiler = LLVMCompiler(renderer)
        self.executor = LLVMExecutor(self, self.runtime)

    @property
    def settings(self) -> HardwareSettings:  # type: ignore[override]
        """The kernel generator's settings for this host (Appendix C)."""
        if self._settings is None:
            # Imported here so that the HAL never needs the kernel IR just to list devices.
            settings_class = importlib.import_module("semtree.kernel").HardwareSettings
            preset = getattr(settings_class, "llvm_cpu", None)  # semtree's Appendix C preset
            if preset is not None:
                self._settings = preset(self.host.cores, self.host.features)
            else:
                self._settings = settings_class(**self.host.settings_fields())
        return self._settings

    @property
    def code_identity(self) -> str | None:
        """LLVM's version, the target triple, the CPU and its features (None with a custom
        renderer, whose code is not the default renderer's)."""
        if self.compiler.renderer is not None:
            return None
        cpu = self.host
        version = ".".join(map(str, llvm_version()))
        return f"llvm {version} {cpu.triple} {cpu.name} {cpu.feature_string}"

    def close(self) -> None:
        self.runtime.close()


class LLVMDeviceSet(DeviceSet):
    def __init__(self, devices: Sequence[LLVMDevice]) -> None:
        self.name = "host"
        self.devices = tuple(devices)


class LLVMDriver(Driver):
    """The LLVM backend: one device set, the host, with one device, `llvm_cpu.0`."""

    name = "llvm"
    id_prefix = "llvm_cpu"

    def __init__(self, *, threads: int | None = None, renderer: Renderer | None = None) -> None:
        self.device = LLVMDevice(host(), 0, renderer=renderer, threads=threads)
        self._sets = (LLVMDeviceSet([self.device]),)

    def device_sets(self) -> Sequence[LLVMDeviceSet]:
        return self._sets


def make_driver() -> LLVMDriver:
    """The registry's entry point for the "llvm" backend."""
    return LLVMDriver()
