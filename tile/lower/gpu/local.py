"""The two cooperative local-memory procedures of the GPU contraction kernels
(`tile.lower.gpu.contract`): staging an operand's footprint, and merging partial accumulators.

Both are executed by every work-item of a work-group; each work-item writes only its own
local elements between two barriers, so no element is written by one work-item and touched
by another without a barrier in between (the reference interpreter checks exactly this).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Clamp,
    Expr,
    For,
    IntConst,
    Load,
    Lookup,
    Select,
    Stmt,
    Store,
    Subscript,
)
from semtree.types import DType, Region, Type, TypeBase
from tile.lang.syntax import AggOp
from tile.lower.kernel import affine
from tile.lower.ops import aggregate

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from semtree.nodes import LValue
    from tile.lower.flat import FlatAccess
    from tile.lower.gpu.layout import GpuTiling, Staging
    from tile.lower.kernel import KernelWriter


def div_mod(expr: Expr, divisor: int, modulus: int | None) -> Expr:
    """`(expr / divisor) % modulus`, leaving out the operations that change nothing."""
    if divisor > 1:
        expr = Binary(BinOp.DIV, expr, IntConst(divisor))
    if modulus is not None:
        expr = Binary(BinOp.MOD, expr, IntConst(modulus))
    return expr


def less(value: Expr, limit: int) -> Expr:
    return Binary(BinOp.LT, value, IntConst(limit))


def local_array(dtype: DType, size: int) -> Type:
    return Type(TypeBase.VALUE, dtype, 1, size, Region.LOCAL)


def stage_copy(
    writer: KernelWriter,
    access: FlatAccess,
    staging: Staging,
    array: str,
    lid: Expr,
    threads: int,
    bases: Mapping[int, Expr],
    reach: Mapping[int, int],
) -> list[Stmt]:
    """Copy the footprint of `access` into the local `array`: work-item `lid` copies the
    positions `lid, lid + threads, ...`, so consecutive work-items read consecutive elements
    along the first axis. `bases[v]` is variable `v`'s value at the start of the tile and
    chunk, `reach[v]` the largest value that base takes. A position that falls outside the
    tensor (at a partial tile or chunk) reads a clamped element, which no valid tuple uses."""
    size = staging.size
    count = -(-size // threads)
    counter = writer.fresh(f"s_{access.tensor}") if count > 1 else ""
    position: Expr = lid
    if counter:
        position = affine([(threads, Load(Lookup(counter))), (1, lid)])
    declaration, position = writer.declare(Type.index(), "pos", position)
    terms = [(s, bases[v]) for v, s in enumerate(access.strides) if s]
    const = low = high = access.offset
    for v, stride in enumerate(access.strides):
        far = stride * reach.get(v, 0)
        low, high = low + min(0, far), high + max(0, far)
    for axis, stride in zip(staging.axes, staging.strides, strict=True):
        last = stride * axis.extent == size  # the position is below `size`
        terms.append((axis.unit, div_mod(position, stride, None if last else axis.extent)))
        const += axis.unit * axis.low
        low += axis.unit * axis.low
        high += axis.unit * (axis.low + axis.extent - 1)
    offset = affine(terms, const)
    if low < 0 or high >= access.size:
        offset = Clamp(offset, IntConst(0), IntConst(access.size - 1))
    copy: Stmt = Store(Subscript(Lookup(array), position), writer.load(access.tensor, offset).expr)
    if count * threads != size:
        copy = sb.if_(less(position, size), copy)
    if counter:
        return [For(counter, count, 1, sb.block(declaration, copy))]
    return [declaration, copy]


@dataclass(frozen=True, slots=True)
class Partials:
    """A work-item's private accumulators (and hit flags) to merge, element `j` at
    `slot(name, j)`."""

    agg: AggOp
    dtype: DType
    acc: str
    hit: str  # "" without flags
    slot: Callable[[str, Expr], LValue]


def merge_partials(
    writer: KernelWriter, tiling: GpuTiling, partials: Partials, lid: Expr, split: Expr
) -> list[Stmt]:
    """Merge the accumulators of the `tiling.splits` work-items that share each element
    (lane `l` of every split) into split 0: they are published in local arrays, then the
    upper half of the remaining splits is folded into the lower half until one is left."""
    threads, per_item = tiling.threads, tiling.per_item
    size = threads * per_item
    values = writer.fresh("partial_acc")
    statements: list[Stmt] = [sb.declare(local_array(partials.dtype, size), values, None)]
    shared = [(partials.acc, values)]
    flags = ""
    if partials.hit:
        flags = writer.fresh("partial_hit")
        statements.append(sb.declare(local_array(DType.BOOLEAN, size), flags, None))
        shared.append((partials.hit, flags))

    def at(array: str, j: Expr, shift: int = 0) -> Subscript:
        return Subscript(Lookup(array), affine([(threads, j), (1, lid)], shift))

    def each(make: Callable[[Expr], list[Stmt]]) -> list[Stmt]:
        if per_item == 1:
            return make(IntConst(0))
        counter = writer.fresh("jm")
        return [For(counter, per_item, 1, sb.block(make(Load(Lookup(counter)))))]

    def publish(j: Expr) -> list[Stmt]:
        return [Store(at(array, j), Load(partials.slot(mine, j))) for mine, array in shared]

    def fold(j: Expr, shift: int, last: bool) -> list[Stmt]:
        acc = partials.slot(partials.acc, j)
        other = Load(at(values, j, shift))
        if partials.agg is AggOp.ASSIGN:  # at most one split holds a value (spec 8.7)
            merged: Expr = Select(Load(at(flags, j, shift)), other, Load(acc))
        else:
            merged = aggregate(partials.agg, partials.dtype, Load(acc), other)
        step: list[Stmt] = [Store(acc, merged)]
        if flags:
            hit = partials.slot(partials.hit, j)
            step.append(Store(hit, Binary(BinOp.LOR, Load(hit), Load(at(flags, j, shift)))))
        return step if last else step + publish(j)

    statements += [*each(publish), Barrier()]
    half = tiling.splits // 2
    while half >= 1:
        shift, last = half * tiling.lanes, half == 1
        statements.append(sb.if_(less(split, half), each(lambda j, s=shift, e=last: fold(j, s, e))))
        if not last:
            statements.append(Barrier())
        half //= 2
    return statements
