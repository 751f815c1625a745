"""GPU settings for the tests of the GPU-style kernels (`tile.lower.gpu.generate`).

`POCL_GPU` is the OpenCL GPU preset as PoCL's queries give it (what `TILE_FORCE_GPU_SETTINGS=1`
gives `opencl.0`), `TYPICAL_GPU` the preset of a common discrete GPU (256 work-items, 48 KiB of
local memory). `SMALL_GPU` and `MID_GPU` are made to reach every branch of the generator on
small shapes: few work-items, so output tiles with several elements per work-item and
reductions in several (partial) chunks; and so little local memory that some operands stay
in global memory, next to staged ones.
"""

from __future__ import annotations

from dataclasses import replace

from semtree.kernel import HardwareSettings

POCL_GPU = HardwareSettings.opencl_gpu(
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    local_mem_size=1 << 20,
    max_compute_units=2,
    global_mem_cacheline_size=64,
    extensions=("cl_khr_fp64",),
)
TYPICAL_GPU = HardwareSettings.opencl_gpu(
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64),
    local_mem_size=48 * 1024,
    max_compute_units=16,
    global_mem_cacheline_size=128,
    extensions=("cl_khr_fp64",),
)
SMALL_GPU = replace(POCL_GPU, threads=8, max_mem=256, goal_groups=64)
MID_GPU = replace(POCL_GPU, threads=32, max_mem=2048, goal_groups=4)
