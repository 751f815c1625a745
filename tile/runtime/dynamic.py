"""Functions compiled once for every size of a batch dimension (issue 13 item 3).

`Function.compile(X=tile.spec(("N", 128)))` names the first axis of `X` N instead of fixing
it. The function is then bound at a few sizes of N to find the tensors that carry the batch
(`tile.lower.separable`, which refuses a program whose rows depend on other rows), and
generated and built for blocks of 24, 6 and 1 rows (`tile.lower.batch.BLOCKS`). Each kernel
runs over any number of blocks in one launch (`hal.Kernel.run(batch=...)`), so no N compiles
anything. A call with N rows takes the largest block B <= N:

- the B-row kernels run over the N // B whole blocks of the call's own buffers;
- the r = N % B rows left are covered by the next smaller block b: its kernels run over
  ceil(r / b) blocks made of the call's last ceil(r / b) * b rows, copied into staging
  buffers first, and only the last r rows of each result are copied back.

Every launch's blocks start at its buffers' first byte, and every row a block reads is one
of the call's own (no padding).

What a call with N rows runs is a plan over its own buffers (a `CompiledProgram`, whose
schedule names the call's slots), built in microseconds and kept for the last few sizes;
each plan owns its temporaries, sized for its N.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from hal.errors import HalError
from tile.errors import TileBindError, TileBundleError, TileError, TileUnsupported, diagnostic
from tile.lower.batch import BLOCKS, BatchedList, BatchError, batch_kernels
from tile.runtime import debug, store
from tile.runtime.batch_plan import Blocks, PlanBuilder
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
from tile.runtime.device import build_error
from tile.runtime.launch import Invocation, launch

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from pathlib import Path

    from tile.bind.program import BoundProgram
    from tile.runtime.api import Device, DeviceLike, InputValue, Tensor
    from tile.runtime.cache import SignatureEntry
    from tile.runtime.execute import CompiledProgram
    from tile.runtime.invoke import Function

PLANS_KEPT = 8  # the per-size plans a dynamic function keeps (each owns its temporaries)
SIZE_HINTS = tuple(sorted({*BLOCKS, 7}))  # the sizes bound to find the batch (and generated)
MAX_ROWS = 2**31 - 1


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
        blocks: dict[int, Blocks],
        compile_seconds: float,
    ) -> None:
        self.name = name
        self.source = source
        self.device = device
        self.symbol = symbol  # the batch dimension's name
        self.signature = inputs  # input name -> SymbolicSpec, or its fixed signature entry
        self.compile_seconds = compile_seconds
        self._source_hash = digest  # tile.runtime.cache.source_hash of the source
        self._blocks = blocks
        self._plans: OrderedDict[int, CompiledProgram] = OrderedDict()
        self._lock = threading.Lock()

    def output_shapes(self, rows: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every output's shape and dtype for a batch of `rows`."""
        return dict(self._plan(rows).output_shapes)

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
        return launch(self.device, self._plan(rows), named, {}, self.name)

    def _needs_value(self, name: str) -> bool:
        return isinstance(self.signature[name], SymbolicSpec) or super()._needs_value(name)

    def _plan(self, rows: int) -> CompiledProgram:
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

    def _build_plan(self, rows: int) -> CompiledProgram:
        if rows > MAX_ROWS:
            raise self._error(f"a batch of {rows} rows is too large")
        builder = PlanBuilder(self.device.runtime.executor, rows)
        sizes = [block for block in BLOCKS if block <= rows]
        direct = self._blocks[sizes[0]]
        whole, left = divmod(rows, sizes[0])
        if left:  # the next block covers the last rows; only the rows left are copied back
            block = sizes[1]
            builder.add(self._blocks[block], -(-left // block), staged=left)
        builder.add(direct, whole, staged=None)  # after: short launches first run at once
        key = ProgramKey(
            self._source_hash,
            input_signature((name, _entry(spec, rows)) for name, spec in self.signature.items()),
            self.device.id,
            self.device.runtime.fingerprint,
        )
        return builder.program(key, direct)

    # ---- bundles ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a bundle (`tile.runtime.compiled`, with a `dynamic` entry in its header and
        one code member per block size) to `path`, atomically; `tile.load` reads it."""
        hal_device = self.device.runtime.device
        members, plans = {}, {}
        for block, blocks in self._blocks.items():
            try:
                members[f"code.{block}.bin"] = hal_device.compiler.export(blocks.library)
            except HalError as error:
                raise TileUnsupported(
                    f"{self.device.id} cannot save compiled code: {error}"
                ) from None
            batched = blocks.batched
            meta = (
                dict(batched.block_elements),
                sorted(batched.private),
                sorted(batched.batched_kernels),
                sorted(blocks.rows),
            )
            plans[block] = (batched.kernel_list, blocks.schedule, meta)
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
            "dynamic": {"symbol": self.symbol, "blocks": sorted(self._blocks, reverse=True)},
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


def compile_dynamic(
    function: Function, device: Device, named: Mapping[str, object]
) -> DynamicFunction:
    """Compile `function` for every size of its one symbolic batch dimension (module
    docstring). `named`: the inputs, the symbolic ones as `SymbolicSpec`s."""
    from tile.lower.separable import NotSeparable, batch_tensors  # the compiler, when it is used

    start = time.perf_counter()
    symbols = {spec.name for spec in named.values() if isinstance(spec, SymbolicSpec)}
    if len(symbols) != 1:
        raise TileUnsupported(
            f"{function.name}: one symbolic dimension per compiled function, not {sorted(symbols)}"
        )
    symbol = symbols.pop()
    missing = [name for name in function.inputs if name not in named]
    if missing:
        raise TileBindError(
            diagnostic(
                "E-BIND", f"{function.name}: missing inputs {missing}", None, function.source
            )
        )

    def at(rows: int) -> dict[str, object]:
        return {n: v.at(rows) if isinstance(v, SymbolicSpec) else v for n, v in named.items()}

    bound = {}
    for rows in SIZE_HINTS:
        try:
            bound[rows] = function.bind(at(rows))
        except TileError as error:
            raise TileUnsupported(
                f"{function.name} cannot take a dynamic {symbol}: with {symbol} = {rows} it does "
                f"not bind:\n{error}"
            ) from error
    try:
        rows_of = batch_tensors([bound[rows] for rows in SIZE_HINTS], SIZE_HINTS)
    except NotSeparable as error:
        raise TileUnsupported(
            f"{function.name} cannot take a dynamic {symbol}: {error}. Compile it for each "
            "size instead."
        ) from None
    inputs: dict[str, SymbolicSpec | SignatureEntry] = {
        name: value if isinstance(value, SymbolicSpec) else signature_entry(value)
        for name, value in ((n, named[n]) for n in function.inputs)
    }
    blocks = {}
    for block in BLOCKS:
        entries = [(name, _entry(spec, block)) for name, spec in inputs.items()]
        entries.append(("(batch)", ("batch", symbol, block)))  # not a static program's key
        key = ProgramKey(
            function.source_hash, input_signature(entries), device.id, device.runtime.fingerprint
        )
        try:
            blocks[block] = _blocks(function.name, device, key, bound[block], rows_of, block)
        except BatchError as error:
            raise TileUnsupported(
                f"{function.name} cannot take a dynamic {symbol} on {device.id}: {error}"
            ) from None
    seconds = time.perf_counter() - start
    return DynamicFunction(
        function.name,
        function.source,
        function.source_hash,
        device,
        symbol,
        inputs,
        blocks,
        seconds,
    )


def _blocks(
    label: str,
    device: Device,
    key: ProgramKey,
    program: BoundProgram,
    rows: frozenset[str],
    block: int,
) -> Blocks:
    """The kernels of `program` (bound for one block) over any number of blocks, from tile's
    disk cache or generated, built and stored."""
    from tile.lower.generate import generate_program
    from tile.lower.schedule import OutputSource, make_schedule

    hal_device = device.runtime.device
    tensors = set(program.bindings)
    stored = store.load_program(key, hal_device) if debug.dump_directory() is None else None
    try:
        if stored is not None:
            kernel_list, schedule, library = stored
            batched = batch_kernels(kernel_list, rows, tensors, block, rewrite=False)
        else:
            settings = hal_device.settings
            if block > 1:  # the blocks keep the cores busy: no parallelism within a block
                settings = replace(settings, goal_groups=1)
            kernel_list = generate_program(program, settings, name_prefix=f"b{block}")
            batched = batch_kernels(kernel_list, rows, tensors, block)
            schedule = make_schedule(program, batched.kernel_list)
            if any(plan.source is OutputSource.COPY for plan in schedule.outputs):
                raise TileUnsupported(f"{label}: an output renamed to another buffer")
            library = hal_device.compiler.build(batched.kernel_list, hal_device)
            store.save_program(key, hal_device, batched.kernel_list, schedule, library)
        kernels = [
            hal_device.executor.prepare(library, index)
            for index in range(len(batched.kernel_list.kernels))
        ]
    except HalError as error:
        raise build_error(error, f"{label} on {device.id}") from error
    return Blocks(batched, rows, schedule, library, kernels)


def _rows_of(entry: SignatureEntry, spec: SymbolicSpec) -> int | None:
    kind, dtype, dims = entry
    if kind != "tensor" or dtype != spec.dtype.str or not isinstance(dims, tuple):
        return None
    if len(dims) != len(spec.rest) + 1 or tuple(dims[1:]) != spec.rest:
        return None
    return int(dims[0])


def _entry(spec: SymbolicSpec | SignatureEntry, rows: int) -> SignatureEntry:
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
        plans = load_plan(path, members["plan.pickle"])
        blocks = {}
        for block in sizes:
            kernel_list, schedule, (elements, private, indexes, rows) = plans[block]
            code = members[f"code.{block}.bin"]
            library, kernels = restore_code(path, header, target, kernel_list, code)
            batched = BatchedList(
                kernel_list, block, dict(elements), frozenset(private), frozenset(indexes)
            )
            blocks[block] = Blocks(batched, frozenset(rows), schedule, library, kernels)
        inputs: dict[str, SymbolicSpec | SignatureEntry] = {}
        for name, entry in header["inputs"]:
            if isinstance(entry, dict):
                rest = tuple(int(dim) for dim in entry["rest"])
                inputs[name] = SymbolicSpec(symbol, rest, np.dtype(entry["dtype"]))
            else:
                inputs[name] = _entry_from_json(entry)
    except (KeyError, TypeError, ValueError) as error:
        raise TileBundleError(f"{path}: not a sound dynamic bundle ({error!r})") from None
    if sorted(blocks, reverse=True) != list(BLOCKS):
        raise TileBundleError(f"{path}: blocks {sizes}; this tile runs blocks {list(BLOCKS)}")
    digest = source_hash(header["source"])
    return DynamicFunction(
        header["name"], header["source"], digest, target, symbol, inputs, blocks, 0.0
    )
