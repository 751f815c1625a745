"""Row-fused kernels: consecutive kernels that each work row by row become one kernel.

Softmax is four kernels (a row max, `exp(X - max)`, a row sum, the division), layer
normalisation five or six; on their own each launches over the whole tensor and passes it
through memory. When consecutive kernel plans all compute rows of one shape `R + (N,)` (or
`R + (1,)`, a row's reduction kept as a column), and every value one of them produces and a
later one reads is read at the reader's own row, one work-group can run them all for one row in
turn: the row is in cache from the first step to the last, and the launches are one.

`row_runs` finds such runs among the program's plans; `generate_run` generates each plan of a
run with a tile of one whole row (one work-group per row, the same grid for all) and joins the
bodies into one function, each in its own scope, over the union of their buffers. Values
passed between the steps still go through their buffers (the temporaries stay), now within
one work-item, which reads them right after writing them. A temporary that only the run
reads, and that a later step's output of its shape can hold (`in_place`), is written into
that output's buffer instead: softmax's `E = exp(X - MX)` into O, which `O = E / S` then
overwrites element by element, so no full-size temporary passes through memory.

A run needs at least one reduction, two plans or more, and a row for every core
(`goal_groups // 4`), or rows short enough that one core does each at once
(`FEW_ROWS_LENGTH`); only CPU-style settings (one work-item per group) fuse rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from semtree.nodes import Block, Declare, For, Lookup, Param, rewrite, walk
from semtree.types import Type
from tile.bind.program import OpKind
from tile.lower.contract import generate_group
from tile.lower.flatten import flatten, row_major
from tile.lower.fuse import PlanKind, reads
from tile.lower.kernel import GeneratedBody, product

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from semtree.kernel import HardwareSettings
    from semtree.nodes import Node
    from tile.bind.program import Binding
    from tile.lower.flat import FlatContraction
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import ProgramContext


# The longest rows fused where there are fewer rows than cores: a softmax over one row of
# 4096 took 19.5 µs in four launches over both cores and 11.5 in one kernel (llvm_cpu.0, AMD
# Zen 4, 2 cores). Beyond that a core alone per row leaves the others idle, but the launches
# it saves weigh more up to rows of a few L2s: interleaved with torch, µs four kernels / fused
# (torch), softmax over 1 x 100003 81 / 60 (60), 131071 101 / 74 (77), 300007 209 / 185
# (213), 524287 323 / 307 (353), 10^6 501 / 558 (614); layer norm 1 x 300007 174 / 122, 600000
# 367 / 283 (the four-kernel form's small launches run on one core too: `TILE_CPU_SPLIT_US`).
# With a row per core, fused won at every length: 3 x 100003 259 -> 154 µs, 6 x 300000 1614
# -> 1382, 4 x 10^6 3446 -> 3056.
FEW_ROWS_LENGTH = 1 << 19


@dataclass(frozen=True, slots=True)
class RowRun:
    """Plans `start` to `stop - 1` (in launch order) with their flat contractions (None for
    an elementwise plan), rows of `rows + (length,)`."""

    start: int
    stop: int
    plans: tuple[KernelPlan, ...]
    flats: tuple[FlatContraction | None, ...]
    rows: tuple[int, ...]
    length: int


def row_runs(
    plans: Sequence[KernelPlan],
    context: ProgramContext,
    bindings: Mapping[str, Binding],
    settings: HardwareSettings,
    single: Sequence[bool],
) -> dict[int, RowRun]:
    """The runs of row-fusable plans, by their first plan's index. `single[i]`: plan `i` must
    stay a kernel of its own (a copy, for instance)."""
    if settings.threads != 1:
        return {}
    runs: dict[int, RowRun] = {}
    index = 0
    while index < len(plans):
        run = _grow(plans, index, context, bindings, settings, single)
        if run is None:
            index += 1
            continue
        runs[run.start] = run
        index = run.stop
    return runs


@dataclass(slots=True)
class _Run:
    rows: tuple[int, ...]
    length: int | None = None  # N, once a plan of full rows fixes it
    produced: set[str] = field(default_factory=set)  # tensors written by the run's plans
    read: set[str] = field(default_factory=set)  # buffers read by them
    written: set[str] = field(default_factory=set)  # buffers written by them
    flats: list[FlatContraction | None] = field(default_factory=list)  # per plan taken
    reductions: int = 0


def _grow(
    plans: Sequence[KernelPlan],
    start: int,
    context: ProgramContext,
    bindings: Mapping[str, Binding],
    settings: HardwareSettings,
    single: Sequence[bool],
) -> RowRun | None:
    """The longest run starting at `start`, if it is worth a kernel."""
    first = plans[start]
    if len(first.shape) < 2 or single[start]:
        return None
    run = _Run(first.shape[:-1])
    stop = start
    while stop < len(plans) and not single[stop] and _joins(plans[stop], run, context, bindings):
        stop += 1
    if stop - start < 2 or not run.reductions or run.length is None:
        return None
    if product(run.rows) < max(1, settings.goal_groups // 4) and run.length > FEW_ROWS_LENGTH:
        return None
    plans_taken = tuple(plans[start:stop])
    return RowRun(start, stop, plans_taken, tuple(run.flats), run.rows, run.length)


def _joins(
    plan: KernelPlan, run: _Run, context: ProgramContext, bindings: Mapping[str, Binding]
) -> bool:
    """Whether `plan` computes rows of the run and reads the run's values only at its own
    row; if so, the run takes it."""
    if plan.kind not in (PlanKind.CONTRACTION, PlanKind.ELEMENTWISE):
        return False
    if len(plan.shape) != len(run.rows) + 1 or plan.shape[:-1] != run.rows:
        return False
    last = plan.shape[-1]
    length = run.length
    if last != 1:
        if length is not None and last != length:
            return False
        length = last
    reductions = 0
    flat = None
    for op in plan.ops:
        if op.kind is OpKind.CONTRACTION:
            flat = flatten(op, bindings)
            length = _reduction_length(flat, run, length, context)
            if length is None:
                return False
            reductions += 1
            continue
        for name, local in reads(op):
            if name in run.produced and not (local and _row_shaped(name, run, length, context)):
                return False
    buffers_written = {context.buffer_of[name] for name in plan.stores}
    buffers_read = {
        context.buffer_of[name]
        for op in plan.ops
        for name in op.inputs
        if not context.is_constant(name)
    }
    if buffers_written & (run.read | run.written):  # written after a read, or twice
        return False
    run.length = length
    run.flats.append(flat)
    run.reductions += reductions
    run.produced.update(op.output for op in plan.ops)
    run.read.update(buffers_read)
    run.written.update(buffers_written)
    return True


def _row_shaped(name: str, run: _Run, length: int | None, context: ProgramContext) -> bool:
    """Whether tensor `name` has the run's rows and its own buffer's layout."""
    dims = context.dims(name)
    if dims != context.shapes[context.buffer_of[name]].dims:
        return False
    return dims[:-1] == run.rows and (dims[-1] == 1 or dims[-1] == length)


def _reduction_length(
    flat: FlatContraction, run: _Run, length: int | None, context: ProgramContext
) -> int | None:
    """N for a contraction that reduces each row to its column `R + (1,)` and reads the run's
    values as `T[row, k]`; None if it is not one."""
    rank = len(run.rows)
    if flat.empty or flat.derived or flat.constraints or flat.default is not None:
        return None
    if flat.outputs != rank + 1 or flat.ranges[: rank + 1] != (*run.rows, 1):
        return None
    if len(flat.reductions) != 1:
        return None
    (k,) = flat.reductions
    if length is not None and flat.ranges[k] != length:
        return None
    length = flat.ranges[k]
    for access in flat.operands:
        if access.tensor not in run.produced:
            continue  # computed before the run: any element may be read
        if not _row_shaped(access.tensor, run, length, context):
            return None
        strides = row_major(access.dims)
        if access.dims[-1] != length or access.offset != 0:
            return None
        if access.strides[:rank] != strides[:rank] or access.strides[rank] != 0:
            return None
        if access.strides[k] != 1:
            return None
    return length


def in_place(run: RowRun, context: ProgramContext, keep: Collection[str]) -> dict[str, str]:
    """The temporaries of the run that a later step's output can hold: buffer -> the
    output's buffer. A temporary qualifies when no buffer of `keep` (read outside the run,
    or an input or output of the program) is it; the output has its shape and is written
    by a step whose every read of the temporary is at the element it stores, after which
    no step reads the temporary. Each output holds one temporary at most."""
    written, read = [], []
    for plan in run.plans:
        written.append([context.buffer_of[name] for name in plan.stores])
        read.append(
            [
                (context.buffer_of[name], local and op.fn != "gather")
                for op in plan.ops
                for name, local in reads(op)
                if not context.is_constant(name)
            ]
        )
    held: dict[str, str] = {}
    for start, buffers in enumerate(written):
        for buffer in buffers:
            if buffer in keep or buffer in held or buffer in held.values():
                continue
            for step in range(start + 1, len(run.plans)):
                if any(b == buffer for later in read[step + 1 :] for b, _ in later):
                    continue  # read after that step overwrites it
                if not all(local for b, local in read[step] if b == buffer):
                    continue
                shape = run.plans[step].shape
                targets = [
                    target
                    for target in written[step]
                    if context.shapes[target] == context.shapes[buffer]
                    and context.shapes[target].dims == tuple(shape)
                    and target not in held
                    and target not in held.values()
                ]
                if targets:
                    held[buffer] = targets[0]
                    break
    return held


def generate_run(
    run: RowRun,
    context: ProgramContext,
    settings: HardwareSettings,
    name: str,
    keep: Collection[str] = (),
) -> GeneratedBody | None:
    """One kernel for the run's plans: a work-group per row, the plans' steps in turn; the
    temporaries `in_place` finds (none of `keep`) held in the outputs that follow them."""
    generated: list[GeneratedBody] = []
    for plan, flat in zip(run.plans, run.flats, strict=True):
        tiles = (*(1 for _ in run.rows), plan.shape[-1])
        generated.append(generate_group(plan, flat, context, settings, tiles, name))
    if len({body.global_size for body in generated}) != 1:
        return None
    held = in_place(run, context, keep)
    outputs = list(dict.fromkeys(b for body in generated for b in body.outputs if b not in held))
    inputs = [
        b
        for b in dict.fromkeys(b for body in generated for b in body.inputs)
        if b not in outputs and b not in held
    ]
    names = {buffer: f"out{i}" for i, buffer in enumerate(outputs)}
    names |= {buffer: f"in{i}" for i, buffer in enumerate(inputs)}
    names |= {buffer: names[target] for buffer, target in held.items()}
    locals_ = {
        node.name if isinstance(node, Declare) else node.var
        for body in generated
        for node in walk(body.body)
        if isinstance(node, Declare | For)
    }
    if locals_ & set(names.values()):
        return None
    steps = tuple(_renamed(body, names) for body in generated)
    params = [Param(names[b], Type.ptr(context.shapes[b].dtype)) for b in outputs]
    params += [Param(names[b], Type.ptr(context.shapes[b].dtype, const=True)) for b in inputs]
    function = replace(generated[0].body, name=name, params=tuple(params), body=Block(steps))
    return GeneratedBody(
        function,
        tuple(outputs),
        tuple(inputs),
        generated[0].global_size,
        sum(body.flops for body in generated),
        sum(context.shapes[b].nbytes for b in (*outputs, *inputs)),
    )


def _renamed(generated: GeneratedBody, names: dict[str, str]) -> Block:
    """The body of one step, its parameters renamed to the joint kernel's."""
    buffers = (*generated.outputs, *generated.inputs)
    params = generated.body.params
    assert len(params) == len(buffers)
    mapping = {param.name: names[buffer] for param, buffer in zip(params, buffers, strict=True)}

    def rename(node: Node) -> Node | None:
        if isinstance(node, Lookup) and node.name in mapping:
            return Lookup(mapping[node.name])
        return None

    return rewrite(generated.body.body, rename)  # type: ignore[return-value]
