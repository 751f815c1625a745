"""From LLVM IR to callable machine code: target machine, O3 pipeline, MCJIT (7.3).

Place in the pipeline: `LLVMCompiler.build(kernel_list, device)` asks a renderer for one
`llvmlite.ir.Module` holding every distinct kernel body and its `__grid` entry point
(`grid.py`), then `compile_module` parses and verifies it, optimises it with LLVM's default
O3 pipeline (new pass manager, loop and SLP vectorisation) for the host CPU, emits an object
file and loads that with MCJIT. The result is an `LLVMLibrary`, from which the executor
prepares kernels. `export` hands the object file on (with the CPU features it needs and the
optimised IR text); `restore` loads it again in another process, with no renderer and no
optimiser, on a CPU that has those features (tile's disk cache, saved bundles: issue 13).

The renderer is a callable `render(kernel_list, settings) -> ir.Module | str`. By default it
is `hal_llvm.render.render`, looked up when the first kernel with a body is built, so this
module works (and is tested) without it. ZERO and COPY kernels have no body; they run as
`memset` / `memmove` and need no code at all.

Compilation holds a process-wide lock (llvmlite does not document concurrent compilation as
safe), and each engine gets its own target machine: MCJIT takes ownership of it, and sharing
one between engines double-frees it (PERFORMANCE.md 4.2). Each module is parsed into its own
LLVM context, freed as soon as the object file is emitted, so that what a module interned
(types, constants) is not kept by LLVM's global context.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llvmlite.binding as llvm
from llvmlite.binding import ffi

from hal.errors import BackendCompileError, HalError, UnsupportedOnDevice
from hal.interfaces import Compiler, Library
from hal_llvm.grid import GRID_PROTOTYPE, grid_symbols
from hal_llvm.host import HostCpu, initialise_llvm, probe_host

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from llvmlite import ir

    from hal.interfaces import Device
    from semtree.kernel import HardwareSettings, KernelInfo, KernelList

    Renderer = Callable[[KernelList, HardwareSettings], "ir.Module | str"]

_compile_lock = threading.Lock()

# Launch shapes the CPU runs: one work-item per work-group (7.1), or "any" for ZERO/COPY.
_CPU_LOCAL_SIZES = ((1, 1, 1), (0, 0, 0))


@functools.cache
def llvm_version() -> tuple[int, ...]:
    """The version of the LLVM that llvmlite links (with llvmlite's own, both change code)."""
    import llvmlite

    return (*llvm.llvm_version_info, *map(int, re.findall(r"\d+", llvmlite.__version__)[:3]))


@functools.cache
def host() -> HostCpu:
    """The host CPU, probed once per process."""
    return probe_host()


class JitModule:
    """One JIT-compiled object file, loaded by MCJIT: the engine and what it needs alive.

    `object_code` is the relocatable object the engine loaded (`Compiler.export` keeps it),
    `features` the CPU features it was compiled for, `functions` the optimised IR text of
    each defined function (empty when it was restored from an export that left them out)."""

    def __init__(
        self,
        name: str,
        engine: Any,
        object_code: bytes,
        features: frozenset[str],
        functions: dict[str, str],
    ) -> None:
        self.name = name
        self._engine = engine
        self.object_code = object_code
        self.features = features
        self.functions = functions

    def __del__(self, finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # `finalizing` is bound now: late in interpreter shutdown the module's `sys` is None.
        if finalizing():
            return
        self._engine.close()

    def address(self, symbol: str) -> int:
        """The address of a function defined in the module; KeyError if there is none."""
        address = self._engine.get_function_address(symbol)
        if not address:
            raise KeyError(f"{symbol!r} is not defined in JIT module {self.name!r}")
        return int(address)

    def grid_entry(self, symbol: str) -> Callable[[int, int, int], None]:
        """The ctypes callable of the grid entry point `symbol` (params address, begin, end;
        `hal_llvm.grid.grid_symbol` names them)."""
        return GRID_PROTOTYPE(self.address(symbol))

    def source_of(self, names: Iterable[str]) -> str:
        """The optimised IR of those of `names` that survived optimisation."""
        text = "\n".join(self.functions[name] for name in names if name in self.functions)
        return text or f"; {', '.join(names)}: loaded as machine code, no IR kept"


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "module"


def _target_machine(cpu: HostCpu, vec_size: int) -> Any:
    target = llvm.Target.from_triple(cpu.triple)
    return target.create_target_machine(
        cpu=cpu.name, features=cpu.target_features(vec_size), opt=3, jit=True
    )


def compile_module(source: ir.Module | str, *, name: str = "tile", vec_size: int = 0) -> JitModule:
    """Verify, optimise (O3 for the host CPU), emit an object file and load it.

    `vec_size` is the widest vector width the code was generated for (float32 lanes);
    16 lets LLVM use 512-bit vectors on AVX-512 hosts. Raises BackendCompileError with
    the IR text and LLVM's message when the IR does not parse or verify. The module and its
    LLVM context are freed before this returns: only the object code is kept, so that what
    runs is exactly what `export` hands on.
    """
    text = source if isinstance(source, str) else str(source)
    cpu = host()
    initialise_llvm()
    with _compile_lock:
        context = llvm.create_context()
        try:
            try:
                module = llvm.parse_assembly(text, context=context)
                module.verify()
            except RuntimeError as error:
                message = "LLVM rejected the IR"
                raise BackendCompileError(name, text, str(error), message) from error
            machine = _target_machine(cpu, vec_size)
            module.triple = cpu.triple
            module.data_layout = str(machine.target_data)
            tuning = llvm.create_pipeline_tuning_options(speed_level=3)
            tuning.loop_vectorization = True
            tuning.slp_vectorization = True
            tuning.loop_unrolling = True
            passes = llvm.create_pass_builder(machine, tuning)
            manager = passes.getModulePassManager()
            manager.run(module, passes)
            _dispose_pass_manager(manager)
            functions = {
                function.name: str(function)
                for function in module.functions
                if not function.is_declaration
            }
            dump_directory = os.environ.get("TILE_DUMP_DIR")
            if dump_directory:
                _dump(Path(dump_directory), name, text, str(module), machine.emit_assembly(module))
            object_code = machine.emit_object(module)
            module.close()
        finally:
            ffi.lib.LLVMPY_ContextDispose(context)
            context.detach()
        return _load_locked(name, object_code, cpu.features, functions, machine)


def load_object(
    name: str, object_code: bytes, features: frozenset[str], functions: dict[str, str]
) -> JitModule:
    """Load an object file `compile_module` emitted (no LLVM IR, no optimiser)."""
    cpu = host()
    initialise_llvm()
    with _compile_lock:
        return _load_locked(name, object_code, features, functions, _target_machine(cpu, 0))


def _load_locked(
    name: str,
    object_code: bytes,
    features: frozenset[str],
    functions: dict[str, str],
    machine: Any,
) -> JitModule:
    # MCJIT needs a module to start from; an empty one, then the object file. The engine
    # takes ownership of `machine` (one machine per engine: sharing one double-frees it).
    empty = llvm.parse_assembly("")
    empty.triple = host().triple
    engine = llvm.create_mcjit_compiler(empty, machine)
    engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
    engine.finalize_object()
    return JitModule(name, engine, object_code, features, functions)


def _dispose_pass_manager(manager: Any) -> None:
    """Free a module pass manager now. llvmlite 0.50 never frees one: in ModulePassManager's
    method order ObjectRef's empty `_dispose` hides NewPassManager's, so each compilation
    leaked its O3 pipeline (~60 KB; issue 10). Done only where the bug is. (llvmlite also
    never frees a pass builder's instrumentation callbacks, ~15 KB a compilation, which no
    binding reaches.)"""
    if type(manager)._dispose is ffi.ObjectRef._dispose:
        ffi.lib.LLVMPY_DisposeNewModulePassManger(manager)
        manager.detach()


def _dump(directory: Path, name: str, before: str, after: str, assembly: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    stem = _safe_file_name(name)
    (directory / f"{stem}.ll").write_text(before)
    (directory / f"{stem}.opt.ll").write_text(after)
    (directory / f"{stem}.s").write_text(assembly)


class LLVMLibrary(Library):
    """The compiled kernels of one KernelList: a JIT module (None when every kernel is a
    ZERO or COPY kernel, which need no code)."""

    def __init__(self, kernel_list: KernelList, jit: JitModule | None) -> None:
        self.kernel_list = kernel_list
        self.jit = jit
        self.symbols = grid_symbols(kernel_list.kernels)

    def source(self, index: int) -> str:
        info = self.kernel_list.kernels[index]
        if info.body is None:
            return f"; {info.name}: {info.kind.value} kernel, run as a memset/memmove call"
        assert self.jit is not None  # built whenever a kernel has a body
        return self.jit.source_of((info.body.name, self.symbols[index][0]))

    def grid_entry(self, index: int) -> Callable[[int, int, int], None]:
        """The native entry point of kernel `index` (which must have a body)."""
        info = self.kernel_list.kernels[index]
        if info.body is None or self.jit is None:
            raise HalError(f"kernel {info.name!r} has no body and therefore no entry point")
        return self.jit.grid_entry(self.symbols[index][0])


def default_renderer() -> Renderer:
    """`hal_llvm.render.render`, imported on first use."""
    try:
        module = importlib.import_module("hal_llvm.render")
    except ImportError as error:
        raise HalError(
            "the LLVM renderer (hal_llvm.render.render) is not available, so kernels with a "
            f"body cannot be built yet: {error}"
        ) from error
    return module.render


def check_launch_shapes(kernel_list: KernelList) -> None:
    """Raise UnsupportedOnDevice for any kernel whose work-groups hold more than one
    work-item: the CPU runs one work-item per work-group (7.1)."""
    for info in kernel_list.kernels:
        if tuple(info.local_size) not in _CPU_LOCAL_SIZES:
            raise UnsupportedOnDevice(
                f"kernel {info.name!r} has local size {tuple(info.local_size)}; llvm_cpu runs "
                "one work-item per work-group, so it must be (1, 1, 1) or (0, 0, 0)"
            )


def _module_name(kernel_list: KernelList) -> str:
    names = [info.name for info in kernel_list.kernels]
    return names[0] if len(names) == 1 else f"{names[0]}_and_{len(names) - 1}_more"


class LLVMCompiler(Compiler):
    """KernelList -> LLVMLibrary through a renderer, the O3 pipeline and MCJIT."""

    def __init__(self, renderer: Renderer | None = None) -> None:
        self.renderer = renderer

    def build(self, kernel_list: KernelList, device: Device) -> LLVMLibrary:
        check_launch_shapes(kernel_list)
        with_body: list[KernelInfo] = [i for i in kernel_list.kernels if i.body is not None]
        if not with_body:
            return LLVMLibrary(kernel_list, None)
        renderer = self.renderer or default_renderer()
        settings = device.settings
        module = renderer(kernel_list, settings)
        name = _module_name(kernel_list)
        jit = compile_module(module, name=name, vec_size=settings.vec_size)
        for info, (symbol, _) in zip(
            with_body, grid_symbols(kernel_list.kernels).values(), strict=True
        ):
            if symbol not in jit.functions:
                text = module if isinstance(module, str) else str(module)
                raise BackendCompileError(
                    info.name, text, "", f"the rendered module defines no {symbol!r}"
                )
        return LLVMLibrary(kernel_list, jit)

    def export(self, library: Library) -> bytes:
        if not isinstance(library, LLVMLibrary):
            raise TypeError(f"an LLVM compiler cannot export {library!r}")
        return export_library(library)

    def restore(self, kernel_list: KernelList, code: bytes, device: Device) -> LLVMLibrary:
        check_launch_shapes(kernel_list)
        return restore_library(kernel_list, code)


# An export: this magic, the header's length (8 bytes, little-endian), the JSON header, then
# the object file.
_EXPORT_MAGIC = b"tile-llvm-object\n"
_EXPORT_FORMAT = 1


def export_library(library: LLVMLibrary) -> bytes:
    """`LLVMCompiler.export`: the object file, the features it needs, the optimised IR."""
    jit = library.jit
    header = {
        "format": _EXPORT_FORMAT,
        "triple": host().triple,
        "features": sorted(jit.features) if jit else [],
        "name": jit.name if jit else "",
        "functions": jit.functions if jit else {},
    }
    data = json.dumps(header, sort_keys=True).encode()
    code = jit.object_code if jit else b""
    return _EXPORT_MAGIC + len(data).to_bytes(8, "little") + data + code


def restore_library(kernel_list: KernelList, code: bytes) -> LLVMLibrary:
    """`LLVMCompiler.restore`: load an export on this host, or say why it cannot run here."""
    if not code.startswith(_EXPORT_MAGIC):
        raise HalError("not LLVM code exported by tile (wrong magic)")
    start = len(_EXPORT_MAGIC) + 8
    size = int.from_bytes(code[len(_EXPORT_MAGIC) : start], "little")
    try:
        header = json.loads(code[start : start + size])
        format_, triple = header["format"], header["triple"]
        features, name, functions = (
            frozenset(header["features"]),
            header["name"],
            header["functions"],
        )
    except (ValueError, KeyError, TypeError) as error:
        raise HalError(f"damaged LLVM export header: {error}") from error
    if format_ != _EXPORT_FORMAT:
        raise HalError(f"LLVM export format {format_}, this tile reads {_EXPORT_FORMAT}")
    cpu = host()
    if triple != cpu.triple:
        raise UnsupportedOnDevice(f"the code was compiled for {triple}; this host is {cpu.triple}")
    missing = sorted(features - cpu.features)
    if missing:
        raise UnsupportedOnDevice(
            f"the code was compiled for a CPU with {', '.join(missing)}, which this CPU "
            f"({cpu.name}) lacks"
        )
    object_code = code[start + size :]
    if not any(info.body is not None for info in kernel_list.kernels):
        return LLVMLibrary(kernel_list, None)
    if not object_code:
        raise HalError("the LLVM export holds no object code for kernels with a body")
    return LLVMLibrary(kernel_list, load_object(name, object_code, features, functions))
