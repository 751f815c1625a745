"""Which tensors of a program carry a dynamic batch, and whether it can run block by block
(issue 13 item 3).

A symbolic dimension (`tile.spec(("N", 128))`) must be the first axis of the inputs that
name it. `batch_tensors` gets the program bound at several sizes of that axis (the same
function, the same other inputs) and answers with the tensors whose first axis is the
batch. It refuses (`NotSeparable`, naming the statement) a program whose rows depend on
other rows, since that program cannot run on blocks of rows:

- a dimension of any tensor that grows with N other than as the first axis, equal to N
  (`2 * N`, `N - 2`, a transposed batch), or a constant that is N (`X / N`);
- a contraction that reduces over the batch, or reads a batched operand at anything but its
  output's batch index (`O[n] = +(X[n + 1])`), or constrains that index;
- an elementwise operation broadcasting a batched operand of lower rank (its first axis
  would meet another axis of the output);
- `index` along the batch axis, `shape` of a batched tensor, `gather` from a batched tensor,
  `scatter` and random numbers over batched data.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from tile.bind.program import ConstBinding, OpKind, TensorBinding

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.bind.polynomial import Polynomial
    from tile.bind.program import BoundContraction, BoundOp, BoundProgram


class NotSeparable(Exception):  # noqa: N818 (a refusal the runtime reports as TileUnsupported)
    """The program cannot run block by block over its batch dimension."""


def batch_tensors(programs: Sequence[BoundProgram], sizes: Sequence[int]) -> frozenset[str]:
    """The tensors whose first axis is the batch, given the program bound with the batch
    at each of `sizes` (at least two distinct sizes); raises NotSeparable (module docstring)."""
    if len(set(sizes)) < 2 or len(programs) != len(sizes):
        raise ValueError("batch_tensors needs the program bound at two sizes or more")
    first = programs[0]
    shape = [(op.kind, op.output, op.inputs, op.fn) for op in first.ops]
    for program in programs[1:]:
        if [(op.kind, op.output, op.inputs, op.fn) for op in program.ops] != shape or set(
            program.bindings
        ) != set(first.bindings):
            raise NotSeparable("the program's operations change with the batch size")
    batched = set()
    for name, binding in first.bindings.items():
        bindings = [program.bindings[name] for program in programs]
        if isinstance(binding, ConstBinding):
            values = {b.value for b in bindings if isinstance(b, ConstBinding)}
            if len(values) > 1 or not all(isinstance(b, ConstBinding) for b in bindings):
                raise NotSeparable(f"'{name}' is a value that depends on the batch size")
            continue
        if _carries_batch(name, bindings, sizes):
            batched.add(name)
    for op in programs[-1].ops:
        _check_op(op, batched, programs[-1])
    return frozenset(batched)


def _carries_batch(name: str, bindings: Sequence[object], sizes: Sequence[int]) -> bool:
    dims = []
    for binding in bindings:
        if not isinstance(binding, TensorBinding):
            raise NotSeparable(f"'{name}' is a tensor at one batch size and not at another")
        dims.append(tuple(binding.shape.dims))
    if len({len(d) for d in dims}) > 1:
        raise NotSeparable(f"the rank of '{name}' depends on the batch size")
    varying = [axis for axis in range(len(dims[0])) if len({d[axis] for d in dims}) > 1]
    if not varying:
        return False
    if varying != [0] or [d[0] for d in dims] != list(sizes):
        shown = ", ".join(f"{list(d)} at N={size}" for d, size in zip(dims, sizes, strict=True))
        raise NotSeparable(
            f"'{name}' has the shape {shown}: a tensor may depend on the batch size N only "
            "through a first axis of exactly N"
        )
    return True


def _check_op(op: BoundOp, batched: set[str], program: BoundProgram) -> None:
    reads = [name for name in op.inputs if name in batched]
    out_batched = op.output in batched
    where = f"'{op}'"
    if op.kind is OpKind.CONTRACTION:
        assert op.contraction is not None
        _check_contraction(op.contraction, batched, where)
        return
    if reads and not out_batched:
        raise NotSeparable(f"{where} combines the rows of the batch")
    if op.kind is OpKind.ELEMENTWISE:
        rank = _rank(program, op.output)
        for name in reads:
            if _rank(program, name) != rank:
                raise NotSeparable(
                    f"{where} broadcasts the batched '{name}' against a tensor of higher rank"
                )
        return
    fn = op.fn
    if fn == "reshape" or (fn == "gather" and op.inputs[0] not in batched):
        return
    if fn == "index" and (not out_batched or op.params[:1] != (0,)):
        return
    if not reads and not out_batched:
        return
    raise NotSeparable(f"{where}: '{fn}' over the batch axis cannot run block by block")


def _rank(program: BoundProgram, name: str) -> int:
    binding = program.bindings[name]
    return len(binding.shape.dims) if isinstance(binding, TensorBinding) else 0


def _check_contraction(contraction: BoundContraction, batched: set[str], where: str) -> None:
    output = contraction.output
    operands = [access for access in contraction.operands if access.tensor in batched]
    if contraction.default in batched and output.tensor not in batched:
        raise NotSeparable(f"{where} combines the rows of the batch")
    if output.tensor not in batched:
        if operands:
            raise NotSeparable(f"{where} reduces over the batch")
        return
    index = _single_index(output.polys[0])
    if index is None:
        raise NotSeparable(f"{where} writes the batch axis at {output.polys[0]}, not an index")
    for access in contraction.access:
        first = 1 if access is output or access.tensor in batched else 0
        if first and _single_index(access.polys[0]) != index:
            raise NotSeparable(
                f"{where} reads '{access.tensor}' at batch row {access.polys[0]}, not {index}"
            )
        if any(poly.coeff(index) for poly in access.polys[first:]):
            raise NotSeparable(f"{where} uses the batch index {index} off the batch axis")
    if any(constraint.poly.coeff(index) for constraint in contraction.constraints):
        raise NotSeparable(f"{where} constrains the batch index {index}")


def _single_index(poly: Polynomial) -> str | None:
    """The index variable `poly` is exactly (coefficient 1, no constant), if it is one."""
    if poly.const != 0 or len(poly.terms) != 1:
        return None
    name, coefficient = poly.terms[0]
    return name if coefficient == Fraction(1) else None
