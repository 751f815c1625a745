"""Shared machinery of the kernel generators (`tile.lower.contract`, `tile.lower.special`):
names, parameters, index arithmetic, loads and stores, the work-group grid.

A `KernelWriter` accumulates one kernel: every buffer it reads or writes becomes a parameter
(outputs first, design 3.5), every local name is unique and a valid C identifier.
Parameter names are positional (`out0`, `in0`, ...), so two kernels doing the same work on
different tensors get identical bodies, which `tile.lower.generate` then shares.

Index arithmetic uses the semtree's INDEX type (loop counters and group ids); tensors have
fewer than 2^31 elements (design 4.4 rule 10), so every offset fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semtree import builder as sb
from semtree.nodes import (
    Binary,
    BinOp,
    Cast,
    Clamp,
    Declare,
    Expr,
    IdKind,
    IndexExpr,
    IntConst,
    Load,
    Lookup,
    Param,
    Select,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnOp,
    c_identifier,
)
from semtree.types import DType, Type
from tile.bind.program import ConstBinding, OpKind, TensorBinding
from tile.errors import TileOutOfMemory
from tile.lower.flatten import row_major
from tile.lower.ops import GenerateError, Typed, apply, constant, convert

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from semtree.kernel import HardwareSettings
    from semtree.nodes import Function
    from semtree.types import TensorShape
    from tile.bind.program import Binding, BoundOp
    from tile.lower.flat import FlatConstraint

INDEX_LIMIT = 2**31
# Reduction tuples per element below which a tile is not worth a second copy of its loops, one
# for whole tiles without the edge's tests (`tile.lower.contract`, `tile.lower.vector`).
MIN_WHOLE_TUPLES = 8


@dataclass(frozen=True, slots=True)
class ProgramContext:
    """What every kernel of one program needs to know about its tensors."""

    bindings: Mapping[str, Binding]
    buffer_of: Mapping[str, str]  # tensor -> buffer holding its elements (row-major)
    shapes: Mapping[str, TensorShape]  # buffer -> shape

    def is_constant(self, name: str) -> bool:
        return isinstance(self.bindings[name], ConstBinding)

    def dtype(self, name: str) -> DType:
        binding = self.bindings[name]
        return binding.shape.dtype if isinstance(binding, TensorBinding) else binding.dtype

    def dims(self, name: str) -> tuple[int, ...]:
        binding = self.bindings[name]
        return binding.shape.dims if isinstance(binding, TensorBinding) else ()

    def constant(self, name: str) -> Typed:
        binding = self.bindings[name]
        assert isinstance(binding, ConstBinding)
        return constant(binding.value, binding.dtype)


def affine(terms: Iterable[tuple[int, Expr]], const: int = 0) -> Expr:
    """`sum(coefficient * term) + const` with as few nodes as possible (INDEX arithmetic)."""
    result: Expr | None = None
    for coefficient, term in terms:
        if isinstance(term, IntConst):  # fold constant terms (a zero tile base, ...)
            const += coefficient * term.value
            continue
        if coefficient == 0:
            continue
        magnitude = abs(coefficient)
        scaled = term if magnitude == 1 else Binary(BinOp.MUL, term, IntConst(magnitude))
        if result is None:
            result = scaled if coefficient > 0 else Unary(UnOp.NEG, scaled)
        else:
            result = Binary(BinOp.ADD if coefficient > 0 else BinOp.SUB, result, scaled)
    if result is None:
        return IntConst(const)
    if const:
        result = Binary(BinOp.ADD if const > 0 else BinOp.SUB, result, IntConst(abs(const)))
    return result


def guard(constraint: FlatConstraint, variables: dict[int, Expr]) -> Expr:
    """Whether a flat contraction's `constraint` holds for the values of its `variables`."""
    terms = [(c, variables[k]) for k, c in enumerate(constraint.lhs) if c]
    return Binary(BinOp.LE, affine(terms), IntConst(constraint.rhs))


def conjunction(conditions: Sequence[Expr]) -> Expr | None:
    if not conditions:
        return None
    return sb.and_(*conditions).node


def check_size(buffer: str, shape: TensorShape) -> None:
    """Generated code indexes elements with 32-bit integers: a larger buffer (input, output or
    temporary) is TileOutOfMemory, on every device, before any kernel is generated."""
    if shape.size >= INDEX_LIMIT:
        raise TileOutOfMemory(
            f"it has {shape.size} elements, and generated code indexes at most 2^31 - 1",
            tensor=buffer,
            shape=tuple(shape.dims),
            dtype=shape.dtype.value,
            nbytes=shape.nbytes,
        )


def product(values: Iterable[int]) -> int:
    total = 1
    for value in values:
        total *= value
    return total


@dataclass(frozen=True, slots=True)
class RowLoop:
    """The rows a contraction reduces over, counted at run time (`tile.lower.contract`)."""

    count: str  # the 0-D INT32 tensor holding the number of rows
    elements: Mapping[str, int]  # tensor read row by row -> its elements per row


class KernelWriter:
    """One kernel's parameters and local names."""

    def __init__(self, context: ProgramContext, stores: Sequence[str]) -> None:
        self.context = context
        self.used: set[str] = set()
        self.outputs: dict[str, str] = {}  # buffer -> parameter name
        self.inputs: dict[str, str] = {}
        for name in stores:
            buffer = context.buffer_of[name]
            if buffer not in self.outputs:
                self.outputs[buffer] = self.fresh(f"out{len(self.outputs)}")

    def fresh(self, base: str) -> str:
        name = c_identifier(base)
        while name in self.used:
            name += "_"
        self.used.add(name)
        return name

    def declare(self, type_: Type, base: str, init: Expr | None) -> tuple[Stmt, Expr]:
        """A fresh local variable; returns its declaration and a load of it."""
        name = self.fresh(base)
        return Declare(type_, name, init), Load(Lookup(name))

    def input_param(self, buffer: str) -> str:
        if buffer in self.outputs:  # a kernel that updates its own output (scatter)
            return self.outputs[buffer]
        if buffer not in self.inputs:
            self.inputs[buffer] = self.fresh(f"in{len(self.inputs)}")
        return self.inputs[buffer]

    # ---- element access ------------------------------------------------------------------------

    def load(self, tensor: str, offset: Expr) -> Typed:
        """Element `offset` (row-major, logical) of `tensor`; a constant is its value."""
        context = self.context
        if context.is_constant(tensor):
            return context.constant(tensor)
        param = self.input_param(context.buffer_of[tensor])
        return Typed(Load(Subscript(Lookup(param), offset)), context.dtype(tensor))

    def store(self, tensor: str, offset: Expr, value: Typed) -> Stmt:
        param = self.outputs[self.context.buffer_of[tensor]]
        if value.dtype is not self.context.dtype(tensor):
            raise GenerateError(f"storing a {value.dtype} value into {tensor}")
        return Store(Subscript(Lookup(param), offset), value.expr)

    def indexed_axes(self, tensor: str, rank: int) -> list[tuple[int, int]] | None:
        """(grid axis, stride) of each dimension of `tensor` that a grid of `rank` axes
        indexes: aligned at the last dimension, size-1 dimensions broadcast (spec 7.2);
        None where `tensor` has more dimensions than the grid."""
        dims = self.context.dims(tensor)
        skip = rank - len(dims)
        if skip < 0:
            return None
        strides = zip(dims, row_major(dims), strict=True)
        return [(skip + axis, stride) for axis, (size, stride) in enumerate(strides) if size != 1]

    def offset_at(self, tensor: str, coordinates: Sequence[Expr]) -> Expr:
        """Row-major offset of `tensor` at `coordinates` (`indexed_axes`)."""
        axes = self.indexed_axes(tensor, len(coordinates))
        if axes is None:
            raise GenerateError(f"{tensor} has more dimensions than the kernel grid")
        return affine((stride, coordinates[axis]) for axis, stride in axes)

    def read_at(self, tensor: str, coordinates: Sequence[Expr]) -> Typed:
        if self.context.is_constant(tensor):
            return self.context.constant(tensor)
        return self.load(tensor, self.offset_at(tensor, coordinates))

    # ---- the function --------------------------------------------------------------------------

    def params(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(output buffers, input buffers) in parameter order."""
        return tuple(self.outputs), tuple(self.inputs)

    def function(self, name: str, body: Sequence[Stmt]) -> Function:
        params = []
        for buffer, param in self.outputs.items():
            params.append(Param(param, Type.ptr(self.context.shapes[buffer].dtype)))
        for buffer, param in self.inputs.items():
            params.append(Param(param, Type.ptr(self.context.shapes[buffer].dtype, const=True)))
        return sb.function(name, params, body)

    def bytes(self, reads: int | None = None) -> int:
        """The buffers' bytes: whole, or with at most `reads` elements of each input (a
        contraction's tuples: a split reduction's tail reads a few elements of its input)."""
        shapes = self.context.shapes
        total = sum(shapes[buffer].nbytes for buffer in self.outputs)
        for buffer in self.inputs:
            shape = shapes[buffer]
            whole = shape.nbytes
            total += whole if reads is None else min(whole, reads * shape.dtype.itemsize)
        return total


@dataclass(frozen=True, slots=True)
class GeneratedBody:
    """A generated kernel: its function, its buffers, its grid and its work."""

    body: Function
    outputs: tuple[str, ...]  # buffers, in parameter order
    inputs: tuple[str, ...]
    global_size: tuple[int, int, int]
    flops: int
    bytes: int


@dataclass(slots=True)
class Grid:
    """The work-group grid over the tiles of an output shape (one work-item per group).

    Work-group `g` (linear, last dimension fastest) owns the tile whose first element has
    coordinates `base[d]`; the tile covers `tiles[d]` elements per dimension, fewer at the end
    of a dimension that the tile does not divide. The linear id comes from one grid dimension,
    or from two or three where the device limits the first (`grid_size`).
    """

    shape: tuple[int, ...]
    tiles: tuple[int, ...]
    global_size: tuple[int, int, int]
    setup: list[Stmt]
    bases: list[Expr]

    @staticmethod
    def build(
        writer: KernelWriter,
        shape: Sequence[int],
        tiles: Sequence[int],
        settings: HardwareSettings,
    ) -> Grid:
        if product(shape) >= INDEX_LIMIT:
            raise GenerateError(f"a tensor of shape {list(shape)} has 2^31 or more elements")
        counts = [-(-size // tile) for size, tile in zip(shape, tiles, strict=True)]
        total = product(counts)
        setup: list[Stmt] = []
        global_size = grid_size(total, settings.goal_dim_sizes)
        linear = linear_group(global_size)
        bases: list[Expr] = []
        if any(count > 1 for count in counts):
            declaration, group = writer.declare(Type.index(), "group", linear)
            setup.append(declaration)
        inner = product(counts)
        first = True
        for dimension, (count, tile) in enumerate(zip(counts, tiles, strict=True)):
            inner //= count
            if count == 1:
                bases.append(IntConst(0))
                continue
            value: Expr = group
            if inner > 1:
                value = Binary(BinOp.DIV, value, IntConst(inner))
            if not first:
                value = Binary(BinOp.MOD, value, IntConst(count))
            first = False
            if tile > 1:
                value = Binary(BinOp.MUL, value, IntConst(tile))
            declaration, base = writer.declare(Type.index(), f"base{dimension}", value)
            setup.append(declaration)
            bases.append(base)
        return Grid(tuple(shape), tuple(tiles), global_size, setup, bases)

    @property
    def tiles_count(self) -> int:
        return product(-(-s // t) for s, t in zip(self.shape, self.tiles, strict=True))

    def guard(self) -> Expr | None:
        """The condition that the linear work-group id names a tile (needed only when the
        total did not fit one grid dimension and the grid was rounded up)."""
        if product(self.global_size) == self.tiles_count:
            return None
        return Binary(BinOp.LT, linear_group(self.global_size), IntConst(self.tiles_count))

    def whole(self) -> Expr | None:
        """The condition that the work-group's tile lies wholly inside the shape; None where
        every tile does (the tiles divide the shape) or none does (a tile longer than its
        dimension): then one copy of the code serves them all."""
        if any(tile > size for size, tile in zip(self.shape, self.tiles, strict=True)):
            return None
        return conjunction(
            [
                Binary(BinOp.LE, affine([(1, base)], tile), IntConst(size))
                for size, tile, base in zip(self.shape, self.tiles, self.bases, strict=True)
                if tile > 1 and size % tile
            ]
        )


def grid_size(total: int, limits: Sequence[int]) -> tuple[int, int, int]:
    """`total` work-groups as a grid within the device's per-dimension `limits`: one
    dimension when it fits (always on the CPU), else two or three, rounded up."""
    first = min(total, limits[0])
    second = min(-(-total // first), limits[1])
    third = -(-total // (first * second))
    if third > limits[2]:
        raise GenerateError(f"{total} work-groups do not fit the device's grid {list(limits)}")
    return (first, second, third)


def linear_group(global_size: Sequence[int]) -> Expr:
    """The linear work-group id, dimension 0 fastest (one work-item per group)."""
    first, second, _ = global_size
    return affine(
        [
            (1, IndexExpr(IdKind.GROUP, 0)),
            (first if second > 1 else 0, IndexExpr(IdKind.GROUP, 1)),
            (first * second if global_size[2] > 1 else 0, IndexExpr(IdKind.GROUP, 2)),
        ]
    )


def fused_value(
    op: BoundOp,
    values: dict[str, Typed],
    coordinates: list[Expr],
    context: ProgramContext,
    writer: KernelWriter,
    settings: HardwareSettings,
) -> Typed:
    """The value of one fused elementwise, index, shape or gather op at `coordinates` of its
    output, reading inputs not computed in this kernel (`values`) from memory."""
    match op.fn:
        case "index":
            return Typed(Cast(Type.value(DType.INT32), coordinates[op.params[0]]), DType.INT32)
        case "shape":
            sizes = context.dims(op.inputs[0])
            value = constant(sizes[-1], DType.INT32).expr
            for axis in reversed(range(len(sizes) - 1)):
                is_axis = Binary(BinOp.EQ, coordinates[0], IntConst(axis))
                value = Select(is_axis, constant(sizes[axis], DType.INT32).expr, value)
            return Typed(value, DType.INT32)
        case "gather":
            return _gather(op, coordinates, context, writer)
    if op.kind is not OpKind.ELEMENTWISE:
        raise GenerateError(f"'{op.fn}' cannot be fused into an elementwise kernel")
    args = [
        values[name] if name in values else writer.read_at(name, coordinates) for name in op.inputs
    ]
    dtype = context.dtype(op.output)
    return apply(op.fn, args, dtype, op.compute or dtype, settings)


def guarded_reads(
    ops: Sequence[BoundOp],
    values: dict[str, Typed],
    coordinates: list[Expr],
    levels: Sequence[int],
    partial: Collection[int],
    writer: KernelWriter,
) -> list[tuple[int, Stmt]]:
    """Read, before the test that an element is inside the shape, the memory inputs of the
    elementwise `ops` that no dimension in `partial` indexes (a row's scale or shift): into
    `values`, as declarations at the tile loop level (`levels`) of the deepest dimension
    they use. Such a read is in bounds for every element, past the shape's end too; inside
    the test, a load that a loop repeats stopped LLVM vectorizing it (exp(X - MX) over rows
    of 100003: scalar code, 6x slower)."""
    if not partial:
        return []
    context, computed = writer.context, {op.output for op in ops}
    hoisted: list[tuple[int, Stmt]] = []
    for op in ops:
        if op.kind is not OpKind.ELEMENTWISE or op.fn in ("index", "shape", "gather"):
            continue
        for name in op.inputs:
            if name in values or name in computed or context.is_constant(name):
                continue
            axes = writer.indexed_axes(name, len(coordinates))
            used = [axis for axis, _ in axes or ()]
            if axes is None or any(axis in partial for axis in used):
                continue
            value = writer.read_at(name, coordinates)
            declaration, variable = writer.declare(Type.value(value.dtype), f"v{name}", value.expr)
            values[name] = Typed(variable, value.dtype)
            hoisted.append((max((levels[axis] for axis in used), default=0), declaration))
    return hoisted


def _gather(
    op: BoundOp, coordinates: list[Expr], context: ProgramContext, writer: KernelWriter
) -> Typed:
    """`O[a..., b...] = V[clamp(I[a...], 0, rows - 1), b...]` (spec 9.5)."""
    table, indices = op.inputs
    rank = len(context.dims(indices))
    index = writer.read_at(indices, coordinates[:rank])
    dims = context.dims(table)
    row = Clamp(convert(index, DType.INT32), IntConst(0), IntConst(dims[0] - 1))
    strides = row_major(dims)
    terms = [(strides[0], Cast(Type.index(), row))]
    terms += [(s, c) for s, c in zip(strides[1:], coordinates[rank:], strict=True)]
    return writer.load(table, affine(terms))
