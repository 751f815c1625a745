"""Compiling a function for every size of a batch dimension (issue 13 item 3): the program is
bound at a few sizes to find its batch (`tile.lower.separable`), cut into stages at its
reductions over the batch (`tile.lower.stages`), and each stage generated and built, from
tile's disk cache where it is there: a block stage for every block size
(`tile.lower.batch.BLOCKS`), a reduction once. `tile.runtime.dynamic.DynamicFunction` runs
the result. Imported only when a dynamic function compiles: it imports the lowering.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from hal.errors import HalError
from tile.bind.program import ConstBinding, TensorBinding
from tile.errors import TileBindError, TileError, TileUnsupported, diagnostic
from tile.lower.batch import BLOCKS, ROWS, BatchError, batch_kernels
from tile.lower.generate import generate_program, generate_row_reduction
from tile.lower.kernel import product
from tile.lower.schedule import OutputSource, make_schedule
from tile.lower.separable import NotSeparable, batch_of
from tile.lower.stages import split_stages
from tile.runtime import debug, store
from tile.runtime.batch_plan import Blocks, Reduction
from tile.runtime.cache import ProgramKey, input_signature
from tile.runtime.compiled import SymbolicSpec, signature_entry
from tile.runtime.device import build_error
from tile.runtime.dynamic import SIZE_HINTS, DynamicFunction, Stage, entry_at

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from tile.bind.program import BoundProgram
    from tile.lower.separable import Batch
    from tile.runtime.api import Device
    from tile.runtime.cache import SignatureEntry
    from tile.runtime.invoke import Function


def compile_dynamic(
    function: Function, device: Device, named: Mapping[str, object]
) -> DynamicFunction:
    """Compile `function` for every size of its one symbolic batch dimension (module
    docstring). `named`: the inputs, the symbolic ones as `SymbolicSpec`s."""
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
        batch = batch_of([bound[rows] for rows in SIZE_HINTS], SIZE_HINTS)
    except NotSeparable as error:
        raise TileUnsupported(
            f"{function.name} cannot take a dynamic {symbol}: {error}. Compile it for each "
            "size instead."
        ) from None
    inputs: dict[str, SymbolicSpec | SignatureEntry] = {
        name: value if isinstance(value, SymbolicSpec) else signature_entry(value)
        for name, value in ((n, named[n]) for n in function.inputs)
    }
    staged = {block: split_stages(bound[block], batch) for block in BLOCKS}
    used = {name for stage in staged[1] for name in stage.program.inputs}
    hidden = {name: _constant_dtype(bound[1], name) for name in sorted(batch.values & used)}

    def key(entry: tuple[object, ...], block: int) -> ProgramKey:
        entries = [(name, entry_at(spec, block)) for name, spec in inputs.items()]
        entries.append(("(batch)", ("batch", symbol, *entry)))  # not a static program's key
        return ProgramKey(
            function.source_hash, input_signature(entries), device.id, device.runtime.fingerprint
        )

    stages: list[Stage] = []
    for index, stage in enumerate(staged[1]):
        label = f"{function.name} (stage {index})"
        try:
            if stage.reduction:
                program = stage.program
                stages.append(_reduction(label, device, key(("rows", index), 1), program, batch))
                continue
            stages.append(
                {
                    block: _blocks(
                        label,
                        device,
                        key(("block", index, block), block),
                        staged[block][index].program,
                        batch.rows,
                        block,
                    )
                    for block in BLOCKS
                }
            )
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
        stages,
        bound[1].output_names,
        hidden,
        seconds,
    )


def _constant_dtype(program: BoundProgram, name: str) -> np.dtype:
    binding = program.bindings[name]
    assert isinstance(binding, ConstBinding)
    return binding.dtype.numpy


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
    return Blocks(batched, rows & tensors, schedule, library, kernels)


def _reduction(
    label: str, device: Device, key: ProgramKey, program: BoundProgram, batch: Batch
) -> Reduction:
    """The kernel of a stage reducing over the batch (`program`, bound for one row), from
    tile's disk cache or generated, built and stored."""
    hal_device = device.runtime.device
    rows = frozenset(name for name in program.inputs if name in batch.rows)
    stored = store.load_program(key, hal_device) if debug.dump_directory() is None else None
    try:
        if stored is not None:
            kernel_list, schedule, library = stored
        else:
            elements = {}
            for name in rows:
                binding = program.bindings[name]
                assert isinstance(binding, TensorBinding)
                elements[name] = product(binding.shape.dims)
            kernel_list = generate_row_reduction(
                program, hal_device.settings, elements, ROWS, name_prefix="rows"
            )
            schedule = make_schedule(program, kernel_list)
            library = hal_device.compiler.build(kernel_list, hal_device)
            store.save_program(key, hal_device, kernel_list, schedule, library)
        kernels = [
            hal_device.executor.prepare(library, index) for index in range(len(kernel_list.kernels))
        ]
    except HalError as error:
        raise build_error(error, f"{label} on {device.id}") from error
    return Reduction(kernel_list, rows, schedule, library, kernels)
