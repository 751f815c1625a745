"""Reference interpreter for semtree kernels: the IR's executable definition (design 12).

`run(function, args, global_size, local_size)` executes a semtree `Function` over a launch grid
on numpy buffers, in place; `run_kernel_list(kernel_list, inputs)` runs a whole `KernelList`
(ZERO and COPY kernels included) and returns its outputs. Generator tests use it to check a
`KernelList` against numpy without a device; a disagreement between a backend and this
interpreter points at the backend.

Every work-item of the grid executes in lockstep (SIMT): each value is an array with one row
per work-item (and one column per vector lane), statements run under a mask of active
work-items, `If`/`While`/`Cond` narrow the mask, and `Barrier` checks that whole work-groups
reach it together. Semantics implemented here, exactly (design 4.4, spec 5.4 and 7.4):

- types from `semtree.typing` (promotion, weak literals, vector widths, emulated fp16);
- integer arithmetic wraps; division truncates, `x / 0 == 0`, `x % 0 == 0`, `MIN / -1 == MIN`,
  `MIN % -1 == 0`; shift counts are taken modulo the bit width (32 for INDEX);
- float to integer truncates and saturates (NaN gives 0), as `fptosi.sat`/`convert_*_sat`;
  integer to float rounds to nearest; anything to bool is `x != 0`;
- INDEX values are 64-bit here but must stay in [-2^31, 2^31) (rule 10): leaving that range,
  where OpenCL (`int`) and LLVM (`i64`) would disagree, raises `InterpreterError`;
- `MAX`/`MIN` ignore a NaN operand (C `fmax`/`fmin`), `ROUND` rounds halves away from zero,
  `Clamp` is `min(max(x, lo), hi)` (NaN gives `lo` for floats), `MAD` is `a * b + c`;
- out-of-bounds accesses by active work-items raise `InterpreterError`; fresh declarations
  and (by default) output buffers hold NaN / a byte pattern, so unwritten values show up;
- local memory is checked for data races: between two barriers of a work-group, an element
  that one work-item writes may not be read or written by another (lockstep execution would
  hide such a race; a real device runs the work-items in any order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from semtree.kernel import KernelKind
from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Block,
    Builtin,
    Call,
    Cast,
    Clamp,
    Cond,
    Declare,
    Expr,
    FloatConst,
    For,
    IdKind,
    If,
    IndexExpr,
    IntConst,
    Lanes,
    Limit,
    LimitConst,
    Load,
    Lookup,
    LValue,
    Return,
    Select,
    Shuffle,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnOp,
    UnsupportedNode,
    While,
)
from semtree.types import DType, Region, Type
from semtree.typing import (
    check_function,
    is_literal,
    literal_type,
    lvalue_type,
    operand_type,
    operands,
    result_type,
    value_type,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from semtree.kernel import KernelInfo, KernelList
    from semtree.nodes import Function

INDEX_LIMIT = 2**31
MAX_WHILE_ITERATIONS = 1_000_000
_POISON_BYTE = 0x5A
COLLECTIVE = -3  # RaceLog.writer of an element every work-item initialised


class InterpreterError(RuntimeError):
    """The kernel did something undefined: out-of-bounds access, INDEX overflow, a divergent
    barrier, an endless loop."""


@dataclass(slots=True)
class Storage:
    """Memory for one variable, array or buffer: `data[row, column]`, one row per owner
    (work-item for private, work-group for local, a single row for global buffers); the
    columns of a vector element are consecutive."""

    name: str
    data: np.ndarray  # (owners, columns) of the stored dtype, or int64 pointer offsets
    rows: np.ndarray  # (items,) the row each work-item uses
    declared: Type  # the declared type (what `semtree.typing` sees)
    target: Storage | None = None  # pointer storage: the buffer pointed into
    races: RaceLog | None = None  # local memory: who touched each element since the barrier


@dataclass(slots=True)
class RaceLog:
    """For each element of a local array, shaped like its `data`: the work-item that last
    wrote it and the barrier epoch of that write; the work-item that read it (-2: several)
    in the epoch `read_epoch`."""

    writer: np.ndarray
    write_epoch: np.ndarray
    reader: np.ndarray
    read_epoch: np.ndarray

    @staticmethod
    def fresh(shape: tuple[int, ...]) -> RaceLog:
        return RaceLog(*(np.full(shape, -1, np.int64) for _ in range(4)))


@dataclass(slots=True)
class Pointer:
    """A pointer value: the buffer and, per work-item, an offset in scalar elements."""

    target: Storage
    offset: np.ndarray  # (items,) int64


@dataclass(slots=True)
class Address:
    storage: Storage
    offset: np.ndarray  # (items,) first column of the element
    type: Type  # the lvalue's declared type
    count: np.ndarray | None = None  # (items,) lanes accessed (a `Lanes` with a count)
    fill: Value | None = None  # what a counted load gives in the other lanes (0 without)

    @property
    def lanes(self) -> int:
        return 1 if self.type.base_is_pointer else self.type.vec_width

    @property
    def stored(self) -> Type:
        """The representation in memory (an emulated f16 variable is stored as f32)."""
        if self.type.base_is_pointer:
            return self.type.with_width(1) if self.type.array else self.type
        return Type.value(DType.of(self.storage.data.dtype), self.type.vec_width)


Value = np.ndarray | Pointer


def numpy_dtype(type_: Type) -> np.dtype:
    if type_.is_index or type_.base_is_pointer:
        return np.dtype(np.int64)
    assert type_.dtype is not None
    return type_.dtype.numpy


def poison(array: np.ndarray) -> np.ndarray:
    """Fill with NaN (floats) or a byte pattern (integers), so unwritten values show up."""
    if array.dtype.kind == "f":
        array[...] = np.nan
    elif array.dtype.kind == "b":
        array[...] = False
    else:
        array.view(np.uint8)[...] = _POISON_BYTE
    return array


# ---- the machine ----------------------------------------------------------------------------


class Machine:
    """Executes one function over one grid; see the module docstring."""

    def __init__(
        self, global_size: Sequence[int], local_size: Sequence[int], native_fp16: bool
    ) -> None:
        local = tuple(local_size) if any(local_size) else (1, 1, 1)
        grid = tuple(global_size)
        if len(grid) != 3 or len(local) != 3:
            raise ValueError("grid sizes need three dimensions")
        for total, size in zip(grid, local, strict=True):
            if size <= 0 or total % size:
                raise ValueError(f"global size {grid} is not a multiple of local size {local}")
        self.native_fp16 = native_fp16
        ids = np.indices(grid[::-1], dtype=np.int64).reshape(3, -1)[::-1]  # dim 0 fastest
        sizes = np.array(local, np.int64)[:, None]
        counts = [total // size for total, size in zip(grid, local, strict=True)]
        groups = ids // sizes
        self.ids = {IdKind.GLOBAL: ids, IdKind.GROUP: groups, IdKind.LOCAL: ids % sizes}
        self.items = ids.shape[1]
        self.group = groups[0] + counts[0] * (groups[1] + counts[1] * groups[2])
        self.group_count = counts[0] * counts[1] * counts[2]
        self.group_size = local[0] * local[1] * local[2]
        self.alive = np.ones(self.items, bool)
        self.env: dict[str, Storage] = {}
        self.epoch = np.zeros(self.group_count, np.int64)  # barriers passed, per work-group

    # ---- entry -------------------------------------------------------------------------------

    def run(self, function: Function, args: Sequence[object]) -> None:
        check_function(function, self.native_fp16)
        if not function.ret.is_void:
            raise ValueError(f"{function.name} returns {function.ret}: only kernels run here")
        if len(args) != len(function.params):
            raise ValueError(f"{function.name} takes {len(function.params)} arguments")
        for param, arg in zip(function.params, args, strict=True):
            self.env[param.name] = self.bind(param.name, param.type, arg)
        if self.items:
            self.execute(function.body, np.ones(self.items, bool))

    def bind(self, name: str, type_: Type, arg: object) -> Storage:
        storage = self.allocate(name, type_)
        if type_.is_pointer:
            if not isinstance(arg, np.ndarray) or not arg.flags.c_contiguous:
                raise TypeError(f"argument {name} must be a C-contiguous numpy array")
            if arg.dtype != numpy_dtype(type_.element()):
                raise TypeError(f"argument {name}: {arg.dtype} for a {type_} parameter")
            rows = np.zeros(self.items, np.int64)
            buffer_type = Type(type_.element().base, type_.dtype, 1, max(1, arg.size))
            storage.target = Storage(name, arg.reshape(1, -1), rows, buffer_type)
            storage.data[...] = 0
        else:
            scalar = _scalar(arg, type_)
            stored = Address(storage, storage.rows, type_).stored
            storage.data[...] = self.convert(self.full(scalar), type_, stored, None)
        return storage

    def allocate(self, name: str, type_: Type) -> Storage:
        element = type_.element() if type_.is_array else type_
        if not element.is_pointer:
            element = value_type(element, self.native_fp16)
        local = type_.region is Region.LOCAL and not type_.base_is_pointer
        owners = self.group_count if local else self.items
        rows = self.group if local else np.arange(self.items)
        lanes = 1 if element.is_pointer else element.vec_width
        data = poison(np.empty((owners, max(1, type_.array) * lanes), numpy_dtype(element)))
        races = RaceLog.fresh(data.shape) if local and self.group_size > 1 else None
        return Storage(name, data, rows, type_, races=races)

    # ---- statements --------------------------------------------------------------------------

    def execute(self, stmt: Stmt, mask: np.ndarray) -> None:
        mask = mask & self.alive
        if not mask.any():
            return
        match stmt:
            case Declare(type_, name, init):
                storage = self.allocate(name, type_)
                if init is not None:
                    element = type_.element() if type_.is_array else type_
                    value = self.prepare(element, init, mask)
                    for index in range(max(1, type_.array)):
                        start = np.zeros(self.items, np.int64)
                        address = Address(storage, start, element)
                        address.offset += index * address.lanes
                        self.write(address, value, mask, collective=True)
                self.env[name] = storage
            case Store(ref, value):
                address = self.address(ref, mask)
                self.write(address, self.prepare(address.type, value, mask), mask)
            case Block(stmts):
                outer = self.env
                self.env = dict(outer)
                try:
                    for item in stmts:
                        self.execute(item, mask)
                finally:
                    self.env = outer
            case If(cond, then, other):
                truth = self.truth(cond, mask)
                self.execute(then, mask & truth)
                if other is not None:
                    self.execute(other, mask & ~truth)
            case For(var, count, step, body):
                outer = self.env
                counter = self.allocate(var, Type.index())
                self.env = {**outer, var: counter}
                try:
                    for index in range(count):
                        counter.data[:, 0] = index * step
                        self.execute(body, mask)
                finally:
                    self.env = outer
            case While(cond, body):
                for _ in range(MAX_WHILE_ITERATIONS):
                    mask = mask & self.alive
                    mask = mask & self.truth(cond, mask)
                    if not mask.any():
                        return
                    self.execute(body, mask)
                raise InterpreterError(f"while ({cond}) ran {MAX_WHILE_ITERATIONS} times")
            case Barrier():
                arrived = np.bincount(self.group[mask], minlength=self.group_count)
                if np.any((arrived != 0) & (arrived != self.group_size)):
                    raise InterpreterError("barrier reached by only part of a work-group")
                self.epoch[arrived != 0] += 1
            case Return(None):
                self.alive &= ~mask
            case _:
                raise UnsupportedNode(stmt)

    def truth(self, cond: Expr, mask: np.ndarray) -> np.ndarray:
        value, _ = self.evaluate(cond, mask)
        return np.asarray(value != 0)[:, 0]  # type: ignore[operator]

    def prepare(self, element: Type, expr: Expr, mask: np.ndarray) -> Value:
        """`expr` converted to the stored form of `element` (a literal is weak: it takes the
        element's value type, as it would from the other operand of an operation)."""
        if element.base_is_pointer:
            return self.evaluate(expr, mask)[0]
        target = value_type(element, self.native_fp16)
        if is_literal(expr):
            value = self.literal(expr, target)  # type: ignore[arg-type]
        else:
            value, type_ = self.evaluate(expr, mask)
            value = self.convert(value, type_, target, mask)  # type: ignore[arg-type]
        return value

    # ---- memory ------------------------------------------------------------------------------

    def address(self, ref: LValue, mask: np.ndarray) -> Address:
        match ref:
            case Lookup(name):
                storage = self.env[name]
                return Address(storage, np.zeros(self.items, np.int64), storage.declared)
            case Subscript(base, offset):
                outer = self.address(base, mask)
                value, index_type = self.evaluate(offset, mask)
                index = self.convert(value, index_type, Type.index(), mask)[:, 0]  # type: ignore[arg-type]
                element = outer.type.element()
                if outer.type.is_array:
                    lanes = 1 if element.is_pointer else element.vec_width
                    return Address(outer.storage, outer.offset + index * lanes, element)
                pointer = self.read(outer, mask)
                assert isinstance(pointer, Pointer)
                start = pointer.offset + index * element.vec_width
                return Address(pointer.target, start, element)
            case Lanes(base, offset, _, count, fill):
                element = lvalue_type(ref, _TypeView(self.env), self.native_fp16)
                lanes = None if count is None else self.index(count, mask)
                others = None
                if fill is not None:
                    value, type_ = self.evaluate(fill, mask)
                    others = self.convert(value, type_, element.scalar(), mask)
                outer = self.address(base, mask)
                if outer.type.is_array:  # lanes of a private array
                    start = outer.offset + self.index(offset, mask)
                    return Address(outer.storage, start, element, lanes, others)
                pointer = self.read(outer, mask)
                assert isinstance(pointer, Pointer)
                start = pointer.offset + self.index(offset, mask)
                return Address(pointer.target, start, element, lanes, others)
            case _:
                raise UnsupportedNode(ref)

    def index(self, expr: Expr, mask: np.ndarray) -> np.ndarray:
        """An integer expression as (items,) int64."""
        value, type_ = self.evaluate(expr, mask)
        return self.convert(value, type_, Type.index(), mask)[:, 0]  # type: ignore[arg-type]

    def columns(self, address: Address, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row and column indices of the element for every work-item (inactive ones: 0)."""
        storage, lanes = address.storage, address.lanes
        size = storage.data.shape[1]
        start = address.offset
        if address.count is not None:  # only the first `count` lanes are accessed
            lanes = np.clip(address.count, 0, lanes)
            if storage.races is not None:
                raise InterpreterError(f"{storage.name}: counted lanes of local memory")
        bad = mask & (lanes > 0) & ((start < 0) | (start + lanes > size))
        if bad.any():
            item = int(np.argmax(bad))
            last = start[item] + np.broadcast_to(lanes, start.shape)[item] - 1
            raise InterpreterError(
                f"{storage.name}: work-item {item} accesses elements {start[item]} to {last} "
                f"of {size}"
            )
        start = np.where(mask, start, 0)
        columns = start[:, None] + np.arange(address.lanes)
        if address.count is not None:  # lanes not accessed: column 0 (read as 0, not written)
            columns = np.where(np.arange(address.lanes) < lanes[:, None], columns, 0)
        return storage.rows[:, None], columns

    def read(self, address: Address, mask: np.ndarray) -> Value:
        storage = address.storage
        if storage.data.shape[1] == 0:
            return np.zeros((self.items, address.lanes), storage.data.dtype)
        rows, columns = self.columns(address, mask)
        if storage.races is not None:
            self.note_access(storage, rows, columns, mask, write=False)
        raw = storage.data[rows, columns]
        if address.count is not None:
            others = np.zeros((), raw.dtype) if address.fill is None else address.fill
            raw = np.where(self.active(address), raw, others)
        if address.type.base_is_pointer:
            if storage.target is None:
                raise InterpreterError(f"pointer {storage.name} is used before it is set")
            return Pointer(storage.target, raw[:, 0])
        return raw

    def write(
        self, address: Address, value: Value, mask: np.ndarray, *, collective: bool = False
    ) -> None:
        """Store `value` for the work-items of `mask`; `collective`: every work-item fills the
        element with the same value (a declaration's initialiser)."""
        storage = address.storage
        if isinstance(value, Pointer):
            if storage.target is not None and storage.target is not value.target:
                raise InterpreterError(f"{storage.name} would point into two buffers")
            storage.target = value.target
            value = value.offset[:, None]
        elif not address.type.base_is_pointer:
            source = value_type(address.type, self.native_fp16)
            value = self.convert(value, source, address.stored, mask)
        rows, columns = self.columns(address, mask)
        if storage.races is not None:
            self.note_access(storage, rows, columns, mask, write=True, collective=collective)
        value = np.broadcast_to(value, (self.items, address.lanes))
        written = np.broadcast_to(mask[:, None], columns.shape)
        if address.count is not None:
            written = written & self.active(address)
        storage.data[np.broadcast_to(rows, columns.shape)[written], columns[written]] = value[
            written
        ]

    def active(self, address: Address) -> np.ndarray:
        """(items, lanes): which lanes of a counted `Lanes` access are accessed."""
        assert address.count is not None
        return np.arange(address.lanes) < address.count[:, None]

    def note_access(
        self,
        storage: Storage,
        rows: np.ndarray,
        columns: np.ndarray,
        mask: np.ndarray,
        write: bool,
        collective: bool = False,
    ) -> None:
        """Record an access to local memory; raise on a race with another work-item. A
        collective write (an initialiser, the same value from every work-item) may be read
        by anyone before the next barrier, but not overwritten."""
        log = storage.races
        assert log is not None
        items = np.nonzero(mask)[0]
        if not items.size:
            return
        lanes = columns.shape[1]
        item = np.repeat(items, lanes)
        row = np.broadcast_to(rows, columns.shape)[mask].reshape(-1)
        column = columns[mask].reshape(-1)
        epoch = self.epoch[self.group[item]]
        where = (row, column)
        written = (log.write_epoch[where] == epoch) & (log.writer[where] != item)
        if not write:
            written &= log.writer[where] != COLLECTIVE
        read = (log.read_epoch[where] == epoch) & (log.reader[where] != item)
        keys = row * storage.data.shape[1] + column
        _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        shared = (counts > 1)[inverse]  # several work-items touch it in this statement
        if collective:
            shared[:] = False
        conflict = written | (read | shared if write else np.zeros_like(written))
        if conflict.any():
            at = int(np.argmax(conflict))
            action = "writes" if write else "reads"
            raise InterpreterError(
                f"data race on local {storage.name}[{column[at]}]: work-item {item[at]} "
                f"{action} it without a barrier after another work-item's access"
            )
        if write:
            log.writer[where] = COLLECTIVE if collective else item
            log.write_epoch[where] = epoch
        else:
            again = (log.read_epoch[where] == epoch) & (log.reader[where] != item)
            log.reader[where] = np.where(shared | again, -2, item)
            log.read_epoch[where] = epoch

    # ---- expressions -------------------------------------------------------------------------

    def evaluate(self, expr: Expr, mask: np.ndarray) -> tuple[Value, Type]:
        """The value of `expr` for every work-item (meaningful where `mask`) and its type."""
        if isinstance(expr, Cond | Select):
            return self.choose(expr, mask)
        children = operands(expr)
        evaluated = [self.evaluate(child, mask) for child in children]
        types = tuple(type_ for _, type_ in evaluated)
        type_ = result_type(expr, types, _TypeView(self.env), self.native_fp16)
        value = self.compute(expr, children, evaluated, type_, mask)
        if type_.is_index:
            self.check_index(value, mask)  # type: ignore[arg-type]
        return value, type_

    def compute(
        self,
        expr: Expr,
        children: tuple[Expr, ...],
        evaluated: list[tuple[Value, Type]],
        type_: Type,
        mask: np.ndarray,
    ) -> Value:
        match expr:
            case IntConst() | FloatConst():
                return self.literal(expr, type_)
            case LimitConst(which, dtype):
                number = {Limit.MIN: dtype.min, Limit.MAX: dtype.max, Limit.ZERO: 0, Limit.ONE: 1}
                exact = Type.value(dtype)
                return self.convert(self.full(_scalar(number[which], exact)), exact, type_, mask)
            case IndexExpr(kind, dim):
                return self.ids[kind][dim][:, None].copy()
            case Load(ref):
                address = self.address(ref, mask)
                value = self.read(address, mask)
                if isinstance(value, Pointer):
                    return value
                return self.convert(value, address.stored, type_, mask)
            case Unary(op, _):
                return _unary(op, evaluated[0][0])  # type: ignore[arg-type]
            case Binary(op, _, _) if type_.is_pointer:
                return _pointer_arithmetic(op, evaluated)
            case Binary(op, _, _) if op.is_logical:
                left, right = (np.asarray(value != 0) for value, _ in evaluated)  # type: ignore[operator]
                return left & right if op is BinOp.LAND else left | right
            case Binary(op, _, _):
                common = operand_type(children, [type_ for _, type_ in evaluated])
                left, right = self.coerce(children, evaluated, common, mask)
                return _binary(op, left, right, common)
            case Clamp():
                value, lo, hi = self.coerce(children, evaluated, type_, mask)
                if type_.is_float:
                    return np.fmin(np.fmax(value, lo), hi)
                return np.minimum(np.maximum(value, lo), hi)
            case Cast(target, inner) if target.is_pointer:
                value = evaluated[0][0]
                assert isinstance(value, Pointer)
                return value
            case Cast(target, inner):
                if is_literal(inner):
                    exact = self.literal(inner, target)  # type: ignore[arg-type]
                else:
                    value, source = evaluated[0]
                    exact = self.convert(value, source, target, mask)  # type: ignore[arg-type]
                return self.convert(exact, target, type_, mask)
            case Call(fn, _):
                return _call(fn, self.coerce(children, evaluated, type_, mask), type_)
            case Shuffle(_, _, lanes):
                pair = [np.asarray(value) for value, _ in evaluated]
                return np.concatenate(pair, axis=1)[:, list(lanes)]
            case _:
                raise UnsupportedNode(expr)

    def choose(self, expr: Cond | Select, mask: np.ndarray) -> tuple[Value, Type]:
        """`Cond` evaluates a branch only for work-items whose condition (in some lane)
        selects it; `Select` evaluates both for every active work-item."""
        truth_value, cond_type = self.evaluate(expr.cond, mask)
        truth = np.asarray(truth_value != 0)  # type: ignore[operator]
        masks = (mask, mask)
        if isinstance(expr, Cond):
            masks = (mask & truth.any(axis=1), mask & ~truth.all(axis=1))
        branches = (expr.then, expr.other)
        evaluated = [self.evaluate(branch, m) for branch, m in zip(branches, masks, strict=True)]
        types = (cond_type, evaluated[0][1], evaluated[1][1])
        type_ = result_type(expr, types, _TypeView(self.env), self.native_fp16)
        if type_.is_pointer:
            then, other = (value for value, _ in evaluated)
            assert isinstance(then, Pointer) and isinstance(other, Pointer)
            if then.target is not other.target:
                raise InterpreterError(f"{expr} selects between pointers into two buffers")
            return Pointer(then.target, np.where(truth[:, 0], then.offset, other.offset)), type_
        common = operand_type(branches, [type_ for _, type_ in evaluated])
        then, other = self.coerce(branches, evaluated, common, mask)
        return np.where(truth, then, other), type_

    def coerce(
        self,
        children: Sequence[Expr],
        evaluated: Sequence[tuple[Value, Type]],
        common: Type,
        mask: np.ndarray,
    ) -> list[np.ndarray]:
        """Operands converted to their common type (a literal directly, being weak)."""
        out = []
        for child, (value, type_) in zip(children, evaluated, strict=True):
            if is_literal(child):
                out.append(self.literal(child, common))  # type: ignore[arg-type]
            else:
                out.append(self.convert(value, type_, common, mask))  # type: ignore[arg-type]
        return out

    def literal(self, expr: IntConst | FloatConst, context: Type) -> np.ndarray:
        own = literal_type(expr, context)
        return self.convert(self.full(_scalar(expr.value, own)), own, context, None)

    def full(self, scalar: np.ndarray) -> np.ndarray:
        return np.full((self.items, 1), scalar, scalar.dtype)

    def convert(
        self, value: np.ndarray, source: Type, target: Type, mask: np.ndarray | None
    ) -> np.ndarray:
        """Rule 8: `value` of type `source` as `target` (a scalar broadcasts to a vector)."""
        with np.errstate(all="ignore"):
            if target.is_bool:
                out = np.asarray(value != 0)
            elif source.is_float and not target.is_float:
                out = _float_to_int(value, target)
            else:
                out = value.astype(numpy_dtype(target))
        if target.is_index:
            self.check_index(out, mask)
        if target.vec_width > out.shape[1]:
            out = np.broadcast_to(out, (out.shape[0], target.vec_width))
        return out

    def check_index(self, value: np.ndarray, mask: np.ndarray | None) -> None:
        active = value if mask is None else value[mask]
        if active.size and (active.min() < -INDEX_LIMIT or active.max() >= INDEX_LIMIT):
            raise InterpreterError(
                f"INDEX value outside [-2^31, 2^31): {active.min()} to {active.max()}"
            )


class _TypeView(Mapping):
    """The declared type of every name in scope, as `semtree.typing` wants it."""

    def __init__(self, env: dict[str, Storage]) -> None:
        self.env = env

    def __getitem__(self, name: str) -> Type:
        return self.env[name].declared

    def __iter__(self) -> Iterator[str]:
        return iter(self.env)

    def __len__(self) -> int:
        return len(self.env)


# ---- operations on values -------------------------------------------------------------------


def _scalar(value: object, type_: Type) -> np.ndarray:
    """A 0-d array holding `value` in `type_`: floats round to nearest, integers wrap."""
    dtype = numpy_dtype(type_)
    if type_.is_float:
        with np.errstate(over="ignore"):  # 1e30 as f16 is inf
            return np.array(float(value)).astype(dtype)  # type: ignore[arg-type]
    if type_.is_bool:
        return np.array(bool(value))
    return np.array(int(value) % 2**64, np.uint64).astype(dtype)  # type: ignore[call-overload]


def _float_to_int(value: np.ndarray, target: Type) -> np.ndarray:
    """Truncate toward zero, saturate at the target's range, NaN -> 0 (`fptosi.sat`)."""
    dtype = numpy_dtype(target)
    info = np.iinfo(dtype)
    real = np.trunc(value.astype(np.float64))
    out = np.zeros(value.shape, dtype)
    low, high = float(int(info.min)), float(int(info.max) + 1)
    inside = (real >= low) & (real < high)
    out[inside] = real[inside].astype(dtype)
    out[real >= high] = info.max
    out[real < low] = info.min
    return out


def _unary(op: UnOp, value: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        match op:
            case UnOp.NEG:
                return np.negative(value)
            case UnOp.BIT_NOT:
                return np.invert(value)
            case UnOp.NOT:
                return np.asarray(value == 0)
            case _:
                raise UnsupportedNode(op)


_COMPARE = {
    BinOp.LT: np.less,
    BinOp.LE: np.less_equal,
    BinOp.GT: np.greater,
    BinOp.GE: np.greater_equal,
    BinOp.EQ: np.equal,
    BinOp.NE: np.not_equal,
}
_PLAIN = {
    BinOp.ADD: np.add,
    BinOp.SUB: np.subtract,
    BinOp.MUL: np.multiply,
    BinOp.AND: np.bitwise_and,
    BinOp.OR: np.bitwise_or,
    BinOp.XOR: np.bitwise_xor,
}


def _binary(op: BinOp, left: np.ndarray, right: np.ndarray, common: Type) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op in _COMPARE:
            return _COMPARE[op](left, right)
        if op in _PLAIN:
            return _PLAIN[op](left, right)
        if op is BinOp.DIV and common.is_float:
            return np.divide(left, right)
        if op in (BinOp.DIV, BinOp.MOD):
            return _divide(op, left, right, common)
        if op in (BinOp.SHL, BinOp.SHR):
            return _shift(op, left, right, common)
    raise UnsupportedNode(op)


def _divide(op: BinOp, left: np.ndarray, right: np.ndarray, common: Type) -> np.ndarray:
    """C division and remainder with the guards of spec 7.4: x / 0 = 0, x % 0 = 0,
    MIN / -1 = MIN, MIN % -1 = 0."""
    zero = right == 0
    divisor = np.where(zero, 1, right).astype(left.dtype)
    if left.dtype.kind == "i":
        overflow = (left == np.iinfo(left.dtype).min) & (divisor == -1)
        divisor = np.where(overflow, 1, divisor).astype(left.dtype)
    remainder = np.fmod(left, divisor)
    if op is BinOp.MOD:
        return np.where(zero, 0, remainder).astype(left.dtype)
    quotient = (left - remainder) // divisor  # exact, so floor division truncates
    return np.where(zero, 0, quotient).astype(left.dtype)


def _shift(op: BinOp, left: np.ndarray, right: np.ndarray, common: Type) -> np.ndarray:
    """Shift counts modulo the bit width (32 for INDEX); `>>` is arithmetic for signed types."""
    bits = 32 if common.is_index else left.dtype.itemsize * 8
    count = right & (bits - 1)
    if op is BinOp.SHR:
        return np.right_shift(left, count)
    if common.is_index:
        return np.left_shift(left, count)
    unsigned = np.dtype(f"uint{bits}")
    return np.left_shift(left.astype(unsigned), count.astype(unsigned)).astype(left.dtype)


def _pointer_arithmetic(op: BinOp, evaluated: list[tuple[Value, Type]]) -> Pointer:
    (left, left_type), (right, _) = evaluated
    if not isinstance(left, Pointer):
        (left, left_type), (right, _) = evaluated[1], evaluated[0]
    assert isinstance(left, Pointer) and isinstance(right, np.ndarray)
    step = right[:, 0].astype(np.int64) * left_type.vec_width
    return Pointer(left.target, left.offset - step if op is BinOp.SUB else left.offset + step)


_MATH = {
    Builtin.ACOS: np.arccos,
    Builtin.ASIN: np.arcsin,
    Builtin.ATAN: np.arctan,
    Builtin.CEIL: np.ceil,
    Builtin.COS: np.cos,
    Builtin.COSH: np.cosh,
    Builtin.EXP: np.exp,
    Builtin.FLOOR: np.floor,
    Builtin.LOG: np.log,
    Builtin.SIN: np.sin,
    Builtin.SINH: np.sinh,
    Builtin.SQRT: np.sqrt,
    Builtin.TAN: np.tan,
    Builtin.TANH: np.tanh,
}


def _call(fn: Builtin, args: list[np.ndarray], type_: Type) -> np.ndarray:
    first = args[0]
    with np.errstate(all="ignore"):
        match fn:
            case Builtin.ABS:
                out = np.abs(first)
            case Builtin.MAX:
                out = (np.fmax if type_.is_float else np.maximum)(first, args[1])
            case Builtin.MIN:
                out = (np.fmin if type_.is_float else np.minimum)(first, args[1])
            case Builtin.MAD:
                out = first * args[1] + args[2]
            case Builtin.POW:
                out = np.power(first, args[1])
            case Builtin.RECIP:
                out = np.divide(1, first)
            case Builtin.ROUND:
                whole = np.trunc(first)
                out = np.where(np.abs(first - whole) >= 0.5, whole + np.sign(first), whole)
            case _ if fn in _MATH:
                out = _MATH[fn](first)
            case _:
                raise UnsupportedNode(fn)
    return np.asarray(out).astype(numpy_dtype(type_), copy=False)


# ---- entry points ---------------------------------------------------------------------------


def run(
    function: Function,
    args: Sequence[object],
    global_size: Sequence[int],
    local_size: Sequence[int] = (0, 0, 0),
    *,
    native_fp16: bool = False,
) -> None:
    """Execute `function` over the grid; pointer parameters take C-contiguous numpy arrays of
    the parameter's dtype (written in place), scalar parameters take numbers. A local size of
    (0, 0, 0) ("any") runs one work-item per work-group."""
    Machine(global_size, local_size, native_fp16).run(function, args)


def run_kernel(
    kernel: KernelInfo, buffers: Mapping[str, np.ndarray], *, native_fp16: bool = False
) -> None:
    """Run one `KernelInfo` on the named buffers (ZERO and COPY included)."""
    arrays = [buffers[param.name] for param in kernel.params]
    if kernel.kind is KernelKind.ZERO:
        arrays[0][...] = 0
    elif kernel.kind is KernelKind.COPY:
        if arrays[0].size != arrays[1].size:
            raise InterpreterError(f"{kernel.name}: copy between buffers of different sizes")
        np.copyto(arrays[0].reshape(-1), arrays[1].reshape(-1))
    else:
        assert kernel.body is not None
        run(kernel.body, arrays, kernel.global_size, kernel.local_size, native_fp16=native_fp16)


def run_kernel_list(
    kernel_list: KernelList,
    inputs: Mapping[str, object],
    *,
    native_fp16: bool = False,
) -> dict[str, np.ndarray]:
    """Run every kernel in order; return the program outputs by buffer name and by the
    user-visible names of `var_rewrites`. Outputs and temporaries start poisoned."""
    buffers: dict[str, np.ndarray] = {}
    for name, shape in kernel_list.shapes.items():
        if name in kernel_list.inputs:
            array = np.array(inputs[name], dtype=shape.dtype.numpy, order="C", copy=True)
            if array.shape != tuple(shape.dims):
                raise ValueError(f"input {name}: shape {array.shape}, expected {shape.dims}")
            buffers[name] = array
        else:
            buffers[name] = poison(np.empty(shape.dims, shape.dtype.numpy))
    for kernel in kernel_list.kernels:
        run_kernel(kernel, buffers, native_fp16=native_fp16)
    results = {name: buffers[name] for name in kernel_list.outputs}
    for user, buffer in kernel_list.var_rewrites.items():
        results[user] = buffers[buffer]
    return results


__all__ = [
    "InterpreterError",
    "Machine",
    "poison",
    "run",
    "run_kernel",
    "run_kernel_list",
]
