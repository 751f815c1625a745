"""Host CPU probing for the LLVM device: what LLVM calls the CPU, its features, its cores.

Place in the pipeline: read once per process when the driver starts. The compiler uses the
name and feature string for the target machine (never "generic", ARCHITECTURE.md 11.1); the
device derives its description and `HardwareSettings` preset (Appendix C) from it; the
runtime sizes its thread pool from the core count.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm

# Appendix C: the LLVM device's settings that do not depend on the host.
_GRID_LIMITS = (2**31 - 1, 65535, 65535)


@functools.cache
def initialise_llvm() -> None:
    """Initialise LLVM's native target once. (`llvm.initialize()` raises in llvmlite 0.50:
    initialisation is otherwise automatic; the asm printer is needed by MCJIT, A.1.)"""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def usable_cores() -> int:
    """Cores this process may run on: `TILE_CPU_THREADS` if set, else the affinity mask."""
    override = os.environ.get("TILE_CPU_THREADS", "").strip()
    if override:
        try:
            count = int(override)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(f"TILE_CPU_THREADS must be a positive integer, not {override!r}")
        return count
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # platforms without affinity masks (macOS)
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class HostCpu:
    """The host as LLVM sees it."""

    triple: str  # e.g. "x86_64-unknown-linux-gnu"
    name: str  # LLVM CPU name, e.g. "cascadelake"
    features: frozenset[str] = field(repr=False)  # enabled feature names: "avx2", "fma", ...
    feature_string: str = field(repr=False)  # "+avx2,+fma,-sse4a,...": LLVM's flattened form
    cores: int = 1  # usable cores (compute threads)

    @property
    def vec_size(self) -> int:
        """Widest SIMD width in float32 lanes (Appendix C: 16 with AVX-512F, 8 with AVX2)."""
        if "avx512f" in self.features:
            return 16
        if "avx2" in self.features or "avx" in self.features:
            return 8
        return 4

    def target_features(self, vec_size: int) -> str:
        """The feature string for a target machine generating code for `vec_size` lanes.

        On AVX-512 hosts LLVM prefers 256-bit vectors unless told otherwise (PERFORMANCE.md
        4.1); switching `prefer-256-bit` off is the only way through llvmlite to get zmm.

        Gathers are off (`prefer-no-gather`, x86 with AVX2): LLVM's loop vectoriser costs them
        as cheap and vectorised the grid loop of small work-groups with them, one gather per
        element a work-group reads. A sum over a last axis of 19 (200070 rows) ran 19 gathers
        per 8 rows instead of the kernel's own vector loads: 0.55 ms instead of 0.19, and
        2.2 ms instead of 0.3 when the rows were no longer in cache (AMD Zen 5). Gathers are
        slow on Zen 4 and 5, and microcoded on Intel since the Gather Data Sampling fix; our
        own vector code never needs them.
        """
        features = self.feature_string
        if "avx2" in self.features:
            features += ",+prefer-no-gather"
        if vec_size >= 16 and "avx512f" in self.features:
            features += ",-prefer-256-bit"
        return features

    def settings_fields(self) -> dict[str, Any]:
        """The keyword arguments of `semtree.kernel.HardwareSettings` for this host
        (Appendix C, `llvm_cpu` column)."""
        wide = self.vec_size >= 16
        return {
            "threads": 1,
            "vec_size": self.vec_size,
            "use_global": True,
            "mem_width": 64,
            "max_mem": 32768,
            "max_regs": 1536 if wide else 768,
            "goal_groups": 4 * self.cores,
            "goal_flops_per_byte": 16,
            "goal_dim_sizes": _GRID_LIMITS,
            "max_work_group_size": 1,
            "native_fp16": False,
            "fp64": True,
            "fast_math": False,
            "half_as_float": True,
            "reduction_steps": True,
            "row_folds": True,
            "transpose_tile": 64,
        }


def probe_host() -> HostCpu:
    """Ask LLVM and the OS about this machine (a few milliseconds; cache the result)."""
    initialise_llvm()
    feature_map = llvm.get_host_cpu_features()
    enabled = frozenset(name for name, on in feature_map.items() if on)
    return HostCpu(
        triple=llvm.get_process_triple(),
        name=llvm.get_host_cpu_name(),
        features=enabled,
        feature_string=feature_map.flatten(),
        cores=usable_cores(),
    )
