"""Functions compiled once for every size of a batch dimension (issue 13 item 3).

`Function.compile(X=tile.spec(("N", 128)))` names the first axis of `X` N instead of fixing
it. The function is then bound at a few sizes of N to find the tensors that carry the batch
(`tile.lower.separable`, which refuses a program whose rows meet other than through the
reductions below), and generated and built for blocks of 24, 6 and 1 rows
(`tile.lower.batch.BLOCKS`; `tile.runtime.dynamic_compile` does this). Each kernel
runs over any number of blocks in one launch (`hal.Kernel.run(batch=...)`), so no N compiles
anything. A call with N rows takes the largest block B <= N and runs its kernels over
ceil(N / B) blocks of the call's own buffers in one launch each, the last block clamped to
end at the last row (`tile.lower.batch`: it recomputes some rows of the block before it, with
the same values). Where the clamped start would misalign a vector access, or recompute more
than `WASTE` of the rows, the kernels run over the N // B whole blocks instead, and the
r = N % B rows left are covered by the next smaller block b: its kernels run over
ceil(r / b) blocks made of the call's last ceil(r / b) * b rows, through views of the
call's buffers where the backend makes one at that offset, else copied into staging buffers
first, of whose results only the last r rows are copied back.

A program that reduces over the batch (a batch sum, a weight gradient) runs in stages
(`tile.lower.stages`): the operations between reductions run block by block as above, and
each reduction runs once over all the rows, its kernel counting them at run time. Constants
equal to N (`X / N`) are 0-D tensors each call fills with N; so is the count of rows. The
tensors a later stage reads are the call's size, whole.

What a call with N rows runs is a plan over its own buffers (a `CompiledProgram`, whose
schedule names the call's slots), built in microseconds and kept for the last few sizes;
each plan owns its temporaries, sized for its N.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from hal.errors import HalError
from tile.errors import TileBundleError, TileUnsupported
from tile.lower.batch import BLOCKS, BatchedList, clamps
from tile.runtime import store
from tile.runtime.api import Tensor
from tile.runtime.batch_plan import Blocks, PlanBuilder, Reduction
from tile.runtime.cache import ProgramKey, input_signature, source_hash, tensor_entry
from tile.runtime.compiled import (
    SignedFunction,
    SymbolicSpec,
    _entry_from_json,
    _jsonable,
    _show,
    bundle_device,
    load_plan,
    restore_code,
    signature_entry,
    write_bundle,
)
from tile.runtime.launch import Invocation, launch

if TYPE_CHECKING:
    import os
    from pathlib import Path

    from tile.lower.schedule import OutputPlan, Schedule
    from tile.runtime.api import Device, DeviceLike, InputValue
    from tile.runtime.cache import SignatureEntry
    from tile.runtime.execute import CompiledProgram

PLANS_KEPT = 8  # the per-size plans a dynamic function keeps (each owns its temporaries)
SIZE_HINTS = tuple(sorted({*BLOCKS, 7}))  # the sizes bound to find the batch (and generated)
MAX_ROWS = 2**31 - 1
# The most rows a clamped last block may compute twice, as a share of the call's rows: past
# it, the rows left run in smaller blocks (a second launch). 8 rows of a 3x3 convolution over
# 28x28x128 images in blocks of 6: 12 rows clamped took 1.5x the static time on llvm_cpu.0,
# 6 + 2 x 1 rows 1.0x; softmax 256 x 1024 in blocks of 24: 264 rows clamped 1.04x, 240 + 18
# rows in two launches 1.25x.
WASTE = 1 / 8

Stage = dict[int, Blocks] | Reduction  # a block stage's kernels per block size, or a reduction


class DynamicFunction(SignedFunction):
    """A function compiled for every size of one batch dimension (module docstring); called
    like a `CompiledFunction`, with any number of rows >= 1 in the batched inputs."""

    def __init__(
        self,
        name: str,
        source: str,
        digest: str,
        device: Device,
        symbol: str,
        inputs: dict[str, SymbolicSpec | SignatureEntry],
        stages: list[Stage],
        outputs: tuple[str, ...],
        hidden: dict[str, np.dtype],
        compile_seconds: float,
    ) -> None:
        self.name = name
        self.source = source
        self.device = device
        self.symbol = symbol  # the batch dimension's name
        self.signature = inputs  # input name -> SymbolicSpec, or its fixed signature entry
        self.compile_seconds = compile_seconds
        self._source_hash = digest  # tile.runtime.cache.source_hash of the source
        self._stages = stages
        self._outputs = outputs  # the function's outputs, in order
        self._hidden = hidden  # the constants equal to N, 0-D inputs each call fills: dtypes
        self._plans: OrderedDict[int, tuple[CompiledProgram, dict[str, Tensor]]] = OrderedDict()
        self._lock = threading.Lock()

    def output_shapes(self, rows: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every output's shape and dtype for a batch of `rows`."""
        return dict(self._plan(rows)[0].output_shapes)

    def __call__(self, *args: InputValue, **inputs: InputValue) -> dict[str, Tensor]:
        return self.invoke(*args, **inputs).outputs

    def invoke(self, *args: InputValue, **inputs: InputValue) -> Invocation:
        named = self._named(args, inputs)
        rows = None
        for name, value in named.items():
            wanted, got = self.signature[name], signature_entry(value)
            if isinstance(wanted, SymbolicSpec):
                size = _rows_of(got, wanted)
                if size is None:
                    raise self._error(
                        f"input '{name}' is {_show(got)}; compiled for a {wanted.dtype.name} "
                        f"tensor of shape [{', '.join([self.symbol, *map(str, wanted.rest)])}]"
                    )
                if rows is not None and size != rows:
                    raise self._error(
                        f"input '{name}' has {size} rows of the batch {self.symbol}, another "
                        f"input has {rows}"
                    )
                rows = size
            elif got != wanted:
                raise self._error(f"input '{name}' is {_show(got)}; compiled for {_show(wanted)}")
        assert rows is not None  # every symbolic input is a tensor input, so it was given
        if rows < 1:
            raise self._error(f"the batch {self.symbol} must have at least one row, not {rows}")
        plan, hidden = self._plan(rows)
        return launch(self.device, plan, {**named, **hidden}, {}, self.name)

    def _needs_value(self, name: str) -> bool:
        return isinstance(self.signature[name], SymbolicSpec) or super()._needs_value(name)

    def _plan(self, rows: int) -> tuple[CompiledProgram, dict[str, Tensor]]:
        with self._lock:
            plan = self._plans.get(rows)
            if plan is not None:
                self._plans.move_to_end(rows)
                return plan
        plan = self._build_plan(rows)
        with self._lock:
            self._plans[rows] = plan
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        return plan

    def _build_plan(self, rows: int) -> tuple[CompiledProgram, dict[str, Tensor]]:
        if rows > MAX_ROWS:
            raise self._error(f"a batch of {rows} rows is too large")
        call_inputs = frozenset(self.signature) | frozenset(self._hidden)
        builder = PlanBuilder(self.device.runtime.executor, rows, call_inputs)
        sizes = [block for block in BLOCKS if block <= rows]
        made: dict[str, tuple[OutputPlan, Schedule, frozenset[str]]] = {}
        for stage in self._stages:
            if isinstance(stage, Reduction):
                builder.add_once(stage)
                schedule, batched = stage.schedule, stage.rows
            else:
                direct = stage[sizes[0]]
                _add_blocks(builder, stage, sizes, rows)
                schedule, batched = direct.schedule, direct.rows
            for output in schedule.outputs:
                made[output.name] = (output, schedule, batched)
        key = ProgramKey(
            self._source_hash,
            input_signature((name, entry_at(spec, rows)) for name, spec in self.signature.items()),
            self.device.id,
            self.device.runtime.fingerprint,
        )
        first = self._stages[0]
        library = first.library if isinstance(first, Reduction) else first[sizes[0]].library
        plan = builder.program(key, library, [made[name] for name in self._outputs])
        # N in each constant's type, converted as the binder converts (wrapping integers)
        values = {
            name: np.array(rows, np.int64).astype(dtype) for name, dtype in self._hidden.items()
        }
        values.update(
            {name: np.array(count, np.int32) for name, count in builder.row_counts.items()}
        )
        hidden = {
            name: Tensor.from_numpy(value, self.device, name=name) for name, value in values.items()
        }
        return plan, hidden

    # ---- bundles ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a bundle (`tile.runtime.compiled`, with a `dynamic` entry in its header and
        one code member per stage and block size) to `path`, atomically; `tile.load` reads
        it."""
        hal_device = self.device.runtime.device
        members, plans = {}, []

        def export(member: str, library: object) -> None:
            try:
                members[member] = hal_device.compiler.export(library)  # type: ignore[arg-type]
            except HalError as error:
                raise TileUnsupported(
                    f"{self.device.id} cannot save compiled code: {error}"
                ) from None

        for index, stage in enumerate(self._stages):
            if isinstance(stage, Reduction):
                export(f"code.{index}.bin", stage.library)
                plans.append(("rows", (stage.kernel_list, stage.schedule, sorted(stage.rows))))
                continue
            per_block = {}
            for block, blocks in stage.items():
                export(f"code.{index}.{block}.bin", blocks.library)
                batched = blocks.batched
                meta = (
                    dict(batched.block_elements),
                    sorted(batched.private),
                    sorted(batched.batched_kernels),
                    sorted(blocks.rows),
                )
                per_block[block] = (batched.kernel_list, blocks.schedule, meta)
            plans.append(("blocks", per_block))
        members["plan.pickle"] = store.dumps(plans)
        inputs = [
            [name, {"rest": list(spec.rest), "dtype": spec.dtype.str}]
            if isinstance(spec, SymbolicSpec)
            else [name, _jsonable(spec)]
            for name, spec in self.signature.items()
        ]
        header = {
            "name": self.name,
            "source": self.source,
            "inputs": inputs,
            "dynamic": {
                "symbol": self.symbol,
                "blocks": list(BLOCKS),
                "outputs": list(self._outputs),
                "hidden": {name: dtype.str for name, dtype in self._hidden.items()},
            },
        }
        return write_bundle(path, header, self.device, members)

    def __repr__(self) -> str:
        shown = []
        for name, entry in self.signature.items():
            if isinstance(entry, SymbolicSpec):
                dims = ", ".join([self.symbol, *map(str, entry.rest)])
                shown.append(f"{name}: {entry.dtype.name}[{dims}]")
            else:
                shown.append(f"{name}: {_show(entry)}")
        return f"<DynamicFunction {self.name}({', '.join(shown)}) on {self.device.id}>"


def _rows_of(entry: SignatureEntry, spec: SymbolicSpec) -> int | None:
    kind, dtype, dims = entry
    if kind != "tensor" or dtype != spec.dtype.str or not isinstance(dims, tuple):
        return None
    if len(dims) != len(spec.rest) + 1 or tuple(dims[1:]) != spec.rest:
        return None
    return int(dims[0])


def _add_blocks(
    builder: PlanBuilder, stage: dict[int, Blocks], sizes: list[int], rows: int
) -> None:
    """A block stage's launches for `rows` rows: the largest block B <= rows over
    ceil(rows / B) blocks, the last clamped (`tile.lower.batch`), where every vector access
    stays aligned and the rows computed twice are at most `WASTE` of the rows; else over its
    rows // B whole blocks, the next smaller block covering the rows left (module
    docstring)."""
    direct, block = stage[sizes[0]], sizes[0]
    count = -(-rows // block)
    if not direct.batched.batched_kernels or (
        count * block - rows <= WASTE * rows and clamps(direct.batched, rows)
    ):
        builder.add(direct, count, rows=rows)
        return
    whole, left = divmod(rows, block)
    smaller = sizes[1]
    count = -(-left // smaller)
    builder.add(stage[smaller], count, rows=count * smaller, staged=left)  # short ones first
    builder.add(direct, whole, rows=whole * block)


def entry_at(spec: SymbolicSpec | SignatureEntry, rows: int) -> SignatureEntry:
    """The signature entry of an input with `rows` rows (if it is batched)."""
    if isinstance(spec, SymbolicSpec):
        return tensor_entry(spec.dtype, (rows, *spec.rest))
    return spec


def load_dynamic(
    path: Path, header: dict, members: dict[str, bytes], device: DeviceLike
) -> DynamicFunction:
    """The `DynamicFunction` of a bundle `DynamicFunction.save` wrote."""
    target = bundle_device(path, header, device)
    try:
        dynamic = header["dynamic"]
        symbol, sizes = str(dynamic["symbol"]), [int(block) for block in dynamic["blocks"]]
        if sizes != list(BLOCKS):
            raise TileBundleError(f"{path}: blocks {sizes}; this tile runs blocks {list(BLOCKS)}")
        stages: list[Stage] = []
        for index, (kind, plan) in enumerate(load_plan(path, members["plan.pickle"])):
            if kind == "rows":
                kernel_list, schedule, rows = plan
                code = members[f"code.{index}.bin"]
                library, kernels = restore_code(path, header, target, kernel_list, code)
                stages.append(Reduction(kernel_list, frozenset(rows), schedule, library, kernels))
                continue
            per_block = {}
            for block in sizes:
                kernel_list, schedule, (elements, private, indexes, rows) = plan[block]
                code = members[f"code.{index}.{block}.bin"]
                library, kernels = restore_code(path, header, target, kernel_list, code)
                batched = BatchedList(
                    kernel_list, block, dict(elements), frozenset(private), frozenset(indexes)
                )
                per_block[block] = Blocks(batched, frozenset(rows), schedule, library, kernels)
            stages.append(per_block)
        inputs: dict[str, SymbolicSpec | SignatureEntry] = {}
        for name, entry in header["inputs"]:
            if isinstance(entry, dict):
                rest = tuple(int(dim) for dim in entry["rest"])
                inputs[name] = SymbolicSpec(symbol, rest, np.dtype(entry["dtype"]))
            else:
                inputs[name] = _entry_from_json(entry)
        outputs = tuple(str(name) for name in dynamic["outputs"])
        hidden = {str(name): np.dtype(dtype) for name, dtype in dynamic["hidden"].items()}
    except (KeyError, TypeError, ValueError) as error:
        raise TileBundleError(f"{path}: not a sound dynamic bundle ({error!r})") from None
    if not stages:
        raise TileBundleError(f"{path}: not a sound dynamic bundle (no stages)")
    digest = source_hash(header["source"])
    return DynamicFunction(
        header["name"],
        header["source"],
        digest,
        target,
        symbol,
        inputs,
        stages,
        outputs,
        hidden,
        0.0,
    )
