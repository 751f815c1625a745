"""Kernels that are not a fused grid of independent elements (design 8.7): `scatter`
and the random-number pair `prng_value` / `prng_state` (spec 9.5, 9.6).

* `scatter(E, I, V)`: duplicate indices must add up without races, so one work-item owns a
  whole column `b` of the output (the positions after the indexed dimension): it zeroes the
  column, then walks every index position in order, adding `E[a, b]` into row
  `clamp(I[a], 0, rows - 1)`.
* `prng_value(X)` / `prng_state(X)` for `X = prng_step(S, sizes)`: one work-item per lane
  `c` of the 2048-lane Tausworthe generator; it steps its lane through the flat positions
  `c, c + 2048, ...` in order and writes each value, then the lane's final state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Cast,
    Clamp,
    Expr,
    For,
    IntConst,
    Load,
    Lookup,
    Stmt,
    Store,
    Subscript,
)
from semtree.types import DType, Type
from tile.lower.kernel import GeneratedBody, KernelWriter, affine, grid_size, linear_group, product
from tile.lower.ops import Typed, constant, convert

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import ProgramContext

PRNG_LANES = 2048
# (mask, shift before the mask, shift of the feedback, shift after) of the three components.
TAUSWORTHE = ((0xFFFFFFFE, 12, 13, 19), (0xFFFFFFF8, 4, 2, 25), (0xFFFFFFF0, 17, 3, 11))


def generate_scatter(
    plan: KernelPlan, context: ProgramContext, settings: HardwareSettings, name: str
) -> GeneratedBody:
    """`O[clamp(I[a]), b] += E[a, b]` over a zeroed `O`, one work-item per column `b`."""
    (op,) = plan.ops
    values, indices, _ = op.inputs
    writer = KernelWriter(context, plan.stores)
    dtype = context.dtype(op.output)
    rows = context.dims(op.output)[0]
    columns = product(context.dims(op.output)[1:])
    positions = product(context.dims(indices))
    out_param = writer.outputs[context.buffer_of[op.output]]
    statements: list[Stmt] = []
    global_size = grid_size(columns, settings.goal_dim_sizes)
    column: Expr = IntConst(0)
    if columns > 1:
        declaration, column = writer.declare(Type.index(), "column", linear_group(global_size))
        statements.append(declaration)

    def cell(row: Expr) -> Subscript:
        return Subscript(Lookup(out_param), affine([(columns, row), (1, column)]))

    row_counter = writer.fresh("row")
    zero_value = constant(0, dtype).expr
    statements.append(
        For(row_counter, rows, 1, sb.block(Store(cell(Load(Lookup(row_counter))), zero_value)))
    )
    position = writer.fresh("position")
    at = Load(Lookup(position))
    index = writer.load(indices, at)
    row_declaration, row = writer.declare(
        Type.index(),
        "target",
        Cast(Type.index(), Clamp(convert(index, DType.INT32), IntConst(0), IntConst(rows - 1))),
    )
    addend = writer.load(values, affine([(columns, at), (1, column)]))
    current = Typed(Load(cell(row)), dtype)
    if dtype.is_bool:
        total: Expr = Binary(BinOp.LOR, current.expr, addend.expr)
    else:
        total = Binary(BinOp.ADD, current.expr, convert(addend, dtype))
        if dtype is DType.FLOAT16:
            total = Cast(Type.value(dtype), total)
    statements.append(
        For(position, positions, 1, sb.block(row_declaration, Store(cell(row), total)))
    )
    outputs, inputs = writer.params()
    return GeneratedBody(
        writer.function(name, _within(statements, column, columns, global_size)),
        outputs,
        inputs,
        global_size,
        positions * columns,
        writer.bytes(),
    )


def generate_prng(
    plan: KernelPlan, context: ProgramContext, settings: HardwareSettings, name: str
) -> GeneratedBody:
    """The lane algorithm of spec 9.6 for one `prng_step`."""
    value_op = next((op for op in plan.ops if op.fn == "prng_value"), None)
    state_op = next((op for op in plan.ops if op.fn == "prng_state"), None)
    writer = KernelWriter(context, plan.stores)
    source = plan.ops[0].inputs[0]
    count = product(plan.shape)
    u32 = DType.UINT32
    statements: list[Stmt] = []
    global_size = grid_size(PRNG_LANES, settings.goal_dim_sizes)
    declaration, lane = writer.declare(Type.index(), "lane", linear_group(global_size))
    statements.append(declaration)
    components = []
    for row, letter in enumerate("abd"):
        element = writer.load(source, affine([(1, lane)], row * PRNG_LANES))
        declaration, _ = writer.declare(Type.value(u32), letter, element.expr)
        statements.append(declaration)
        components.append(declaration.name)
    steps = -(-count // PRNG_LANES)
    counter = writer.fresh("step")
    position_declaration, position = writer.declare(
        Type.index(), "position", affine([(1, lane), (PRNG_LANES, Load(Lookup(counter)))])
    )

    def u32_literal(value: int) -> Expr:
        return constant(value, u32).expr

    advance: list[Stmt] = []
    for component, (mask, shift, feedback, back) in zip(components, TAUSWORTHE, strict=True):
        # x = ((x & mask) << shift) ^ (((x << feedback) ^ x) >> back), all in u32
        state = Load(Lookup(component))
        masked = Binary(BinOp.SHL, Binary(BinOp.AND, state, u32_literal(mask)), u32_literal(shift))
        mixed = Binary(BinOp.XOR, Binary(BinOp.SHL, state, u32_literal(feedback)), state)
        advance.append(
            Store(
                Lookup(component),
                Binary(BinOp.XOR, masked, Binary(BinOp.SHR, mixed, u32_literal(back))),
            )
        )
    if value_op is not None and value_op.output in plan.stores:
        a, b, d = (Load(Lookup(c)) for c in components)
        bits = Binary(BinOp.XOR, Binary(BinOp.XOR, a, b), d)
        # The 32-bit value is rounded to f32 first, then scaled by 2^-32 (exact).
        number = Binary(
            BinOp.DIV,
            Cast(Type.value(DType.FLOAT32), bits),
            constant(4294967296.0, DType.FLOAT32).expr,
        )
        advance.append(writer.store(value_op.output, position, Typed(number, DType.FLOAT32)))
    body = sb.block(
        position_declaration, sb.if_(Binary(BinOp.LT, position, IntConst(count)), advance)
    )
    statements.append(For(counter, steps, 1, body))
    if state_op is not None and state_op.output in plan.stores:
        for row, component in enumerate(components):
            offset = affine([(1, lane)], row * PRNG_LANES)
            value = Typed(Load(Lookup(component)), u32)
            statements.append(writer.store(state_op.output, offset, value))
    outputs, inputs = writer.params()
    return GeneratedBody(
        writer.function(name, _within(statements, lane, PRNG_LANES, global_size)),
        outputs,
        inputs,
        global_size,
        count * 12,
        writer.bytes(),
    )


def _within(
    statements: list[Stmt], linear: Expr, count: int, global_size: tuple[int, int, int]
) -> list[Stmt]:
    """`statements` run only by the first `count` work-groups of a rounded-up grid (the
    declaration of the linear id, first, stays outside)."""
    if product(global_size) == count:
        return statements
    first, *rest = statements
    return [first, sb.if_(Binary(BinOp.LT, linear, IntConst(count)), rest)]
