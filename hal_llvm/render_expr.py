"""Semtree expressions and lvalues in LLVM IR: the expression half of the LLVM renderer.

`render.py` walks a kernel's statements and hands every expression, load and store to
`ExpressionEmitter`, which emits it at the builder's position. Types and conversions follow
`semtree.typing` to the letter (design 4.4): the kernel computes what `tests/reference.py` does:

- every operation converts its operands to `operand_type(...)` first (weak literals become
  constants of that type directly) and produces `result_type(...)`;
- integer arithmetic wraps; division and remainder guard the divisor (`x / 0 == 0`,
  `MIN / -1 == MIN`, `x % 0 == 0`), since x86 traps on both; shift counts are masked to the
  lane width (32 for INDEX, which is `i64` here);
- conversions (including the memory forms below) are `render_convert.py`'s;
- `Select` is a `select`; `Cond` evaluates only the chosen branch, unless neither branch
  reads memory through a subscript (then both, and a `select`: it cannot fault, and is faster);
- buffer elements are read and written in their memory form (booleans as bytes, float16 as
  `half` extended to float32 when the device has no native fp16).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from hal_llvm.render_arith import float_operation, integer_operation
from hal_llvm.render_convert import Converter
from hal_llvm.render_lanes import lane_mask, lanes_index, masked_load, masked_store, shuffle
from hal_llvm.render_math import Declarations, emit_builtin
from hal_llvm.render_types import (
    I1,
    I64,
    INDEX,
    Typed,
    constant,
    exact_number,
    intrinsic_suffix,
    is_signed,
    memory_type,
    register_type,
    same_register,
)
from semtree.nodes import (
    Binary,
    BinOp,
    Call,
    Cast,
    Clamp,
    Cond,
    Expr,
    FloatConst,
    IdKind,
    IndexExpr,
    IntConst,
    Lanes,
    Limit,
    LimitConst,
    Load,
    Lookup,
    LValue,
    Select,
    Shuffle,
    Subscript,
    Unary,
    UnOp,
    UnsupportedNode,
    walk,
)
from semtree.types import DType, Type
from semtree.typing import is_literal, literal_type, operand_type, result_type, type_of, value_type

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings


@dataclass(frozen=True, slots=True)
class Variable:
    """A name in scope: its declared type and where its value lives."""

    type: Type
    storage: ir.Value | None = None  # an alloca: declarations, loop counters, assigned params
    value: ir.Value | None = None  # an SSA value: a parameter that is never assigned
    alignment: int = 0  # for `value` pointers: the known alignment of what they point to


@dataclass(frozen=True, slots=True)
class Address:
    """Where an lvalue lives: `pointer` to an element of semtree type `type`."""

    pointer: ir.Value
    type: Type
    in_memory: bool  # a buffer element, stored in its memory form (bytes for booleans)
    alignment: int | None = None


class TypeView(Mapping[str, Type]):
    """The declared type of every name in scope, as `semtree.typing` wants it."""

    def __init__(self, scope: Mapping[str, Variable]) -> None:
        self.scope = scope

    def __getitem__(self, name: str) -> Type:
        return self.scope[name].type

    def __iter__(self) -> Iterator[str]:
        return iter(self.scope)

    def __len__(self) -> int:
        return len(self.scope)


class ExpressionEmitter(Converter):
    """Emits expressions of one kernel at `self.builder`; `render.KernelEmitter` adds the
    statements and owns the function."""

    def __init__(
        self,
        builder: ir.IRBuilder,
        entry_builder: ir.IRBuilder,
        declarations: Declarations,
        settings: HardwareSettings,
    ) -> None:
        super().__init__(builder, declarations, settings.native_fp16)
        self.entry_builder = entry_builder  # at the end of the entry block: allocas go there
        # `contract` lets instruction selection fuse multiply-adds beyond MAD (ARCHITECTURE
        # 4.6); a device that disables MAD gets no fusion at all.
        if settings.fast_math:
            self.float_flags: tuple[str, ...] = ("fast",)
        else:
            self.float_flags = () if settings.disable_mad else ("contract",)
        self.scope: dict[str, Variable] = {}
        self.ids: tuple[ir.Value, ...] = ()

    # ---- helpers -------------------------------------------------------------------------------

    @property
    def types(self) -> TypeView:
        return TypeView(self.scope)

    def variable(self, name: str) -> Variable:
        variable = self.scope.get(name)
        if variable is None:
            raise UnsupportedNode(Lookup(name), f"{name!r} is not declared")
        return variable

    def alloca(self, type_: ir.Type, name: str) -> ir.Value:
        """A stack slot in the entry block, where SROA/mem2reg turn it into registers."""
        return self.entry_builder.alloca(type_, name=name)

    def value_type(self, type_: Type) -> Type:
        return type_ if type_.base_is_pointer else value_type(type_, self.native_fp16)

    def literal(self, expr: IntConst | FloatConst, context: Type) -> ir.Value:
        """A weak literal used where a value of `context` is expected (rule 4)."""
        own = literal_type(expr, context)
        if same_register(own, context.scalar()):
            return constant(context, expr.value)
        return self.convert(constant(own, expr.value), own, context)

    def coerce(
        self, children: Sequence[Expr], typed: Sequence[Typed], common: Type
    ) -> list[ir.Value]:
        """Operands converted to their common type (a literal directly, being weak)."""
        return [
            self.literal(child, common)  # type: ignore[arg-type]
            if is_literal(child)
            else self.convert(item.value, item.type, common)
            for child, item in zip(children, typed, strict=True)
        ]

    def prepared(self, expr: Expr, target: Type) -> ir.Value:
        """`expr` as a value of `target` for a store or an initialiser (rule 4: a literal
        takes the target's type)."""
        if target.base_is_pointer:
            return self.expression(expr).value
        if is_literal(expr):
            return self.literal(expr, target)  # type: ignore[arg-type]
        typed = self.expression(expr)
        return self.convert(typed.value, typed.type, target)

    # ---- memory --------------------------------------------------------------------------------

    def lvalue_type(self, ref: LValue) -> Type:
        match ref:
            case Lookup(name):
                return self.variable(name).type
            case Subscript(base, _):
                return self.lvalue_type(base).element()
            case Lanes(base, _, width, _):
                dtype = self.lvalue_type(base).dtype
                assert dtype is not None
                return Type.value(dtype, width)
            case _:
                raise UnsupportedNode(ref)

    def index(self, offset: Expr) -> ir.Value:
        """A subscript as an `i64` element count."""
        if isinstance(offset, IntConst):
            return ir.Constant(I64, exact_number(offset.value, INDEX))
        typed = self.expression(offset)
        return self.convert(typed.value, typed.type, INDEX)

    def address(self, ref: LValue, count: ir.Value | None = None) -> Address:
        match ref:
            case Lookup(name):
                variable = self.variable(name)
                if variable.storage is None:
                    raise UnsupportedNode(ref, f"{name!r} has no storage")
                return Address(variable.storage, variable.type, in_memory=False)
            case Subscript(base, offset):
                base_type = self.lvalue_type(base)
                element = base_type.element()
                index = self.index(offset)
                if base_type.is_array:
                    outer = self.address(base)
                    zero = ir.Constant(I64, 0)
                    pointer = self.builder.gep(outer.pointer, [zero, index], inbounds=True)
                    return Address(pointer, element, in_memory=False)
                pointer = self.load(base).value
                width = element.vec_width
                if width > 1:
                    index = self.builder.mul(index, ir.Constant(I64, width), flags=("nsw",))
                pointer = self.builder.gep(pointer, [index], inbounds=True)
                if width > 1:
                    pointer = self.builder.bitcast(pointer, memory_type(element).as_pointer())
                alignment = self._alignment(base, element)
                return Address(pointer, element, in_memory=True, alignment=alignment)
            case Lanes(base, offset, _, counted):
                # Past-the-end lanes are masked, never accessed: no `inbounds` with a count,
                # and an access of no lanes goes to element 0 (`render_lanes.lanes_index`).
                element, index = self.lvalue_type(ref), self.index(offset)
                if counted is not None:  # `count`: its value, which `_masked` emits once
                    assert count is not None
                    index = lanes_index(self.builder, index, count)
                if self.lvalue_type(base).is_array:  # lanes of a private array
                    outer, indices = self.address(base).pointer, [ir.Constant(I64, 0), index]
                else:
                    outer, indices = self.load(base).value, [index]
                pointer = self.builder.gep(outer, indices, inbounds=counted is None)
                pointer = self.builder.bitcast(pointer, memory_type(element).as_pointer())
                assert element.dtype is not None
                return Address(pointer, element, in_memory=True, alignment=element.dtype.itemsize)
            case _:
                raise UnsupportedNode(ref)

    def _masked(self, ref: Lanes, value: ir.Value | None = None) -> ir.Value:
        """A masked load of `ref` (value None) or a masked store of `value` to it."""
        assert ref.count is not None
        count = self.index(ref.count)
        address, mask = self.address(ref, count), lane_mask(self.builder, count, ref.width)
        access = (self.builder, self.declarations, address.pointer, address.alignment or 1, mask)
        if value is not None:
            return masked_store(*access, value)
        stored = self.lvalue_type(ref)  # the lanes past the edge: a reduction's identity, or 0
        fill = ref.fill and self.to_memory(self.prepared(ref.fill, self.value_type(stored)), stored)
        return masked_load(*access, memory_type(address.type), fill)

    def _alignment(self, base: LValue, element: Type) -> int:
        """The alignment of a buffer element: a subscript of an aligned parameter in units
        of its own (vector) elements is aligned to the element size's largest power-of-two
        factor; anything else only to the scalar size."""
        assert element.dtype is not None
        scalar = 1 if element.dtype is DType.BOOLEAN else element.dtype.itemsize
        if isinstance(base, Lookup):
            variable = self.variable(base.name)
            if variable.value is not None and variable.alignment:
                size = scalar * element.vec_width
                return min(variable.alignment, size & -size)
        return scalar

    def load(self, ref: LValue) -> Typed:
        if isinstance(ref, Lookup):
            variable = self.variable(ref.name)
            if variable.value is not None:
                return Typed(variable.value, variable.type)
        if isinstance(ref, Lanes) and ref.count is not None:
            type_ = self.lvalue_type(ref)
            return Typed(self.from_memory(self._masked(ref), type_), self.value_type(type_))
        address = self.address(ref)
        value = self.builder.load(address.pointer, align=address.alignment)
        register = self.value_type(address.type)
        if address.in_memory and register.is_value:
            value = self.from_memory(value, address.type)
        return Typed(value, register)

    def store(self, ref: LValue, expr: Expr) -> None:
        if isinstance(ref, Lanes) and ref.count is not None:
            stored = self.lvalue_type(ref)
            value = self.prepared(expr, self.value_type(stored))
            self._masked(ref, self.to_memory(value, stored))
            return
        address = self.address(ref)
        target = self.value_type(address.type)
        value = self.prepared(expr, target)
        if address.in_memory and target.is_value:
            value = self.to_memory(value, address.type)
        self.builder.store(value, address.pointer, align=address.alignment)

    def expression(self, expr: Expr) -> Typed:
        """Emit `expr`; its value and semtree type (the type `semtree.typing` gives it)."""
        match expr:
            case IntConst() | FloatConst():
                type_ = literal_type(expr)
                return Typed(constant(type_, expr.value), type_)
            case LimitConst(which, dtype):
                number = {Limit.MIN: dtype.min, Limit.MAX: dtype.max, Limit.ZERO: 0, Limit.ONE: 1}
                type_ = self.value_type(Type.value(dtype))
                exact = exact_number(number[which], Type.value(dtype))
                return Typed(constant(type_, exact), type_)
            case IndexExpr(kind, dim):
                # One work-item per work-group (design 7.1): local ids are 0 and
                # group ids are global ids.
                if kind is IdKind.LOCAL:
                    return Typed(ir.Constant(I64, 0), INDEX)
                return Typed(self.ids[dim], INDEX)
            case Load(ref):
                return self.load(ref)
            case Unary(op, operand):
                return self._unary(expr, op, self.expression(operand))
            case Binary(op, lhs, rhs):
                return self._binary(expr, op, lhs, rhs)
            case Select():
                return self._select(expr)
            case Cond():
                return self._cond(expr)
            case Clamp(value, lo, hi):
                return self._clamp(expr, (value, lo, hi))
            case Shuffle(first, second, mask):
                pair = (self.expression(first), self.expression(second))
                value = shuffle(self.builder, pair[0].value, pair[1].value, mask)
                return Typed(value, self._result(expr, pair))
            case Cast(target, inner):
                return self._cast(target, inner)
            case Call(fn, args):
                typed = [self.expression(argument) for argument in args]
                type_ = self._result(expr, typed)
                values = self.coerce(args, typed, type_)
                value = emit_builtin(
                    self.builder, self.declarations, fn, values, type_, self.float_flags
                )
                return Typed(value, type_)
            case _:
                raise UnsupportedNode(expr)

    def _result(self, expr: Expr, typed: Sequence[Typed]) -> Type:
        types = tuple(item.type for item in typed)
        return result_type(expr, types, self.types, self.native_fp16)

    def _unary(self, expr: Expr, op: UnOp, operand: Typed) -> Typed:
        type_ = self._result(expr, (operand,))
        builder = self.builder
        match op:
            case UnOp.NOT:
                return Typed(builder.not_(self.truth(operand)), type_)
            case UnOp.NEG if type_.is_float:
                return Typed(builder.fneg(operand.value), type_)
            case UnOp.NEG:
                return Typed(builder.neg(operand.value), type_)
            case UnOp.BIT_NOT:
                return Typed(builder.not_(operand.value), type_)
            case _:
                raise UnsupportedNode(op)

    def _binary(self, expr: Expr, op: BinOp, lhs: Expr, rhs: Expr) -> Typed:
        left, right = self.expression(lhs), self.expression(rhs)
        type_ = self._result(expr, (left, right))
        if type_.is_pointer:
            return self._pointer_arithmetic(op, left, right, type_)
        if op.is_logical:
            width = type_.vec_width
            truths = self.truth(left, width), self.truth(right, width)
            combine = self.builder.and_ if op is BinOp.LAND else self.builder.or_
            return Typed(combine(*truths), type_)
        common = operand_type((lhs, rhs), (left.type, right.type))
        first, second = self.coerce((lhs, rhs), (left, right), common)
        if common.is_float:
            return Typed(float_operation(self.builder, op, first, second, self.float_flags), type_)
        return Typed(integer_operation(self.builder, op, first, second, common), type_)

    def _pointer_arithmetic(self, op: BinOp, left: Typed, right: Typed, type_: Type) -> Typed:
        pointer, offset = (left, right) if left.type.is_pointer else (right, left)
        index = self.convert(offset.value, offset.type, INDEX)
        if type_.vec_width > 1:
            index = self.builder.mul(index, ir.Constant(I64, type_.vec_width), flags=("nsw",))
        if op is BinOp.SUB:
            index = self.builder.neg(index)
        # Not `inbounds`: a pointer may step outside its buffer and back before any access.
        return Typed(self.builder.gep(pointer.value, [index]), type_)

    def _select(self, expr: Select | Cond) -> Typed:
        cond = self.expression(expr.cond)
        then, other = self.expression(expr.then), self.expression(expr.other)
        type_ = self._result(expr, (cond, then, other))
        if type_.is_pointer:
            return Typed(self.builder.select(self.truth(cond), then.value, other.value), type_)
        common = operand_type((expr.then, expr.other), (then.type, other.type))
        first, second = self.coerce((expr.then, expr.other), (then, other), common)
        first, second = self.convert(first, common, type_), self.convert(second, common, type_)
        # A scalar condition selects whole vectors; a vector one selects lane by lane.
        return Typed(self.builder.select(self.truth(cond), first, second), type_)

    def _cond(self, expr: Cond) -> Typed:
        if _cannot_fault(expr.then) and _cannot_fault(expr.other):
            return self._select(expr)
        builder = self.builder
        cond = self.expression(expr.cond)
        branch_types = tuple(
            type_of(branch, self.types, self.native_fp16) for branch in (expr.then, expr.other)
        )
        types = (cond.type, *branch_types)
        type_ = result_type(expr, types, self.types, self.native_fp16)
        common = type_ if type_.is_pointer else operand_type((expr.then, expr.other), branch_types)
        truth = self.truth(cond)
        then_block = builder.append_basic_block("cond.then")
        other_block = builder.append_basic_block("cond.else")
        merge = builder.append_basic_block("cond.end")
        slot_type = register_type(type_)
        if cond.type.vec_width == 1:
            slot = self.alloca(slot_type, "cond")
            builder.cbranch(truth, then_block, other_block)
            for block, branch in ((then_block, expr.then), (other_block, expr.other)):
                builder.position_at_end(block)
                builder.store(self._branch(branch, common, type_), slot)
                builder.branch(merge)
            builder.position_at_end(merge)
            return Typed(builder.load(slot), type_)
        # A vector condition: each branch runs if any lane needs it, then lanes are chosen.
        slots = self.alloca(slot_type, "cond.then"), self.alloca(slot_type, "cond.else")
        lanes = truth.type
        any_true = self._reduce("or", truth)
        all_true = self._reduce("and", truth)
        check_other = builder.append_basic_block("cond.check")
        builder.cbranch(any_true, then_block, check_other)
        builder.position_at_end(then_block)
        builder.store(self._branch(expr.then, common, type_), slots[0])
        builder.branch(check_other)
        builder.position_at_end(check_other)
        builder.cbranch(all_true, merge, other_block)
        builder.position_at_end(other_block)
        builder.store(self._branch(expr.other, common, type_), slots[1])
        builder.branch(merge)
        builder.position_at_end(merge)
        assert isinstance(lanes, ir.VectorType)
        value = builder.select(truth, builder.load(slots[0]), builder.load(slots[1]))
        return Typed(value, type_)

    def _branch(self, branch: Expr, common: Type, type_: Type) -> ir.Value:
        if type_.is_pointer:
            return self.expression(branch).value
        if is_literal(branch):
            value = self.literal(branch, common)  # type: ignore[arg-type]
        else:
            typed = self.expression(branch)
            value = self.convert(typed.value, typed.type, common)
        return self.convert(value, common, type_)

    def _reduce(self, operation: str, lanes: ir.Value) -> ir.Value:
        function = self.declarations.function(
            f"llvm.vector.reduce.{operation}.{intrinsic_suffix(lanes.type)}", I1, [lanes.type]
        )
        return self.builder.call(function, [lanes])

    def _clamp(self, expr: Clamp, children: tuple[Expr, Expr, Expr]) -> Typed:
        typed = [self.expression(child) for child in children]
        type_ = self._result(expr, typed)
        value, low, high = self.coerce(children, typed, type_)
        if type_.is_float:
            # min(max(x, lo), hi) with C fmax/fmin: a NaN x gives lo, as the reference does.
            names = ("llvm.maxnum", "llvm.minnum")
        elif is_signed(type_):
            names = ("llvm.smax", "llvm.smin")
        else:
            names = ("llvm.umax", "llvm.umin")
        upper = self.declarations.overloaded(names[0], value.type, 2)
        lower = self.declarations.overloaded(names[1], value.type, 2)
        flags = self.float_flags if type_.is_float else ()
        raised = self.builder.call(upper, [value, low], fastmath=flags)
        return Typed(self.builder.call(lower, [raised, high], fastmath=flags), type_)

    def _cast(self, target: Type, inner: Expr) -> Typed:
        if target.is_pointer:
            # Pointers of one dtype are one LLVM type (scalar elements; see render_types).
            return Typed(self.expression(inner).value, target)
        if is_literal(inner):
            exact = self.literal(inner, target)  # type: ignore[arg-type]
        else:
            typed = self.expression(inner)
            exact = self.convert(typed.value, typed.type, target)
        # An emulated float16 target rounds to half here and widens again (rule 7).
        type_ = self.value_type(target)
        return Typed(self.convert(exact, target, type_), type_)


def _cannot_fault(expr: Expr) -> bool:
    """Whether evaluating `expr` where its value is not needed is harmless: it reads no
    memory through a subscript (arithmetic is guarded and loads of variables are safe)."""
    return not any(isinstance(node, Subscript | Lanes) for node in walk(expr))
