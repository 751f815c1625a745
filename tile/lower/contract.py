"""Contraction and elementwise kernel bodies (design 8.7).

One generator serves a contraction (from its `FlatContraction`), a contraction with a fused
elementwise epilogue, and a pure elementwise group. The grid is the output shape, cut into
tiles (`tile.lower.tiles`); one work-item owns a tile:

    group -> base coordinates of the tile
    acc[tile] = identity; hit[tile] = false          (contractions only)
    for each reduction variable:                     (outer: the register-tile micro-kernel)
        if reduction-only guards:
            for each element of the tile:            (inner, constant trip counts)
                coordinates; if inside the shape:
                    derived variables, if divisible:
                        if guards: acc = agg(acc, combine(operands)); hit = true
    for each element of the tile:                    (the output phase)
        coordinates; if inside the shape:
            C = hit ? acc : (default element or 0)   (identities never reach memory)
            epilogue values in registers, each rounded to its Tile type
            store the values other kernels or the caller need

Where the last tile of a dimension may stick out of the shape, the reduction loops are written
twice, and the work-groups whose tile lies wholly inside (`Grid.whole`) run the copy without the
tests of each element against the shape: masked loads in every group halved the speed of a
column max over 4096 x 3024 (2.0 ms, not 1.0; AMD Zen 5). Not for reductions shorter than
`MIN_WHOLE_TUPLES` per element, whose loops cost little either way. An elementwise kernel's
loops are written twice alike (not under `vector_loops`, whose `widen` tests whole vectors):
the masks of the tested copy cost `exp` over 100003 floats 54 -> 46 µs, a sigmoid over 300007
140 -> 112 (AMD Zen 4, interleaved); memory-bound bodies are level.

No hit flag is needed where every element gets a tuple (no guards or derived variables), or
where the accumulator starts at an unwritten element's value (0 for `+`, `=` with no default).

Lanes (`tile.lower.accumulators`): a float reduction along a contiguous variable keeps several
partial results per element and folds them pairwise after the loops; where the tile is a row of
`lanes` short reductions (`rows_fold`), each element reduces into an accumulator of its own, and
the tile's fold together in shuffles. Jammed steps
(`tile.lower.jam`, llvm_cpu): a streaming reduction from memory takes several steps of its
innermost loop per pass of the tile loops, each element adding them in order.

Rows counted at run time (`RowLoop`: a reduction over a dynamic batch, generated for one row):
the reduction loops run once per row, while `row` is below the count a 0-D tensor holds, and
each load of a tensor read row by row moves by `row` times its elements per row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Block,
    Expr,
    For,
    IntConst,
    Load,
    Lookup,
    Select,
    Stmt,
    Store,
    Subscript,
    While,
)
from semtree.types import DType, Type, TypeBase
from tile.bind.program import OpKind
from tile.lang.syntax import AggOp, CombOp
from tile.lower.accumulators import (
    accumulator_dtype,
    fold_lanes,
    fold_rows,
    identity_is_unwritten,
    lane_split,
    own_accumulator,
)
from tile.lower.flatten import row_major
from tile.lower.jam import jam_steps, jammed
from tile.lower.kernel import (
    MIN_WHOLE_TUPLES,
    GeneratedBody,
    RowLoop,
    affine,
    conjunction,
    fused_value,
    guard,
    guarded_reads,
    product,
)
from tile.lower.ops import Typed, aggregate, combine, constant, convert, identity, zero
from tile.lower.tile_nest import TileElement, TileNest
from tile.lower.tiles import MAX_FOLD_LANES, ragged_vector, read_order
from tile.lower.transpose import with_blocks
from tile.lower.widen import widen, widen_lanes

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from semtree.kernel import HardwareSettings
    from tile.lower.flat import FlatConstraint, FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import ProgramContext


def generate_group(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    tiles: Sequence[int],
    name: str,
    *,
    over_rows: RowLoop | None = None,
) -> GeneratedBody:
    """The kernel of a CONTRACTION or ELEMENTWISE plan, on vectors where `tile.lower.widen`
    can write it so: under `settings.vector_loops`, and elsewhere where the innermost tile is
    one vector past the shape (`ragged_vector`). With `over_rows`, a contraction's reduction
    runs over rows counted at run time (above)."""
    order = read_order(flat, tuple(tiles))
    ragged = flat is not None and ragged_vector(flat, plan.shape, tiles, order, settings)
    kernel = _GroupKernel(plan, flat, context, settings, tuple(tiles), over_rows, not ragged)
    generated = kernel.build(name)
    blocks = with_blocks(generated, plan, flat, kernel.tiles, order, kernel.grid, kernel.writer)
    if blocks is not generated or not (settings.vector_loops or ragged):  # blocks: as they are
        return blocks
    if flat is not None:  # reductions in lanes, and tile loops, on vectors
        body = widen_lanes(generated.body, settings.vec_size)
        if ragged and body is generated.body:  # nothing widened: the padded tile after all
            return _GroupKernel(plan, flat, context, settings, tuple(tiles), over_rows).build(name)
        return replace(generated, body=body)
    widened = widen(generated.body, settings.vec_size)
    return generated if widened is None else replace(generated, body=widened)


class _GroupKernel(TileNest):
    def __init__(
        self,
        plan: KernelPlan,
        flat: FlatContraction | None,
        context: ProgramContext,
        settings: HardwareSettings,
        tiles: tuple[int, ...],
        over_rows: RowLoop | None = None,
        pad: bool = True,
    ) -> None:
        super().__init__(plan, flat, context, settings, tiles)
        self.pad = pad and not settings.vector_loops  # `padded`
        self.flops = 0
        self.tuples: int | None = None  # a contraction's, once its accumulation is built
        self.acc = ""
        self.acc_dtype = flat.dtype if flat is not None else DType.FLOAT32
        self.hit: str | None = None
        self.variables: dict[int, Expr] = {}
        self.inner_guards: list[FlatConstraint] = []
        self.lane_k, self.lanes = -1, 1  # the reduction variable split into lanes (above)
        self.lane_stop = 1  # lanes that take a value in the step being written (fewer in the last)
        self.lane_counter = self.lane = ""
        self.over_rows = over_rows
        self.row: Expr | None = None  # the row counter under `over_rows`

    # ---- structure -----------------------------------------------------------------------------

    def build(self, name: str) -> GeneratedBody:
        body: list[Stmt] = list(self.grid.setup)
        accumulate = self.flat is not None and not self.flat.empty
        if accumulate:
            body += self.accumulation()
        # An elementwise body twice as well (module docstring); `widen` tests each vector itself.
        whole = None if accumulate or self.settings.vector_loops else self.grid.whole()
        body.append(self.edge_copies(whole, lambda: self.tile_loops("w", self.output_phase)))
        named = self.grid.guard()
        if named is not None:
            body = [sb.if_(named, body)]
        outputs, inputs = self.writer.params()
        epilogue = sum(1 for op in self.plan.ops if op.kind is OpKind.ELEMENTWISE)
        return GeneratedBody(
            self.writer.function(name, body),
            outputs,
            inputs,
            self.grid.global_size,
            self.flops + epilogue * product(self.plan.shape),
            self.writer.bytes(self.tuples),
        )

    # ---- contraction phase ---------------------------------------------------------------------

    def accumulation(self) -> list[Stmt]:
        flat = self.flat
        assert flat is not None
        self.acc_dtype = accumulator_dtype(flat.dtype)
        self.lane_k, self.lanes = lane_split(flat, self.tiles, self.acc_dtype)
        needs_hit = flat.needs_hit and not identity_is_unwritten(flat)
        self.rows_fold = (  # one vector of lanes per element, a row of them per group
            self.settings.row_folds
            and 1 < self.lanes <= MAX_FOLD_LANES
            and bool(self.tiles)
            and self.tiles[-1] == product(self.tiles) == self.lanes
            and self.over_rows is None
            and not needs_hit
        )
        self.own_acc = self.writer.fresh("own_acc") if self.rows_fold else ""
        size = product(self.tiles) * self.lanes
        acc_type = Type(TypeBase.VALUE, self.acc_dtype, 1, size if size > 1 else 0)
        start = identity(flat.agg.value, self.acc_dtype)
        statements: list[Stmt] = []
        self.acc = self.writer.fresh("acc")
        statements.append(sb.declare(acc_type, self.acc, start.expr))
        if needs_hit:
            self.hit = self.writer.fresh("hit")
            hit_type = Type(TypeBase.VALUE, DType.BOOLEAN, 1, size if size > 1 else 0)
            statements.append(sb.declare(hit_type, self.hit, constant(0, DType.BOOLEAN).expr))
        reductions = sorted(flat.reductions, key=lambda k: k == self.lane_k)  # lanes innermost
        counters = [self.writer.fresh(flat.names[k]) for k in reductions]
        for k, counter in zip(reductions, counters, strict=True):
            self.variables[k] = Load(Lookup(counter))
        row = self.writer.fresh("row") if self.over_rows is not None else ""
        self.row = Load(Lookup(row)) if row else None
        if self.lanes > 1:
            self.lane_counter, self.lane = counters[-1], self.writer.fresh("lane")
        outer_guards: list[FlatConstraint] = []
        for constraint in flat.constraints:
            used = {k for k, c in enumerate(constraint.lhs) if c}
            target = outer_guards if used <= set(reductions) else self.inner_guards
            target.append(constraint)
        points = product(flat.ranges[k] for k in reductions)
        whole = self.grid.whole() if points >= MIN_WHOLE_TUPLES else None
        body = self.edge_copies(
            whole, lambda: self.reduction_nest(reductions, counters, outer_guards)
        )
        if self.over_rows is not None:  # the reduction once per row counted at run time
            rows = self.writer.load(self.over_rows.count, IntConst(0)).expr
            step = Store(Lookup(row), Binary(BinOp.ADD, Load(Lookup(row)), IntConst(1)))
            loop = While(Binary(BinOp.LT, Load(Lookup(row)), rows), sb.block(body, step))
            body = sb.block(sb.declare(Type.index(), row, IntConst(0)), loop)
        statements.append(body)
        if self.rows_fold:
            statements += fold_rows(self.writer, self.acc, self.lanes, flat.agg, self.acc_dtype)
        elif self.lanes > 1:
            statements.append(self.tile_loops("f", self.fold))
        self.tuples = product(self.plan.shape) * points
        self.flops += self.tuples * (1 if flat.comb is CombOp.NONE else 2)
        return statements

    def reduction_nest(
        self, reductions: list[int], counters: list[str], outer_guards: list[FlatConstraint]
    ) -> Stmt:
        """The loops over `reductions` (named `counters`), guarded by `outer_guards`."""
        flat = self.flat
        assert flat is not None
        self.lane_stop = self.lanes
        if self.rows_fold:  # row after row, each read from its start to its end
            nest = self.row_nest
            return self.tile_loops("r", lambda tile: ([nest(tile, reductions, counters)], []))
        plain = self.lanes == 1 and self.hit is None and self.over_rows is None
        steps = jam_steps(flat, self.plan.shape, self.tiles, self.settings, plain=plain)
        contribute, tail_k, tail = self.contribute, self.lane_k, None
        if steps > 1:  # `tile.lower.jam`; the steps left over in a shorter pass
            k, counter, count = reductions[-1], counters[-1], flat.ranges[reductions[-1]]
            contribute = jammed(self.contribute, self.variables, k, counter, steps)
            if count % steps:
                rest = jammed(self.contribute, self.variables, k, counter, count % steps)
                tail_k, tail = k, self.tile_loops("j", rest, reading=True)
        body: Stmt = self.tile_loops("r", contribute, reading=True)
        partial = self.partial_step(lambda: self.tile_loops("t", self.contribute))
        tail = tail if partial is None else partial  # lanes never jam (`jam_steps`: `plain`)
        condition = conjunction([guard(c, self.variables) for c in outer_guards])
        if condition is not None:
            body = sb.if_(condition, body)
            tail = None if tail is None else sb.if_(condition, tail)
        return self.loops(reductions, counters, body, (tail_k, tail), steps)

    def edge_copies(self, whole: Expr | None, write: Callable[[], Stmt]) -> Stmt:
        """The loops `write()` gives, and where some tiles lie wholly inside the shape
        (`whole`, `Grid.whole`), a second copy for those without the edge's tests (module
        docstring), chosen by `whole`."""
        body = write()
        if whole is None:
            return body
        self.whole = True
        inside = write()
        self.whole = False
        return sb.if_(whole, [inside], [body])

    def partial_step(self, step: Callable[[], Stmt]) -> Stmt | None:
        """The last, partial step of the lanes (`step()` with only the lanes below the
        remainder live), or None where the lanes divide the range."""
        assert self.flat is not None
        remainder = self.flat.ranges[self.lane_k] % self.lanes if self.lanes > 1 else 0
        if not remainder:
            return None
        self.lane_stop = remainder
        tail = step()
        self.lane_stop = self.lanes
        return tail

    def loops(
        self,
        reductions: list[int],
        counters: list[str],
        body: Stmt,
        tail: tuple[int, Stmt | None],
        steps: int = 1,
    ) -> Stmt:
        """`body` in the loops over `reductions`, the innermost taking `steps` per pass; the
        loop over `tail[0]` followed by `tail[1]` from the value after its last pass."""
        assert self.flat is not None
        for k, counter in reversed(list(zip(reductions, counters, strict=True))):
            step = steps if k == reductions[-1] else 1
            count = self.flat.ranges[k] // (self.lanes if k == self.lane_k else step)
            body = For(counter, count, step, _block(body))
            if k == tail[0] and tail[1] is not None:
                after = sb.declare(Type.index(), counter, IntConst(count * step))
                body = sb.block(body, sb.block(after, tail[1]))
        return body

    def row_nest(self, tile: TileElement, reductions: list[int], counters: list[str]) -> Stmt:
        """The reduction of one element of a tile whose rows fold together (`rows_fold`), into
        an accumulator of its own (`tile.lower.accumulators.own_accumulator`)."""
        assert self.flat is not None
        own = TileElement(tile.coordinates, IntConst(0), tile.levels, tile.partial)
        body = sb.block(*self.contribute(own)[0])
        tail = self.partial_step(lambda: sb.block(*self.contribute(own)[0]))
        nest = self.loops(reductions, counters, body, (self.lane_k, tail))
        agg, dtype, lanes = self.flat.agg, self.acc_dtype, self.lanes
        return own_accumulator(
            self.writer, nest, self.acc, self.own_acc, tile.index, lanes, agg, dtype
        )

    def contribute(self, tile: TileElement) -> tuple[list[Stmt], list[tuple[int, Stmt]]]:
        """One tuple's contribution to one element of the tile."""
        flat = self.flat
        assert flat is not None
        for k, coordinate in enumerate(tile.coordinates):
            self.variables[k] = coordinate
        if self.lanes > 1:
            lane = [(self.lanes, Load(Lookup(self.lane_counter))), (1, Load(Lookup(self.lane)))]
            self.variables[self.lane_k] = affine(lane)
        checks = []
        for position, derived in enumerate(flat.derived):
            terms = [(c, self.variables[j]) for j, c in enumerate(derived.numerator) if c]
            numerator_declaration, numerator = self.writer.declare(
                Type.index(), f"{derived.name}_num", affine(terms, derived.const)
            )
            declaration, value = self.writer.declare(
                Type.index(), derived.name, Binary(BinOp.DIV, numerator, IntConst(derived.divisor))
            )
            self.variables[flat.outputs + position] = value
            divisible = Binary(
                BinOp.EQ, Binary(BinOp.MOD, numerator, IntConst(derived.divisor)), IntConst(0)
            )
            checks.append((numerator_declaration, divisible, declaration))
        # Loads are hoisted out of tile loops they do not depend on, unless a check inside
        # the tile (a guard, a divisibility test) might make them invalid.
        hoisted: list[tuple[int, Stmt]] = []
        operands = []
        hoistable = not checks and not self.inner_guards and self.lanes == 1
        for access in flat.operands:
            terms = [(s, self.variables[k]) for k, s in enumerate(access.strides) if s]
            if self.row is not None and self.over_rows and access.tensor in self.over_rows.elements:
                terms.append((self.over_rows.elements[access.tensor], self.row))
            value = self.writer.load(access.tensor, affine(terms, access.offset))
            used = [k for k in range(flat.outputs) if access.strides[k]]
            level = max((tile.levels[k] for k in used), default=0)
            if hoistable and level < max(tile.levels, default=0) and not tile.partial & {*used}:
                declaration, loaded = self.writer.declare(
                    Type.value(value.dtype), f"{access.tensor}_value", value.expr
                )
                hoisted.append((level, declaration))
                value = Typed(loaded, value.dtype)
            operands.append(value)
        condition = conjunction([guard(c, self.variables) for c in self.inner_guards])
        if self.lanes > 1:
            index = affine([(self.lanes, tile.index), (1, Load(Lookup(self.lane)))])
            stop = self.lane_stop  # the last step pads the lanes past the remainder
            lane = Load(Lookup(self.lane))
            inside = Binary(BinOp.LT, lane, IntConst(stop)) if stop < self.lanes else None
            step = self.update(index, operands, inside)
            update: list[Stmt] = [For(self.lane, self.lanes, 1, _block(step))]
        elif self.padded(tile, condition):  # the guards choose the value, not the update
            tests = [test for test in (tile.inside, condition) if test is not None]
            update = self.update(tile.index, operands, conjunction(tests))
            tile.inside = condition = None
        else:
            update = self.update(tile.index, operands)
        statements: list[Stmt] = [sb.if_(condition, update)] if condition is not None else update
        # Each derived variable wraps what follows in its divisibility check.
        for numerator_declaration, divisible, declaration in reversed(checks):
            statements = [numerator_declaration, sb.if_(divisible, [declaration, *statements])]
        return statements, hoisted

    def padded(self, tile: TileElement, guards: Expr | None) -> bool:
        """Whether elements of a partial tile outside the shape, and tuples the `guards` leave
        out, aggregate the identity: every update is then unconditional and the accumulators
        stay in registers, only loads masked (a depthwise 3x3 over 144 channels kept them on the
        stack, 0.33 ms, not 0.12; Zen 5). Not where `widen_lanes` follows (`pad` false): it
        wants the guards outside; and Intel's OpenCL compiler crashed on a padded tile."""
        flat = self.flat
        assert flat is not None
        plain = not flat.derived and self.hit is None and flat.agg is not AggOp.ASSIGN
        return plain and self.pad and (tile.inside, guards) != (None, None)

    def update(
        self, tile_index: Expr, operands: list[Typed], inside: Expr | None = None
    ) -> list[Stmt]:
        """The aggregation of one tuple into one element (where rows fold together, into the
        element's own accumulator: `row_nest`); with `inside`, of the identity where it is
        false (`padded`)."""
        flat = self.flat
        assert flat is not None
        value = convert(combine(flat, operands), self.acc_dtype)
        acc = self.element(self.own_acc if self.rows_fold else self.acc, tile_index)
        statements: list[Stmt] = []
        if inside is not None:
            start = identity(flat.agg.value, self.acc_dtype)
            name = self.writer.fresh("v")
            store = Store(Lookup(name), value)
            statements += [sb.declare(Type.value(self.acc_dtype), name, start.expr)]
            statements += [sb.if_(inside, [store])]
            value = Load(Lookup(name))
        statements.append(Store(acc, aggregate(flat.agg, self.acc_dtype, Load(acc), value)))
        if self.hit is not None:
            statements.append(
                Store(self.element(self.hit, tile_index), constant(1, DType.BOOLEAN).expr)
            )
        return statements

    def element(self, array: str, tile_index: Expr) -> Subscript | Lookup:
        if product(self.tiles) > 1 or self.lanes > 1:
            return Subscript(Lookup(array), tile_index)
        return Lookup(array)

    def fold(self, tile: TileElement) -> tuple[list[Stmt], list[tuple[int, Stmt]]]:
        assert self.flat is not None
        agg, dtype = self.flat.agg, self.acc_dtype
        return fold_lanes(self.writer, self.acc, tile.index, self.lanes, agg, dtype), []

    # ---- output phase --------------------------------------------------------------------------

    def output_phase(self, tile: TileElement) -> tuple[list[Stmt], list[tuple[int, Stmt]]]:
        coordinates, tile_index = tile.coordinates, tile.index
        statements: list[Stmt] = []
        values: dict[str, Typed] = {}
        ops = list(self.plan.ops)
        contraction = self.plan.contraction
        if contraction is not None:
            ops = ops[1:]
            result = self.result(coordinates, tile_index)
            statements += self.bind(values, contraction.output, result)
        hoisted = guarded_reads(ops, values, coordinates, tile.levels, tile.partial, self.writer)
        for op in ops:
            value = fused_value(op, values, coordinates, self.context, self.writer, self.settings)
            statements += self.bind(values, op.output, value)
        dims = self.plan.shape
        # The output's offset in its buffer: 0 but for a split reduction's tail (tile.lower.split).
        output = self.flat.output if self.flat is not None else None
        for name in self.plan.stores:
            start = output.offset if output is not None and output.tensor == name else 0
            offset = affine(zip(row_major(dims), coordinates, strict=True), start)
            statements.append(self.writer.store(name, offset, values[name]))
        return statements, hoisted

    def bind(self, values: dict[str, Typed], name: str, value: Typed) -> list[Stmt]:
        declaration, variable = self.writer.declare(Type.value(value.dtype), f"v{name}", value.expr)
        values[name] = Typed(variable, value.dtype)
        return [declaration]

    def result(self, coordinates: list[Expr], tile_index: Expr) -> Typed:
        """The contraction's value at one element: the aggregate, or 0 / the default."""
        flat = self.flat
        assert flat is not None
        dtype = flat.dtype
        default = flat.default
        read = None if default is None else self.writer.read_at(default, coordinates)
        unwritten = zero(dtype) if read is None else Typed(convert(read, dtype), dtype)
        if flat.empty:
            return unwritten
        acc = self.element(self.acc, affine([(1 if self.rows_fold else self.lanes, tile_index)]))
        aggregate = convert(Typed(Load(acc), self.acc_dtype), dtype)
        if self.hit is not None:
            written = Load(self.element(self.hit, tile_index))
            aggregate = Select(written, aggregate, unwritten.expr)
        return Typed(aggregate, dtype)


def _block(statement: Stmt) -> Block:
    return statement if isinstance(statement, Block) else sb.block(statement)
