"""From LLVM IR to callable machine code: target machine, O3 pipeline, MCJIT (7.3).

Place in the pipeline: `LLVMCompiler.build(kernel_list, device)` asks a renderer for one
`llvmlite.ir.Module` holding every distinct kernel body and its `__grid` entry point
(`grid.py`), then `compile_module` parses and verifies it, optimises it with LLVM's default
O3 pipeline (new pass manager, loop and SLP vectorisation) for the host CPU, and JIT-compiles
it with MCJIT. The result is an `LLVMLibrary`, from which the executor prepares kernels.

The renderer is a callable `render(kernel_list, settings) -> ir.Module | str`. By default it
is `hal_llvm.render.render`, looked up when the first kernel with a body is built, so this
module works (and is tested) without it. ZERO and COPY kernels have no body; they run as
`memset` / `memmove` and need no code at all.

Compilation holds a process-wide lock (llvmlite does not document concurrent compilation as
safe), and each engine gets its own target machine: MCJIT takes ownership of it, and sharing
one between engines double-frees it (PERFORMANCE.md 4.2). Each module also gets its own LLVM
context, so that everything a module interned (types, constants) is freed with its engine
when the program cache evicts the program, not kept by LLVM's global context.
"""

from __future__ import annotations

import functools
import importlib
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
def host() -> HostCpu:
    """The host CPU, probed once per process."""
    return probe_host()


class JitModule:
    """One optimised, JIT-compiled LLVM module: the engine and everything it needs alive.

    It owns the module's LLVM context and frees it after the engine (which owns the module):
    left to llvmlite, a garbage cycle could finalize the context first."""

    def __init__(
        self, name: str, engine: Any, target_machine: Any, context: Any, functions: dict[str, str]
    ) -> None:
        self.name = name
        self._engine = engine
        self._target_machine = target_machine  # owned by the engine; kept for clarity
        self._context = context
        context._owned = True  # llvmlite's finalizer leaves it to __del__
        self.functions = functions  # optimised IR text of each defined function, by name

    def __del__(self, finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # `finalizing` is bound now: late in interpreter shutdown the module's `sys` is None.
        if finalizing():
            return
        self._engine.close()
        ffi.lib.LLVMPY_ContextDispose(self._context)
        self._context.detach()

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
        return "\n".join(self.functions[name] for name in names if name in self.functions)


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "module"


def compile_module(source: ir.Module | str, *, name: str = "tile", vec_size: int = 0) -> JitModule:
    """Verify, optimise (O3 for the host CPU) and JIT-compile `source`.

    `vec_size` is the widest vector width the code was generated for (float32 lanes);
    16 lets LLVM use 512-bit vectors on AVX-512 hosts. Raises BackendCompileError with
    the IR text and LLVM's message when the IR does not parse or verify.
    """
    text = source if isinstance(source, str) else str(source)
    cpu = host()
    initialise_llvm()
    with _compile_lock:
        context = llvm.create_context()
        try:
            module = llvm.parse_assembly(text, context=context)
            module.verify()
        except RuntimeError as error:
            raise BackendCompileError(name, text, str(error), "LLVM rejected the IR") from error
        target = llvm.Target.from_triple(cpu.triple)
        machine = target.create_target_machine(
            cpu=cpu.name, features=cpu.target_features(vec_size), opt=3, jit=True
        )
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
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
    return JitModule(name, engine, machine, context, functions)


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
