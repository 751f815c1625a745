"""Output relayout: a contraction whose output is laid out the wrong way round for the vector
kernel computes into a temporary laid out the right way, and a transposition moves the result
into place (issue 11, "other layouts"; CPU devices).

The register-tiled vector kernel (`tile.lower.vector`) runs in vectors along an output
coordinate `j` that the broadcast operand A does not use, of stride 1 in the output (and in
B, or in a packed copy of B: `tile.lower.pack`). A convolution in PyTorch's layout,

    O[n, co, y, x] = +(I[n, ci, y + i - 1, x + j - 1] * K[co, ci, i, j])

has none: its stride-1 coordinate `x` is also guarded (the padding) or strided in I, and the
coordinate that would do, `co`, lies 3136 elements apart in O. The generic kernel then ran one
output channel per work-group, re-reading the input 64 times: 35x torch's time at 8 x 64 x 56
x 56. `relayout_output` gives the generator two flat contractions instead:

    main    T[..., j] = the contraction, its coordinates in their order with `j` moved last
    then    O[coordinates] = T[...]                       (a transposition, one pass over O)
            and the kernel's fused epilogue, if any (conv + bias + relu), on the way

`main` may then pack B (`tile.lower.pack.pack_operand`) and takes the vector kernel. Only a
`+(A * B)` of float32 is relaid, where the reduction is long enough (`MIN_REDUCTION` tuples
per output element) for the extra pass over the output to be small against it, and only
where the relaid form takes the vector kernel.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree.types import TensorShape
from tile.lang.syntax import AggOp, CombOp
from tile.lower.flat import FlatAccess, FlatContraction
from tile.lower.flatten import row_major
from tile.lower.fuse import KernelPlan, PlanKind
from tile.lower.kernel import product
from tile.lower.pack import float32_product, pack_operand
from tile.lower.split import Split, with_temporary
from tile.lower.vector_shape import vector_shape

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from tile.lower.kernel import ProgramContext

# Tuples per output element below which the generic kernel, memory-bound anyway, is kept.
MIN_REDUCTION = 16


def relayout_output(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
) -> Split | None:
    """The relaid form of `plan` (module docstring): `first` computes into the temporary
    `buffer`, `then` transposes it into the output; None where it is not needed or would not
    take the vector kernel."""
    if flat is None or plan.contraction is None:
        return None
    if not float32_product(plan, flat, context, settings):
        return None
    if product(flat.ranges[k] for k in flat.reductions) < MIN_REDUCTION:
        return None
    if vector_shape(flat, settings.vec_size) is not None or _packs_in_place(flat):
        return None
    for j in _coordinates(flat, settings.vec_size):
        split = _relaid(plan, flat, context, settings, buffer, j)
        if split is not None:
            return split
    return None


def _packs_in_place(flat: FlatContraction) -> bool:
    """Whether the output's stride-1 coordinate suits the vector kernel once its operand is
    packed by a permutation (`tile.lower.pack`: `A @ B.T`), which then decides. Not where it
    is guarded, used by both operands or by none, or where the packed copy would repeat
    elements (a strided convolution's image, copied once per filter tap)."""
    j = next((k for k in range(flat.outputs) if flat.output.strides[k] == 1), None)
    if j is None or any(constraint.lhs[j] for constraint in flat.constraints):
        return False
    users = [access for access in flat.operands if access.strides[j]]
    if len(users) != 1:
        return False
    (b,) = users
    return product(flat.ranges[k] for k, stride in enumerate(b.strides) if stride) <= b.size


def _coordinates(flat: FlatContraction, vec_size: int) -> list[int]:
    """The output coordinates that could be the vector kernel's `j`, best first: used by one
    operand only, in no guard, at least half a vector long; the one whose operand has the
    fewest elements to pack first (a filter rather than an image), then the longest."""
    chosen: list[tuple[int, int, int]] = []
    for j in range(flat.outputs):
        if flat.ranges[j] < max(2, vec_size // 2) or flat.output.strides[j] == 1:
            continue
        if any(constraint.lhs[j] for constraint in flat.constraints):
            continue
        users = [access for access in flat.operands if access.strides[j]]
        if len(users) != 1:
            continue
        (b,) = users
        packed = (
            0
            if b.strides[j] == 1
            else product(flat.ranges[k] for k, stride in enumerate(b.strides) if stride)
        )
        chosen.append((packed, -flat.ranges[j], j))
    return [j for *_, j in sorted(chosen)]


def _relaid(
    plan: KernelPlan,
    flat: FlatContraction,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
    j: int,
) -> Split | None:
    op = plan.contraction
    assert op is not None
    order = [k for k in range(flat.outputs) if k != j] + [j]
    dims = tuple(flat.ranges[k] for k in order)
    at = dict(zip(order, row_major(dims), strict=True))
    strides = tuple(at.get(k, 0) for k in range(len(flat.ranges)))
    temporary = FlatAccess(buffer, flat.dtype, dims, 0, strides)
    main = replace(flat, access=(temporary, *flat.operands))
    relaid = with_temporary(context, buffer, TensorShape(flat.dtype, dims))
    main_plan = KernelPlan(plan.kind, plan.shape, (replace(op, output=buffer),), (buffer,))
    if vector_shape(main, settings.vec_size) is None:
        packed = pack_operand(main_plan, main, relaid, settings, f"{buffer}_probe")
        if packed is None or vector_shape(packed.then[1], settings.vec_size) is None:
            return None
    coordinates = range(flat.outputs)
    output = flat.output
    copy = FlatContraction(
        statement=f"{output.tensor} = {buffer} relaid for {flat.statement}",
        names=flat.names[: flat.outputs],
        outputs=flat.outputs,
        ranges=flat.ranges[: flat.outputs],
        derived=(),
        access=(
            replace(output, strides=output.strides[: flat.outputs]),
            FlatAccess(buffer, flat.dtype, dims, 0, tuple(strides[k] for k in coordinates)),
        ),
        constraints=(),
        agg=AggOp.SUM,
        comb=CombOp.NONE,
        dtype=flat.dtype,
    )
    copy_op = replace(op, inputs=(buffer,))
    copy_plan = KernelPlan(PlanKind.CONTRACTION, plan.shape, (copy_op, *plan.ops[1:]), plan.stores)
    return Split((main_plan, main), (copy_plan, copy), buffer, relaid, "relaid")
