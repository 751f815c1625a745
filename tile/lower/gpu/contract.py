"""GPU-style contraction kernels: work-group tiles staged through local memory (ARCHITECTURE
8.7, 11.2), for devices whose settings ask for them (`tile.lower.gpu.generate`).

One work-group of `threads` work-items owns an output tile (`tile.lower.gpu.layout.GpuTiling`);
work-item `lid` is lane `lid % lanes` of split `lid / lanes`:

    acc[per_item] = identity; hit[per_item] = false
    for each chunk of the reduction:                      (uniform in the work-group)
        every staged operand: the work-items copy its footprint on (tile, chunk) into a
            __local array, consecutive work-items reading consecutive positions; positions
            that fall outside the tensor are clamped into it (no valid tuple reads them)
        barrier
        for each reduction point of the chunk owned by this split (points split + splits*q):
            if inside the ranges and the reduction-only guards hold:
                for each owned element j (element lane + lanes*j of the tile):
                    if inside the output, derived variables divide, guards hold:
                        acc[j] = agg(acc[j], combine(operands from local or global memory))
                        hit[j] = true
        barrier
    splits > 1: partial accumulators meet in __local arrays, halving the splits each step
        (a log2 tree with barriers); split 0 keeps the result
    split 0: for each owned element inside the output: the value (aggregate, or 0 / the
        default where nothing contributed), the fused epilogue, the stores

The group's tile, the chunk loops and every barrier depend only on the group id, so whole
work-groups reach each barrier together. `=` keeps whichever split's value arrived (spec 8.7:
at most one tuple contributes to an element of a valid program).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Expr,
    For,
    IdKind,
    IndexExpr,
    IntConst,
    Load,
    Lookup,
    Stmt,
    Store,
    Subscript,
)
from semtree.types import DType, Type, TypeBase
from tile.bind.program import OpKind
from tile.lang.syntax import AggOp, CombOp
from tile.lower.accumulators import accumulator_dtype
from tile.lower.gpu.element import OutputPhase, guarded
from tile.lower.gpu.local import Partials, div_mod, less, local_array, merge_partials, stage_copy
from tile.lower.kernel import GeneratedBody, KernelWriter, affine, conjunction, guard, product
from tile.lower.ops import GenerateError, Typed, aggregate, combine, constant, convert, identity

if TYPE_CHECKING:
    from collections.abc import Callable

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.gpu.layout import GpuTiling, Staging
    from tile.lower.kernel import ProgramContext

    # The statements for one element: (coordinates, offsets in the tile, accumulator slot).
    Element = Callable[[list[Expr], list[Expr], Expr], list[Stmt]]


def generate_staged(
    plan: KernelPlan,
    flat: FlatContraction,
    context: ProgramContext,
    settings: HardwareSettings,
    tiling: GpuTiling,
    name: str,
) -> GeneratedBody:
    """The GPU kernel of a CONTRACTION plan whose flat form has reduction variables."""
    return _StagedKernel(plan, flat, context, settings, tiling).build(name)


class _StagedKernel:
    def __init__(
        self,
        plan: KernelPlan,
        flat: FlatContraction,
        context: ProgramContext,
        settings: HardwareSettings,
        tiling: GpuTiling,
    ) -> None:
        if tuple(plan.shape) != tuple(flat.ranges[: flat.outputs]):
            raise GenerateError("the kernel grid is not the contraction's output shape")
        self.plan = plan
        self.flat = flat
        self.tiling = tiling
        self.writer = KernelWriter(context, plan.stores)
        self.output = OutputPhase(plan, flat, context, settings, self.writer)
        self.acc_dtype = accumulator_dtype(flat.dtype)
        self.reductions = list(flat.reductions)
        self.staged: dict[int, tuple[Staging, str]] = {}  # operand -> (layout, local array)
        self.merging = tiling.splits > 1
        # `=` merges by taking a partial value that exists, so it needs the flags too.
        self.tracks_hits = flat.needs_hit or (self.merging and flat.agg is AggOp.ASSIGN)
        self.acc = self.writer.fresh("acc")
        self.hit = self.writer.fresh("hit") if self.tracks_hits else ""
        self.lid: Expr = IntConst(0)
        self.lane: Expr = IntConst(0)
        self.split: Expr = IntConst(0)
        self.bases: dict[int, Expr] = {}  # variable -> its value at the tile's / chunk's start

    # ---- structure -----------------------------------------------------------------------------

    def build(self, name: str) -> GeneratedBody:
        tiling, shape = self.tiling, self.plan.shape
        width, rows = tiling.grid(shape)
        body = self.setup(width) + self.declarations() + self.chunks()
        finish = self.elements("o", self.finish)
        if self.merging:
            partials = Partials(self.flat.agg, self.acc_dtype, self.acc, self.hit, self.slot)
            body += merge_partials(self.writer, tiling, partials, self.lid, self.split)
            finish = [sb.if_(Binary(BinOp.EQ, self.split, IntConst(0)), finish)]
        body += finish
        groups = tiling.groups(shape)
        if width * rows != groups:  # padding work-groups: uniform, so barriers stay legal
            body = [sb.if_(less(self.group_linear(width), groups), body)]
        outputs, inputs = self.writer.params()
        points = product(self.flat.ranges[k] for k in self.reductions)
        per_point = 1 if self.flat.comb is CombOp.NONE else 2
        ops = sum(1 for op in self.plan.ops[1:] if op.kind is OpKind.ELEMENTWISE)
        return GeneratedBody(
            self.writer.function(name, body),
            outputs,
            inputs,
            (width * tiling.threads, rows, 1),
            product(shape) * (points * per_point + ops),
            self.writer.bytes(),
        )

    def group_linear(self, width: int) -> Expr:
        if width >= self.tiling.groups(self.plan.shape):
            return IndexExpr(IdKind.GROUP, 0)
        return affine([(1, IndexExpr(IdKind.GROUP, 0)), (width, IndexExpr(IdKind.GROUP, 1))])

    def setup(self, width: int) -> list[Stmt]:
        """Work-item and work-group ids, the base coordinates of the group's tile."""
        tiling, writer = self.tiling, self.writer
        statements: list[Stmt] = []
        declaration, self.lid = writer.declare(Type.index(), "lid", IndexExpr(IdKind.LOCAL, 0))
        statements.append(declaration)
        self.lane = self.lid
        if self.merging:
            for role, op in (("lane", BinOp.MOD), ("split", BinOp.DIV)):
                value = Binary(op, self.lid, IntConst(tiling.lanes))
                declaration, variable = writer.declare(Type.index(), role, value)
                statements.append(declaration)
                setattr(self, role, variable)
        groups = tiling.groups(self.plan.shape)
        group: Expr = IntConst(0)
        if groups > 1:
            declaration, group = writer.declare(Type.index(), "group", self.group_linear(width))
            statements.append(declaration)
        inner = groups
        for dimension, (size, tile) in enumerate(zip(self.plan.shape, tiling.tiles, strict=True)):
            count = -(-size // tile)
            inner //= count
            if count == 1:
                self.bases[dimension] = IntConst(0)
                continue
            value = div_mod(group, inner, count if inner * count < groups else None)
            if tile > 1:
                value = Binary(BinOp.MUL, value, IntConst(tile))
            declaration, self.bases[dimension] = writer.declare(
                Type.index(), f"base{dimension}", value
            )
            statements.append(declaration)
        return statements

    def declarations(self) -> list[Stmt]:
        """The local arrays of the staged operands, the accumulators and hit flags."""
        flat, tiling, writer = self.flat, self.tiling, self.writer
        statements: list[Stmt] = []
        for staging in tiling.staged:
            access = flat.operands[staging.operand]
            array = writer.fresh(f"tile_{access.tensor}")
            statements.append(sb.declare(local_array(access.dtype, staging.size), array, None))
            self.staged[staging.operand] = (staging, array)
        count = tiling.per_item if tiling.per_item > 1 else 0
        start = identity(flat.agg.value, self.acc_dtype)
        acc_type = Type(TypeBase.VALUE, self.acc_dtype, 1, count)
        statements.append(sb.declare(acc_type, self.acc, start.expr))
        if self.tracks_hits:
            hit_type = Type(TypeBase.VALUE, DType.BOOLEAN, 1, count)
            statements.append(sb.declare(hit_type, self.hit, constant(0, DType.BOOLEAN).expr))
        return statements

    # ---- elements of the tile ------------------------------------------------------------------

    def elements(self, tag: str, element: Element) -> list[Stmt]:
        """A loop over the work-item's elements of the tile; `element(coordinates, offsets,
        j)` gives the statements for one element inside the output shape (`offsets`: the
        coordinates relative to the tile's base, `j`: the element's accumulator slot)."""
        tiling, writer = self.tiling, self.writer
        counter = writer.fresh(f"j{tag}") if tiling.per_item > 1 else ""
        j: Expr = Load(Lookup(counter)) if counter else IntConst(0)
        index = affine([(1, self.lane), (tiling.lanes, j)])
        statements: list[Stmt] = []
        coordinates: list[Expr] = []
        offsets: list[Expr] = []
        inside: list[Expr] = []
        inner = tiling.elements
        for dimension, (tile, size) in enumerate(zip(tiling.tiles, self.plan.shape, strict=True)):
            outer = inner
            inner //= tile
            offset: Expr = IntConst(0)
            if tile > 1:
                offset = div_mod(index, inner, tile if outer < tiling.elements else None)
            value = affine([(1, self.bases[dimension]), (1, offset)])
            declaration, coordinate = writer.declare(
                Type.index(), self.flat.names[dimension], value
            )
            statements.append(declaration)
            coordinates.append(coordinate)
            offsets.append(offset)
            if size % tile:
                inside.append(less(coordinate, size))
        body = element(coordinates, offsets, j)
        condition = conjunction(inside)
        statements += [sb.if_(condition, body)] if condition is not None else body
        if not counter:
            return statements
        return [For(counter, tiling.per_item, 1, sb.block(statements))]

    def slot(self, array: str, j: Expr) -> Subscript | Lookup:
        if self.tiling.per_item > 1:
            return Subscript(Lookup(array), j)
        return Lookup(array)

    # ---- the reduction -------------------------------------------------------------------------

    def chunks(self) -> list[Stmt]:
        """The chunk loops: stage, barrier, accumulate, barrier."""
        flat, tiling, writer = self.flat, self.tiling, self.writer
        loops: list[tuple[str, int]] = []
        reach: dict[int, int] = {}
        for dimension, (size, tile) in enumerate(zip(self.plan.shape, tiling.tiles, strict=True)):
            reach[dimension] = (-(-size // tile) - 1) * tile
        for k, chunk in zip(self.reductions, tiling.chunks, strict=True):
            count = -(-flat.ranges[k] // chunk)
            reach[k] = (count - 1) * chunk
            if count == 1:
                self.bases[k] = IntConst(0)
                continue
            counter = writer.fresh(f"c_{flat.names[k]}")
            loops.append((counter, count))
            self.bases[k] = Binary(BinOp.MUL, Load(Lookup(counter)), IntConst(chunk))
        body: list[Stmt] = []
        for operand, (staging, array) in self.staged.items():
            access = flat.operands[operand]
            body += stage_copy(
                writer, access, staging, array, self.lid, tiling.threads, self.bases, reach
            )
        if self.staged:
            body.append(Barrier())
        body += self.points()
        if self.staged and loops:
            body.append(Barrier())  # before the next chunk overwrites the local arrays
        for counter, count in reversed(loops):
            body = [For(counter, count, 1, sb.block(body))]
        return body

    def points(self) -> list[Stmt]:
        """The reduction points of the chunk that this split owns, each over its elements:
        nested loops over the chunk without splits, else the points `split + splits * q` of
        the chunk in row-major order."""
        flat, tiling, writer = self.flat, self.tiling, self.writer
        chunks = tiling.chunks
        total = product(chunks)
        offsets: list[Expr] = []
        loops: list[tuple[str, int]] = []
        declarations: list[Stmt] = []
        checks: list[Expr] = []
        if not self.merging:
            for k, chunk in zip(self.reductions, chunks, strict=True):
                counter = writer.fresh(f"i_{flat.names[k]}") if chunk > 1 else ""
                if counter:
                    loops.append((counter, chunk))
                offsets.append(Load(Lookup(counter)) if counter else IntConst(0))
        else:
            splits = tiling.splits
            rounds = -(-total // splits)
            counter = writer.fresh("q") if rounds > 1 else ""
            point: Expr = self.split
            if counter:
                loops.append((counter, rounds))
                point = affine([(splits, Load(Lookup(counter))), (1, self.split)])
            declaration, point = writer.declare(Type.index(), "p", point)
            declarations.append(declaration)
            if rounds * splits != total:
                checks.append(less(point, total))
            inner = total
            for chunk in chunks:
                outer = inner
                inner //= chunk
                offsets.append(
                    div_mod(point, inner, chunk if outer < total else None)
                    if chunk > 1
                    else IntConst(0)
                )
        variables: dict[int, Expr] = {}
        for k, chunk, offset in zip(self.reductions, chunks, offsets, strict=True):
            value = affine([(1, self.bases[k]), (1, offset)])
            declaration, variables[k] = writer.declare(Type.index(), flat.names[k], value)
            declarations.append(declaration)
            if flat.ranges[k] % chunk:
                checks.append(less(variables[k], flat.ranges[k]))
        reductions = set(self.reductions)
        outer_guards = [c for c in flat.constraints if _uses(c.lhs) <= reductions]
        inner_guards = [c for c in flat.constraints if not _uses(c.lhs) <= reductions]
        within = dict(zip(self.reductions, offsets, strict=True))

        def contribute(coordinates: list[Expr], tile_offsets: list[Expr], j: Expr) -> list[Stmt]:
            known = {**variables, **dict(enumerate(coordinates))}
            places = {**within, **dict(enumerate(tile_offsets))}
            return guarded(flat, writer, known, inner_guards, lambda: self.update(known, places, j))

        body = self.elements("r", contribute)
        condition = conjunction(checks + [guard(c, variables) for c in outer_guards])
        if condition is not None:
            body = [sb.if_(condition, body)]
        statements = declarations + body
        for counter, count in reversed(loops):
            statements = [For(counter, count, 1, sb.block(statements))]
        return statements

    def update(self, variables: dict[int, Expr], within: dict[int, Expr], j: Expr) -> list[Stmt]:
        """One tuple's contribution to slot `j`; `variables`: every variable's value, `within`:
        the coordinates' and reductions' offsets in the tile and chunk."""
        flat = self.flat
        operands = []
        for position, access in enumerate(flat.operands):
            if position in self.staged:
                staging, array = self.staged[position]
                terms: list[tuple[int, Expr]] = []
                const = 0
                for axis, stride in zip(staging.axes, staging.strides, strict=True):
                    terms += [(stride * c, within[v]) for v, c in axis.terms]
                    const -= stride * axis.low
                element = Subscript(Lookup(array), affine(terms, const))
                operands.append(Typed(Load(element), access.dtype))
            else:
                terms = [(s, variables[k]) for k, s in enumerate(access.strides) if s]
                operands.append(self.writer.load(access.tensor, affine(terms, access.offset)))
        value = convert(combine(flat, operands), self.acc_dtype)
        acc = self.slot(self.acc, j)
        statements: list[Stmt] = [Store(acc, aggregate(flat.agg, self.acc_dtype, Load(acc), value))]
        if self.tracks_hits:
            statements.append(Store(self.slot(self.hit, j), constant(1, DType.BOOLEAN).expr))
        return statements

    # ---- output --------------------------------------------------------------------------------

    def finish(self, coordinates: list[Expr], _offsets: list[Expr], j: Expr) -> list[Stmt]:
        accumulated = Typed(Load(self.slot(self.acc, j)), self.acc_dtype)
        hit = Load(self.slot(self.hit, j)) if self.tracks_hits else None
        return self.output.statements(coordinates, accumulated, hit)


def _uses(coefficients: tuple[int, ...]) -> set[int]:
    return {k for k, c in enumerate(coefficients) if c}
