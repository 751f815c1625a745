"""Which tensors of a program carry a dynamic batch, and how it runs over any number of rows
(issue 13 item 3).

A symbolic dimension (`tile.spec(("N", 128))`) must be the first axis of the inputs that
name it. `batch_of` gets the program bound at several sizes of that axis (the same function,
the same other inputs) and answers with a `Batch`:

- `rows`: the tensors whose first axis is the batch (they run block by block);
- `reductions`: the contractions that reduce over the batch (`S[c] = +(X[n, c])`, a weight
  gradient `+(X[n, i] * D[n, j])`): each reads the batch at one index `n`, only as the first
  axis of its batched operands, and writes a tensor without the batch; it runs once over all
  the rows (`tile.lower.generate.generate_row_reduction`);
- `values`: the constants that are N itself (`X / N`), which become 0-D tensors holding N.

It refuses (`NotSeparable`, naming the statement) a program whose rows depend on other rows
in any other way:

- a dimension of any tensor that grows with N other than as the first axis, equal to N
  (`2 * N`, `N - 2`, a transposed batch), or a constant that depends on N but is not N;
- a contraction that reads a batched operand at anything but its output's batch index
  (`O[n] = +(X[n + 1])`), constrains that index, pairs two rows (`+(X[n, c] * X[m, c])`)
  or reduces over the batch with a batched default;
- an elementwise operation broadcasting a batched operand of lower rank (its first axis
  would meet another axis of the output);
- `index` along the batch axis, `shape` of a batched tensor, `gather` from a batched tensor,
  `scatter` and random numbers over batched data.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from tile.bind.program import ConstBinding, OpKind, TensorBinding

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.bind.polynomial import Polynomial
    from tile.bind.program import BoundAccess, BoundContraction, BoundOp, BoundProgram


class NotSeparable(Exception):  # noqa: N818 (a refusal the runtime reports as TileUnsupported)
    """The program cannot run block by block over its batch dimension."""


@dataclass(frozen=True, slots=True)
class Batch:
    """How a program's tensors and operations meet its batch (module docstring)."""

    rows: frozenset[str]
    reductions: frozenset[str] = frozenset()  # outputs of contractions over the batch
    values: frozenset[str] = frozenset()  # constants equal to N


def batch_of(programs: Sequence[BoundProgram], sizes: Sequence[int]) -> Batch:
    """The batch of a program, given it bound with the batch at each of `sizes` (at least
    two distinct sizes); raises NotSeparable (module docstring)."""
    if len(set(sizes)) < 2 or len(programs) != len(sizes):
        raise ValueError("batch_of needs the program bound at two sizes or more")
    first = programs[0]
    shape = [(op.kind, op.output, op.inputs, op.fn) for op in first.ops]
    for program in programs[1:]:
        if [(op.kind, op.output, op.inputs, op.fn) for op in program.ops] != shape or set(
            program.bindings
        ) != set(first.bindings):
            raise NotSeparable("the program's operations change with the batch size")
    batched, values = set(), set()
    for name, binding in first.bindings.items():
        bindings = [program.bindings[name] for program in programs]
        if isinstance(binding, ConstBinding):
            if not all(isinstance(b, ConstBinding) for b in bindings):
                raise NotSeparable(f"'{name}' is a value at one batch size and not at another")
            found = [b.value for b in bindings if isinstance(b, ConstBinding)]
            if found == list(sizes):
                values.add(name)
            elif len(set(found)) > 1:
                raise NotSeparable(
                    f"'{name}' is a value that depends on the batch size N other than as N"
                )
            continue
        if _carries_batch(name, bindings, sizes):
            batched.add(name)
    reductions = {op.output for op in programs[-1].ops if _check_op(op, batched, programs[-1])}
    return Batch(frozenset(batched), frozenset(reductions), frozenset(values))


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


def _check_op(op: BoundOp, batched: set[str], program: BoundProgram) -> bool:
    """Whether `op` is a reduction over the batch; NotSeparable if its rows meet otherwise."""
    reads = [name for name in op.inputs if name in batched]
    out_batched = op.output in batched
    where = f"'{op}'"
    if op.kind is OpKind.CONTRACTION:
        assert op.contraction is not None
        return _check_contraction(op.contraction, batched, where)
    if reads and not out_batched:
        raise NotSeparable(f"{where} combines the rows of the batch")
    if op.kind is OpKind.ELEMENTWISE:
        rank = _rank(program, op.output)
        for name in reads:
            if _rank(program, name) != rank:
                raise NotSeparable(
                    f"{where} broadcasts the batched '{name}' against a tensor of higher rank"
                )
        return False
    fn = op.fn
    if fn == "reshape" or (fn == "gather" and op.inputs[0] not in batched):
        return False
    if fn == "index" and (not out_batched or op.params[:1] != (0,)):
        return False
    if not reads and not out_batched:
        return False
    raise NotSeparable(f"{where}: '{fn}' over the batch axis cannot run block by block")


def _rank(program: BoundProgram, name: str) -> int:
    binding = program.bindings[name]
    return len(binding.shape.dims) if isinstance(binding, TensorBinding) else 0


def _check_contraction(contraction: BoundContraction, batched: set[str], where: str) -> bool:
    output = contraction.output
    operands = [access for access in contraction.operands if access.tensor in batched]
    if contraction.default in batched and output.tensor not in batched:
        raise NotSeparable(f"{where} combines the rows of the batch into its default")
    if output.tensor not in batched:
        if operands:
            _check_reduction(contraction, operands, batched, where)
            return True
        return False
    index = _single_index(output.polys[0])
    if index is None:
        raise NotSeparable(f"{where} writes the batch axis at {output.polys[0]}, not an index")
    _keeps_to_batch_axis(contraction, index, batched, where)
    return False


def _check_reduction(
    contraction: BoundContraction, operands: Sequence[BoundAccess], batched: set[str], where: str
) -> None:
    """A contraction reducing over the batch reads every batched operand at one index `n`
    in the first axis, and `n` nowhere else."""
    indexes = {_single_index(access.polys[0]) for access in operands}
    index = indexes.pop() if len(indexes) == 1 else None
    if index is None:
        shown = ", ".join(str(access.polys[0]) for access in operands)
        raise NotSeparable(
            f"{where} reads the batch at rows {shown}: a reduction over the batch must read "
            "every batched operand at the same single index"
        )
    _keeps_to_batch_axis(contraction, index, batched, where)


def _keeps_to_batch_axis(
    contraction: BoundContraction, index: str, batched: set[str], where: str
) -> None:
    """The batch index `index` is the first axis of every batched access, exactly, and
    appears nowhere else: no other axis, no constraint."""
    for access in contraction.access:
        first = 1 if access.tensor in batched else 0
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
