"""The stages of a program with a dynamic batch (issue 13 item 3).

`tile.lower.separable.batch_of` finds the contractions that reduce over the batch. Each of
them needs every row before anything reads its result, so `split_stages` cuts the program
there, in its order of operations:

- a *block* stage: the operations between two reductions, which run block by block over the
  rows (`tile.lower.batch`);
- a *reduction* stage: one contraction over the batch, which runs once over all the rows
  (`tile.lower.generate.generate_row_reduction`).

Every stage takes the 0-D INT32 tensor `ROWS`, the count of rows its launch covers: a
reduction's loop runs that many rows, and the batched kernels of a block stage clamp their
last block to it (`tile.lower.batch`).

Each stage is a `BoundProgram` of its own: its inputs are the tensors it reads that the
function was given or an earlier stage made; its outputs are the function's outputs it makes
and the tensors a later stage reads. The constants that are N (`Batch.values`) become 0-D
tensor inputs, which each call fills with N, so no kernel holds the batch size. Outputs no
operation makes (an input returned as it is) belong to the first stage; a reduction nothing
reads is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape
from tile.bind.program import ConstBinding, TensorBinding
from tile.lower.batch import ROWS

if TYPE_CHECKING:
    from tile.bind.program import Binding, BoundProgram
    from tile.lower.separable import Batch


@dataclass(frozen=True, slots=True)
class Stage:
    program: BoundProgram
    reduction: bool  # one contraction over all the rows; else operations on blocks of rows


def split_stages(program: BoundProgram, batch: Batch) -> list[Stage]:
    """`program` cut at its reductions over the batch (module docstring)."""
    groups: list[tuple[bool, list[int]]] = []
    for index, op in enumerate(program.ops):
        if op.output in batch.reductions:
            groups.append((True, [index]))
        elif groups and not groups[-1][0]:
            groups[-1][1].append(index)
        else:
            groups.append((False, [index]))
    if not groups:
        groups.append((False, []))
    bindings: dict[str, Binding] = dict(program.bindings)
    for name in batch.values:
        binding = bindings[name]
        assert isinstance(binding, ConstBinding)
        bindings[name] = TensorBinding(TensorShape(binding.dtype, ()))
    made_by_ops = {op.output for op in program.ops}
    unmade = [name for name in program.output_names if name not in made_by_ops]
    stages = []
    for position, (reduction, indexes) in enumerate(groups):
        ops = tuple(program.ops[index] for index in indexes)
        made = [op.output for op in ops]
        later = {
            name
            for _, after in groups[position + 1 :]
            for index in after
            for name in program.ops[index].inputs
        }
        outputs = [name for name in made if name in program.output_names or name in later]
        if reduction and not outputs:
            continue  # nothing reads it
        first = not stages
        if first:
            outputs += unmade
        reads = dict.fromkeys(name for op in ops for name in op.inputs if name not in made)
        if first:
            reads.update(dict.fromkeys(name for name in unmade if name in program.inputs))
        inputs = [name for name in reads if isinstance(bindings[name], TensorBinding)]
        stage_bindings = {**bindings, ROWS: TensorBinding(TensorShape(DType.INT32, ()))}
        inputs.append(ROWS)
        stage = replace(
            program,
            ops=ops,
            bindings=stage_bindings,
            inputs=tuple(inputs),
            output_names=tuple(outputs),
            input_bindings={
                name: program.input_bindings.get(name, stage_bindings[name]) for name in inputs
            },
        )
        stages.append(Stage(stage, reduction))
    return stages
