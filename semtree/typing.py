"""Typing and promotion: the one set of type rules every backend follows (design 4.4).

Backends and the reference interpreter ask this module for the type of every expression and
for the common type its operands are converted to, and insert conversions exactly there, so a
kernel computes the same values on every device. The rules, in the order they apply:

1. pointers: an operation with a pointer operand has that pointer type (address arithmetic);
2. vector width: the widest operand width; scalars broadcast; two different widths > 1 clash;
3. rank: the dtype of highest rank wins; INDEX ranks like INT32 and wins a tie with it;
4. literals are weak: an IntConst takes the other operands' type (INT32, or INT64 when it
   does not fit, when alone), a FloatConst takes it when it is a float type (else FLOAT32);
   an assignment, a cast and a return are "the other operand" of a literal they receive;
5. comparisons and logic yield booleans of the operands' width;
6. booleans occupy one byte in memory (a backend matter);
7. without native fp16, FLOAT16 is a storage format: values of that type are FLOAT32 (a
   load from memory widens; a store to memory and a `Cast` to FLOAT16 round to half; a
   private or local FLOAT16 variable holds FLOAT32 values);
8. to 10. conversions, integer arithmetic and INDEX ranges: semantics, defined by the
   reference interpreter (`tests/reference.py`) and implemented by the renderers.

`check_function` adds the statement rules: stores convert as a `Cast` to the target would,
never go through a const pointer and never assign a loop counter; `If`/`While` conditions are
scalars (a vector boolean feeds only `Cond`, `Select` and logic).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree.nodes import (
    LANE_WIDTHS,
    Barrier,
    Binary,
    BinOp,
    Block,
    Call,
    Cast,
    Clamp,
    Cond,
    Declare,
    Expr,
    FloatConst,
    For,
    Function,
    If,
    IndexExpr,
    IntConst,
    Lanes,
    LimitConst,
    Load,
    Lookup,
    LValue,
    Return,
    Select,
    SemtreeTypeError,
    Shuffle,
    Stmt,
    Store,
    Subscript,
    Unary,
    UnOp,
    UnsupportedNode,
    While,
)
from semtree.types import DType, Region, Type, TypeBase

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    Scope = Mapping[str, Type]

INDEX = Type.index()
INT32_RANGE = range(-(2**31), 2**31)
INT64_RANGE = range(-(2**63), 2**63)


def value_type(type_: Type, native_fp16: bool) -> Type:
    """Rule 7: the type a value of `type_` has in registers (FLOAT16 -> FLOAT32 if emulated)."""
    if not native_fp16 and type_.base is TypeBase.VALUE and type_.dtype is DType.FLOAT16:
        return type_.with_dtype(DType.FLOAT32)
    return type_


def is_literal(expr: Expr) -> bool:
    return isinstance(expr, IntConst | FloatConst)


def literal_type(expr: IntConst | FloatConst, context: Type | None = None) -> Type:
    """Rule 4: the type of a literal whose other operand (or assignment target, or cast
    target) has type `context`; alone (context None): INT32, INT64 when it does not fit
    (UINT64 beyond that), or FLOAT32. Always scalar."""
    if context is not None and context.is_numeric:
        if isinstance(expr, IntConst) and not context.is_bool:
            return context.scalar()
        if isinstance(expr, FloatConst) and context.is_float:
            return context.scalar()
    if isinstance(expr, FloatConst):
        return Type.value(DType.FLOAT32)
    if expr.value in INT32_RANGE:
        return Type.value(DType.INT32)
    if expr.value in INT64_RANGE:
        return Type.value(DType.INT64)
    return Type.value(DType.UINT64)


def vector_width(types: Sequence[Type]) -> int:
    """Rule 2: the common width of operands (scalars broadcast)."""
    widths = {type_.vec_width for type_ in types if type_.vec_width > 1}
    if len(widths) > 1:
        raise SemtreeTypeError(f"mixed vector widths {sorted(widths)}")
    return widths.pop() if widths else 1


def widen(type_: Type, width: int) -> Type:
    """`type_` at vector width `width`; INDEX, which is scalar only, widens to INT32 lanes."""
    if width == type_.vec_width:
        return type_
    if type_.is_index:
        return Type.value(DType.INT32, width)
    return type_.with_width(width)


def _rank(type_: Type) -> tuple[int, int]:
    if type_.is_index:
        return DType.INT32.rank, 1
    assert type_.dtype is not None
    return type_.dtype.rank, 0


def promote(*types: Type) -> Type:
    """Rules 1 to 3: the common type of operands that are not literals."""
    if not types:
        raise ValueError("promote() needs at least one type")
    pointers = [type_ for type_ in types if type_.is_pointer]
    if pointers:
        if any(pointer != pointers[0] for pointer in pointers):
            raise SemtreeTypeError(f"different pointer types {[str(p) for p in pointers]}")
        return pointers[0]
    for type_ in types:
        if not type_.is_numeric:
            raise SemtreeTypeError(f"{type_} is not a value")
    width = vector_width(types)
    return widen(max(types, key=_rank), width)


def operand_type(operands: Sequence[Expr], types: Sequence[Type]) -> Type:
    """Rules 1 to 4: the type the operands of one operation are converted to.

    `types` are the operands' own types (`type_of`); literals among `operands` are weak.
    """
    strong = [type_ for expr, type_ in zip(operands, types, strict=True) if not is_literal(expr)]
    if not strong:
        return promote(*types)
    common = promote(*strong)
    if common.is_pointer:
        return common
    width = common.vec_width
    literals = [expr for expr in operands if is_literal(expr)]
    if any(isinstance(expr, FloatConst) for expr in literals) and not common.is_float:
        common = promote(common, Type.value(DType.FLOAT32, width))
    if common.is_bool:
        for expr in literals:
            common = promote(common, literal_type(expr).with_width(width))  # type: ignore[arg-type]
    return common


def operands(expr: Expr) -> tuple[Expr, ...]:
    """The sub-expressions whose types `result_type` needs, in field order (none for Load)."""
    match expr:
        case Unary(_, operand):
            return (operand,)
        case Binary(_, lhs, rhs):
            return (lhs, rhs)
        case Cond(cond, then, other) | Select(cond, then, other):
            return (cond, then, other)
        case Clamp(value, lo, hi):
            return (value, lo, hi)
        case Shuffle(first, second):
            return (first, second)
        case Cast(_, value):
            return (value,)
        case Call(_, args):
            return args
        case IntConst() | FloatConst() | LimitConst() | IndexExpr() | Load():
            return ()
        case _:
            raise UnsupportedNode(expr)


def type_of(expr: Expr, scope: Scope, native_fp16: bool) -> Type:
    """The type of `expr`, whose free names have the types in `scope` (rules 1 to 7)."""
    types = tuple(type_of(operand, scope, native_fp16) for operand in operands(expr))
    return result_type(expr, types, scope, native_fp16)


def lvalue_type(ref: LValue, scope: Scope, native_fp16: bool) -> Type:
    """The declared type of a variable, or the element type of a subscripted one."""
    match ref:
        case Lookup(name):
            if name not in scope:
                raise SemtreeTypeError(f"undeclared name {name!r}")
            return scope[name]
        case Subscript(base, offset):
            base_type = lvalue_type(base, scope, native_fp16)
            if not (base_type.is_array or base_type.is_pointer):
                raise SemtreeTypeError(f"{ref}: {base_type} cannot be subscripted")
            offset_type = type_of(offset, scope, native_fp16)
            if not offset_type.is_integer or offset_type.is_vector:
                raise SemtreeTypeError(f"{ref}: subscript of type {offset_type}")
            return base_type.element()
        case Lanes(base, offset, width, count, fill):
            base_type = lvalue_type(base, scope, native_fp16)
            private = base_type.is_array and not base_type.base_is_pointer
            if not (base_type.is_pointer or private) or base_type.vec_width != 1:
                raise SemtreeTypeError(
                    f"{ref}: lanes of {base_type}, not of a scalar pointer or array"
                )
            if base_type.dtype is DType.BOOLEAN:
                raise SemtreeTypeError(f"{ref}: lanes of {base_type.dtype.value} elements")
            for what, index in (("offset", offset), ("count", count)):
                index_type = INDEX if index is None else type_of(index, scope, native_fp16)
                if not index_type.is_integer or index_type.is_vector:
                    raise SemtreeTypeError(f"{ref}: {what} of type {index_type}")
            if fill is not None and type_of(fill, scope, native_fp16).is_vector:
                raise SemtreeTypeError(f"{ref}: a fill of lanes must be a scalar")
            assert base_type.dtype is not None
            return Type.value(base_type.dtype, width)
        case _:
            raise UnsupportedNode(ref)


def result_type(expr: Expr, types: Sequence[Type], scope: Scope, native_fp16: bool) -> Type:
    """The type of `expr` given the types of its `operands(expr)` (one level of `type_of`)."""
    match expr:
        case IntConst() | FloatConst():
            return literal_type(expr)
        case LimitConst(_, dtype):
            return value_type(Type.value(dtype), native_fp16)
        case IndexExpr():
            return INDEX
        case Load(ref):
            stored = lvalue_type(ref, scope, native_fp16)
            if stored.is_array or stored.is_void:
                raise SemtreeTypeError(f"{expr}: {stored} is not a value")
            return value_type(stored, native_fp16)
        case Unary(op, operand):
            return _unary_type(op, operand, types[0])
        case Binary(op, lhs, rhs):
            return _binary_type(op, (lhs, rhs), types)
        case Cond(_, then, other) | Select(_, then, other):
            return _select_type(expr, types[0], (then, other), types[1:])
        case Clamp(value, lo, hi):
            common = operand_type((value, lo, hi), types)
            if common.is_pointer or common.is_bool:
                raise SemtreeTypeError(f"clamp of {common}")
            return common
        case Shuffle(_, _, mask):
            return _shuffle_type(expr, types, mask)
        case Cast(target, _):
            check_cast(types[0], target)
            return value_type(target, native_fp16)
        case Call(fn, args):
            common = operand_type(args, types)
            if common.is_pointer or common.is_bool:
                raise SemtreeTypeError(f"{fn.value} of {common}")
            if fn.float_only and not common.is_float:
                raise SemtreeTypeError(f"{fn.value} needs float arguments, got {common}")
            return common
        case _:
            raise UnsupportedNode(expr)


def _unary_type(op: UnOp, operand: Expr, type_: Type) -> Type:
    if not type_.is_numeric:
        raise SemtreeTypeError(f"{op.value} applied to {type_}")
    if op is UnOp.NOT:
        return Type.boolean(type_.vec_width)
    if type_.is_bool:
        raise SemtreeTypeError(f"{op.value} applied to a boolean")
    if op is UnOp.BIT_NOT and type_.is_float:
        raise SemtreeTypeError("~ applied to a float")
    return type_


def _binary_type(op: BinOp, pair: tuple[Expr, Expr], types: Sequence[Type]) -> Type:
    if op.is_logical:
        for type_ in types:
            if not type_.is_numeric:
                raise SemtreeTypeError(f"{op.value} applied to {type_}")
        return Type.boolean(vector_width(types))
    common = operand_type(pair, types)
    if common.is_pointer:
        return _pointer_arithmetic(op, types)
    if op.is_comparison:
        return Type.boolean(common.vec_width)
    if op.is_arithmetic:
        if common.is_bool:
            raise SemtreeTypeError(f"{op.value} applied to booleans")
        if op is BinOp.MOD and common.is_float:
            raise SemtreeTypeError("% applied to floats")
    elif common.is_float or (op.is_shift and common.is_bool):
        raise SemtreeTypeError(f"{op.value} applied to {common}")
    return common


def _pointer_arithmetic(op: BinOp, types: Sequence[Type]) -> Type:
    left, right = types
    if op is BinOp.ADD and right.is_pointer and not left.is_pointer:
        left, right = right, left
    if op not in (BinOp.ADD, BinOp.SUB) or not left.is_pointer:
        raise SemtreeTypeError(f"pointer arithmetic {left} {op.value} {right}")
    if not right.is_integer or right.is_vector:
        raise SemtreeTypeError(f"pointer offset of type {right}")
    return left


def _select_type(
    expr: Expr, cond: Type, branches: tuple[Expr, Expr], types: Sequence[Type]
) -> Type:
    if not cond.is_numeric:
        raise SemtreeTypeError(f"{type(expr).__name__} condition of type {cond}")
    common = operand_type(branches, types)
    if common.is_pointer:
        if cond.is_vector:
            raise SemtreeTypeError("a vector condition cannot select pointers")
        return common
    return widen(common, vector_width((cond, common)))


def check_cast(source: Type, target: Type) -> None:
    """Rule 8's domain: numeric to numeric (scalars broadcast to vectors), pointer to pointer
    of the same dtype and region (a reinterpretation; may add const, change the width)."""
    if target.is_pointer or source.is_pointer:
        ok = (
            target.is_pointer
            and source.is_pointer
            and target.dtype is source.dtype
            and target.region is source.region
            and (target.is_const or not source.is_const)
        )
        if not ok:
            raise SemtreeTypeError(f"cannot cast {source} to {target}")
        return
    if not (target.is_numeric and source.is_numeric):
        raise SemtreeTypeError(f"cannot cast {source} to {target}")
    if source.is_vector and source.vec_width != target.vec_width:
        raise SemtreeTypeError(f"cannot cast {source} to {target}: widths differ")


def check_assign(target: Type, value: Type, what: str) -> None:
    """Stores and initialisers convert implicitly, as a `Cast` to the target type would;
    a pointer may only be assigned a pointer of the same type (or its non-const version)."""
    if not (target.is_numeric or target.is_pointer):
        raise SemtreeTypeError(f"{what}: cannot assign to {target}")
    if (target.is_pointer or value.is_pointer) and not (
        value.is_pointer and value.with_base(target.base) == target
    ):
        raise SemtreeTypeError(f"{what}: cannot assign {value} to {target}")
    try:
        check_cast(value, target)
    except SemtreeTypeError as err:
        raise SemtreeTypeError(f"{what}: {err}") from None


def check_store_target(ref: LValue, scope: Scope, native_fp16: bool) -> Type:
    """The type stored to by `ref`; raises if it is read-only (through a const pointer)."""
    through = isinstance(ref, Subscript | Lanes)
    base = lvalue_type(ref.base, scope, native_fp16) if through else None
    if base is not None and base.is_pointer and base.is_const:
        raise SemtreeTypeError(f"store through a const pointer: {ref}")
    return lvalue_type(ref, scope, native_fp16)


def check_function(function: Function, native_fp16: bool) -> None:
    """Type-check every statement and expression of `function`; raise SemtreeTypeError.

    Beyond the expression rules: stores convert as casts would, never go through a const
    pointer, never assign a loop variable (a `For` counter is read-only), and `If`/`While`
    conditions are scalars."""
    scope: dict[str, Type] = {}
    for param in function.params:
        if not (param.type.is_pointer or param.type.is_numeric):
            raise SemtreeTypeError(f"parameter {param.name} of type {param.type}")
        scope[param.name] = param.type
    _check_stmt(function.body, scope, set(), function.ret, native_fp16)


def _check_condition(cond: Expr, scope: Scope, native_fp16: bool, what: str) -> None:
    type_ = type_of(cond, scope, native_fp16)
    if not type_.is_numeric or type_.is_vector:
        raise SemtreeTypeError(f"{what} condition must be a scalar, got {type_}")


def _check_stmt(
    stmt: Stmt, scope: dict[str, Type], loops: set[str], ret: Type, native_fp16: bool
) -> None:
    """`scope` and `loops` (the loop counters in scope) belong to the enclosing block."""
    match stmt:
        case Declare(type_, name, init):
            if type_.is_void or (type_.region is Region.GLOBAL and not type_.base_is_pointer):
                raise SemtreeTypeError(f"cannot declare {name} of type {type_}")
            if init is not None:
                target = value_type(type_.element() if type_.is_array else type_, native_fp16)
                check_assign(target, type_of(init, scope, native_fp16), f"{name} = {init}")
            scope[name] = type_
            loops.discard(name)
        case Store(ref, value):
            if isinstance(ref, Lookup) and ref.name in loops:
                raise SemtreeTypeError(f"loop variable {ref.name} is read-only")
            target = value_type(check_store_target(ref, scope, native_fp16), native_fp16)
            check_assign(target, type_of(value, scope, native_fp16), f"{ref} = {value}")
        case Block(stmts):
            inner, inner_loops = dict(scope), set(loops)
            for item in stmts:
                _check_stmt(item, inner, inner_loops, ret, native_fp16)
        case If(cond, then, other):
            _check_condition(cond, scope, native_fp16, "if")
            _check_stmt(then, dict(scope), set(loops), ret, native_fp16)
            if other is not None:
                _check_stmt(other, dict(scope), set(loops), ret, native_fp16)
        case For(var, _, _, body):
            _check_stmt(body, {**scope, var: INDEX}, {*loops, var}, ret, native_fp16)
        case While(cond, body):
            _check_condition(cond, scope, native_fp16, "while")
            _check_stmt(body, dict(scope), set(loops), ret, native_fp16)
        case Barrier():
            pass
        case Return(value):
            if value is None and not ret.is_void:
                raise SemtreeTypeError(f"return without a value from a {ret} function")
            if value is not None:
                check_assign(ret, type_of(value, scope, native_fp16), f"return {value}")
        case _:
            raise UnsupportedNode(stmt)


def _shuffle_type(expr: Expr, types: Sequence[Type], mask: tuple[int, ...]) -> Type:
    """Two vectors of one type (not booleans: a backend's bytes), lanes picked from both."""
    first, second = types
    if first != second or first.vec_width not in LANE_WIDTHS or first.is_pointer or first.is_bool:
        raise SemtreeTypeError(f"{expr}: shuffle of {first} and {second}")
    if max(mask) >= 2 * first.vec_width:
        raise SemtreeTypeError(f"{expr}: lane {max(mask)} of two {first}")
    return first.with_width(len(mask))
