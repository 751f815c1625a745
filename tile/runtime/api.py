"""The public Python API, part 1 (design 9): devices and tensors.

Place in the pipeline: this is the device layer's face, with `tile.runtime.invoke` (functions,
invokers, invocations, `run`). `device()` picks a HAL device through the registry; a `Tensor`
is a buffer on it with a `BufferState` (tile.runtime.device). Reading a tensor (`mmap_current`,
`to_numpy`) waits for whatever writes it; writing it waits for its readers too.

Device resolution: the `id` argument, else `TILE_DEVICE`, else `llvm_cpu.0`; an id is exact
(`opencl.1`), names a backend (`opencl`, `llvm`, `llvm_cpu`: its first device), or a backend
and a selector of its own (`opencl:intel`, `opencl:pocl`, `opencl:oclgrind`: the first device
of that OpenCL platform; `hal_opencl.platforms`). Device objects are singletons per id.
Backends are loaded in registry order and only as far as needed, so asking for `llvm_cpu.0`
never touches OpenCL.
"""

from __future__ import annotations

import math
import os
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Union

import numpy as np

from hal import registry
from hal.errors import DeviceUnavailableError
from semtree.types import DType
from tile.errors import DeviceNotFound
from tile.runtime import debug
from tile.runtime.cache import tensor_entry
from tile.runtime.device import Contents, DeviceRuntime

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import hal
    from semtree.kernel import HardwareSettings
    from tile.runtime.cache import SignatureEntry
    from tile.runtime.device import BufferState

DTypeLike = Union[DType, str, np.dtype, type]  # noqa: UP007 (evaluated at run time on 3.10)
DeviceLike = Union["Device", str, None]
InputValue = Union["Tensor", np.ndarray, int, float, bool]

DEFAULT_DEVICE = "llvm_cpu.0"


# ---- devices --------------------------------------------------------------------------------


class Device:
    """A device that runs Tile programs; `available=False` marks a backend that failed to
    load (listed by `devices(include_unavailable=True)`, with the reason as description)."""

    def __init__(
        self,
        id: str,
        description: str,
        kind: str,
        settings: HardwareSettings | None,
        available: bool,
        hal_device: hal.Device | None = None,
    ) -> None:
        self.id = id
        self.description = description
        self.kind = kind
        self.settings = settings
        self.available = available
        self._hal = hal_device
        self._runtime = DeviceRuntime(hal_device) if hal_device is not None else None

    @property
    def runtime(self) -> DeviceRuntime:
        """The device layer's state for this device (buffers, program cache)."""
        if self._runtime is None:
            raise DeviceNotFound(f"device {self.id!r} is unavailable: {self.description}")
        return self._runtime

    def clear_cache(self) -> None:
        """Forget every compiled program of this device (they are rebuilt on next use) and
        release the buffers it keeps for the outputs of later calls."""
        if self._runtime is not None:
            self._runtime.programs.clear()
            self._runtime.pool.clear()

    def __repr__(self) -> str:
        state = "" if self.available else " (unavailable)"
        return f"<Device {self.id}{state}: {self.description}>"


_lock = threading.Lock()
_by_id: dict[str, Device] = {}  # the singletons
_resolved: dict[str, Device] = {}  # requested id or prefix -> device


def device_of(hal_device: hal.Device) -> Device:
    """The `Device` singleton for a HAL device (made on first use)."""
    with _lock:
        found = _by_id.get(hal_device.id)
        if found is None:
            found = Device(
                hal_device.id,
                hal_device.description,
                hal_device.kind.value,
                hal_device.settings,
                True,
                hal_device,
            )
            _by_id[hal_device.id] = found
            debug.device_opened(found.id, found.kind, found.description, hal_device.settings)
        return found


def devices(include_unavailable: bool = False) -> list[Device]:
    """Every device that loaded, `llvm_cpu.0` first; with `include_unavailable`, also one
    unavailable entry per backend that failed, its reason as the description."""
    loaded, failures = registry.enumerate()
    found = [device_of(item) for item in loaded]
    for failure in failures:
        debug.backend_unavailable(failure.backend, failure.reason)
    if include_unavailable:
        found += [
            Device(failure.backend, failure.reason, "other", None, False) for failure in failures
        ]
    return found


def device(id: str | None = None) -> Device:
    """One device: `id`, else `TILE_DEVICE`, else `llvm_cpu.0` (module docstring). Raises
    DeviceNotFound, listing the available ids, when nothing matches."""
    from_environment = id is None and bool(os.environ.get("TILE_DEVICE"))
    wanted = id if id is not None else os.environ.get("TILE_DEVICE") or DEFAULT_DEVICE
    found = _resolved.get(wanted)
    if found is not None:
        return found
    reasons: list[str] = []
    found = _find(wanted, reasons)
    if found is None:
        loaded, failures = registry.enumerate()
        ids = [item.id for item in loaded]
        source = " (from TILE_DEVICE)" if from_environment else ""
        message = f"no device {wanted!r}{source}"
        message += "".join(f": {reason}" for reason in reasons)
        message += f"; available devices: {', '.join(ids) or 'none'}"
        if failures:
            message += "; unavailable backends: " + "; ".join(str(item) for item in failures)
        raise DeviceNotFound(message, ids)
    with _lock:
        _resolved[wanted] = found
    return found


def _find(wanted: str, reasons: list[str]) -> Device | None:
    """The device `wanted` names, or None with the reasons a selector gave appended."""
    prefix, colon, selector = wanted.partition(":")
    for backend in registry.backend_names():
        selected = False
        try:
            driver = registry.get_driver(backend)
            selected = bool(colon) and prefix in (backend, driver.id_prefix)
            if selected:  # also a platform that is not listed (Oclgrind)
                return device_of(driver.select(selector))
            loaded = driver.devices()
        except DeviceUnavailableError as error:
            debug.backend_unavailable(backend, error.reason)
            if selected or (colon and prefix == backend):
                reasons.append(error.reason)
                return None
            continue
        for item in loaded:
            if item.id == wanted:
                return device_of(item)
        if loaded and wanted in (backend, driver.id_prefix):
            return device_of(loaded[0])
    return None


def resolve(value: DeviceLike) -> Device:
    """A Device from a Device, an id or prefix, or None (the default)."""
    if isinstance(value, Device):
        return value
    if value is None or isinstance(value, str):
        return device(value)
    raise TypeError(f"a device is a tile.Device, an id or None, not {type(value).__name__}")


# ---- tensors --------------------------------------------------------------------------------


# DLPack device types (dlpack.h DLDeviceType).
_DL_CPU = 1
_DL_OPENCL = 4
_DL_EXTENSION = 12  # kDLExtDev: any other device

# The native numpy dtype of every Tile element type, for a look-up without parsing names.
_NATIVE = {item.numpy: item.numpy for item in DType}


def numpy_dtype(dtype: DTypeLike) -> np.dtype:
    """The numpy dtype of a Tile element type given in any accepted spelling."""
    native = _NATIVE.get(dtype) if isinstance(dtype, np.dtype) else None  # type: ignore[call-overload]
    return native if native is not None else DType.of(dtype).numpy


class Tensor:
    """An n-dimensional array in one device's memory (contents undefined until written).

    `name` only labels errors: a tensor its device cannot allocate (more bytes than the
    device allows or has) raises `TileOutOfMemory` naming it, its shape and its bytes."""

    __slots__ = ("__weakref__", "_entry", "_state", "device", "dtype", "nbytes", "shape")

    def __init__(
        self,
        device: DeviceLike,
        shape: Sequence[int],
        dtype: DTypeLike = "float32",
        *,
        name: str | None = None,
    ) -> None:
        self.device = resolve(device)
        self.shape = tuple(int(size) for size in shape)
        if any(size < 0 for size in self.shape):
            raise ValueError(f"a tensor shape cannot have negative sizes: {self.shape}")
        self.dtype = numpy_dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        contents = Contents(name, self.shape, self.dtype)
        self._state = self.device.runtime.allocate(self.nbytes, contents)
        self._entry = tensor_entry(self.dtype, self.shape)  # its part of a program key

    @classmethod
    def _over(
        cls,
        device: Device,
        shape: tuple[int, ...],
        dtype: np.dtype,
        state: BufferState,
        entry: SignatureEntry,
    ) -> Tensor:
        """A tensor over a buffer just allocated for it: a run's output, whose shape, dtype
        and signature entry its program computed once (no checks: every launch makes these)."""
        tensor = cls.__new__(cls)
        tensor.device = device
        tensor.shape = shape
        tensor.dtype = dtype
        tensor.nbytes = state.nbytes
        tensor._state = state
        tensor._entry = entry
        return tensor

    @classmethod
    def from_numpy(
        cls, array: np.ndarray, device: DeviceLike = None, *, name: str | None = None
    ) -> Tensor:
        """A new tensor on `device` holding a copy of `array` (written through mmap_discard)."""
        values = np.asarray(array)
        tensor = cls(device, values.shape, values.dtype, name=name)
        with tensor.mmap_discard() as view:
            view[...] = values
        return tensor

    def to_numpy(self) -> np.ndarray:
        """Wait for the last writer and return a copy as a new numpy array."""
        raw = self.device.runtime.read(self._state)
        return raw.view(self.dtype).reshape(self.shape)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the work queued so far that writes this tensor has finished; nothing
        is mapped or copied. Raises ExecutionError if that work failed, and TimeoutError if
        it has not finished after `timeout` seconds."""
        self.device.runtime.wait_written(self._state, timeout)

    @contextmanager
    def mmap_current(self, writable: bool = False) -> Iterator[np.ndarray]:
        """Map the current contents as an array of this tensor's shape and dtype.

        Waits for the last writer (and, if `writable`, for every reader). The array is
        read-only unless `writable`; it must not be used after the `with` block, when the
        mapping ends (and, if writable, the contents go back to the device). Kernels that
        write this tensor (or, if `writable`, read it) wait for the block to end, so do not
        wait inside it for work that needs them. Raises ExecutionError if the last writer
        failed.
        """
        with self.device.runtime.mapped(self._state, write=writable) as raw:
            yield raw.view(self.dtype).reshape(self.shape)

    @contextmanager
    def mmap_discard(self) -> Iterator[np.ndarray]:
        """Map for overwriting: waits for the last writer and every reader, transfers
        nothing in and yields a writable array of undefined contents; on exit the contents
        go to the device (clearing any earlier failure)."""
        with self.device.runtime.mapped(self._state, write=True, discard=True) as raw:
            yield raw.view(self.dtype).reshape(self.shape)

    def numpy(self) -> np.ndarray:
        """The contents as a new numpy array, after the last writer (as `to_numpy`)."""
        return self.to_numpy()

    def to(self, device: DeviceLike) -> Tensor:
        """A copy of this tensor on another device (through host memory)."""
        return Tensor.from_numpy(self.to_numpy(), device)

    # ---- numpy interop -------------------------------------------------------------------

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        """`np.asarray(tensor)`: the contents (after the last writer) as a new array, with
        NumPy 2 semantics. A tensor lives in memory its device manages, so an array of it is
        always a copy: `copy=True` and `copy=None` give one, `copy=False` raises ValueError
        (use `mmap_current` for a view). `dtype` converts the copy."""
        if copy is False:
            raise ValueError(
                "a tile.Tensor cannot become a numpy array without a copy; use "
                "tensor.mmap_current() for a view"
            )
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype, copy=False)

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's (device type, device number): (1, 0), the host CPU, for a tensor on a
        CPU device (host-visible memory); (4, n) for OpenCL device n, which is not."""
        if self.device.kind == "cpu":
            return (_DL_CPU, 0)
        backend, _, number = self.device.id.rpartition(".")
        if backend == "opencl" and number.isdigit():
            return (_DL_OPENCL, int(number))
        return (_DL_EXTENSION, 0)

    def __dlpack__(
        self,
        *,
        stream: object = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> object:
        """Export to DLPack (`np.from_dlpack(tensor)`, `torch.from_dlpack(tensor)`).

        Host-visible tensors (CPU devices) export a copy of their contents, taken after the
        last writer, as `__array__` does: later kernels never change what the consumer got,
        and the consumer cannot write around the device's ordering. So `copy=False` raises
        BufferError. A tensor on another device exports only to the host, when asked for
        with `dl_device=(1, 0)` and a copy allowed.
        """
        if stream is not None:
            raise BufferError("tile.Tensor exports host memory, which takes no stream")
        if copy is False:
            raise BufferError(
                "a tile.Tensor is exported as a copy of its contents; copy=False cannot be met"
            )
        if dl_device is not None and tuple(dl_device) != (_DL_CPU, 0):
            raise BufferError(f"a tile.Tensor exports only to the host (1, 0), not {dl_device}")
        if dl_device is None and self.__dlpack_device__()[0] != _DL_CPU:
            raise BufferError(
                f"{self!r} is not in host-visible memory; pass dl_device=(1, 0) to export a "
                "host copy"
            )
        values = self.to_numpy()
        if max_version is not None:
            try:
                return values.__dlpack__(max_version=max_version)
            except TypeError:  # numpy < 2.1 makes only unversioned capsules
                pass
        return values.__dlpack__()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        """numpy-style, with the values (waiting for the last writer; large tensors are
        summarised as numpy does): `Tensor([[1., 2.]], dtype=float32, device=llvm_cpu.0)`.
        A tensor whose values cannot be read (its last writer failed) shows why instead."""
        tail = f"dtype={self.dtype.name}, device={self.device.id}"
        try:
            with self.mmap_current() as view:
                if self.size == 0:
                    values = f"[], shape={self.shape}"
                else:  # reads only the elements shown
                    values = np.array2string(view, separator=", ", prefix="Tensor(")
        except Exception as error:  # a repr never raises
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            shape = ", ".join(str(size) for size in self.shape)
            return f"<Tensor {self.dtype.name}[{shape}] on {self.device.id}: {reason}>"
        return f"Tensor({values}, {tail})"
