"""GPU-style kernels for contraction and elementwise groups (design 8.7, 11.2).

`tile.lower.generate` calls `generate_gpu_group` instead of `tile.lower.contract.generate_group`
when the device's settings ask for work-groups of several work-items or for operands staged through
local memory (`uses_gpu_kernels`: the OpenCL GPU preset, or any device forced to it, see
`hal_opencl.device`). Two kinds of kernel come out, both launched with work-groups of
`settings.threads` work-items:

* a contraction with reduction variables gets the **staged** kernel of
  `tile.lower.gpu.contract`: work-group tiles, operand tiles in `__local` arrays between
  barriers, partial results merged through local memory;
* everything else (elementwise groups, contractions without reductions such as transposes
  and paddings, contractions without any valid tuple, and a contraction whose merge would not
  fit local memory) gets a **work-item parallel** kernel: the CPU generator's kernel with one
  element per work-item, its work-group ids read as global work-item ids, the grid padded to
  whole work-groups and the padding masked off. Nothing is reused across work-items there,
  so local memory would buy nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import Binary, BinOp, IdKind, IndexExpr, IntConst, Node, rewrite
from tile.lower.accumulators import accumulator_dtype
from tile.lower.contract import generate_group
from tile.lower.gpu.contract import generate_staged
from tile.lower.gpu.layout import choose_tiling
from tile.lower.kernel import INDEX_LIMIT

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from semtree.nodes import Function
    from tile.lower.flat import FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import GeneratedBody, ProgramContext


@dataclass(frozen=True, slots=True)
class GpuKernel:
    generated: GeneratedBody
    tiles: tuple[int, ...]  # output elements per work-group, per output dimension
    local_size: tuple[int, int, int]
    staged: bool  # the work-group tiled kernel (local memory, barriers)


def uses_gpu_kernels(settings: HardwareSettings) -> bool:
    """Whether `settings` describe a device that wants GPU-style kernels."""
    return settings.threads > 1 or not settings.use_global


def generate_gpu_group(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    name: str,
) -> GpuKernel:
    """The GPU-style kernel of a CONTRACTION or ELEMENTWISE plan."""
    if flat is not None and not flat.empty and len(flat.reductions):
        tiling = choose_tiling(flat, settings, accumulator_dtype(flat.dtype))
        if tiling is not None:
            generated = generate_staged(plan, flat, context, settings, tiling, name)
            return GpuKernel(generated, tiling.tiles, (tiling.threads, 1, 1), True)
    return work_item_parallel(plan, flat, context, settings, name)


def work_item_parallel(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    name: str,
) -> GpuKernel:
    """One element per work-item, `settings.threads` work-items per work-group."""
    threads = settings.threads
    width = (INDEX_LIMIT - 1) // threads * threads  # a two-dimensional grid's row of items
    goal = settings.goal_dim_sizes
    single = replace(settings, threads=1, use_global=True, goal_dim_sizes=(width, *goal[1:]))
    tiles = (1,) * len(plan.shape)
    generated = generate_group(plan, flat, context, single, tiles, name)
    body = _group_ids_as_global_ids(generated.body)
    columns, rows, layers = generated.global_size
    if rows == 1 and layers == 1:
        padded = -(-columns // threads) * threads
        if padded != columns:
            inside = Binary(BinOp.LT, IndexExpr(IdKind.GLOBAL, 0), IntConst(columns))
            body = replace(body, body=sb.block(sb.if_(inside, list(body.body.stmts))))
        columns = padded
    elif columns % threads:
        raise AssertionError(f"grid row of {columns} work-items is not whole work-groups")
    generated = replace(generated, body=body, global_size=(columns, rows, layers))
    return GpuKernel(generated, tiles, (threads, 1, 1), False)


def _group_ids_as_global_ids(body: Function) -> Function:
    def swap(node: Node) -> Node | None:
        if isinstance(node, IndexExpr) and node.kind is IdKind.GROUP:
            return IndexExpr(IdKind.GLOBAL, node.dim)
        return None

    result = rewrite(body, swap)
    assert isinstance(result, type(body))
    return result
