"""Register-tiled vector kernels for dense `+(A * B)` contractions (PERFORMANCE.md 2.1).

`generate_vector_contraction` recognises a flat contraction that is a matmul in disguise and
emits the micro-kernel shape the LLVM renderer turns into broadcast + FMA code:

* an output coordinate `j` of stride 1 in the output and in B, 0 in A (the vector dimension),
* an output coordinate `i` of stride 0 in B and not 0 in A (the row dimension),
* any reduction variables (matmul's k, a valid convolution's kx, ky, ci),
* the other output coordinates (batch, conv's n and x) become grid dimensions.

One work-group owns `rows` x `vectors * width` elements of (i, j):

    declare acc: float32 x width [rows * vectors] = 0
    for each reduction variable (constant trip counts):
        for v: b[v] = B_w[(B offset + strides . variables) / width + jt * vectors + v]
        for r: a = A[... i = min(i0 + r, I - 1) ...]            (one scalar, broadcast)
               for v: acc[r * vectors + v] = MAD(a, b[v], acc[r * vectors + v])
    for r, v: if inside: C_w[(...) / width + jt * vectors + v] = acc[r * vectors + v]

B and C are vectors of `width` floats: aligned where every element offset the kernel forms is
a multiple of `vec_size`, else `Lanes` at element offsets (an output 333 wide), counted where a
tile can pass the edge of a row (masked); the reduction loops are then written twice, and the
column tiles inside the row run the copy whose loads are not counted. Rows past the edge read a
clamped element and skip their stores.

Guards (a padded convolution's `0 <= x + kx - 1 < W`) may use any variable but `j`. One
without `i` holds for the whole tile: it wraps the reduction step. One with `i` is linear in
the row, so it holds for every row when it holds for the first and the last: such steps run
the code above, the others test each row before its load and update (a tuple outside the
guards contributes nothing, not `0 * b`). Anything else (derived variables, defaults, fused
epilogues, other types or operators) returns None: the generic generator handles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import Builtin, IntConst, Param
from semtree.types import Type, TypeBase
from tile.lower.kernel import (
    INDEX_LIMIT,
    MIN_WHOLE_TUPLES,
    GeneratedBody,
    KernelWriter,
    grid_size,
    linear_group,
    product,
)
from tile.lower.ops import GenerateError
from tile.lower.tiles import from_memory, streaming
from tile.lower.vector_blocks import (
    BLOCK_NAMES,
    Blocking,
    blocked_pair,
    blocking,
    column_block,
    steps,
)
from tile.lower.vector_epilogue import Epilogue
from tile.lower.vector_shape import F32, VectorShape, model_tile, vector_shape

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from semtree.nodes import Function  # noqa: F401 (GeneratedBody.body, for the API reference)
    from tile.lower.flat import FlatAccess, FlatConstraint, FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import ProgramContext


@dataclass(frozen=True, slots=True)
class VectorBody(GeneratedBody):
    """A generated body whose parameters are accessed as vectors: buffer -> width."""

    vec_widths: dict[str, int] | None = None
    tile: tuple[int, ...] = ()


def generate_vector_contraction(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    name: str,
) -> VectorBody | None:
    """The register-tiled kernel of a `+(A * B)` contraction plan, with the elementwise
    epilogue fused into it where `Epilogue.check` allows; or None."""
    if flat is None or plan.contraction is None:
        return None
    if tuple(plan.shape) != tuple(flat.ranges[: flat.outputs]):
        return None
    shape = vector_shape(flat, settings.vec_size, half=not settings.native_fp16)
    if shape is None or _one_row_from_memory(plan, flat, shape, settings):
        return None
    if any(context.is_constant(access.tensor) for access in flat.operands):
        return None
    buffers = [context.buffer_of[access.tensor] for access in flat.access]
    if len(set(buffers)) != len(buffers):  # aliasing or one buffer read two ways
        return None
    if product(plan.shape) >= INDEX_LIMIT:
        return None
    epilogue = None
    if len(plan.ops) > 1:
        operands = {context.buffer_of[access.tensor] for access in flat.operands}
        epilogue = Epilogue.check(plan, context, shape.j, shape.width, operands, shape.lanes)
        if epilogue is None:
            return None
    elif tuple(plan.stores) != (plan.contraction.output,):
        return None
    rows, vectors, blocks = register_tiles(plan, flat, context, settings, shape)
    if shape.b.panel is not None and (blocks is None or shape.b.panel[0] != vectors * shape.width):
        return None  # packed for another tile (not made so: tile.lower.pack.pack_operand)
    return _build(plan, flat, context, settings, shape, (rows, vectors, blocks), name, epilogue)


def _one_row_from_memory(
    plan: KernelPlan, flat: FlatContraction, shape: VectorShape, settings: HardwareSettings
) -> bool:
    """Whether the register tile would have one row of A and stream B from memory: without
    rows to share B's loads, the streaming strips read it faster (`tile.lower.tiles`; x @ B
    at 1 x 4096 x 4096: 4.2 ms in tiles of 64 columns, 2.4 in strips; from the caches, at 1 x
    1000 x 1000, the register tile was as fast)."""
    if flat.ranges[shape.i] != 1 or not settings.reduction_steps or not streaming(flat):
        return False
    points = product(flat.ranges[k] for k in flat.reductions)
    return from_memory(plan.shape, points, F32.itemsize)


def register_tiles(
    plan: KernelPlan,
    flat: FlatContraction,
    context: ProgramContext,
    settings: HardwareSettings,
    shape: VectorShape,
) -> tuple[int, int, Blocking | None]:
    """(rows, vectors) of the register tile and how its work-groups block the reduction."""
    rows, vectors = model_tile(flat, shape, settings)
    out_buffer = context.buffer_of[flat.output.tensor]
    stored = [context.buffer_of[tensor] for tensor in plan.stores]
    tile = (rows, vectors, shape.width)
    blocks = blocking(flat, shape.i, shape.j, tile, stored.count(out_buffer) == 1, settings)
    return rows, vectors, blocks


def _build(
    plan: KernelPlan,
    flat: FlatContraction,
    context: ProgramContext,
    settings: HardwareSettings,
    shape: VectorShape,
    register: tuple[int, int, Blocking | None],
    name: str,
    epilogue: Epilogue | None = None,
) -> VectorBody | None:
    width = shape.width
    rows, vectors, blocks = register
    writer = KernelWriter(context, plan.stores)
    out_buffer = context.buffer_of[flat.output.tensor]
    c_param = writer.outputs.get(out_buffer)  # None: only the epilogue's values are stored
    params = {flat.operands[0].tensor: "", flat.operands[1].tensor: ""}
    for tensor in params:
        params[tensor] = writer.input_param(context.buffer_of[tensor])
    a_param, b_param = params[shape.a.tensor], params[shape.b.tensor]

    size_i, size_j = flat.ranges[shape.i], flat.ranges[shape.j]
    columns = -(-size_j // width)  # vectors in a row of the output
    row_tiles, column_tiles = -(-size_i // rows), -(-columns // vectors)
    others = [k for k in range(flat.outputs) if k not in (shape.i, shape.j)]
    tiles = (row_tiles, column_tiles)
    if blocks is not None:  # work-group -> a block of tiles
        tiles = (-(-row_tiles // blocks.row_tiles), -(-column_tiles // blocks.column_tiles))
    counts = [flat.ranges[k] for k in others] + list(tiles)
    total = product(counts)
    try:
        global_size = grid_size(total, settings.goal_dim_sizes)
    except GenerateError:
        return None

    # Work-group -> (other coordinates..., row tile, column tile), the tiles in bands.
    body: list = []
    group = writer.fresh("group")
    body.append(sb.declare(Type.index(), group, sb.Value(linear_group(global_size))))
    values: list[sb.Value] = []
    inner = total
    for k in others:
        inner //= flat.ranges[k]
        value: sb.Value = sb.var(group)
        if inner > 1:
            value = value / inner
        if values:
            value = value % flat.ranges[k]
        local = writer.fresh(flat.names[k])
        body.append(sb.declare(Type.index(), local, value))
        values.append(sb.var(local))
    coordinate: dict[int, sb.Value] = dict(zip(others, values, strict=True))
    pair = sb.var(group) % product(tiles) if others else sb.var(group)
    names: dict[str, str] = {}
    if blocks is None:
        # Column tiles in blocks whose panels of B stay in cache while every row tile
        # passes (a matmul 2048 read all of B once per row tile); row-major where B is small.
        block = column_block(flat, columns, vectors, width)
        jt, it = blocked_pair(writer, body, pair, block, (column_tiles, row_tiles), ("jt", "it"))
    else:  # the blocks with column blocks fastest; the tiles of a block are set below
        names = {name: writer.fresh(name) for name in BLOCK_NAMES}
        body += [
            sb.declare(Type.index(), names["jb"], pair % tiles[1]),
            sb.declare(Type.index(), names["ib"], pair / tiles[1]),
            *(sb.declare(Type.index(), names[name], 0) for name in ("jt", "it", "k0")),
        ]
        jt, it = sb.var(names["jt"]), sb.var(names["it"])

    acc, b_row, a_value = writer.fresh("acc"), writer.fresh("b_row"), writer.fresh("a_value")
    r, v = writer.fresh("r"), writer.fresh("v")
    reductions = list(flat.reductions)
    counters = {k: writer.fresh(flat.names[k]) for k in reductions}
    variables: dict[int, sb.Value] = {
        k: sb.var(counter) for k, counter in counters.items()
    } | coordinate
    trips = {k: flat.ranges[k] for k in reductions}
    if blocks is not None:  # the reduction variable counts from the step's start
        variables[blocks.k] = sb.var(names["k0"]) + sb.var(counters[blocks.k])
    row = it * rows + sb.var(r)
    load_row = row if size_i % rows == 0 else sb.call(Builtin.MIN, row, size_i - 1)
    column = jt * vectors + sb.var(v)
    ragged_columns = columns % vectors != 0
    load_column = column if not ragged_columns else sb.call(Builtin.MIN, column, columns - 1)

    def linear(access: FlatAccess, extra: dict[int, sb.Value], scale: int) -> sb.Value:
        """`access`'s element offset without the j term, in units of `scale` elements."""
        result: sb.Value | None = None
        for k, stride in enumerate(access.strides):
            if stride == 0 or k == shape.j:
                continue
            term = extra.get(k, variables.get(k))
            assert term is not None
            term = term * (stride // scale) if stride != scale else term
            result = term if result is None else result + term
        offset = access.offset // scale
        if result is None:
            return sb.Value(IntConst(offset))
        return result + offset if offset else result

    def holds(constraint: FlatConstraint, at_row: sb.Value) -> sb.Value:
        """The guard, with the row coordinate at `at_row`."""
        terms = [
            (at_row if k == shape.i else variables[k]) * coefficient
            for k, coefficient in enumerate(constraint.lhs)
            if coefficient
        ]
        return sum(terms[1:], terms[0]).le(constraint.rhs)

    def level(constraint: FlatConstraint) -> int:
        """How many reduction loops enclose the guard: those of the variables it uses."""
        return max((p + 1 for p, k in enumerate(reductions) if constraint.lhs[k]), default=0)

    a_index = linear(shape.a, {shape.i: load_row}, 1)
    # Lanes: the vectors at element offsets, counted where the tile can pass the edge.
    count = None
    if shape.lanes and size_j % (width * vectors):
        count = size_j - column * width

    def c_start_at(at_row: sb.Value) -> sb.Value:
        return linear(flat.output, {shape.i: at_row}, 1) + column * width

    b_whole = None  # B's vectors without counts, where `b_vector` counts them
    if shape.lanes and shape.b.panel is not None:  # whole panels: nothing to mask
        start = linear(shape.b, {}, 1) + jt * shape.b.panel[1] + sb.var(v) * width
        b_vector = sb.lanes(sb.var(b_param), start, width)
    elif shape.lanes:
        start = linear(shape.b, {}, 1) + column * width
        b_vector = sb.lanes(sb.var(b_param), start, width, count)
        if count is not None and vectors * width <= size_j:  # some column tile is inside
            b_whole = sb.lanes(sb.var(b_param), start, width)
    elif shape.b.panel is not None:  # whole panels of `vectors` vectors: no clamped column
        b_vector = sb.var(b_param)[
            linear(shape.b, {}, width) + jt * (shape.b.panel[1] // width) + sb.var(v)
        ]
    else:
        b_vector = sb.var(b_param)[linear(shape.b, {}, width) + load_column]

    if settings.disable_mad:
        update = (
            sb.var(a_value) * sb.var(b_row)[sb.var(v)]
            + sb.var(acc)[sb.var(r) * vectors + sb.var(v)]
        )
    else:
        update = sb.call(
            Builtin.MAD,
            sb.var(a_value),
            sb.var(b_row)[sb.var(v)],
            sb.var(acc)[sb.var(r) * vectors + sb.var(v)],
        )
    row_step = [
        sb.declare(F32, a_value, sb.var(a_param)[a_index]),
        sb.for_(v, vectors, body=sb.assign(sb.var(acc)[sb.var(r) * vectors + sb.var(v)], update)),
    ]
    uniform = [c for c in flat.constraints if not c.lhs[shape.i]]
    by_row = [c for c in flat.constraints if c.lhs[shape.i]]
    split = max((level(c) for c in by_row), default=-1)  # where "every row" is decided
    each_row = sb.if_(sb.and_(*(holds(c, load_row) for c in by_row)), row_step) if by_row else None

    def step(rows_in: str, whole: bool) -> list:
        """One reduction step: B's vectors (uncounted for a column tile inside the row), then
        the rows, all of them or each tested."""
        vector = b_whole if whole and b_whole is not None else b_vector
        load_b = sb.for_(v, vectors, body=sb.assign(sb.var(b_row)[sb.var(v)], vector))
        return [load_b, sb.for_(r, rows, body=row_step if rows_in == "all" else each_row)]

    def nest(depth: int, rows_in: str | None, whole: bool = False) -> list:
        """The reduction loops from `depth` inwards, inside the guards that belong there.
        `rows_in`: "all" when every row of the tile is inside the row guards, "each" when
        each row is tested, None above the loop level where that is decided; `whole`: the
        copy for a column tile inside the row."""
        if rows_in is None and depth == split:
            last_row = sb.call(Builtin.MIN, it * rows + (rows - 1), size_i - 1)
            ends = [holds(c, at) for c in by_row for at in (it * rows, last_row)]
            inner = [
                sb.if_(sb.and_(*ends), loops(depth, "all", whole), loops(depth, "each", whole))
            ]
        else:
            inner = loops(depth, rows_in, whole)
        here = [holds(c, load_row) for c in uniform if level(c) == depth]
        return [sb.if_(sb.and_(*here), inner)] if here else inner

    def loops(depth: int, rows_in: str | None, whole: bool) -> list:
        if depth == len(reductions):
            return step(rows_in or "all", whole)
        k = reductions[depth]
        return [sb.for_(counters[k], trips[k], body=nest(depth + 1, rows_in, whole))]

    def reduction() -> list:
        """The reduction loops; where the row's last column tile sticks out and the loops are
        long, twice: the tiles inside the row load B without counts (counted loads in every
        step took 2.3x the time of whole ones; a product 16 x 1149 x 81, AMD Zen 3)."""
        if b_whole is None or product(trips.values()) < MIN_WHOLE_TUPLES:
            return nest(0, None)
        inside = (jt * (vectors * width) + vectors * width).le(size_j)
        return [sb.if_(inside, nest(0, None, whole=True), nest(0, None))]

    result = sb.var(acc)[sb.var(r) * vectors + sb.var(v)]
    if c_param is None:
        c_target = None
    elif shape.lanes:
        c_target = sb.lanes(sb.var(c_param), c_start_at(row), width, count)
    else:
        c_target = sb.var(c_param)[linear(flat.output, {shape.i: row}, width) + column]
    store: list = [] if c_target is None else [sb.assign(c_target, result)]
    if epilogue is not None:
        at = [
            row.node if k == shape.i else column.node if k == shape.j else coordinate[k].node
            for k in range(flat.outputs)
        ]
        lanes_count = None if count is None else count.node
        values, computed = epilogue.statements(
            result.node, at, context, writer, settings, lanes_count
        )
        store += values
        store += [
            epilogue.store(tensor, computed[tensor], at, writer, lanes_count)
            for tensor in plan.stores
            if tensor != flat.output.tensor
        ]

    def stores(statements: list) -> sb.Stmt:
        if ragged_columns:
            statements = [sb.if_(column.lt(columns), statements)]
        each = sb.for_(v, vectors, body=statements)
        if size_i % rows:
            each = sb.if_(row.lt(size_i), each)
        return sb.for_(r, rows, body=each)

    declarations = [
        sb.declare(Type(TypeBase.VALUE, F32, width, rows * vectors), acc, 0.0),
        sb.declare(Type(TypeBase.VALUE, F32, width, vectors), b_row),
    ]
    if blocks is None:
        body += [*declarations, *reduction(), stores(store)]
    else:
        assert c_target is not None
        body += declarations
        if shape.lanes:
            c_load = sb.lanes(sb.var(c_param), c_start_at(load_row), width, count)
        else:
            c_load = sb.var(c_param)[linear(flat.output, {shape.i: load_row}, width) + load_column]
        zero = sb.for_(r, rows, body=sb.for_(v, vectors, body=sb.assign(result, 0.0)))
        reload = sb.for_(r, rows, body=sb.for_(v, vectors, body=sb.assign(result, c_load)))
        body += steps(
            blocks, names, (row_tiles, column_tiles), trips, reduction,
            (zero, reload), (stores(store), stores(store[:1])),
        )  # fmt: skip
    if product(global_size) != total:  # the grid was rounded up: spare work-groups do nothing
        body = [body[0], sb.if_(sb.var(group).lt(total), body[1:])]

    widths = {} if shape.lanes else {out_buffer: width, context.buffer_of[shape.b.tensor]: width}
    if epilogue is not None:
        widths |= epilogue.widths(context)
    function_params = [
        Param(param, Type.ptr(context.shapes[buffer].dtype, widths.get(buffer, 1)))
        for buffer, param in writer.outputs.items()
    ]
    function_params += [
        Param(param, Type.ptr(context.shapes[buffer].dtype, widths.get(buffer, 1), const=True))
        for buffer, param in writer.inputs.items()
    ]
    widths = {
        buffer: w
        for buffer, w in widths.items()
        if buffer in writer.outputs or buffer in writer.inputs
    }
    epilogue_ops = len(plan.ops) - 1
    tile = tuple(
        rows if k == shape.i else vectors * width if k == shape.j else 1
        for k in range(flat.outputs)
    )
    outputs, inputs = writer.params()
    return VectorBody(
        sb.function(name, function_params, body),
        outputs,
        inputs,
        global_size,
        (2 * product(flat.ranges[k] for k in reductions) + epilogue_ops) * product(plan.shape),
        writer.bytes(),
        widths,
        tile,
    )
