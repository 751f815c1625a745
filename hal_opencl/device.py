"""OpenCL devices: enumeration, capabilities and settings (design 6.1, Appendix C).

Place in the pipeline: the registry calls `hal_opencl.make_driver()`, which lands here (after
`vendors.register()` made pip-installed drivers such as Intel's CPU runtime visible). Every
platform is a device set; devices are numbered across platforms as `opencl.0`, `opencl.1`, ...
in the order of `platforms.py` (PoCL, Intel, others), never the loader's, so installing a
driver moves no id; debugging platforms (Oclgrind) are listed only once a selector such as
`opencl:oclgrind` asks for them (`OpenCLDriver.select`). Each device reports its capabilities
(half, double, largest allocation, local memory, compute units, ...) and the `HardwareSettings`
the kernel generator targets: CPU devices (PoCL) get the OpenCL CPU preset (one work-item
per work-group, operands read from global memory, vector strips), GPUs the GPU preset
(work-group tiling through local memory). A device's context and in-order queue
(`queue.DeviceQueue`) are created on first use.

`TILE_FORCE_GPU_SETTINGS=1` in the environment gives every OpenCL device the GPU preset (built
from its own queries), so PoCL runs the GPU-style kernels (work-groups of many work-items,
local memory, barriers) and tests them (issue 4). It is read when a device first builds its
settings, and the settings' fingerprint keeps the program cache apart.

This module, `executor.py`, `memory.py`, `queue.py` and `compiler.py` import pyopencl; the
package itself does not, so a machine without OpenCL imports everything and runs `llvm_cpu.0`.
A missing ICD, no platform or no device becomes `DeviceUnavailableError`, which the registry
records as the OpenCL backend's failure.

Each device must build a one-line probe kernel at enumeration before it is listed: a driver
whose compiler rejects every program is not a device. The known case is PoCL 3.0 (the PyPI
build, on LLVM 14) on processors LLVM 14 does not know, such as AMD Zen 5: LLVM names the CPU
"generic" and PoCL's clang rejects that name ("unknown target CPU 'generic'"). When every
device fails that way, the error says so and carries `unsupported_host=True`. On processors
LLVM 14 knows only by an older name (AMD Zen 4 is "znver3" to it, without AVX-512), PoCL still
reports the processor's vector width; the width the generator targets is what PoCL compiles
for (`compiled_width`).
"""

from __future__ import annotations

import importlib
import re
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyopencl as cl

from hal.environment import flag
from hal.errors import DeviceUnavailableError
from hal.interfaces import Device, DeviceKind, DeviceSet, Driver
from hal_opencl import driver_cache, vendors
from hal_opencl.build import build_log
from hal_opencl.executor import OpenCLExecutor
from hal_opencl.platforms import HIDDEN, matches, order_platforms, platform_key
from hal_opencl.queue import DeviceQueue, check_not_forked, driver_loaded

FORCE_GPU_SETTINGS = "TILE_FORCE_GPU_SETTINGS"

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hal_opencl.compiler import OpenCLCompiler
    from semtree.kernel import HardwareSettings


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one OpenCL device offers, read once at enumeration."""

    platform: str
    name: str
    version: str
    kind: DeviceKind
    extensions: tuple[str, ...]
    fp16: bool  # cl_khr_fp16: half arithmetic (half storage works everywhere)
    fp64: bool  # cl_khr_fp64
    max_allocation: int  # bytes in one buffer
    global_memory: int
    local_memory: int  # bytes of __local memory per work-group
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, int, int]
    host_unified_memory: bool
    base_address_alignment: int  # bytes; sub-buffer offsets are multiples of this
    cacheline: int
    preferred_vector_width_float: int
    native_vector_width_float: int  # the SIMD width (Intel's CPU runtime prefers 1 but has 16)
    map_invalidate: bool  # CL_MAP_WRITE_INVALIDATE_REGION (OpenCL 1.2 and later)

    def summary(self) -> str:
        features = [name for name, flag in (("fp16", self.fp16), ("fp64", self.fp64)) if flag]
        return (
            f"{self.kind.value}, {self.compute_units} compute units, "
            f"{self.global_memory // 2**20} MiB, local {self.local_memory // 1024} KiB, "
            f"work-groups up to {self.max_work_group_size}, {' '.join(features) or 'fp32 only'}"
        )


def device_kind(type_bits: int) -> DeviceKind:
    """The kind from the `device.type` bit field (not `device_type.to_string`, which prints
    "ALL | CPU" on PoCL; design A.2)."""
    if type_bits & cl.device_type.GPU:
        return DeviceKind.GPU
    if type_bits & cl.device_type.CPU:
        return DeviceKind.CPU
    if type_bits & cl.device_type.ACCELERATOR:
        return DeviceKind.ACCELERATOR
    return DeviceKind.OTHER


def _version(version: str) -> tuple[int, int]:
    """(major, minor) of "OpenCL 3.0 PoCL ..."; (1, 0) when unreadable."""
    try:
        major, minor = version.split()[1].split(".")[:2]
        return int(major), int(minor)
    except (IndexError, ValueError):
        return 1, 0


# LLVM's names of the x86 processors with AVX-512 (what PoCL compiles for: `compiled_width`).
AVX512_TARGETS = frozenset(
    {
        "knl",
        "knm",
        "skx",
        "skylake-avx512",
        "cascadelake",
        "cooperlake",
        "cannonlake",
        "icelake-client",
        "icelake-server",
        "rocketlake",
        "tigerlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "diamondrapids",
        "znver4",
        "znver5",
        "x86-64-v4",
    }
)

# The processor PoCL compiles for, at the end of its version's HSTR: "OpenCL 3.0 PoCL HSTR:
# pthread-x86_64-unknown-linux-gnu-znver3".
_POCL_TARGET = re.compile(r"HSTR:\s*\S*?-linux-gnu\w*-(\S+)")


def compiled_width(version: str, width: int) -> int:
    """A vector width of floats that the device's compiler also generates code for: `width`,
    except on PoCL when it compiles for an x86 processor without AVX-512 and reports 16
    floats. PoCL reads the width from the processor, but its LLVM names the processor from
    what it knows: LLVM 14 calls AMD Zen 4 "znver3", which has no AVX-512. Vectors of 16
    floats then compile in halves, and some crash that LLVM (`select` of float16 aborts the
    process: "Cannot emit physreg copy instruction")."""
    if width <= 8 or "PoCL" not in version:
        return width
    found = _POCL_TARGET.search(version)
    return width if found is None or found.group(1) in AVX512_TARGETS else 8


def query_capabilities(cl_device: cl.Device) -> Capabilities:
    extensions = tuple(sorted(cl_device.extensions.split()))
    sizes = (*tuple(cl_device.max_work_item_sizes), 1, 1, 1)
    version = cl_device.version.strip()
    preferred = max(1, int(cl_device.preferred_vector_width_float))
    native = max(1, int(cl_device.native_vector_width_float))
    return Capabilities(
        platform=cl_device.platform.name.strip(),
        name=cl_device.name.strip(),
        version=version,
        kind=device_kind(int(cl_device.type)),
        extensions=extensions,
        fp16="cl_khr_fp16" in extensions,
        fp64="cl_khr_fp64" in extensions,
        max_allocation=int(cl_device.max_mem_alloc_size),
        global_memory=int(cl_device.global_mem_size),
        local_memory=int(cl_device.local_mem_size),
        compute_units=int(cl_device.max_compute_units),
        max_work_group_size=int(cl_device.max_work_group_size),
        max_work_item_sizes=(int(sizes[0]), int(sizes[1]), int(sizes[2])),
        host_unified_memory=bool(cl_device.host_unified_memory),
        base_address_alignment=max(1, int(cl_device.mem_base_addr_align) // 8),
        cacheline=int(cl_device.global_mem_cacheline_size),
        preferred_vector_width_float=compiled_width(version, preferred),
        native_vector_width_float=compiled_width(version, native),
        map_invalidate=_version(version) >= (1, 2),
    )


def hardware_settings(capabilities: Capabilities) -> HardwareSettings:
    """The generator's settings for a device (Appendix C): the CPU preset for CPU devices,
    the GPU preset for everything else, or for every device under TILE_FORCE_GPU_SETTINGS."""
    # Imported here: listing devices must not import the kernel IR (or the renderer).
    settings_class = importlib.import_module("semtree.kernel").HardwareSettings
    forced = flag(FORCE_GPU_SETTINGS)
    if capabilities.kind is DeviceKind.CPU and not forced:
        return settings_class.opencl_cpu(
            max_work_group_size=capabilities.max_work_group_size,
            max_work_item_sizes=capabilities.max_work_item_sizes,
            max_compute_units=capabilities.compute_units,
            preferred_vector_width_float=capabilities.preferred_vector_width_float,
            native_vector_width_float=capabilities.native_vector_width_float,
            global_mem_cacheline_size=capabilities.cacheline,
            extensions=capabilities.extensions,
        )
    return settings_class.opencl_gpu(
        max_work_group_size=capabilities.max_work_group_size,
        max_work_item_sizes=capabilities.max_work_item_sizes,
        local_mem_size=capabilities.local_memory,
        max_compute_units=capabilities.compute_units,
        global_mem_cacheline_size=capabilities.cacheline,
        extensions=capabilities.extensions,
    )


class OpenCLDevice(Device):
    """One OpenCL device: `opencl.<index>`, with its own context and in-order queue."""

    def __init__(self, index: int, cl_device: cl.Device, *, profiling: bool | None = None) -> None:
        self.cl_device = cl_device
        self.capabilities = query_capabilities(cl_device)
        self.id = f"opencl.{index}"
        self.description = f"{self.capabilities.platform}: {self.capabilities.name}"
        self.kind = self.capabilities.kind
        self._settings: HardwareSettings | None = None  # built on first use
        self._compiler: OpenCLCompiler | None = None
        self.executor = OpenCLExecutor(self)
        self._profiling = profiling  # None: TILE_PROFILE decides when the queue is made
        self._queue: DeviceQueue | None = None
        self._lock = threading.Lock()

    @property
    def settings(self) -> HardwareSettings:  # type: ignore[override]
        """The kernel generator's settings for this device (Appendix C)."""
        if self._settings is None:
            self._settings = hardware_settings(self.capabilities)
        return self._settings

    @property
    def compiler(self) -> OpenCLCompiler:  # type: ignore[override]
        """The device's compiler (and program cache), made on first use."""
        if self._compiler is None:
            with self._lock:
                if self._compiler is None:
                    module = importlib.import_module("hal_opencl.compiler")
                    self._compiler = module.OpenCLCompiler()
        return self._compiler

    @property
    def queue(self) -> DeviceQueue:
        """The device's context and in-order queue, created on first use."""
        queue = self._queue
        check_not_forked(self.id)
        if queue is None:
            with self._lock:
                if self._queue is None:
                    self._queue = DeviceQueue(self.id, self.cl_device, profiling=self._profiling)
                queue = self._queue
        return queue

    @property
    def renews_context(self) -> bool:
        """Whether the compiler renews the context now and then (`DeviceQueue.renew`): on
        PoCL, whose compiles leave memory behind until its last context is released."""
        return platform_key(self.capabilities.platform) == "pocl"

    @property
    def code_identity(self) -> str:
        """The platform, the device, their versions and the driver's (issue 13)."""
        cl_device, capabilities = self.cl_device, self.capabilities
        platform_version = cl_device.platform.version.strip()
        return (
            f"opencl {capabilities.platform} {platform_version} | {capabilities.name} "
            f"{capabilities.version} | driver {cl_device.driver_version.strip()}"
        )

    def flush(self) -> None:
        if self._queue is not None:
            self._queue.flush()

    def close(self) -> None:
        """Finish queued work and stop the submitter thread; cached programs are dropped."""
        with self._lock:
            queue, self._queue = self._queue, None
        if queue is not None:
            queue.close()
        if self._compiler is not None:
            self._compiler.clear()


PROBE_SOURCE = "__kernel void tile_probe(__global int *out) { out[0] = 1; }"
UNKNOWN_CPU = "unknown target CPU"  # the driver's log when its LLVM cannot name the host CPU


def compile_problem(cl_device: cl.Device) -> str | None:
    """None when the device's compiler builds a trivial kernel, else the driver's reason."""
    try:
        context = cl.Context(devices=[cl_device])
        program = cl.Program(context, PROBE_SOURCE)
    except cl.Error as error:
        return f"cannot create a context: {error}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        try:
            driver_cache.build(program, context, cl_device, PROBE_SOURCE)
        except cl.Error as error:
            log = build_log(program, cl_device) or str(error)
            lines = [line.strip() for line in log.splitlines() if line.strip()]
            return "its compiler rejects every program: " + (lines[0] if lines else "no log")
    return None


class OpenCLDeviceSet(DeviceSet):
    """The devices of one OpenCL platform."""

    def __init__(self, name: str, devices: Sequence[OpenCLDevice], key: str = "") -> None:
        self.name = name
        self.key = key or platform_key(name)  # its selector key (hal_opencl.platforms)
        self.devices = tuple(devices)


@dataclass(slots=True)
class _Platform:
    """One platform as the driver found it; a hidden one is probed when first selected."""

    key: str
    name: str
    cl_devices: list[cl.Device]
    first: int  # the index of its first device
    hidden: bool
    devices: tuple[OpenCLDevice, ...] | None = None  # None until probed
    problems: tuple[str, ...] = ()


class OpenCLDriver(Driver):
    """The OpenCL backend: one device set per platform that has devices, in the order of
    `hal_opencl.platforms` (PoCL, Intel, others; debugging platforms only when selected)."""

    name = "opencl"
    id_prefix = "opencl"

    def __init__(self, *, profiling: bool | None = None) -> None:
        driver_loaded()  # from here on, a forked child cannot use OpenCL (hal_opencl.queue)
        try:
            platforms = cl.get_platforms()
        except cl.Error as error:  # no ICD loader configuration, no platform
            raise DeviceUnavailableError(self.name, f"no OpenCL platform: {error}") from error
        if not platforms:
            raise DeviceUnavailableError(self.name, "no OpenCL platform is installed")
        self._profiling = profiling
        self._lock = threading.Lock()
        self.skipped: list[str] = []  # platforms and devices that are not usable, and why
        self._platforms: list[_Platform] = []
        listed, hidden = order_platforms(platforms, lambda platform: platform.name.strip())
        index = 0
        for platform in [*listed, *hidden]:
            name = platform.name.strip()
            try:
                cl_devices = list(platform.get_devices())
            except cl.Error as error:
                self.skipped.append(f"{name}: {error}")
                continue
            key = platform_key(name)
            entry = _Platform(key, name, cl_devices, index, hidden=key in HIDDEN)
            if not entry.hidden:
                self._probe(entry)
                assert entry.devices is not None
                cl_devices = [device.cl_device for device in entry.devices]
            self._platforms.append(entry)
            index += len(cl_devices)
        self._sets = self._device_sets()
        self._none: DeviceUnavailableError | None = None  # why no platform is listed
        if not self._sets:
            detail = "; ".join(self.skipped) or "the platforms list no devices"
            unknown_cpu = bool(self.skipped) and all(UNKNOWN_CPU in item for item in self.skipped)
            if unknown_cpu:
                detail += " (the driver's LLVM does not know this processor)"
            hidden = [f"opencl:{entry.key}" for entry in self._platforms if entry.hidden]
            if hidden:
                detail += f"; debugging platforms only when selected: {', '.join(hidden)}"
            self._none = DeviceUnavailableError(
                self.name, f"no usable OpenCL device: {detail}", unsupported_host=unknown_cpu
            )
            if not any(entry.hidden for entry in self._platforms):
                raise self._none

    def _probe(self, entry: _Platform) -> tuple[OpenCLDevice, ...]:
        """The platform's devices whose compiler builds the probe, numbered from its first
        index; the others are recorded with their problem."""
        if entry.devices is None:
            devices, problems = [], []
            for cl_device in entry.cl_devices:
                problem = compile_problem(cl_device)
                if problem is not None:
                    problems.append(f"{cl_device.name.strip()}: {problem}")
                    continue
                index = entry.first + len(devices)
                devices.append(OpenCLDevice(index, cl_device, profiling=self._profiling))
            entry.devices, entry.problems = tuple(devices), tuple(problems)
            self.skipped.extend(problems)
        return entry.devices

    def _device_sets(self) -> tuple[OpenCLDeviceSet, ...]:
        return tuple(
            OpenCLDeviceSet(entry.name, entry.devices, entry.key)
            for entry in self._platforms
            if entry.devices
        )

    def device_sets(self) -> Sequence[OpenCLDeviceSet]:
        """The listed platforms' device sets; where none has a usable device and only a
        hidden platform could be selected, raises why (so the registry reports it)."""
        if not self._sets and self._none is not None:
            raise self._none
        return self._sets

    def platform_keys(self) -> dict[str, bool]:
        """Every platform's selector key, and whether it is hidden from the default list."""
        return {entry.key: entry.hidden for entry in self._platforms}

    def select(self, selector: str) -> OpenCLDevice:
        """The first usable device of the platform `selector` names (`pocl`, `intel`,
        `oclgrind`, ...: hal_opencl.platforms); a hidden platform is probed and joins the
        device sets. Raises DeviceUnavailableError, with `unsupported_host` when the
        platform's compiler does not know this processor."""
        keys = [entry.key for entry in self._platforms]
        problems: list[str] = []
        for position in matches(selector, keys):
            entry = self._platforms[position]
            with self._lock:
                devices = self._probe(entry)
                self._sets = self._device_sets()
            if devices:
                return devices[0]
            problems += entry.problems
        if not problems:
            raise DeviceUnavailableError(
                self.name, f"no OpenCL platform {selector!r} here, only {', '.join(keys)}"
            )
        raise DeviceUnavailableError(
            self.name,
            f"OpenCL platform {selector!r} has no usable device: {'; '.join(problems)}",
            unsupported_host=all(UNKNOWN_CPU in item for item in problems),
        )

    def close(self) -> None:
        for device_set in self._sets:
            for device in device_set.devices:
                device.close()


def make_driver() -> OpenCLDriver:
    """The registry's entry point for the "opencl" backend: makes pip-installed drivers
    visible to the ICD loader first (`hal_opencl.vendors`), then enumerates."""
    vendors.register()
    return OpenCLDriver()
