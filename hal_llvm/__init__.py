"""LLVM CPU backend: the `llvm_cpu.0` device, JIT-compiled with llvmlite and MCJIT and run on
a thread pool (ARCHITECTURE.md 7). The registry calls `make_driver()`."""

from __future__ import annotations

from hal_llvm.compiler import LLVMCompiler, LLVMLibrary, compile_module
from hal_llvm.device import (
    LLVMDevice,
    LLVMDeviceSet,
    LLVMDriver,
    LLVMExecutor,
    LLVMKernel,
    make_driver,
)
from hal_llvm.grid import GRID_PROTOTYPE, emit_grid_entry, grid_symbol
from hal_llvm.memory import CpuArena, CpuBuffer
from hal_llvm.runtime import CpuRuntime, LLVMEvent

__all__ = [
    "GRID_PROTOTYPE",
    "CpuArena",
    "CpuBuffer",
    "CpuRuntime",
    "LLVMCompiler",
    "LLVMDevice",
    "LLVMDeviceSet",
    "LLVMDriver",
    "LLVMEvent",
    "LLVMExecutor",
    "LLVMKernel",
    "LLVMLibrary",
    "compile_module",
    "emit_grid_entry",
    "grid_symbol",
    "make_driver",
]
