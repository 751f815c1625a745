"""The abstract HAL: what every backend implements and all the device layer of `tile` sees.

Place in the pipeline (ARCHITECTURE.md 3, 5.1): a `semtree.KernelList` goes to a device's
`Compiler`, which returns a `Library`; the device's `Executor` turns entries of the library
into launchable `Kernel`s and manages `Buffer`s; every asynchronous operation returns an
`Event`, and events are the only ordering mechanism.

    Driver -> DeviceSet -> Device (compiler, executor)
    Compiler.build(KernelList) -> Library;  Executor.prepare(Library, i) -> Kernel
    Kernel.run(buffers, deps) -> Event;  Executor.copy / fill_zero -> Event
    Buffer.map_current / map_discard -> numpy view;  Buffer.unmap() -> Event

The semtree names (`KernelList`, `KernelInfo`, `HardwareSettings`) are used in annotations
only, so importing the HAL never imports the kernel IR.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING

from hal.errors import DeviceUnavailableError, UnsupportedOnDevice

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from semtree.kernel import HardwareSettings, KernelInfo, KernelList


class DeviceKind(Enum):
    CPU = "cpu"
    GPU = "gpu"
    ACCELERATOR = "accelerator"
    OTHER = "other"


class Event(ABC):
    """Completion of one asynchronous operation (kernel run, copy, fill, unmap).

    Events are created only by HAL objects. An event completes exactly once, either
    successfully or with an exception; waiting on a failed event raises that exception.
    """

    @abstractmethod
    def wait(self, timeout: float | None = None) -> None:
        """Block until the operation completes. Raise its exception if it failed;
        raise TimeoutError if `timeout` seconds pass first."""

    @property
    @abstractmethod
    def is_complete(self) -> bool:
        """True once the operation has finished (successfully or not). Never blocks."""

    @abstractmethod
    def exception(self) -> BaseException | None:
        """The failure of a completed operation, or None. Must only be called when complete."""

    @abstractmethod
    def duration_ns(self) -> int | None:
        """Execution time of the operation itself (from start, after its dependencies
        were satisfied, to end), or None when profiling was not enabled for it."""

    @abstractmethod
    def add_done_callback(self, fn: Callable[[Event], None]) -> None:
        """Call `fn(self)` once complete (immediately if already complete), on an
        unspecified thread. Used by the runtime to drop buffer references."""


def read_only_view(array: np.ndarray) -> np.ndarray:
    """A view of `array` that cannot be made writeable: its base is a read-only memoryview,
    so `view.flags.writeable = True` raises ValueError, for it and every view derived from
    it. (A view whose flag was merely cleared can be switched back.)"""
    import numpy as np  # at run time only: importing the HAL needs no numpy

    return np.asarray(memoryview(array).toreadonly())


class Buffer(ABC):
    """A fixed-size block of device memory.

    Mapping gives the host a numpy view of the bytes. While mapped, the device must not
    use the buffer; `unmap()` returns the event after which it may.
    """

    size: int  # bytes
    device: Device

    @abstractmethod
    def map_current(self, deps: Sequence[Event] = (), *, writable: bool = False) -> np.ndarray:
        """Wait for `deps`, then return a 1-D uint8 array of `size` bytes holding the
        buffer's current contents. Writes through the view reach the device only if
        `writable` is True, and only after `unmap()`; otherwise the view is read-only for
        good (`read_only_view`)."""

    @abstractmethod
    def map_discard(self, deps: Sequence[Event] = ()) -> np.ndarray:
        """Wait for `deps`, then return a writable 1-D uint8 view whose initial contents
        are undefined (no device-to-host transfer is made)."""

    @abstractmethod
    def unmap(self) -> Event:
        """End the current mapping. The returned event completes when the device's view
        of the memory is consistent with what the host wrote."""

    def read(self, size: int, deps: Sequence[Event] = ()) -> np.ndarray:
        """Wait for `deps`, then return a new 1-D uint8 array holding the first `size` bytes.
        By default a map, a copy and an unmap; a back end whose driver reads in one command
        does that instead."""
        view = self.map_current(deps)
        try:
            return view[:size].copy()
        finally:
            del view
            self.unmap()


class Arena(ABC):
    """One allocation from which buffers are placed at explicit offsets.

    Buffers made from one arena may overlap; the caller guarantees that overlapping
    buffers are never live at the same time (the runtime's placement does this)."""

    size: int
    alignment: int  # offsets must be multiples of this many bytes

    @abstractmethod
    def make_buffer(self, offset: int, size: int) -> Buffer:
        """A buffer over bytes [offset, offset + size) of the arena. Raises ValueError when
        the offset is not a multiple of `alignment` or the range leaves the arena."""


class Library(ABC):
    """Executable code for the kernels of one KernelList on one device."""

    kernel_list: KernelList

    @abstractmethod
    def source(self, index: int) -> str:
        """Human-readable generated code for kernel `index` (OpenCL C, LLVM IR).
        For notebooks, dumps and error messages."""


class Kernel(ABC):
    """One prepared kernel, ready to launch any number of times."""

    info: KernelInfo

    @abstractmethod
    def run(
        self,
        params: Sequence[Buffer],
        deps: Sequence[Event] = (),
        *,
        profile: bool = False,
        batch: int = 1,
    ) -> Event:
        """Launch the kernel once all `deps` have completed, without blocking the caller.

        `params` align with `info.params`. The HAL keeps the buffers alive until the
        returned event completes. If a dependency failed, the kernel does not run and
        the returned event fails with `hal.DependencyFailed` chaining the cause.
        `batch` multiplies the grid's third extent (`info.global_size[2]`) for this launch:
        a kernel compiled for one block of a batch, which finds its block at
        `get_group_id(2)`, runs over `batch` blocks (tile's dynamic shapes); 0 launches
        nothing. Bodiless (ZERO, COPY) kernels take whole buffers and ignore it."""

    def run_fitted(self, params: Sequence[Buffer], deps: Sequence[Event] = ()) -> Event:
        """`run(params, deps)` for a caller that knows every buffer is this device's and large
        enough for its parameter (a cached call's launch: its tensors' signatures were
        matched): a device may skip checking them. Anything else is undefined."""
        return self.run(params, deps)


class Compiler(ABC):
    """Turns kernel lists into libraries for one kind of device."""

    @abstractmethod
    def build(self, kernel_list: KernelList, device: Device) -> Library:
        """Translate every kernel body to device code and compile it. Raises
        `hal.BackendCompileError` (with the generated source and the driver log) or
        `hal.UnsupportedOnDevice` (e.g. float64 without cl_khr_fp64)."""

    def export(self, library: Library) -> bytes:
        """The code of `library` as bytes that `restore` turns back into a library in another
        process (tile's disk cache and saved bundles keep them). Raises
        `hal.UnsupportedOnDevice` where the backend cannot export its code."""
        raise UnsupportedOnDevice(f"{type(self).__name__} cannot export compiled code")

    def restore(self, kernel_list: KernelList, code: bytes, device: Device) -> Library:
        """The library `export` described, for `kernel_list` on `device`, without translating
        or optimising anything that `export` already holds. Raises `hal.UnsupportedOnDevice`
        (saying why) when the code cannot run on `device` (another CPU, missing features),
        `hal.HalError` when `code` is not what `export` writes."""
        raise UnsupportedOnDevice(f"{type(self).__name__} cannot restore compiled code")


class Executor(ABC):
    """Memory and execution for one device."""

    buffer_alignment: int
    makes_views: bool = False  # whether `view` makes views (at multiples of the alignment)
    # Whether buffers are host memory: `Buffer.read` without dependencies is then a copy on
    # the calling thread that waits for nothing (a caller may make it under its own lock).
    host_memory: bool = False

    @abstractmethod
    def allocate(self, size: int) -> Buffer:
        """A new device buffer of `size` bytes (contents undefined)."""

    def allocator(self, size: int) -> Callable[[], Buffer]:
        """What `allocate(size)` does, as a function of no arguments for a caller that makes
        many buffers of one size (a cached call's outputs): a device may skip work there."""
        return partial(self.allocate, size)

    @abstractmethod
    def make_arena(self, size: int) -> Arena:
        """A new arena of `size` bytes whose base is aligned to `buffer_alignment`."""

    @abstractmethod
    def prepare(self, library: Library, index: int) -> Kernel:
        """Make kernel `index` of `library` launchable (create the driver kernel object,
        look up the JIT entry point). Prepared kernels may be cached by the caller."""

    @abstractmethod
    def copy(
        self,
        src: Buffer,
        src_offset: int,
        dst: Buffer,
        dst_offset: int,
        size: int,
        deps: Sequence[Event] = (),
    ) -> Event:
        """Asynchronously copy `size` bytes once `deps` complete."""

    @abstractmethod
    def fill_zero(self, dst: Buffer, deps: Sequence[Event] = ()) -> Event:
        """Asynchronously set every byte of `dst` to zero once `deps` complete."""

    def together(self, kernels: Sequence[Kernel]) -> bool:
        """Whether `run_together` runs these kernels side by side, sooner than one by one
        (the default: never). The caller asks once per set of kernels that do not depend on
        each other, and launches them with `run_together` only where the answer is True."""
        return False

    def run_together(
        self,
        launches: Sequence[tuple[Kernel, Sequence[Buffer]]],
        deps: Sequence[Event] = (),
        *,
        profile: bool = False,
    ) -> list[Event]:
        """Launch kernels that do not depend on each other (none writes a buffer that another
        reads or writes) once all `deps` have completed, as `Kernel.run` would, and return
        one event per launch. A backend may run them side by side as one job (their events
        are then one event) where `together` says so; this default launches them one by one.
        """
        return [kernel.run(params, deps, profile=profile) for kernel, params in launches]

    def view(self, buffer: Buffer, offset: int, size: int) -> Buffer | None:
        """A buffer over bytes [offset, offset + size) of `buffer`, sharing its memory, for
        kernel parameters; None where this backend makes no views there (the default: none;
        an offset that is not a multiple of `buffer_alignment`)."""
        return None

    def flush(self) -> None:  # noqa: B027 (a deliberate no-op default, not an abstract method)
        """Push queued work to the device (no-op where submission is immediate)."""


class Device(ABC):
    """One device: an id, its settings for the kernel generator, a compiler, an executor."""

    id: str  # "llvm_cpu.0", "opencl.0", ...
    description: str  # e.g. "Portable Computing Language: pthread-Intel(R) Xeon(R)"
    kind: DeviceKind
    settings: HardwareSettings
    compiler: Compiler
    executor: Executor

    def close(self) -> None:  # noqa: B027 (optional for backends, so not abstract)
        """Release driver resources. Optional; devices also close at interpreter exit."""

    @property
    def code_identity(self) -> str | None:
        """Everything besides `settings` that the code built for this device depends on (the
        driver and its version, the CPU model and features), as one string: code compiled
        where it is equal runs here. None (the default) when the backend cannot say, and its
        compiled code is then never reused from disk."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}: {self.description}>"


class DeviceSet(ABC):
    """Devices that share host memory or a platform (the host; one OpenCL platform)."""

    name: str
    devices: Sequence[Device]


class Driver(ABC):
    """One backend: the registry's entry point to its device sets."""

    name: str  # registry name: "llvm" or "opencl"
    id_prefix: str  # device id prefix: "llvm_cpu" or "opencl"

    @abstractmethod
    def device_sets(self) -> Sequence[DeviceSet]:
        """The device sets this driver found, in enumeration order (may be empty)."""

    def devices(self) -> list[Device]:
        """Every device of every device set, in enumeration order."""
        return [device for device_set in self.device_sets() for device in device_set.devices]

    def default_device(self) -> Device:
        """The first device of the first device set; raises DeviceUnavailableError
        when the driver found none."""
        devices = self.devices()
        if not devices:
            raise DeviceUnavailableError(self.name, "the driver found no devices")
        return devices[0]

    def select(self, selector: str) -> Device:
        """The device a backend-specific selector names (`opencl:intel` gives "intel" to the
        OpenCL driver); raises DeviceUnavailableError, with the reason, when none does."""
        raise DeviceUnavailableError(self.name, f"{self.id_prefix} has no selector {selector!r}")
