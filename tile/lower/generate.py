"""Stage 5: kernel generation — a bound program becomes a `KernelList` (design 3.5, 8.7).

`generate_program(bound, settings)` is the one entry point the runtime calls. It drives the
front end's back half:

    BoundProgram --tile.lower.fuse.plan_program--> kernel plans and buffers
                 --tile.lower.flatten.flatten-->   FlatContraction per contraction
                 --tile.lower.split-->         a large reduction to few elements: two kernels
                 --tile.lower.tiles-->          tile sizes
                 --tile.lower.contract / tile.lower.special--> semtree bodies
                   (elementwise tiles on vectors under vector_loops: tile.lower.widen)
                 (tile.lower.rows: a run of plans that work row by row becomes one kernel)
                   (tile.lower.gpu.generate instead of tile.lower.contract for GPU settings)
                 --> KernelList (launch order = dependency order)

Kernels are named `<prefix>_<n>`; bodies that come out identical (same structure on
different tensors) are shared and carry the same `key`. The buffers of the list are the
program's tensor inputs, its outputs (each in its own buffer, except an output that is an
input) and the temporaries that some later kernel reads; constants are inlined into bodies
and never become buffers, plus `_P<n>`, the partial results of a split reduction. `var_rewrites`
is empty: no user-visible output is renamed. A buffer of 2^31 or more elements is refused
first (`tile.TileOutOfMemory`): kernels index with 32-bit integers.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING

from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList, KernelParam
from semtree.nodes import Declare, For, Lookup, Node, c_identifier, rewrite, walk
from tile.lower.accumulators import accumulator_dtype, lane_split
from tile.lower.channels import channels_last
from tile.lower.collapse import merge_coordinates
from tile.lower.contract import generate_group
from tile.lower.flatten import flatten
from tile.lower.fuse import PlanKind, plan_program
from tile.lower.gpu.generate import generate_gpu_group, uses_gpu_kernels
from tile.lower.kernel import ProgramContext, RowLoop, check_size, product
from tile.lower.pack import float_copy, float_output, pack_operand
from tile.lower.relayout import relayout_output
from tile.lower.rows import RowRun, generate_run, row_runs
from tile.lower.special import generate_prng, generate_scatter
from tile.lower.split import split_inner, split_reduction
from tile.lower.tiles import choose_tiles, streaming
from tile.lower.vector import generate_vector_contraction

if TYPE_CHECKING:
    from collections.abc import Mapping

    from semtree.kernel import HardwareSettings
    from semtree.nodes import Function
    from semtree.types import TensorShape
    from tile.bind.program import BoundProgram
    from tile.lower.flat import FlatContraction
    from tile.lower.fuse import KernelPlan, ProgramPlan
    from tile.lower.kernel import GeneratedBody
    from tile.lower.split import Split
    from tile.lower.tuning import Tuning

KIND = {
    PlanKind.CONTRACTION: KernelKind.CONTRACTION,
    PlanKind.ELEMENTWISE: KernelKind.ELEMENTWISE,
    PlanKind.SCATTER: KernelKind.SPECIAL,
    PlanKind.PRNG: KernelKind.SPECIAL,
}


def generate_program(
    bound: BoundProgram,
    settings: HardwareSettings,
    *,
    name_prefix: str = "tile",
    tuning: Tuning | None = None,
) -> KernelList:
    """The kernels computing `bound` on a device described by `settings`, with the register
    tiles `tuning` chose (and the contractions that have a choice noted in it)."""
    if settings.threads == 1:  # CPU kernels: a depthwise NCHW convolution channels last
        bound = channels_last(bound)
    plan = plan_program(bound)
    for buffer, shape in plan.shapes.items():
        check_size(buffer, shape)
    context = ProgramContext(bound.bindings, plan.buffer_of, plan.shapes)
    prefix = c_identifier(name_prefix)
    kernels: list[KernelInfo] = []
    bodies: dict[str, Function] = {}
    shapes, temporaries = dict(plan.shapes), list(plan.temporaries)
    copies = [_copy_source(kernel_plan, context) for kernel_plan in plan.kernels]
    runs = row_runs(
        plan.kernels, context, bound.bindings, settings, [c is not None for c in copies]
    )
    fused_until = 0
    for index, kernel_plan in enumerate(plan.kernels):
        if index < fused_until:
            continue
        name = f"{prefix}_{index}"
        run = runs.get(index)
        fused = None
        if run is not None:
            keep = _kept(plan, run, context)
            fused = generate_run(run, context, settings, name, keep)
        if fused is not None:
            assert run is not None
            kernels.append(_row_info(name, run, fused, context, bodies))
            fused_until = run.stop
            continue
        copy = copies[index]
        if copy is not None:
            target = context.buffer_of[kernel_plan.stores[0]]
            kernels.append(_copy_kernel(name, target, copy, context, kernel_plan))
            continue
        flat = None
        tiles: tuple[int, ...] = ()
        local_size = (1, 1, 1)
        after = None  # a kernel converting what this one computed (tile.lower.pack)
        match kernel_plan.kind:
            case PlanKind.CONTRACTION | PlanKind.ELEMENTWISE if uses_gpu_kernels(settings):
                # GPU-style kernels (work-groups of several work-items): tile.lower.gpu.generate.
                contraction = kernel_plan.contraction
                if contraction is not None:
                    flat = flatten(contraction, bound.bindings)
                gpu = generate_gpu_group(kernel_plan, flat, context, settings, name)
                generated, tiles, local_size = gpu.generated, gpu.tiles, gpu.local_size
            case PlanKind.CONTRACTION | PlanKind.ELEMENTWISE:
                contraction = kernel_plan.contraction
                if contraction is not None:
                    flat = flatten(contraction, bound.bindings)
                    if kernel_plan.ops == (contraction,):  # no later op reads coordinates
                        flat = merge_coordinates(flat)
                        kernel_plan = replace(kernel_plan, shape=flat.ranges[: flat.outputs])
                chosen = settings  # with a register tile a measured search chose, if any
                if tuning is not None and flat is not None and settings.threads == 1:
                    chosen = tuning.settings_for(flat, name, settings)
                before = None  # a kernel filling a temporary that this one reads
                if settings.threads == 1:
                    before = split_reduction(kernel_plan, flat, context, chosen, f"_P{index}")
                    before = before or split_inner(kernel_plan, flat, context, chosen, f"_R{index}")
                    if before is None:  # the output in another layout first, then B packed
                        after = relayout_output(kernel_plan, flat, context, chosen, f"_T{index}")
                        if after is not None:
                            context, kernel_plan, flat = _through(after, shapes, temporaries)
                        before = pack_operand(kernel_plan, flat, context, chosen, f"_B{index}")
                    before = before or float_copy(kernel_plan, flat, context, chosen, f"_F{index}")
                made = 0  # float32 copies of operands (tile.lower.pack.float_copy)
                while before is not None:  # the first kernel now; the second below, as usual
                    context = before.context
                    shapes[before.buffer] = context.shapes[before.buffer]
                    temporaries.append(before.buffer)
                    first_name = f"{name}_{before.suffix}"
                    first_plan, first_flat = before.first
                    kernels.append(
                        _side_kernel(first_name, first_plan, first_flat, context, chosen, bodies)
                    )
                    if before.tail is not None:  # a split reduction's last, shorter piece
                        tail_plan, tail_flat = before.tail
                        kernels.append(
                            _side_kernel(
                                f"{first_name}_tail", tail_plan, tail_flat, context, chosen, bodies
                            )
                        )
                    copied = before.suffix.startswith("to_float")
                    kernel_plan, flat = before.then
                    made += 1  # and of the other float16 operand, where it pays
                    buffer = f"_F{index}_{made}"
                    before = float_copy(kernel_plan, flat, context, chosen, buffer)
                    if before is None and copied and after is None:
                        # The float32 copies made: a float16 result through float32 (at the
                        # end), and then B in panels where the float32 product blocks.
                        after = float_output(kernel_plan, flat, context, chosen, f"_O{index}")
                        if after is not None:
                            context, kernel_plan, flat = _through(after, shapes, temporaries)
                            before = pack_operand(kernel_plan, flat, context, chosen, f"_B{index}")
                if settings.threads == 1 and after is None:  # the same without copies
                    after = float_output(kernel_plan, flat, context, chosen, f"_O{index}")
                    if after is not None:
                        context, kernel_plan, flat = _through(after, shapes, temporaries)
                # CPU fast path: register-tiled vector kernels for plain +(A * B).
                vector = None
                if settings.threads == 1:
                    vector = generate_vector_contraction(kernel_plan, flat, context, chosen, name)
                if vector is not None:
                    tiles, generated = vector.tile, vector
                else:
                    tiles = _tiles(kernel_plan, flat, chosen)
                    if tuning is not None and flat is not None and settings.threads == 1:
                        tiles = tuning.tiles_for(flat, kernel_plan.shape, name, tiles)
                    generated = generate_group(kernel_plan, flat, context, chosen, tiles, name)
            case PlanKind.SCATTER:
                generated = generate_scatter(kernel_plan, context, settings, name)
            case _:
                generated = generate_prng(kernel_plan, context, settings, name)
        kernels.append(
            _info(name, kernel_plan, generated, flat, tiles, local_size, context, bodies)
        )
        if after is not None:
            then_plan, then_flat = after.then
            then_name = f"{name}_{after.suffix}"
            kernels.append(_side_kernel(then_name, then_plan, then_flat, context, settings, bodies))
    used = {param.name for kernel in kernels for param in kernel.params}
    unused = {buffer for buffer in temporaries if buffer not in used}  # held in place
    return KernelList(
        kernels=tuple(kernels),
        shapes={buffer: shape for buffer, shape in shapes.items() if buffer not in unused},
        inputs=plan.inputs,
        outputs=plan.outputs,
        temporaries=tuple(buffer for buffer in temporaries if buffer not in unused),
        var_rewrites={},
    )


def _kept(plan: ProgramPlan, run: RowRun, context: ProgramContext) -> set[str]:
    """The buffers a row-fused run must leave as they are (`tile.lower.rows.in_place`): the
    program's inputs and outputs, and every buffer a kernel outside the run reads."""
    kept = {context.buffer_of[name] for name in (*plan.inputs, *plan.outputs)}
    for index, kernel_plan in enumerate(plan.kernels):
        if not run.start <= index < run.stop:  # a value computed in the kernel has no buffer
            names = {name for op in kernel_plan.ops for name in op.inputs}
            kept.update(context.buffer_of[name] for name in names if name in context.buffer_of)
    return kept


# The rows a reduction over a dynamic batch is tiled for: many, so that it gets the register
# tiles of a long reduction.
NOMINAL_ROWS = 256
# Vectors per row of the register tile of such a reduction when its operands meet in an outer
# product (a weight gradient X[n, i] * D[n, j]); its rows fill settings.max_regs. A 512 x 512
# weight gradient over 1024 rows on llvm_cpu.0 (AMD Zen 4, 16 lanes, 384 accumulators): 18.4
# ms with a strip of 1 x 64, 11.1 with 2 x 64, 9.7 with 4 x 64, 13.8 with 6 x 64, 8.0 with
# 3 x 128.
OUTER_VECTORS = 8


def generate_row_reduction(
    bound: BoundProgram,
    settings: HardwareSettings,
    rows: Mapping[str, int],
    count: str,
    *,
    name_prefix: str = "tile",
) -> KernelList:
    """The one kernel of `bound`, a program of one contraction bound for one row of a batch
    that it reduces over (`tile.lower.separable`): it runs the reduction over every row, as
    many as the 0-D INT32 tensor `count` holds, reading row r of each tensor of `rows` at r
    times its elements per row (`tile.lower.contract.RowLoop`). The plain contraction kernel
    of design 8.7, whatever the device's settings: no split, packing or vector fast path."""
    plan = plan_program(bound)
    for buffer, shape in plan.shapes.items():
        check_size(buffer, shape)
    if len(plan.kernels) != 1 or plan.kernels[0].contraction is None:
        raise ValueError("generate_row_reduction takes a program of one contraction")
    (kernel_plan,) = plan.kernels
    context = ProgramContext(bound.bindings, plan.buffer_of, plan.shapes)
    flat = flatten(kernel_plan.contraction, bound.bindings)
    tiles = _outer_tiles(kernel_plan, flat, settings) or _tiles(
        kernel_plan, flat, settings, rows=NOMINAL_ROWS
    )
    name = f"{c_identifier(name_prefix)}_0"
    loop = RowLoop(count, dict(rows))
    generated = generate_group(kernel_plan, flat, context, settings, tiles, name, over_rows=loop)
    info = _info(name, kernel_plan, generated, flat, tiles, (1, 1, 1), context, {})
    return KernelList(
        kernels=(replace(info, comments=f"over the rows {count} counts\n{info.comments}"),),
        shapes=dict(plan.shapes),
        inputs=plan.inputs,
        outputs=plan.outputs,
        temporaries=tuple(plan.temporaries),
        var_rewrites={},
    )


def _outer_tiles(
    plan: KernelPlan, flat: FlatContraction, settings: HardwareSettings
) -> tuple[int, ...] | None:
    """A register tile of several rows for a reduction whose operands meet in an outer
    product over its last two output dimensions (one operand constant along the last, one
    along the one before), on a device with vectors; None for any other."""
    last = flat.outputs - 1
    if last < 1 or len(plan.shape) != flat.outputs or settings.vec_size <= 1:
        return None
    strides = [(access.strides[last - 1], access.strides[last]) for access in flat.operands]
    if not any(s[0] and not s[1] for s in strides) or not any(s[1] and not s[0] for s in strides):
        return None
    columns = min(plan.shape[-1], OUTER_VECTORS * settings.vec_size)
    budget = settings.max_regs // accumulator_dtype(flat.dtype).itemsize
    rows = max(1, min(plan.shape[-2], budget // columns))
    return (1,) * (len(plan.shape) - 2) + (rows, columns)


def _row_info(
    name: str,
    run: RowRun,
    generated: GeneratedBody,
    context: ProgramContext,
    bodies: dict[str, Function],
) -> KernelInfo:
    """The launch of a run of row-fused plans (`tile.lower.rows`)."""
    body, key = _shared_body(generated.body, bodies)
    steps = "\n".join(_comments(p, f) for p, f in zip(run.plans, run.flats, strict=True))
    return KernelInfo(
        name=name,
        kind=KernelKind.CONTRACTION,
        params=_params(generated, context),
        global_size=generated.global_size,
        local_size=(1, 1, 1),
        body=body,
        flops=generated.flops,
        bytes=generated.bytes,
        key=key,
        comments=f"row-fused: {len(run.plans)} steps per row\n{steps}",
    )


def _side_kernel(
    name: str,
    plan: KernelPlan,
    flat: FlatContraction | None,
    context: ProgramContext,
    settings: HardwareSettings,
    bodies: dict[str, Function],
) -> KernelInfo:
    """A kernel that a split adds (tile.lower.split, tile.lower.pack), from the generic
    generator with the tiles `_tiles` chooses."""
    tiles = _tiles(plan, flat, settings)
    generated = generate_group(plan, flat, context, settings, tiles, name)
    return _info(name, plan, generated, flat, tiles, (1, 1, 1), context, bodies)


def _info(
    name: str,
    plan: KernelPlan,
    generated: GeneratedBody,
    flat: FlatContraction | None,
    tiles: tuple[int, ...],
    local_size: tuple[int, int, int],
    context: ProgramContext,
    bodies: dict[str, Function],
) -> KernelInfo:
    body, key = _shared_body(generated.body, bodies)
    return KernelInfo(
        name=name,
        kind=KIND[plan.kind],
        params=_params(generated, context),
        global_size=generated.global_size,
        local_size=local_size,
        body=body,
        flops=generated.flops,
        bytes=generated.bytes,
        key=key,
        tile=tiles,
        comments=_comments(plan, flat),
    )


def _tiles(
    plan: KernelPlan,
    flat: FlatContraction | None,
    settings: HardwareSettings,
    *,
    rows: int = 1,
) -> tuple[int, ...]:
    """The tiles of a plan (`tile.lower.tiles`); `rows`: how many times the reduction runs
    (a nominal count for rows counted at run time)."""
    points = rows
    accumulator_bytes = 4
    lanes = 1
    crosswise = None
    streams = broadcasts = False
    if flat is not None and not flat.empty:
        points = rows * product(flat.ranges[k] for k in flat.reductions)
        acc_dtype = accumulator_dtype(flat.dtype)
        accumulator_bytes = acc_dtype.itemsize
        lanes = lane_split(flat, (1,) * len(plan.shape), acc_dtype)[1]
        last = flat.outputs - 1
        for access in flat.operands:
            if last >= 0 and access.strides[last] != 1:
                contiguous = [k for k in range(last) if access.strides[k] == 1]
                crosswise = contiguous[0] if contiguous else crosswise
        streams = streaming(flat)
        broadcasts = streams and any(not access.strides[last] for access in flat.operands)
    return choose_tiles(
        plan.shape,
        settings,
        reduction_points=points,
        accumulator_bytes=accumulator_bytes,
        lanes=lanes,
        crosswise=crosswise,
        streams=streams,
        broadcasts=broadcasts,
        elementwise=flat is None,
    )


def _through(
    after: Split, shapes: dict[str, TensorShape], temporaries: list[str]
) -> tuple[ProgramContext, KernelPlan, FlatContraction | None]:
    """Take the float32 temporary of `after` (tile.lower.pack.float_output): the context
    that has it, and the plan and contraction writing it."""
    context = after.context
    shapes[after.buffer] = context.shapes[after.buffer]
    temporaries.append(after.buffer)
    kernel_plan, flat = after.first
    return context, kernel_plan, flat


def _copy_source(plan: KernelPlan, context: ProgramContext) -> str | None:
    """The buffer a plan copies unchanged into its one output, if it is a plain copy."""
    if plan.kind is PlanKind.COPY:
        return context.buffer_of[plan.ops[0].inputs[0]]
    if plan.kind is not PlanKind.ELEMENTWISE or len(plan.ops) != 1 or len(plan.stores) != 1:
        return None
    (op,) = plan.ops
    if op.fn != "ident" or op.output != plan.stores[0]:
        return None
    (source,) = op.inputs
    if context.is_constant(source):
        return None
    same = context.dtype(source) is context.dtype(op.output)
    if not same or context.dims(source) != context.dims(op.output):
        return None
    return context.buffer_of[source]


def _copy_kernel(
    name: str, target: str, source: str, context: ProgramContext, plan: KernelPlan
) -> KernelInfo:
    shapes = context.shapes
    params = (
        KernelParam(target, Direction.OUT, shapes[target].dtype, shapes[target].dims),
        KernelParam(source, Direction.IN, shapes[source].dtype, shapes[source].dims),
    )
    return KernelInfo(
        name=name,
        kind=KernelKind.COPY,
        params=params,
        global_size=(0, 0, 0),
        local_size=(0, 0, 0),
        body=None,
        flops=0,
        bytes=2 * shapes[target].nbytes,
        comments=_comments(plan, None),
    )


def _params(generated: GeneratedBody, context: ProgramContext) -> tuple[KernelParam, ...]:
    shapes = context.shapes
    widths = getattr(generated, "vec_widths", None) or {}
    params = [
        KernelParam(
            buffer, Direction.OUT, shapes[buffer].dtype, shapes[buffer].dims, widths.get(buffer, 1)
        )
        for buffer in generated.outputs
    ]
    params += [
        KernelParam(
            buffer, Direction.IN, shapes[buffer].dtype, shapes[buffer].dims, widths.get(buffer, 1)
        )
        for buffer in generated.inputs
    ]
    return tuple(params)


def _shared_body(body: Function, bodies: dict[str, Function]) -> tuple[Function, str]:
    """The body to launch and its structural key: an earlier body that differs only in the
    names of its locals (which follow the tensors' names) is reused."""
    text = str(_canonical(replace(body, name="kernel")))
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    return bodies.setdefault(key, body), key


def _canonical(body: Function) -> Node:
    """`body` with its local names replaced by `l0, l1, ...` in order of declaration."""
    names: dict[str, str] = {}
    for node in walk(body):
        match node:
            case Declare(name=name) | For(var=name):
                names.setdefault(name, f"l{len(names)}")

    def rename(node: Node) -> Node | None:
        match node:
            case Lookup(name=name) if name in names:
                return replace(node, name=names[name])
            case Declare(name=name):
                return replace(node, name=names[name])
            case For(var=name):
                return replace(node, var=names[name])
        return None

    return rewrite(body, rename)


def _comments(plan: KernelPlan, flat: FlatContraction | None) -> str:
    lines = []
    ops = plan.ops
    if flat is not None:
        lines.append(str(flat))
        ops = ops[1:]
    lines += [str(op) for op in ops]
    return "\n".join(lines)
