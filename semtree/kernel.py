"""KernelList and HardwareSettings: where the front end and every HAL meet (design 3.5,
5.3).

`tile.lower.generate` turns a bound program and a device's `HardwareSettings` into a `KernelList`
of `KernelInfo`s, each a launch (grid, parameters, semtree body or a built-in ZERO/COPY);
`hal.Compiler.build` turns the list into a library. The cheap invariants of 3.5 are checked
when the objects are built, so a malformed list fails in the generator, not in a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING

from semtree.nodes import Function, c_identifier
from semtree.types import VECTOR_WIDTHS, DType, Region

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from semtree.types import TensorShape


class Direction(Enum):
    IN = "in"
    OUT = "out"


class KernelKind(Enum):
    CONTRACTION = "contraction"  # may carry a fused epilogue
    ELEMENTWISE = "elementwise"  # fused elementwise group, no reduction
    ZERO = "zero"  # fill params[0] with zero bytes; body is None
    COPY = "copy"  # params[0] <- params[1]; body is None
    SPECIAL = "special"  # gather, scatter, prng, ...: body is a semtree


_BODILESS = (KernelKind.ZERO, KernelKind.COPY)


class KernelListError(ValueError):
    """A KernelInfo or KernelList breaks an invariant of design 3.5."""


@dataclass(frozen=True, slots=True)
class KernelParam:
    name: str  # tensor name in the KernelList (after var_rewrites)
    direction: Direction
    dtype: DType
    shape: tuple[int, ...]
    vec_width: int = 1  # the body accesses this buffer as vectors of this width

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.vec_width not in VECTOR_WIDTHS:
            raise KernelListError(f"param {self.name}: vector width {self.vec_width}")

    def __str__(self) -> str:
        vec = f" x{self.vec_width}" if self.vec_width > 1 else ""
        dims = ", ".join(str(dim) for dim in self.shape)
        return f"{self.name}: {self.direction.value.upper()} {self.dtype.short}[{dims}]{vec}"


@dataclass(frozen=True, slots=True)
class KernelInfo:
    name: str  # unique launch name, a valid C identifier
    kind: KernelKind
    params: tuple[KernelParam, ...]  # outputs first, then operands, then epilogue inputs
    global_size: tuple[int, int, int]  # work-items per dimension (OpenCL meaning)
    local_size: tuple[int, int, int]  # work-items per work-group; (0, 0, 0) = any
    body: Function | None  # semtree function; None only for ZERO and COPY
    flops: int  # useful arithmetic operations (for GFLOP/s reports)
    bytes: int  # estimated global memory traffic
    key: str = ""  # structural key: equal keys => identical body
    tile: tuple[int, ...] = ()  # chosen tile sizes, one per FlatContraction index
    comments: str = field(default="", compare=False)  # origin: Tile statement, flat table
    safe_self_aliases: tuple[tuple[str, str], ...] = ()  # (output, input) may share a buffer

    def __post_init__(self) -> None:
        for name in ("params", "global_size", "local_size", "tile", "safe_self_aliases"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "safe_self_aliases", tuple(map(tuple, self.safe_self_aliases)))
        self._check()

    def _check(self) -> None:
        where = f"kernel {self.name}"
        if c_identifier(self.name) != self.name:
            raise KernelListError(f"{where}: the name is not a C identifier")
        if len(self.global_size) != 3 or len(self.local_size) != 3:
            raise KernelListError(f"{where}: grid sizes need three dimensions")
        if any(size < 0 for size in self.global_size + self.local_size):
            raise KernelListError(f"{where}: negative grid size")
        if any(self.local_size) and not all(self.local_size):
            raise KernelListError(f"{where}: local size {self.local_size} mixes 0 and sizes")
        for total, local in zip(self.global_size, self.local_size, strict=True):
            if local and total % local:
                raise KernelListError(
                    f"{where}: global size {self.global_size} is not a multiple of local "
                    f"size {self.local_size}"
                )
        if self.flops < 0 or self.bytes < 0:
            raise KernelListError(f"{where}: negative flops or bytes")
        directions = [param.direction for param in self.params]
        if directions != sorted(directions, key=lambda item: item is Direction.IN):
            raise KernelListError(f"{where}: outputs must come before inputs")
        self._check_kind()
        if self.body is not None:
            self._check_body(self.body)
        for output, input_ in self.safe_self_aliases:
            if output not in self.outputs or input_ not in self.inputs:
                raise KernelListError(f"{where}: alias ({output}, {input_}) is not (out, in)")

    def _check_kind(self) -> None:
        where = f"kernel {self.name}"
        if (self.body is None) != (self.kind in _BODILESS):
            raise KernelListError(f"{where}: a {self.kind.value} kernel body must be None")
        expected = {
            KernelKind.ZERO: [Direction.OUT],
            KernelKind.COPY: [Direction.OUT, Direction.IN],
        }
        if self.kind in expected:
            if [param.direction for param in self.params] != expected[self.kind]:
                raise KernelListError(f"{where}: {self.kind.value} parameters {self.params}")
            if self.kind is KernelKind.COPY and self.params[0].dtype is not self.params[1].dtype:
                raise KernelListError(f"{where}: copy between different dtypes")

    def _check_body(self, body: Function) -> None:
        where = f"kernel {self.name}"
        if len(body.params) != len(self.params):
            raise KernelListError(
                f"{where}: {len(self.params)} params but the body takes {len(body.params)}"
            )
        for info, param in zip(self.params, body.params, strict=True):
            type_ = param.type
            ok = (
                type_.is_pointer
                and type_.dtype is info.dtype
                and type_.vec_width == info.vec_width
                and type_.region is Region.GLOBAL
                and type_.is_const == (info.direction is Direction.IN)
            )
            if not ok:
                raise KernelListError(f"{where}: param {info} has body type {type_}")

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(param.name for param in self.params if param.direction is Direction.IN)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(param.name for param in self.params if param.direction is Direction.OUT)

    def __str__(self) -> str:
        lines = [f"// {line}" for line in self.comments.splitlines()]
        lines.append(
            f"// {self.name}: {self.kind.value}, global {self.global_size}, local "
            f"{self.local_size}, {self.flops} flops, {self.bytes} bytes"
        )
        lines += [f"//   {param}" for param in self.params]
        if self.body is not None:
            lines.append(str(self.body).rstrip("\n"))
        return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class KernelList:
    kernels: tuple[KernelInfo, ...]  # launch order is a valid dependency order
    shapes: Mapping[str, TensorShape]  # every buffer any kernel touches (read-only mapping)
    inputs: tuple[str, ...]  # program inputs (names as seen by kernels)
    outputs: tuple[str, ...]  # program outputs (names as seen by kernels)
    temporaries: tuple[str, ...]  # buffers that are neither
    var_rewrites: Mapping[str, str] = field(default_factory=dict)  # user output -> buffer

    def __post_init__(self) -> None:
        for name in ("kernels", "inputs", "outputs", "temporaries"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "shapes", MappingProxyType(dict(self.shapes)))
        object.__setattr__(self, "var_rewrites", MappingProxyType(dict(self.var_rewrites)))
        self._check()

    def __reduce__(self) -> tuple:
        # Pickled as its fields (a mapping proxy does not pickle); unpickling checks it again.
        fields = (self.kernels, dict(self.shapes), self.inputs, self.outputs, self.temporaries)
        return (KernelList, (*fields, dict(self.var_rewrites)))

    def _check(self) -> None:
        names = [kernel.name for kernel in self.kernels]
        if len(set(names)) != len(names):
            raise KernelListError(f"duplicate kernel names in {names}")
        missing = [n for n in (*self.inputs, *self.outputs, *self.temporaries) if n not in self]
        if missing:
            raise KernelListError(f"buffers without a shape: {missing}")
        if set(self.temporaries) & (set(self.inputs) | set(self.outputs)):
            raise KernelListError("a temporary is also a program input or output")
        for user, buffer in self.var_rewrites.items():
            if buffer not in self.shapes:
                raise KernelListError(f"var_rewrites {user} -> {buffer}: unknown buffer")
        written: set[str] = set(self.inputs)
        bodies: dict[str, Function] = {}
        keyed: dict[str, Function | None] = {}
        for kernel in self.kernels:
            self._check_kernel(kernel, written)
            written.update(kernel.outputs)
            body = kernel.body
            if body is not None and bodies.setdefault(body.name, body) != body:
                raise KernelListError(f"two different bodies named {kernel.body.name}")
            if kernel.key and keyed.setdefault(kernel.key, kernel.body) != kernel.body:
                raise KernelListError(f"kernels with key {kernel.key!r} have different bodies")

    def _check_kernel(self, kernel: KernelInfo, written: set[str]) -> None:
        for param in kernel.params:
            shape = self.shapes.get(param.name)
            if shape is None:
                raise KernelListError(f"kernel {kernel.name}: {param.name} has no shape")
            if shape.dtype is not param.dtype or tuple(shape.dims) != param.shape:
                raise KernelListError(f"kernel {kernel.name}: {param} but the buffer is {shape}")
            temporary = param.name in self.temporaries
            if param.direction is Direction.IN and temporary and param.name not in written:
                raise KernelListError(
                    f"kernel {kernel.name} reads temporary {param.name} before any kernel writes it"
                )

    def __contains__(self, name: object) -> bool:
        return name in self.shapes

    def __str__(self) -> str:
        head = [
            f"// inputs: {', '.join(self.inputs)}",
            f"// outputs: {', '.join(self.outputs)}",
            f"// temporaries: {', '.join(self.temporaries)}",
        ]
        head += [f"// {name}: {shape}" for name, shape in self.shapes.items()]
        head += [f"// {user} -> {buffer}" for user, buffer in self.var_rewrites.items()]
        return "\n".join(head) + "\n\n" + "\n".join(str(kernel) for kernel in self.kernels)


# ---- hardware settings ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HardwareSettings:
    """What the generator may assume about a device (design 5.3, presets: Appendix C)."""

    threads: int  # work-items per work-group the generator may use (CPU: 1)
    vec_size: int  # widest SIMD width, in float32 elements, for vectorize()
    use_global: bool  # True: operands read from global memory directly (no local staging)
    mem_width: int  # bytes per cache line / memory transaction
    max_mem: int  # local-memory bytes per work-group (CPU: L1 budget for the cost model)
    max_regs: int  # bytes of accumulators a work-group may keep in registers
    goal_groups: int  # work-groups needed to keep the device busy
    goal_flops_per_byte: int  # arithmetic intensity at which the device is compute-bound
    goal_dim_sizes: tuple[int, int, int]  # grid extents used by special kernels
    max_work_group_size: int
    native_fp16: bool = False
    fp64: bool = True
    fast_math: bool = False  # allow approximate transcendental builtins
    disable_mad: bool = False
    disable_io_aliasing: bool = False
    vector_loops: bool = False  # elementwise tiles and lanes as vectors (tile.lower.widen)
    # Float16 products of the register-tiled kernel computed from float32 copies of their
    # operands, each made once by a kernel first, and through a float32 result where that
    # gives the kernel wider vectors (tile.lower.pack): CPU devices (llvm_cpu; OpenCL CPU
    # drivers, whose half loads are scalar code, or whose half arithmetic is slow).
    half_as_float: bool = False
    # Long reductions of the register-tiled kernel walked in steps over blocks of tiles, its
    # vector operand packed in panels first (tile.lower.vector_blocks): llvm_cpu. (PoCL's
    # kernels of 8-float vectors ran 1.0-1.5x slower so.)
    reduction_steps: bool = False
    # A short reduction in lanes takes a group of rows, whose lanes fold together in shuffles
    # (tile.lower.accumulators.fold_rows): llvm_cpu, where one row per group left LLVM
    # vectorising across groups.
    row_folds: bool = False
    # The square tile, per side, of a kernel that transposes (an operand contiguous along an
    # output dimension that is not the last): 64 on CPU devices, whose tiles move in 8 x 8
    # register blocks (tile.lower.transpose); smaller where the element path's private copy
    # of the tile would pass half of `max_mem` (tile.lower.tiles). Transpose 4096 in blocks
    # (AMD EPYC Zen 5, 2 threads), ms for sides 16 / 32 / 64: llvm_cpu 4.7 / 5.5 / 4.6,
    # Intel's runtime 9.1 / 6.7 / 4.6. By elements on an Intel Xeon (Emerald Rapids), for
    # sides 8 / 16 / 32: llvm_cpu 32-37 / 51 / 41-48; PoCL 70 / 50 / 35.
    transpose_tile: int = 8
    # The (rows, vectors) of the register-tiled kernel (tile.lower.vector) that a measured
    # search chose for the contraction at hand (tile.runtime.tune); None: the cost model's.
    # Set per kernel plan by the generator, never on a device.
    register_tile: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "goal_dim_sizes", tuple(self.goal_dim_sizes))
        positive = ("threads", "vec_size", "mem_width", "max_mem", "max_regs", "goal_groups")
        positive += ("transpose_tile",)
        for name in (*positive, "goal_flops_per_byte", "max_work_group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"HardwareSettings.{name} must be positive")
        if self.vec_size not in (1, 2, 4, 8, 16):
            raise ValueError(f"vec_size {self.vec_size} is not 1, 2, 4, 8 or 16")
        if self.threads > self.max_work_group_size:
            raise ValueError(f"{self.threads} threads > max_work_group_size")
        if len(self.goal_dim_sizes) != 3 or min(self.goal_dim_sizes) < 1:
            raise ValueError(f"goal_dim_sizes {self.goal_dim_sizes}")
        if self.register_tile is not None:
            object.__setattr__(self, "register_tile", tuple(self.register_tile))
            if len(self.register_tile) != 2 or min(self.register_tile) < 1:
                raise ValueError(f"register_tile {self.register_tile}")

    def fingerprint(self) -> str:
        """A readable, stable string naming every field that is set: part of the program cache
        key."""
        parts = []
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if isinstance(value, tuple):
                value = "x".join(str(part) for part in value)
            elif isinstance(value, bool):
                value = int(value)
            parts.append(f"{item.name}={value}")
        return ";".join(parts)

    @staticmethod
    def llvm_cpu(cores: int, features: Iterable[str] = ()) -> HardwareSettings:
        """The `llvm_cpu` preset; `features` are the host's enabled CPU feature names
        (`avx512f`, `avx2`, ...), e.g. the true keys of `llvm.get_host_cpu_features()`."""
        enabled = set(features)
        avx512 = "avx512f" in enabled
        return HardwareSettings(
            threads=1,
            vec_size=16 if avx512 else 8 if "avx2" in enabled else 4,
            use_global=True,
            mem_width=64,
            max_mem=32768,
            max_regs=1536 if avx512 else 768,
            goal_groups=4 * max(1, cores),
            goal_flops_per_byte=16,
            goal_dim_sizes=(2**31 - 1, 65535, 65535),
            max_work_group_size=1,
            half_as_float=True,
            reduction_steps=True,
            row_folds=True,
            transpose_tile=64,
        )

    @staticmethod
    def opencl_gpu(
        *,
        max_work_group_size: int,
        max_work_item_sizes: tuple[int, int, int],
        local_mem_size: int,
        max_compute_units: int,
        global_mem_cacheline_size: int = 0,
        extensions: Iterable[str] = (),
    ) -> HardwareSettings:
        """The OpenCL GPU preset from device queries (`extensions` split into names)."""
        threads = 1
        while threads * 2 <= min(256, max_work_group_size):
            threads *= 2
        enabled = set(extensions)
        return HardwareSettings(
            threads=threads,
            vec_size=1,
            use_global=False,
            mem_width=global_mem_cacheline_size or 64,
            max_mem=local_mem_size,
            max_regs=16384,
            goal_groups=4 * max(1, max_compute_units),
            goal_flops_per_byte=50,
            goal_dim_sizes=tuple(max_work_item_sizes),  # type: ignore[arg-type]
            max_work_group_size=max_work_group_size,
            native_fp16="cl_khr_fp16" in enabled,
            fp64="cl_khr_fp64" in enabled,
        )

    @staticmethod
    def opencl_cpu(
        *,
        max_work_group_size: int,
        max_work_item_sizes: tuple[int, int, int],
        max_compute_units: int,
        preferred_vector_width_float: int,
        native_vector_width_float: int = 1,
        global_mem_cacheline_size: int = 0,
        extensions: Iterable[str] = (),
    ) -> HardwareSettings:
        """The OpenCL CPU preset (e.g. PoCL): one work-item per group, global operands.
        float16 is computed in float32, loaded and stored as half, even where the driver has
        cl_khr_fp16 (Intel's CPU runtime): its half arithmetic is 5-8x slower than float32
        there, and the results are then those of llvm_cpu and PoCL.

        The vector width is the driver's preferred float width, at most 16; where the driver
        prefers 1 (Intel's CPU runtime, whose compiler vectorises across the work-items of a
        work-group) its native width, at most 16. With one work-item per group, Intel's
        scalar kernels ran 4-13x slower than explicit float8 ones, and float16 halved the
        float8 time of matmuls and convolutions again (matmul 1024: 242, 52, 33 ms; Intel
        Xeon, Emerald Rapids). PoCL there (preferred width 16) gained as much from float16
        over float8: matmul 1024 44 -> 21 ms, conv 3x3 8x28x128 25 -> 9.7 ms; its reductions,
        elementwise kernels and norms were unchanged within the noise."""
        preferred = preferred_vector_width_float
        widest = min(16, preferred if preferred > 1 else native_vector_width_float)
        vec = 1
        while vec * 2 <= widest:
            vec *= 2
        enabled = set(extensions)
        return HardwareSettings(
            threads=1,
            vec_size=vec,
            use_global=True,
            mem_width=global_mem_cacheline_size or 64,
            max_mem=32768,
            max_regs=1536,
            goal_groups=4 * max(1, max_compute_units),
            goal_flops_per_byte=16,
            goal_dim_sizes=tuple(max_work_item_sizes),  # type: ignore[arg-type]
            max_work_group_size=max_work_group_size,
            native_fp16=False,
            fp64="cl_khr_fp64" in enabled,
            vector_loops=vec > 1,
            half_as_float=True,
            transpose_tile=64,
        )
