"""Kernels for one block of a dynamic batch (issue 13 item 3).

A function compiled with a symbolic batch dimension (`tile.spec(("N", 128))`) is generated
for each of a few fixed block sizes (`BLOCKS` rows), like any program (`tile.lower.generate`).
This module makes those kernel lists run over
any number of blocks in one launch: every kernel that touches batched data finds its block
at `get_group_id(2)`, and each of its accesses to a batched buffer moves by that block's
offset (`hal.Kernel.run(batch=...)` multiplies the grid's third extent at launch). The
runtime (`tile.runtime.dynamic`) chooses the blocks of each call, so no N compiles anything.

Which buffers are batched:
- `rows`: the program's tensors whose first axis is the batch (the symbolic inputs, and
  every tensor `tile.lower.separable` found to carry it): block `b` of such a tensor is its
  rows [b * B, (b + 1) * B) for blocks of B rows, contiguous in row-major order;
- every buffer the generator made (split partials, operand copies) that a batched kernel
  writes: each block gets a private copy (block `b` at `b` times its size).
A kernel is batched when it touches a batched buffer. A batched kernel that writes a tensor
of the program without the batch axis would compute it once per block: `BatchError`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList
from semtree.nodes import Binary, IndexExpr, IntConst, Lanes, Lookup, Subscript, rewrite, walk
from semtree.operators import BinOp, IdKind

if TYPE_CHECKING:
    from collections.abc import Collection

    from semtree.nodes import Function, Node
    from semtree.types import TensorShape

# Rows per block of the kernel lists a dynamic function is generated for, largest first: a
# multiple of the usual register tiles' heights (2, 3, 4, 6, 8, 12), so that a block ends
# where a tile does; a block of 6 for the rows left over; and single rows.
BLOCKS = (24, 6, 1)


class BatchError(Exception):
    """A kernel list that cannot run block by block."""


@dataclass(frozen=True, slots=True)
class BatchedList:
    """A kernel list whose batched kernels run over any number of blocks."""

    kernel_list: KernelList
    block: int  # rows per block
    # Elements (of the buffer's dtype) of one block of each batched buffer.
    block_elements: dict[str, int]
    private: frozenset[str]  # batched buffers that are per-block copies, not row blocks
    batched_kernels: frozenset[int]  # indexes of the kernels launched over the blocks


def batch_kernels(
    kernel_list: KernelList,
    rows: Collection[str],
    program_tensors: Collection[str],
    block: int,
    *,
    rewrite: bool = True,
) -> BatchedList:
    """`kernel_list`, generated for one block of `block` rows, made to run over many blocks
    (module docstring). `rows`: the buffers whose first axis is the batch; `program_tensors`:
    every buffer named after a tensor of the program (the others are the generator's).
    `rewrite=False`: the bodies already run over blocks (a list this function made, kept on
    disk); only which buffers and kernels are batched is worked out again."""
    shapes = kernel_list.shapes
    batched = {name: _elements(shapes[name]) for name in rows if name in shapes}
    private: set[str] = set()
    kernels, indexes = [], set()
    for index, info in enumerate(kernel_list.kernels):
        touched = [param.name for param in info.params if param.name in batched]
        if not touched:
            kernels.append(info)
            continue
        for param in info.params:
            if param.direction is not Direction.OUT or param.name in batched:
                continue
            if param.name in program_tensors:
                raise BatchError(
                    f"kernel {info.name} writes {param.name}, which has no batch axis, from "
                    "batched data"
                )
            batched[param.name] = _elements(shapes[param.name])
            private.add(param.name)
        indexes.add(index)
        kernels.append(_batched_kernel(info, batched) if rewrite else info)
    batched_list = replace(kernel_list, kernels=tuple(kernels))
    return BatchedList(batched_list, block, batched, frozenset(private), frozenset(indexes))


def _elements(shape: TensorShape) -> int:
    total = 1
    for dim in shape.dims:
        total *= dim
    return total


def _batched_kernel(info: KernelInfo, batched: dict[str, int]) -> KernelInfo:
    if info.kind is KernelKind.ZERO:  # the generator makes none today
        raise BatchError(f"kernel {info.name} zeroes a batched buffer whole")
    if info.body is None:
        return info  # a COPY: the runtime copies the blocks of each launch
    if info.global_size[2] != 1 or any(
        isinstance(node, IndexExpr) and node.dim == 2 for node in walk(info.body)
    ):
        raise BatchError(f"kernel {info.name} already uses the grid's third dimension")
    strides: dict[str, int] = {}
    for param, body_param in zip(info.params, info.body.params, strict=True):
        if param.name not in batched:
            continue
        elements = batched[param.name]
        if elements % param.vec_width:
            raise BatchError(
                f"kernel {info.name} reads {param.name} as vectors of {param.vec_width}, which "
                f"do not divide its block of {elements} elements"
            )
        strides[body_param.name] = elements // param.vec_width
    body = _offset_accesses(info.body, strides, info.name)
    # Kernels sharing a body may touch batched buffers of other block sizes, or none.
    tag = hashlib.sha256(repr(sorted(strides.items())).encode()).hexdigest()[:8]
    body = replace(body, name=f"{body.name}_b{tag}")
    return replace(info, body=body, key=f"{info.key}:b{tag}" if info.key else "")


def _offset_accesses(body: Function, strides: dict[str, int], name: str) -> Function:
    """`body` with every access to a pointer of `strides` moved by `get_group_id(2)` times
    its stride; any other use of such a pointer is refused."""
    bases = sum(
        1
        for node in walk(body)
        if isinstance(node, Subscript | Lanes)
        and isinstance(node.base, Lookup)
        and node.base.name in strides
    )
    uses = sum(1 for node in walk(body) if isinstance(node, Lookup) and node.name in strides)
    if bases != uses:
        raise BatchError(f"kernel {name} uses a batched pointer other than by indexing it")
    block = IndexExpr(IdKind.GROUP, 2)

    def moved(node: Node) -> Node | None:
        if not isinstance(node, Subscript | Lanes) or not isinstance(node.base, Lookup):
            return None
        stride = strides.get(node.base.name)
        if stride is None:
            return None
        offset = Binary(BinOp.ADD, node.offset, Binary(BinOp.MUL, block, IntConst(stride)))
        return replace(node, offset=offset)

    result = rewrite(body, moved)
    assert isinstance(result, type(body))
    return result
