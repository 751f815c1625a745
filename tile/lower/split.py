"""Split reductions: a large reduction to a few elements becomes two kernels (CPU devices).

A contraction with fewer work-groups than the device wants keeps one core busy while the
others wait. Two kinds are cut (`_split_variable`): a reduction in lanes
(`tile.lower.contract`) with fewer elements than the device wants groups, along its lane
variable; and a streaming reduction (a column sum, a matvec-T: every operand contiguous along
the kept last dimension) whose rows are too narrow to give every core a strip of vectors,
along its longest reduction variable, each piece then streaming its own block of rows (the
sum of 49312 x 75 floats over its rows: 5 strips, 335 -> 198 µs; 100000 x 75 from memory
1.9-4.1 -> 1.2-1.4 ms; AMD Zen 4, 2 cores). `split_reduction` cuts that variable `k` (range K)
into `parts` consecutive pieces and gives the generator two flat contractions instead:

    partials  P[p, coordinates...] = agg over k' < K / parts of the original tuple at
              k = p * K / parts + k'                    (`parts` times the work-groups)
    total     O[coordinates...]    = agg over p of P[p, coordinates...]

Where no divisor of K gives the pieces (a prime K), each piece takes K // parts values of k,
and a third kernel between the two reduces the `K % parts` left at the end into one more row
of P, `P[parts, ...]` (the first kernel whose output does not start at element 0 of its
buffer: `FlatAccess.offset` of the output, which the generic generator adds to its stores).

`P` is a temporary buffer of the accumulator type (f32 for f16 results), so the total is
rounded once, like the one-kernel form. Only float `+`, `>` and `<` reductions are cut
(`regroupable`): the total differs from the one-kernel result in float rounding
only, and every device that runs these kernels sums in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from semtree.types import TensorShape
from tile.bind.program import TensorBinding
from tile.lang.syntax import CombOp
from tile.lower.accumulators import accumulator_dtype, lane_split, regroupable
from tile.lower.flat import FlatAccess, FlatContraction
from tile.lower.flatten import row_major
from tile.lower.fuse import KernelPlan, PlanKind
from tile.lower.kernel import ProgramContext, product
from tile.lower.tiles import STRIP_ROWS, streaming

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings
    from semtree.types import DType

# Fewer tuples than this are not worth a second kernel (tens of microseconds of work).
MIN_SPLIT_TUPLES = 1 << 20
# `split_inner`: the longest contiguous runs, and the fewest outer rows (values of the other
# reduction variables), for which the runs are reduced first. Sums over the first and last
# axes of X[A, B, C], µs one kernel / two (AMD Zen 4, in turns): 228 x 208 x 43 418 / 177,
# x 64 440 / 294, x 100 841 / 469, 100 x 208 x 250 447 / 361, 30 x 100 x 1000 125 / 119.
MAX_RUN_BYTES = 2048
MIN_INNER_ROWS = 8


@dataclass(frozen=True, slots=True)
class Split:
    """Two kernels in place of one: `first` fills the temporary `buffer`, `then` reads it (a
    split reduction's partials and total, `tile.lower.pack`'s pack kernel and contraction);
    `context` knows the temporary (its shape is `context.shapes[buffer]`); the first kernel is
    named `<kernel>_<suffix>`."""

    first: tuple[KernelPlan, FlatContraction | None]  # None: an elementwise kernel
    then: tuple[KernelPlan, FlatContraction | None]
    buffer: str
    context: ProgramContext
    suffix: str
    # A kernel between them that also writes the temporary, named `<kernel>_<suffix>_tail`
    # (a split reduction's last, shorter piece).
    tail: tuple[KernelPlan, FlatContraction] | None = None


def with_temporary(context: ProgramContext, buffer: str, shape: TensorShape) -> ProgramContext:
    """`context` that also knows the temporary `buffer` of `shape`."""
    return ProgramContext(
        {**context.bindings, buffer: TensorBinding(shape)},
        {**context.buffer_of, buffer: buffer},
        {**context.shapes, buffer: shape},
    )


def split_reduction(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
) -> Split | None:
    """The split form of `plan` (module docstring), or None where one kernel does as well."""
    op = plan.contraction
    if flat is None or op is None or not _bare(plan, flat):
        return None
    acc_dtype = accumulator_dtype(flat.dtype)
    elements = product(plan.shape)
    tuples = elements * product(flat.ranges[r] for r in flat.reductions)
    if tuples < MIN_SPLIT_TUPLES:
        return None
    chosen = _split_variable(flat, plan.shape, acc_dtype, settings)
    if chosen is None:
        return None
    k, groups, least = chosen
    count = flat.ranges[k]
    # The most parts, up to 16, each of which still has `least` values of k.
    allowed = [
        p for p in range(16, 1, -1) if p * groups <= 2 * settings.goal_groups and count >= least * p
    ]
    if not allowed:
        return None
    # Equal pieces where a divisor allows (a full max over 130x137x179, 2 x 5 x 13 x 137 x
    # 179 tuples, ran on one core); else the most pieces, and a tail kernel reduces the
    # `rest` that they leave into one more row of partials (a sum over 2000003 ran on one
    # core: the count is prime).
    parts = next((p for p in allowed if count % p == 0), allowed[0])
    piece, rest = divmod(count, parts)
    rows = parts + (rest > 0)
    shape = TensorShape(acc_dtype, (rows, *plan.shape))
    context = with_temporary(context, buffer, shape)
    output = flat.output
    # Partials: a new leading coordinate p; k covers one piece.
    part_access = FlatAccess(
        buffer, acc_dtype, shape.dims, output.offset, (elements, *output.strides)
    )
    operands = tuple(replace(a, strides=(a.strides[k] * piece, *a.strides)) for a in flat.operands)
    partials = replace(
        flat,
        statement=f"{flat.statement}  (part p of {parts})",
        names=("p", *flat.names),
        outputs=flat.outputs + 1,
        ranges=(parts, *(piece if v == k else r for v, r in enumerate(flat.ranges))),
        access=(part_access, *operands),
        dtype=acc_dtype,
    )
    partials_plan = KernelPlan(
        PlanKind.CONTRACTION, (parts, *plan.shape), (replace(op, output=buffer),), (buffer,)
    )
    tail = None
    if rest:  # the last `rest` values of k, into row `parts`
        tail_access = FlatAccess(
            buffer, acc_dtype, shape.dims, output.offset + parts * elements, output.strides
        )
        start = parts * piece
        tail_flat = replace(
            flat,
            statement=f"{flat.statement}  (k from {start}, the rest)",
            ranges=tuple(rest if v == k else r for v, r in enumerate(flat.ranges)),
            access=(
                tail_access,
                *(replace(a, offset=a.offset + start * a.strides[k]) for a in flat.operands),
            ),
            dtype=acc_dtype,
        )
        tail_plan = KernelPlan(
            PlanKind.CONTRACTION, plan.shape, (replace(op, output=buffer),), (buffer,)
        )
        tail = (tail_plan, tail_flat)
    # Total: the original coordinates, one reduction over the parts.
    coordinates = output.strides[: flat.outputs]
    total = replace(
        flat,
        statement=f"{op.output} = {flat.agg.value}({buffer}[p, ...])",
        names=(*flat.names[: flat.outputs], "p"),
        ranges=(*plan.shape, rows),
        derived=(),
        access=(
            replace(output, strides=(*coordinates, 0)),
            FlatAccess(buffer, acc_dtype, shape.dims, output.offset, (*coordinates, elements)),
        ),
        constraints=(),
        comb=CombOp.NONE,
    )
    total_plan = KernelPlan(
        PlanKind.CONTRACTION, plan.shape, (replace(op, inputs=(buffer,)),), plan.stores
    )
    return Split((partials_plan, partials), (total_plan, total), buffer, context, "part", tail)


def _bare(plan: KernelPlan, flat: FlatContraction) -> bool:
    """Whether `plan` is its contraction alone (no epilogue, one store, its own shape), with
    tuples for its elements and no default: what the two-kernel forms can stand for."""
    op = plan.contraction
    assert op is not None
    if len(plan.ops) != 1 or plan.stores != (op.output,):
        return False
    whole = tuple(plan.shape) == flat.ranges[: flat.outputs]
    return whole and not flat.empty and flat.default is None


def _split_variable(
    flat: FlatContraction, shape: Sequence[int], acc_dtype: DType, settings: HardwareSettings
) -> tuple[int, int, int] | None:
    """(k, groups, least): the reduction variable to cut, the work-groups the whole of `k`
    leaves the kernel, and the fewest values of `k` a piece keeps; None where the kernel
    already has `goal_groups` work-groups or may not be regrouped.

    A reduction in lanes has one work-group per element and is cut along its lane variable
    (pieces of 16 or more values still run in lanes). A streaming reduction (a column sum:
    every operand reads the last output dimension contiguously) has a strip of whole vectors
    of the last dimension per group; where its rows are so narrow that the strips are too
    few, it is cut along its longest reduction variable into pieces of `STRIP_ROWS` rows or
    more, each of which streams its own block of rows.
    """
    k, lanes = lane_split(flat, (1,) * flat.outputs, acc_dtype)
    if lanes > 1:
        elements = product(shape)
        return None if elements >= settings.goal_groups else (k, elements, 16)
    if not shape or not regroupable(flat, acc_dtype) or not streaming(flat):
        return None
    rows = product(shape[:-1])
    if rows * -(-shape[-1] // settings.vec_size) >= settings.goal_groups:
        return None
    k = max(flat.reductions, key=lambda r: flat.ranges[r])
    return k, rows, STRIP_ROWS


def split_inner(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
) -> Split | None:
    """A reduction over short contiguous runs and outer variables, in two kernels: first each
    run, then the outer variables (None where one kernel does as well).

    A sum of X[a, b, c] over a and c (228 x 208 x 43) reduces c in lanes, and each element b
    walks its 228 runs of 43 floats, 35 KB apart: a new page every run, which the prefetchers
    do not follow (1.1 ms, torch 0.68; AMD Zen 4). Instead the first kernel reduces the runs
    alone, `T[a, b] = agg over c`, reading X in its own order (short rows: rows folded
    together, `tile.lower.tiles.folds_rows`), and the second `O[b] = agg over a of T[a, b]`,
    a column reduction of a tensor `count` times smaller. T's dimensions (the outer
    variables and the coordinates) are in the order of their strides in the operand that runs
    along c, so the first kernel reads it in memory order; T has the accumulator type, so the
    result is rounded once. Only for regroupable reductions (float `+`, `>`, `<`) whose runs
    are up to `MAX_RUN_BYTES` long, over `MIN_INNER_ROWS` outer rows or more and
    `MIN_SPLIT_TUPLES` tuples.
    """
    op = plan.contraction
    if flat is None or op is None or not _bare(plan, flat):
        return None
    acc_dtype = accumulator_dtype(flat.dtype)
    k, lanes = lane_split(flat, (1,) * flat.outputs, acc_dtype)
    outer = [r for r in flat.reductions if r != k]
    if lanes == 1 or not outer or flat.ranges[k] * acc_dtype.itemsize > MAX_RUN_BYTES:
        return None
    rows = product(flat.ranges[r] for r in outer)
    if (
        rows < MIN_INNER_ROWS
        or product(flat.ranges[r] for r in flat.reductions) * product(plan.shape) < MIN_SPLIT_TUPLES
    ):
        return None
    # The operand that runs along k (the largest, where several do) orders T's dimensions.
    runs = max((a for a in flat.operands if a.strides[k] == 1), key=lambda a: a.size)
    kept = sorted([*range(flat.outputs), *outer], key=lambda v: (-abs(runs.strides[v]), v))
    dims = tuple(flat.ranges[v] for v in kept)
    shape = TensorShape(acc_dtype, dims)
    context = with_temporary(context, buffer, shape)
    strides = dict(zip(kept, row_major(dims), strict=True))
    inner = replace(
        flat,
        statement=f"{flat.statement}  (over {flat.names[k]} first)",
        names=(*(flat.names[v] for v in kept), flat.names[k]),
        outputs=len(kept),
        ranges=(*dims, flat.ranges[k]),
        access=(
            FlatAccess(buffer, acc_dtype, dims, 0, (*row_major(dims), 0)),
            *(
                replace(a, strides=(*(a.strides[v] for v in kept), a.strides[k]))
                for a in flat.operands
            ),
        ),
        dtype=acc_dtype,
    )
    inner_plan = KernelPlan(PlanKind.CONTRACTION, dims, (replace(op, output=buffer),), (buffer,))
    variables = [*range(flat.outputs), *outer]
    total = replace(
        flat,
        statement=f"{op.output} = {flat.agg.value}({buffer}[...])",
        names=tuple(flat.names[v] for v in variables),
        ranges=tuple(flat.ranges[v] for v in variables),
        derived=(),
        access=(
            replace(flat.output, strides=tuple(flat.output.strides[v] for v in variables)),
            FlatAccess(buffer, acc_dtype, dims, 0, tuple(strides[v] for v in variables)),
        ),
        constraints=(),
        comb=CombOp.NONE,
    )
    total_plan = KernelPlan(
        PlanKind.CONTRACTION, plan.shape, (replace(op, inputs=(buffer,)),), plan.stores
    )
    return Split((inner_plan, inner), (total_plan, total), buffer, context, "runs")
