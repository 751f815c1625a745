"""Elementwise epilogues fused into register-tiled vector kernels (issue 11 item 2).

A `+(A * B)` contraction followed by elementwise ops on its result (a bias, an activation, a
scale, a residual add) runs in one kernel: the epilogue works on the accumulators while they
are still in registers, one vector of `width` output elements at a time, and each value the
program needs is stored as a vector. `Epilogue.check` says whether a kernel plan's epilogue can
be computed so:

- its ops are float32 arithmetic, negation, comparisons and `cond` (what `relu`, `max`, `min`,
  bias adds and scales are made of), computed in float32 (comparisons give vectors of bools);
- every other tensor they read is a constant, or a float32 tensor that broadcasts along the
  vector coordinate `j` (one scalar for the vector) or is contiguous along it (one vector
  load: its last axis is the output's, every other stride a multiple of `width`);
- every value stored has the kernel's shape and is float32.

Anything else keeps the generic generator, which fuses every epilogue element by element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree.nodes import Declare, Lanes, Load, Lookup, Store, Subscript
from semtree.types import DType, Type, TypeBase
from tile.bind.program import OpKind
from tile.lower.flatten import row_major
from tile.lower.kernel import affine
from tile.lower.ops import Typed, apply

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings
    from semtree.nodes import Expr, LValue, Stmt
    from tile.lower.fuse import KernelPlan
    from tile.lower.kernel import KernelWriter, ProgramContext

F32 = DType.FLOAT32
_COMPARISONS = {"cmp_eq", "cmp_ne", "cmp_lt", "cmp_gt", "cmp_le", "cmp_ge"}
_FUNCTIONS = {"add", "sub", "mul", "div", "neg", "ident", "cond", *_COMPARISONS}


@dataclass(frozen=True, slots=True)
class Epilogue:
    """The fusable epilogue of a kernel plan whose grid's coordinate `j` is the vector one."""

    plan: KernelPlan
    j: int
    width: int
    vectors: dict[str, bool]  # tensors read from memory -> read as a vector (else a scalar)
    lanes: bool = False  # vectors at element offsets (`semtree.Lanes`), else aligned

    @staticmethod
    def check(
        plan: KernelPlan,
        context: ProgramContext,
        j: int,
        width: int,
        operands: set[str],
        lanes: bool = False,
    ) -> Epilogue | None:
        """The epilogue of `plan`, or None when it cannot run on vectors (module docstring).
        `operands`: the contraction's operand buffers, which the kernel reads as scalars;
        `lanes`: the kernel's vectors are `Lanes` at any element offset, else aligned ones."""
        contraction = plan.contraction
        assert contraction is not None
        shape = tuple(plan.shape)
        if row_major(shape)[j] != 1:
            return None
        computed = {contraction.output}
        vectors: dict[str, bool] = {}
        for op in plan.ops[1:]:
            output_dtype = context.dtype(op.output)
            compute = op.compute or output_dtype
            if op.kind is not OpKind.ELEMENTWISE or op.fn not in _FUNCTIONS or compute is not F32:
                return None
            if output_dtype is not (DType.BOOLEAN if op.fn in _COMPARISONS else F32):
                return None
            for name in op.inputs:
                if name in computed or name in vectors:
                    continue
                if context.is_constant(name):  # a scalar, converted to float32 by `apply`
                    continue
                access = _access(context, name, shape, j, 1 if lanes else width)
                if access is None or context.buffer_of[name] in operands:
                    return None
                vectors[name] = access
            computed.add(op.output)
        for name in plan.stores:
            if name != contraction.output and (
                context.dims(name) != shape or context.dtype(name) is not F32
            ):
                return None
        return Epilogue(plan, j, width, vectors, lanes)

    def widths(self, context: ProgramContext) -> dict[str, int]:
        """The buffers read or written as vectors, with their width."""
        if self.lanes:  # scalar pointers
            return {}
        names = [name for name, vector in self.vectors.items() if vector]
        names += [name for name in self.plan.stores if name != self.contraction_output]
        return {context.buffer_of[name]: self.width for name in names}

    @property
    def contraction_output(self) -> str:
        contraction = self.plan.contraction
        assert contraction is not None
        return contraction.output

    def statements(
        self,
        result: Expr,
        coordinates: list[Expr],
        context: ProgramContext,
        writer: KernelWriter,
        settings: HardwareSettings,
        count: Expr | None = None,
    ) -> tuple[list[Stmt], dict[str, Typed]]:
        """The epilogue on one vector of results (`result`, the accumulator) at `coordinates`
        (the `j` one counted in vectors of `width`): declarations of every value, and the
        values by name. `count`: the lanes inside the output, where the vector may pass its
        edge (`Lanes` only)."""
        values = {self.contraction_output: Typed(result, F32)}
        statements: list[Stmt] = []
        for op in self.plan.ops[1:]:
            args = [
                values[name] if name in values else self._read(name, coordinates, writer, count)
                for name in op.inputs
            ]
            value = apply(op.fn, args, context.dtype(op.output), op.compute or F32, settings)
            local = writer.fresh(f"v{op.output}")
            type_ = Type(TypeBase.VALUE, value.dtype, self.width)
            statements.append(Declare(type_, local, value.expr))
            values[op.output] = Typed(Load(Lookup(local)), value.dtype)
        return statements, values

    def store(
        self,
        name: str,
        value: Typed,
        coordinates: list[Expr],
        writer: KernelWriter,
        count: Expr | None = None,
    ) -> Stmt:
        """A vector store of `name`'s value at `coordinates` (`j` counted in vectors)."""
        param = writer.outputs[writer.context.buffer_of[name]]
        ref = self._vector(param, row_major(tuple(self.plan.shape)), coordinates, count)
        return Store(ref, value.expr)

    def _vector(
        self,
        param: str,
        strides: list[int] | tuple[int, ...],
        coordinates: list[Expr],
        count: Expr | None,
    ) -> LValue:
        """The vector of `param` at `coordinates` (`j` counted in vectors)."""
        if not self.lanes:
            return Subscript(Lookup(param), _vector_offset(strides, coordinates, self.width))
        terms = [
            (stride * self.width if stride == 1 else stride, coordinate)
            for stride, coordinate in zip(strides, coordinates, strict=True)
            if stride
        ]
        return Lanes(Lookup(param), affine(terms), self.width, count)

    def _read(
        self, name: str, coordinates: list[Expr], writer: KernelWriter, count: Expr | None
    ) -> Typed:
        context = writer.context
        if context.is_constant(name):
            return context.constant(name)
        if not self.vectors[name]:
            return writer.read_at(name, coordinates)
        param = writer.input_param(context.buffer_of[name])
        dims = context.dims(name)
        aligned = coordinates[len(coordinates) - len(dims) :]
        strides = [
            0 if size == 1 else stride for size, stride in zip(dims, row_major(dims), strict=True)
        ]
        return Typed(Load(self._vector(param, strides, aligned, count)), context.dtype(name))


def _access(
    context: ProgramContext, name: str, shape: tuple[int, ...], j: int, width: int
) -> bool | None:
    """How the epilogue reads `name` for a vector of results along `j`: True one vector
    (contiguous along j), False one scalar (broadcast along j), None not at all."""
    if context.dtype(name) is not F32:
        return None
    dims = context.dims(name)
    skip = len(shape) - len(dims)
    if skip < 0:
        return None
    strides = row_major(dims)
    if j < skip or dims[j - skip] == 1:
        return False
    if dims[j - skip] != shape[j] or strides[j - skip] != 1:
        return None
    if any(stride % width for axis, stride in enumerate(strides) if axis != j - skip):
        return None
    return True


def _vector_offset(
    strides: list[int] | tuple[int, ...], coordinates: list[Expr], width: int
) -> Expr:
    """The offset, in vectors of `width`, of the vector at `coordinates` (the stride-1 one
    counted in vectors; every other stride a multiple of `width`)."""
    terms = [
        (1 if stride == 1 else stride // width, coordinate)
        for stride, coordinate in zip(strides, coordinates, strict=True)
        if stride
    ]
    return affine(terms)
