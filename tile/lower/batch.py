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

The last block of a launch may end past the rows there are: every batched kernel reads the
count of rows its launch covers, R, from the 0-D INT32 buffer `ROWS` (a parameter it gains),
and block `b` starts at row min(b * B, R - B). The last block then overlaps the one before it
and writes some of that block's rows again, with the same values (rows are independent), so
that R rows take ceil(R / B) blocks in one launch. A private buffer's copy stays at `b`. The
runtime (`tile.runtime.batch_plan`) passes R = the blocks' rows where they end exactly, and
checks that the clamped start keeps every vector access aligned before it uses it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList, KernelParam
from semtree.nodes import (
    Binary,
    Block,
    Call,
    Declare,
    Expr,
    For,
    IndexExpr,
    IntConst,
    Lanes,
    Load,
    Lookup,
    Param,
    Subscript,
    rewrite,
    walk,
)
from semtree.operators import BinOp, Builtin, IdKind
from semtree.types import DType, TensorShape, Type

if TYPE_CHECKING:
    from collections.abc import Collection

    from semtree.nodes import Function, Node

# Rows per block of the kernel lists a dynamic function is generated for, largest first: a
# multiple of the usual register tiles' heights (2, 3, 4, 6, 8, 12), so that a block ends
# where a tile does; a block of 6 for the rows left over; and single rows.
BLOCKS = (24, 6, 1)
ROWS = "_rows"  # the 0-D INT32 buffer of the rows a launch covers (every stage's input)


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
    shapes = dict(kernel_list.shapes)
    inputs = kernel_list.inputs
    if ROWS not in shapes:
        shapes[ROWS] = TensorShape(DType.INT32, ())
        inputs = (*inputs, ROWS)
    batched = {name: _elements(shapes[name]) for name in rows if name in shapes}
    per_row = {name: elements // block for name, elements in batched.items()}
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
        kernels.append(_batched_kernel(info, batched, per_row, block) if rewrite else info)
    batched_list = replace(kernel_list, kernels=tuple(kernels), shapes=shapes, inputs=inputs)
    return BatchedList(batched_list, block, batched, frozenset(private), frozenset(indexes))


def clamps(batched: BatchedList, rows: int) -> bool:
    """Whether `rows` rows (at least one block) may run in ceil(rows / block) blocks, the last
    clamped to end at the last row (module docstring): every vector access to a batched row
    buffer stays aligned at the clamped start."""
    block = batched.block
    start = rows - block
    if rows < block:
        return False
    if rows % block == 0:
        return True
    for index in batched.batched_kernels:
        for param in batched.kernel_list.kernels[index].params:
            elements = batched.block_elements.get(param.name)
            if elements is None or param.name in batched.private or param.vec_width == 1:
                continue
            if start * (elements // block) % param.vec_width:
                return False
    return True


def _elements(shape: TensorShape) -> int:
    total = 1
    for dim in shape.dims:
        total *= dim
    return total


def _batched_kernel(
    info: KernelInfo, batched: dict[str, int], per_row: dict[str, int], block: int
) -> KernelInfo:
    if info.kind is KernelKind.ZERO:  # the generator makes none today
        raise BatchError(f"kernel {info.name} zeroes a batched buffer whole")
    if info.body is None:
        return info  # a COPY: the runtime copies the blocks of each launch
    if info.global_size[2] != 1 or any(
        isinstance(node, IndexExpr) and node.dim == 2 for node in walk(info.body)
    ):
        raise BatchError(f"kernel {info.name} already uses the grid's third dimension")
    body = info.body
    used = {param.name for param in body.params}
    used |= {node.name for node in walk(body) if isinstance(node, Declare)}
    used |= {node.var for node in walk(body) if isinstance(node, For)}
    count, first = _fresh("rows_count", used), _fresh("block_row", used)
    offsets: dict[str, Expr] = {}
    group = IndexExpr(IdKind.GROUP, 2)
    for param, body_param in zip(info.params, body.params, strict=True):
        if param.name not in batched:
            continue
        elements, width = batched[param.name], param.vec_width
        if elements % width:
            raise BatchError(
                f"kernel {info.name} reads {param.name} as vectors of {width}, which "
                f"do not divide its block of {elements} elements"
            )
        if param.name not in per_row:  # a private copy per block
            offsets[body_param.name] = Binary(BinOp.MUL, group, IntConst(elements // width))
            continue
        row = Load(Lookup(first))
        if per_row[param.name] % width:  # exact where the runtime clamps (module docstring)
            scaled = Binary(BinOp.MUL, row, IntConst(per_row[param.name]))
            offsets[body_param.name] = Binary(BinOp.DIV, scaled, IntConst(width))
        else:
            stride = IntConst(per_row[param.name] // width)
            offsets[body_param.name] = Binary(BinOp.MUL, row, stride)
    body = _offset_accesses(body, offsets, info.name)
    # block_row = min(group * block, rows_count[0] - block)
    rows = Load(Subscript(Lookup(count), IntConst(0)))
    start = Call(
        Builtin.MIN,
        (Binary(BinOp.MUL, group, IntConst(block)), Binary(BinOp.SUB, rows, IntConst(block))),
    )
    statements = (Declare(Type.index(), first, start), *body.body.stmts)
    params = (*body.params, Param(count, Type.ptr(DType.INT32, const=True)))
    body = replace(body, params=params, body=Block(statements))
    # Kernels sharing a body may touch batched buffers of other block sizes, or none.
    shown = sorted((name, str(offset)) for name, offset in offsets.items())
    tag = hashlib.sha256(repr((block, shown)).encode()).hexdigest()[:8]
    body = replace(body, name=f"{body.name}_b{tag}")
    rows_param = KernelParam(ROWS, Direction.IN, DType.INT32, ())
    return replace(
        info,
        params=(*info.params, rows_param),
        body=body,
        key=f"{info.key}:b{tag}" if info.key else "",
    )


def _fresh(base: str, used: set[str]) -> str:
    name = base
    while name in used:
        name += "_"
    used.add(name)
    return name


def _offset_accesses(body: Function, offsets: dict[str, Expr], name: str) -> Function:
    """`body` with every access to a pointer of `offsets` moved by its offset; any other use
    of such a pointer is refused."""
    bases = sum(
        1
        for node in walk(body)
        if isinstance(node, Subscript | Lanes)
        and isinstance(node.base, Lookup)
        and node.base.name in offsets
    )
    uses = sum(1 for node in walk(body) if isinstance(node, Lookup) and node.name in offsets)
    if bases != uses:
        raise BatchError(f"kernel {name} uses a batched pointer other than by indexing it")

    def moved(node: Node) -> Node | None:
        if not isinstance(node, Subscript | Lanes) or not isinstance(node.base, Lookup):
            return None
        offset = offsets.get(node.base.name)
        if offset is None:
            return None
        return replace(node, offset=Binary(BinOp.ADD, node.offset, offset))

    result = rewrite(body, moved)
    assert isinstance(result, type(body))
    return result
