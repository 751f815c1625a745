"""GPU-style kernels: work-groups of many work-items, operand tiles staged in local
memory (`generate.generate_gpu_group`, used by `tile.lower.generate` for GPU settings).
"""
