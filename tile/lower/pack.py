"""Packed operands: a contraction whose vector operand is laid out the wrong way round is given
a packed copy of it first (issue 11 item 1; CPU devices).

The register-tiled vector kernel (`tile.lower.vector`) needs an operand B that is contiguous
along the output's stride-1 coordinate `j`. `A @ B.T` (a linear layer's `x @ W.T`), a batched
product with a transposed right side, or a 1x1 convolution over a transposed filter have
none: B is contiguous along a reduction variable instead, and the generic kernel then runs
one dot product per output element. `pack_operand` finds such a contraction and gives the
generator two flat contractions:

    pack    P[v..., j] = B[offset + strides . (v..., j)]   for every variable B uses
    main    the contraction, reading P where it read B (j now of stride 1)

`P` is a temporary buffer whose axes are B's variables in their order with `j` last; the
pack kernel is a pure permutation (the transposition tile of `tile.lower.tiles`), and its
cost, one pass over B, is small against the contraction's when A has rows enough to share
each packed vector (`MANY_ROWS`, below; the rows are every output coordinate that A uses and
B does not: a convolution's images, rows and columns). Only a default-free `+(A * B)`
contraction of float32 whose B access stays inside B for every value of its variables (the
pack kernel copies them all, whatever the guards say: those stay in the contraction) is
packed, and only where the vector kernel would take the packed form. A convolution in NCHW
layout gets here relaid (`tile.lower.relayout`) and packs its filter with the output channels
last.

Float32 copies (issue 12 item 3): on a device without half arithmetic
(`settings.half_as_float`: llvm_cpu, and OpenCL without cl_khr_fp16, where PoCL converts
each half with a dozen integer operations), the vector kernel of a float16 product converted
each element of A once per column tile and of B once per row tile, and ran at 2.4x the
float32 time (matmul 1024, PoCL; 1.3x on llvm_cpu). `float_copy` gives it float32 copies
instead, each made by a kernel of its own in one pass (`P = A`, the copy in A's layout); the
generator asks again for the other operand, so a float16 product reads two copies, a mixed
one the copy of its half operand. The result is the same: a half widens to float exactly.
Half outputs take aligned vectors only, so an output width such as 333 left a float16
product on scalars (14x the float32 time on PoCL, 8.5x on llvm_cpu): `float_output` has the
kernel write a float32 temporary through vectors at element offsets, and a last kernel
convert it (rounding once, as the half store did). It does the same where the float32
product walks its reduction in blocks (`tile.lower.vector_blocks`, which needs a float32
output), and the generator then packs the float copy of B in panels: matmul 1024 on llvm_cpu
went from 2.7x to 1.1x the float32 time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape
from tile.bind.program import BoundOp, OpKind
from tile.lang.syntax import AggOp, CombOp
from tile.lower.flat import FlatAccess, FlatConstraint, FlatContraction
from tile.lower.flatten import row_major
from tile.lower.fuse import KernelPlan, PlanKind
from tile.lower.kernel import ProgramContext, product
from tile.lower.split import Split, with_temporary
from tile.lower.vector_shape import vector_shape

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings

# When packing pays (llvm_cpu, A @ B.T): the generic kernel runs one dot product per element,
# contiguous in A and B, which is fast when the reduction is long; the packed kernel shares
# each packed vector between the rows of A. Packing wins with many rows, or with a short
# reduction and some rows: (444, 104, 1288) 4.7x faster, (512, 512, 512) 1.3x, (32, 64,
# 2000) 1.6x (AMD Zen 4). With a long reduction it wins from 24 rows on since the transposition
# moves in blocks (`tile.lower.transpose`): (24, 1024, 1000) 0.56 -> 0.37 ms, (32, 1500,
# 1500) 1.8 -> 1.0, (68, 682, 839) 1.0 -> 0.54; with 16 rows it wins or loses by 30%, (16,
# 1024, 1000) 0.36 -> 0.52 and (16, 4096, 256) 0.39 -> 0.28 (AMD Zen 5).
MANY_ROWS = 24
SOME_ROWS = 16
SHORT_REDUCTION = 512
# Where the generic kernel's dot products are strided (`_contiguous_dot`): packing pays from
# 3 rows on, for a B of 8192 elements or more.
SHARED_ROWS = 3
SMALL_OPERAND = 8192


def pack_operand(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
) -> Split | None:
    """The packed form of `plan` (module docstring), or None where it is not needed or not
    possible."""
    op = plan.contraction
    if flat is None or op is None or not float32_product(plan, flat, context, settings):
        return None
    shape = vector_shape(flat, settings.vec_size)
    if shape is not None:  # the vector kernel takes B as it is, or in panels
        if flat.constraints or not _inside(flat, shape.b) or flat.ranges[shape.i] < SHARED_ROWS:
            return None
        return _panels(plan, flat, context, settings, buffer, shape.b, shape.j)
    output = flat.output
    for a, b in (flat.operands, reversed(flat.operands)):
        j = next(
            (
                k
                for k in range(flat.outputs)
                if output.strides[k] == 1 and a.strides[k] == 0 and b.strides[k] != 0
            ),
            None,
        )
        rows = [
            k for k in range(flat.outputs) if k != j and b.strides[k] == 0 and a.strides[k] != 0
        ]
        if j is None or not rows or not _inside(flat, b):
            continue
        reduction = product(flat.ranges[k] for k in flat.reductions if b.strides[k])
        count = product(flat.ranges[k] for k in rows)  # the rows that share each vector
        few = count < MANY_ROWS and (count < SOME_ROWS or reduction >= SHORT_REDUCTION)
        if few and (_contiguous_dot(flat, a, b) or count < SHARED_ROWS or _small(flat, b)):
            continue
        panels = _panels(plan, flat, context, settings, buffer, b, j)
        if panels is not None:
            return panels
        variables = [k for k, stride in enumerate(b.strides) if stride and k != j] + [j]
        packed, copy = _copy_of(flat, b, variables, buffer, b.dtype, "packed")
        main = replace(
            flat,
            access=tuple(packed if access is b else access for access in flat.access),
        )
        if vector_shape(main, settings.vec_size) is None:
            return None
        context = with_temporary(context, buffer, TensorShape(b.dtype, copy.ranges))
        copy_op = replace(op, output=buffer, inputs=(b.tensor,))
        copy_plan = KernelPlan(PlanKind.CONTRACTION, copy.ranges, (copy_op,), (buffer,))
        return Split((copy_plan, copy), (plan, main), buffer, context, "pack")
    return None


def float32_product(
    plan: KernelPlan, flat: FlatContraction, context: ProgramContext, settings: HardwareSettings
) -> bool:
    """Whether `plan` is a float32 `+(A * B)` over its whole grid, of two operands that are
    not constants, without defaults or derived variables, on a device with vectors: what
    packing (and relaying, `tile.lower.relayout`) may give the vector kernel."""
    if settings.vec_size == 1 or flat.empty or flat.derived or flat.default is not None:
        return False
    if flat.agg is not AggOp.SUM or flat.comb is not CombOp.MUL or len(flat.operands) != 2:
        return False
    if any(access.dtype is not DType.FLOAT32 for access in flat.access):
        return False
    if tuple(plan.shape) != tuple(flat.ranges[: flat.outputs]):
        return False
    return not any(context.is_constant(access.tensor) for access in flat.operands)


def _contiguous_dot(flat: FlatContraction, a: FlatAccess, b: FlatAccess) -> bool:
    """Whether the generic kernel's dot products walk both operands contiguously: a reduction
    variable of stride 1 in each (`A @ B.T`). Otherwise (`A.T @ B.T`) the generic kernel
    reads B one element at a time, and packing pays with fewer rows: in ms unpacked / packed
    on AMD Zen 5, 16 x 1149 x 81 0.33 / 0.08, 5 x 1000 x 1000 0.95 / 0.24, 4 x 331 x 533
    0.11 / 0.06; but 2 x 1500 x 1500 0.51 / 0.76 (`SHARED_ROWS`), and a B of 1554 elements
    0.012 / 0.019 (`_small`: the copy's launch costs more than it saves)."""
    return any(a.strides[k] == 1 and b.strides[k] == 1 for k in flat.reductions)


def _small(flat: FlatContraction, b: FlatAccess) -> bool:
    """Whether B has fewer than `SMALL_OPERAND` elements (each variable it reads counted)."""
    return product(flat.ranges[k] for k, stride in enumerate(b.strides) if stride) < SMALL_OPERAND


def _panels(
    plan: KernelPlan,
    flat: FlatContraction,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
    b: FlatAccess,
    j: int,
) -> Split | None:
    """B (`b`, vector coordinate `j`) copied in panels, where the vector kernel reading it
    walks the reduction in steps (`tile.lower.vector_blocks`): P[others..., jt, reductions...,
    jj] = B[..., j = jt * NR + jj, ...] (0 past B's last column), NR the register tile's
    columns. A step of a panel is then one contiguous run of memory; in place, the step's rows
    of B lie a row of B apart (8 KB at 2048 columns: a page each). Matmul 2048 on Intel Xeon
    went from 1.7x to 1.1x numpy's time. None where the kernel would not block."""
    from tile.lower.vector import generate_vector_contraction, register_tiles

    # The register tile of the contraction reading B as a row-major copy with j last.
    variables = [k for k, stride in enumerate(b.strides) if stride and k != j] + [j]
    row_major_copy, _ = _copy_of(flat, b, variables, buffer, b.dtype, "packed")
    main = replace(flat, access=tuple(row_major_copy if x is b else x for x in flat.access))
    shape = vector_shape(main, settings.vec_size)
    if shape is None or shape.width != settings.vec_size:
        return None
    temporary = with_temporary(context, buffer, TensorShape(b.dtype, (1,)))
    _, vectors, blocks = register_tiles(plan, main, temporary, settings, shape)
    if blocks is None:
        return None
    width = vectors * shape.width
    others = [k for k in variables[:-1] if k < flat.outputs]
    reductions = [k for k in variables[:-1] if k >= flat.outputs]
    columns = flat.ranges[j]
    slots = [*others, "jt", *reductions, "jj"]
    taken = set(flat.names)
    names = [
        flat.names[k] if isinstance(k, int) else _fresh(flat.names[j], k, taken) for k in slots
    ]
    ranges = [
        flat.ranges[k] if isinstance(k, int) else -(-columns // width) if k == "jt" else width
        for k in slots
    ]
    source_strides = [
        b.strides[k] if isinstance(k, int) else b.strides[j] * (width if k == "jt" else 1)
        for k in slots
    ]
    dims = tuple(ranges)
    strides = row_major(dims)
    constraints = ()
    if columns % width:  # the last panel's columns past B's are 0 (unwritten elements)
        lhs = tuple(width if k == "jt" else 1 if k == "jj" else 0 for k in slots)
        constraints = (FlatConstraint(lhs, columns - 1),)
    copy = FlatContraction(
        statement=f"{buffer} = {b.tensor} in panels for {flat.statement}",
        names=tuple(names),
        outputs=len(slots),
        ranges=dims,
        derived=(),
        access=(
            FlatAccess(buffer, b.dtype, dims, 0, strides),
            replace(b, strides=tuple(source_strides)),
        ),
        constraints=constraints,
        agg=AggOp.SUM,
        comb=CombOp.NONE,
        dtype=b.dtype,
    )
    at = {k: stride for k, stride in zip(slots, strides, strict=True)}
    main_strides = tuple(1 if k == j else at.get(k, 0) for k in range(len(flat.ranges)))
    packed = FlatAccess(buffer, b.dtype, dims, 0, main_strides, (width, at["jt"]))
    main = replace(flat, access=tuple(packed if x is b else x for x in flat.access))
    context = with_temporary(context, buffer, TensorShape(b.dtype, dims))
    if generate_vector_contraction(plan, main, context, settings, "probe") is None:
        return None
    op = plan.contraction
    assert op is not None
    copy_op = replace(op, output=buffer, inputs=(b.tensor,))
    copy_plan = KernelPlan(PlanKind.CONTRACTION, dims, (copy_op,), (buffer,))
    return Split((copy_plan, copy), (plan, main), buffer, context, "panels")


def _fresh(base: str, role: str, taken: set[str]) -> str:
    """A variable name for a panel's `role` ("jt", "jj") of `base`, not in `taken`."""
    name = f"{base}_{role[1]}"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def float_copy(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
) -> Split | None:
    """A float32 copy of a float16 operand of the register-tiled kernel, made first by a
    kernel of its own, where `settings.half_as_float` asks for it (module docstring): of the
    broadcast operand A where a row of it meets more than one column tile, else of the
    vector operand B where a panel of it meets more than one row tile; None when neither."""
    if flat is None or plan.contraction is None or not settings.half_as_float:
        return None
    if settings.native_fp16 or settings.vec_size == 1:
        return None
    if tuple(plan.shape) != tuple(flat.ranges[: flat.outputs]):
        return None
    shape = vector_shape(flat, settings.vec_size, half=True)
    if shape is None or any(context.is_constant(access.tensor) for access in flat.operands):
        return None
    if shape.a.dtype is DType.FLOAT16 and flat.ranges[shape.j] > shape.width:
        operand, role = shape.a, "a"
    elif shape.b.dtype is DType.FLOAT16 and flat.ranges[shape.i] > 1:
        operand, role = shape.b, "b"
    else:
        return None
    if not _inside(flat, operand):
        return None
    # The copy keeps the operand's layout (its variables by falling stride).
    variables = sorted(
        (k for k, stride in enumerate(operand.strides) if stride),
        key=lambda k: -operand.strides[k],
    )
    wide, copy = _copy_of(flat, operand, variables, buffer, DType.FLOAT32, "as float32")
    main = replace(
        flat, access=tuple(wide if access is operand else access for access in flat.access)
    )
    if vector_shape(main, settings.vec_size, half=True) is None:
        return None
    context = with_temporary(context, buffer, TensorShape(DType.FLOAT32, copy.ranges))
    return Split(_cast(plan, copy, buffer), (plan, main), buffer, context, f"to_float_{role}")


def _cast(
    plan: KernelPlan, copy: FlatContraction, buffer: str
) -> tuple[KernelPlan, FlatContraction | None]:
    """The kernel making `copy` (into `buffer`) for the contraction of `plan`: where it is its
    source tensor element for element (the whole tensor, in its own layout), an elementwise
    cast, whose kernels take vectors (`settings.vector_loops`); else a contraction copying."""
    assert plan.contraction is not None
    target, source = copy.access
    if source.offset == 0 and source.dims == copy.ranges and source.strides == target.strides:
        op = BoundOp(OpKind.ELEMENTWISE, buffer, (source.tensor,), "cast", target.dtype)
        return KernelPlan(PlanKind.ELEMENTWISE, copy.ranges, (op,), (buffer,)), None
    copy_op = replace(plan.contraction, output=buffer, inputs=(source.tensor,))
    return KernelPlan(PlanKind.CONTRACTION, copy.ranges, (copy_op,), (buffer,)), copy


def float_output(
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    buffer: str,
) -> Split | None:
    """A float16 product whose operands are float32 (copies) written to a float32 temporary
    by the vector kernel (`first`), then converted to the float16 output by a kernel of its
    own (`then`), where the float32 form takes vectors at element offsets (`Lanes`: an
    output width such as 333) that half cannot, or walks the reduction in blocks; None
    elsewhere."""
    op = plan.contraction
    if flat is None or op is None or not settings.half_as_float or settings.native_fp16:
        return None
    output = flat.output
    if output.dtype is not DType.FLOAT16 or len(plan.ops) != 1 or plan.stores != (op.output,):
        return None
    if any(access.dtype is not DType.FLOAT32 for access in flat.operands):
        return None
    dims = output.dims
    whole = tuple(flat.ranges[: flat.outputs]) == dims and output.offset == 0
    if not whole or output.strides[: flat.outputs] != row_major(dims):
        return None  # the vector kernel writes part of the output: nothing to copy from
    if any(output.strides[flat.outputs :]):
        return None
    half = vector_shape(flat, settings.vec_size, half=True)
    wide = FlatAccess(buffer, DType.FLOAT32, dims, 0, output.strides)
    main = replace(flat, access=(wide, *flat.access[1:]), dtype=DType.FLOAT32)
    single = vector_shape(main, settings.vec_size)
    if single is None:
        return None
    context = with_temporary(context, buffer, TensorShape(DType.FLOAT32, dims))
    main_plan = KernelPlan(plan.kind, plan.shape, (replace(op, output=buffer),), (buffer,))
    unaligned = single.lanes and (half is None or half.width < single.width)
    if not unaligned and not _blocks(main_plan, main, context, settings, single):
        return None
    outputs = range(flat.outputs)
    temporary = FlatAccess(buffer, DType.FLOAT32, dims, 0, row_major(dims))
    _, convert = _copy_of(flat, temporary, outputs, output.tensor, DType.FLOAT16, "as float16")
    then = _cast(replace(plan, ops=(replace(op, inputs=(buffer,)),)), convert, op.output)
    return Split((main_plan, main), then, buffer, context, "to_half")


def _blocks(
    plan: KernelPlan,
    flat: FlatContraction,
    context: ProgramContext,
    settings: HardwareSettings,
    shape: object,
) -> bool:
    """Whether the vector kernel of `flat` walks the reduction in blocks
    (`tile.lower.vector_blocks`), which it does for a float32 output only: a float16 product
    otherwise ran its whole reduction per register tile (matmul 1024 on llvm_cpu: 2.7x the
    float32 time)."""
    from tile.lower.vector import register_tiles

    return register_tiles(plan, flat, context, settings, shape)[2] is not None  # type: ignore[arg-type]


def _copy_of(
    flat: FlatContraction,
    access: FlatAccess,
    variables: Sequence[int],
    target: str,
    dtype: DType,
    how: str,
) -> tuple[FlatAccess, FlatContraction]:
    """A row-major copy of what `access` reads for `variables` (in that order) into `target`,
    in `dtype`: how `flat` reads the copy, and the flat contraction of the kernel making it."""
    dims = tuple(flat.ranges[k] for k in variables)
    strides = dict(zip(variables, row_major(dims), strict=True))
    copied = FlatAccess(
        target, dtype, dims, 0, tuple(strides.get(k, 0) for k in range(len(flat.ranges)))
    )
    copy = FlatContraction(
        statement=f"{target} = {access.tensor} {how} for {flat.statement}",
        names=tuple(flat.names[k] for k in variables),
        outputs=len(variables),
        ranges=dims,
        derived=(),
        access=(
            FlatAccess(target, dtype, dims, 0, row_major(dims)),
            replace(access, strides=tuple(access.strides[k] for k in variables)),
        ),
        constraints=(),
        agg=AggOp.SUM,
        comb=CombOp.NONE,
        dtype=dtype,
    )
    return copied, copy


def _inside(flat: FlatContraction, access: FlatAccess) -> bool:
    """Whether `access` stays inside its tensor for every value of every variable (nothing
    guards the pack kernel's reads)."""
    if any(stride < 0 for stride in access.strides) or access.offset < 0:
        return False
    last = access.offset + sum(
        stride * (flat.ranges[k] - 1) for k, stride in enumerate(access.strides) if stride
    )
    return last < product(access.dims)
