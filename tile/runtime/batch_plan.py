"""The plan of one call size of a dynamic function (`tile.runtime.dynamic`): the kernels of a
block size over the call's blocks, as a `CompiledProgram` whose schedule names the call's own
slots, so that `tile.runtime.launch` runs it like any program.

`PlanBuilder.add` lays out one kernel list over `count` blocks: the program's batched inputs
and outputs are the call's tensors (N rows); a batched temporary grows to `count` blocks; a
private buffer (`tile.lower.batch`) gets `count` copies; anything without the batch stays its
size. The blocks cover `rows` rows: all N, the last block clamped to end at the last row
(`tile.lower.batch`), or the first `count` whole blocks. With `staged`, the blocks are
instead made of the call's last rows, in place through views or copied into staging buffers
first, and only the last `staged` rows of each output are copied back. The counts of rows
the launches cover are 0-D INT32 inputs the call gives (`row_counts`: `ROWS` for N).
Kernels that touch batched buffers launch over the blocks (`hal.Kernel.run(batch=...)`);
ZERO and COPY kernels over batched buffers zero or copy whole buffers of the call's size.
`PlanBuilder.add_once` lays out a `Reduction` (a stage of `tile.lower.stages` that reduces
over the batch) over the call's whole buffers. Stages pass tensors by name: what one stage
writes under a name, a later one reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList, KernelParam
from semtree.types import DType, TensorShape
from tile.lower.batch import ROWS
from tile.lower.schedule import OutputPlan, OutputSource, Schedule, Step
from tile.runtime.execute import CompiledProgram

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from hal.interfaces import Buffer, Event, Executor, Kernel, Library
    from tile.lower.batch import BatchedList
    from tile.runtime.cache import ProgramKey


@dataclass(slots=True)
class Blocks:
    """The kernels of one block size, built and prepared."""

    batched: BatchedList
    rows: frozenset[str]  # the program's tensors whose first axis is the batch
    schedule: Schedule
    library: Library
    kernels: list[Kernel]


@dataclass(slots=True)
class Reduction:
    """The kernel of a stage reducing over the batch, built and prepared."""

    kernel_list: KernelList
    rows: frozenset[str]  # the tensors it reads row by row
    schedule: Schedule
    library: Library
    kernels: list[Kernel]


class PlanBuilder:
    """The slots and steps of one call size (module docstring); `call_inputs`: the names the
    call gives (every other input of a stage is what an earlier stage wrote)."""

    def __init__(self, executor: Executor, rows: int, call_inputs: frozenset[str]) -> None:
        self.executor = executor
        self.rows = rows
        self.call_inputs = call_inputs
        self.names: list[str] = []
        self.slots: dict[str, int] = {}
        self.shapes: dict[str, TensorShape] = {}
        self.inputs: dict[str, int] = {}
        self.temporaries: list[int] = []
        self.steps: list[Step] = []
        self.kernels: list[Kernel] = []
        self.parts = 0  # the kernel lists added so far (their slots are kept apart)
        self.row_counts: dict[str, int] = {}  # 0-D INT32 inputs: name -> the rows it holds

    def slot(self, name: str, shape: TensorShape, *, temporary: bool = False) -> int:
        if name not in self.slots:
            self.slots[name] = len(self.names)
            self.names.append(name)
            self.shapes[name] = shape
            if temporary:
                self.temporaries.append(self.slots[name])
        return self.slots[name]

    def add(self, blocks: Blocks, count: int, *, rows: int, staged: int | None = None) -> None:
        """The kernels of `blocks` over `count` blocks covering the first `rows` rows of the
        call's own buffers; or, with `staged` rows, over `count` blocks made of the call's
        last rows (`rows` of them), of which the last `staged` rows of each output are kept."""
        batched = blocks.batched
        kernel_list = batched.kernel_list
        program_inputs = set(kernel_list.inputs)
        output_buffers = {
            blocks.schedule.slot_names[plan.slot]
            for plan in blocks.schedule.outputs
            if plan.source is OutputSource.KERNEL
        }
        prefix = f"p{self.parts}."
        self.parts += 1
        slot_of: dict[str, int] = {}
        copies_out = []
        # In place: the last rows of the call's own buffers, through views, when the backend
        # makes views at their offset; else staging buffers and copies.
        views: dict[str, tuple[int, int]] = {}  # buffer -> (offset, bytes) of its view
        in_place = staged is not None and self._views_fit(
            blocks, count, program_inputs | output_buffers
        )
        for name, shape in kernel_list.shapes.items():
            is_rows = name in batched.block_elements and name not in batched.private
            if name == ROWS:
                slot_of[name] = self._row_count(rows)
            elif name in batched.private:
                slot_of[name] = self.slot(
                    prefix + name, _grown(shape, count, private=True), temporary=True
                )
            elif name in program_inputs:
                whole = slot_of[name] = self._input(name, shape, is_rows)
                if is_rows and in_place:
                    views[name] = self._last_rows(shape, count)
                elif is_rows and staged is not None:  # the input's last rows
                    grown = _grown(shape, count, private=False)
                    stage = self.slot(f"{prefix}stage.{name}", grown, temporary=True)
                    rows = grown.dims[0]
                    self._copy(name, whole, stage, (self.rows - rows, 0, rows), shape)
                    slot_of[name] = stage
            elif name in output_buffers and (staged is None or (in_place and is_rows)):
                full = _with_rows(shape, self.rows) if is_rows else shape
                slot_of[name] = self.slot(name, full)
                if staged is not None:
                    views[name] = self._last_rows(shape, count)
            elif name in output_buffers and is_rows:
                grown = _grown(shape, count, private=False)
                slot_of[name] = self.slot(f"{prefix}stage.{name}", grown, temporary=True)
                copies_out.append((name, slot_of[name], shape))
            else:  # a temporary (or an unbatched output the direct blocks already write)
                grown = _grown(shape, count, private=False) if is_rows else shape
                slot_of[name] = self.slot(prefix + name, grown, temporary=True)
        for index, info in enumerate(kernel_list.kernels):
            params = tuple(slot_of[param.name] for param in info.params)
            kernel = blocks.kernels[index]
            placed = {i: views[p.name] for i, p in enumerate(info.params) if p.name in views}
            if index in batched.batched_kernels:
                sizes = [self.shapes[self.names[slot]].nbytes for slot in params]
                for i, (_, size) in placed.items():
                    sizes[i] = size
                kernel = _over_blocks(self.executor, kernel, info, count, min(sizes))
            if placed:
                kernel = _Viewed(self.executor, kernel, placed)  # type: ignore[assignment]
            self._step(kernel, info, params)
        for name, stage, shape in copies_out:
            assert staged is not None
            target = self.slot(name, _with_rows(shape, self.rows))
            rows = count * shape.dims[0]
            self._copy(name, stage, target, (rows - staged, self.rows - staged, staged), shape)

    def add_once(self, reduction: Reduction) -> None:
        """The kernel of `reduction` over the call's whole buffers, launched once."""
        kernel_list = reduction.kernel_list
        inputs = set(kernel_list.inputs)
        prefix = f"p{self.parts}."
        self.parts += 1
        slot_of = {}
        for name, shape in kernel_list.shapes.items():
            if name == ROWS:
                slot_of[name] = self._row_count(self.rows)
            elif name in inputs:
                slot_of[name] = self._input(name, shape, name in reduction.rows)
            elif name in kernel_list.outputs:
                slot_of[name] = self.slot(name, shape)
            else:
                slot_of[name] = self.slot(prefix + name, shape, temporary=True)
        for index, info in enumerate(kernel_list.kernels):
            params = tuple(slot_of[param.name] for param in info.params)
            self._step(reduction.kernels[index], info, params)

    def _row_count(self, rows: int) -> int:
        """The slot of the 0-D input holding `rows` (a count of rows the call gives)."""
        name = ROWS if rows == self.rows else f"{ROWS}.{rows}"
        self.row_counts[name] = rows
        slot = self.inputs[name] = self.slot(name, TensorShape(DType.INT32, ()))
        return slot

    def _input(self, name: str, shape: TensorShape, is_rows: bool) -> int:
        """The slot of a stage's input: the call's, or what an earlier stage wrote; `shape`
        at one block (of a batched input, `is_rows`)."""
        slot = self.slot(name, _with_rows(shape, self.rows) if is_rows else shape)
        if name in self.call_inputs:
            self.inputs[name] = slot
        return slot

    def _views_fit(self, blocks: Blocks, count: int, program_buffers: set[str]) -> bool:
        """Whether every batched input and output of `blocks` (among `program_buffers`) has
        a view at its last `count` blocks' rows."""
        if not self.executor.makes_views:
            return False
        batched = blocks.batched
        shapes = batched.kernel_list.shapes
        for name in batched.block_elements.keys() & program_buffers:
            offset, _ = self._last_rows(shapes[name], count)
            if offset % self.executor.buffer_alignment:
                return False
        return True

    def _last_rows(self, shape: TensorShape, count: int) -> tuple[int, int]:
        """(offset, bytes) of the call's last `count` blocks of a batched buffer whose one
        block is `shape`."""
        size = _grown(shape, count, private=False).nbytes
        return _with_rows(shape, self.rows).nbytes - size, size

    def _copy(
        self, name: str, source: int, target: int, rows: tuple[int, int, int], shape: TensorShape
    ) -> None:
        """Copy rows (first source row, first target row, count) of a batched buffer whose
        one block is `shape`."""
        row_bytes = shape.nbytes // shape.dims[0]
        first, to, count = (row * row_bytes for row in rows)
        info = _copy_info(
            f"copy_{len(self.steps)}", self.names[target], self.names[source], self.shapes, count
        )
        self._step(_RangeCopy(self.executor, info, first, to, count), info, (target, source))

    def _step(self, kernel: Kernel, info: KernelInfo, params: tuple[int, ...]) -> None:
        reads, writes = {}, {}
        for param, slot in zip(info.params, params, strict=True):
            (writes if param.direction is Direction.OUT else reads)[slot] = None
        self.steps.append(Step(len(self.kernels), params, tuple(reads), tuple(writes)))
        self.kernels.append(kernel)

    def program(
        self,
        key: ProgramKey,
        library: Library,
        made: Sequence[tuple[OutputPlan, Schedule, frozenset[str]]],
    ) -> CompiledProgram:
        """The plan: a program over the slots laid out, whose outputs are `made` (each
        output's plan in the schedule of the stage making it, and that stage's batched
        tensors); TileOutOfMemory for a buffer the kernels cannot index (2^31 elements or
        more), before anything is allocated."""
        from tile.lower.kernel import check_size  # the lowering's limit, where it applies

        for name, shape in self.shapes.items():
            check_size(name, shape)
        outputs = []
        for plan, stage_schedule, rows in made:
            shape = plan.shape
            if plan.source is OutputSource.INPUT:
                source = self.shapes.get(plan.input)
                dims = source.dims if source is not None else self._input_dims(rows, plan)
                outputs.append(replace(plan, shape=TensorShape(shape.dtype, dims)))
                continue
            buffer = stage_schedule.slot_names[plan.slot]
            slot = self.slots[buffer]
            outputs.append(
                OutputPlan(
                    plan.name, TensorShape(shape.dtype, self.shapes[buffer].dims), plan.source, slot
                )
            )
        owned = {plan.slot for plan in outputs if plan.source is OutputSource.KERNEL}
        temporaries = tuple(
            (slot, self.shapes[self.names[slot]].nbytes)
            for slot in range(len(self.names))
            if slot not in self.inputs.values() and slot not in owned
        )
        schedule = Schedule(
            tuple(self.names),
            tuple(self.inputs.items()),
            tuple(outputs),
            temporaries,
            tuple(self.steps),
        )
        kernel_list = KernelList((), self.shapes, tuple(self.inputs), (), ())
        return CompiledProgram(key, kernel_list, library, self.kernels, schedule, 0.0)

    def _input_dims(self, rows: frozenset[str], plan: OutputPlan) -> tuple[int, ...]:
        dims = tuple(plan.shape.dims)  # the input's, at one block
        return (self.rows, *dims[1:]) if plan.input in rows else dims


def _with_rows(shape: TensorShape, rows: int) -> TensorShape:
    return TensorShape(shape.dtype, (rows, *shape.dims[1:]))


def _grown(shape: TensorShape, count: int, *, private: bool) -> TensorShape:
    """`count` blocks of a buffer whose one block is `shape`: more rows, or (a private
    buffer of any layout) `count` copies."""
    if private or not shape.dims:
        return TensorShape(shape.dtype, (count, *shape.dims))
    return TensorShape(shape.dtype, (count * shape.dims[0], *shape.dims[1:]))


class _Launch:
    """A kernel launched over a number of blocks (hal.Kernel.run's `batch`)."""

    def __init__(self, kernel: Kernel, info: KernelInfo, count: int) -> None:
        self.kernel = kernel
        self.info = info
        self.count = count

    def run(
        self, params: Sequence[Buffer], deps: Sequence[Event] = (), *, profile: bool = False
    ) -> Event:
        return self.kernel.run(params, deps, profile=profile, batch=self.count)


def _over_blocks(
    executor: Executor, kernel: Kernel, info: KernelInfo, count: int, size: int
) -> Kernel:
    """`kernel` launched over `count` blocks; a COPY (the one bodiless kind batched) copies
    `size` bytes: the blocks of the call, not the one block it was generated for."""
    if info.body is not None:
        return _Launch(kernel, info, count)  # type: ignore[return-value]
    return _RangeCopy(executor, info, 0, 0, size)  # type: ignore[return-value]


class _Viewed:
    """A kernel given views of some of its buffers: (offset, bytes) by parameter index."""

    def __init__(self, executor: Executor, kernel: Kernel, views: dict[int, tuple[int, int]]):
        self.executor = executor
        self.kernel = kernel
        self.info = kernel.info
        self.views = views

    def run(
        self, params: Sequence[Buffer], deps: Sequence[Event] = (), *, profile: bool = False
    ) -> Event:
        buffers = list(params)
        for index, (offset, size) in self.views.items():
            view = self.executor.view(buffers[index], offset, size)
            if view is None:  # the plan checked the offsets: a backend that changed its mind
                raise RuntimeError(f"no view at byte {offset} of {self.info.params[index].name}")
            buffers[index] = view
        return self.kernel.run(buffers, deps, profile=profile)


def _copy_info(
    name: str, target: str, source: str, shapes: Mapping[str, TensorShape], size: int
) -> KernelInfo:
    """The COPY kernel a plan shows for a copy of `size` bytes from `source` to `target`."""
    params = tuple(
        KernelParam(buffer, direction, shapes[buffer].dtype, shapes[buffer].dims)
        for buffer, direction in ((target, Direction.OUT), (source, Direction.IN))
    )
    return KernelInfo(name, KernelKind.COPY, params, (0, 0, 0), (0, 0, 0), None, 0, 2 * size)


class _RangeCopy:
    """Bytes [source_offset, + size) of one buffer into another at target_offset."""

    def __init__(
        self,
        executor: Executor,
        info: KernelInfo,
        source_offset: int,
        target_offset: int,
        size: int,
    ) -> None:
        self.executor = executor
        self.info = info
        self.source_offset = source_offset
        self.target_offset = target_offset
        self.size = size

    def run(
        self, params: Sequence[Buffer], deps: Sequence[Event] = (), *, profile: bool = False
    ) -> Event:
        target, source = params
        return self.executor.copy(
            source, self.source_offset, target, self.target_offset, self.size, deps
        )
