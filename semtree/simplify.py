"""Semtree clean-up run by `tile.lower.generate` on every kernel for every device (ARCHITECTURE
4.6).

`simplify()` folds constants through arithmetic, comparisons, logic, casts and selections;
removes the identities `x+0 x-0 x*1 x/1` (`x+0` for integers only: `-0.0 + 0.0` is `+0.0`) and
`x*0 0/x x%1` (integers); collapses `Cond`/`Select`/`If`/`While` with constant conditions;
propagates declarations initialised with a constant or a plain alias and drops unused ones;
drops empty blocks and loops; and strength-reduces `*`, `/`, `%` by powers of two on INDEX
values known to be non-negative (ids, loop counters, sums and products of those).
`form_mad()` turns float `a + b * c` into `MAD(b, c, a)`; skip it under `settings.disable_mad`.

Every rewrite keeps the type (design 4.4) of every expression it replaces and the value
the reference interpreter computes, bit for bit. A folded constant of type T is written
`Cast(T, literal)` (literals are weak, a folded value is not); the cast is dropped where a
bare literal would be converted to the same type anyway.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from semtree.constants import (
    convert,
    exact_literal,
    fold_binary,
    literal_value,
    make_constant,
    numpy_dtype,
)
from semtree.nodes import (
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
    Function,
    If,
    IndexExpr,
    IntConst,
    Limit,
    LimitConst,
    Load,
    Lookup,
    Param,
    Select,
    Stmt,
    Store,
    Unary,
    UnOp,
    While,
    walk,
)
from semtree.passes import ScopedPass, rebuilt, with_operands
from semtree.types import Type
from semtree.typing import (
    INDEX,
    is_literal,
    literal_type,
    operand_type,
    operands,
    result_type,
    type_of,
    value_type,
)

_MAX_PASSES = 8


def simplify(function: Function, *, native_fp16: bool) -> Function:
    """The function with the rewrites of the module docstring applied until nothing changes."""
    for _ in range(_MAX_PASSES):
        simpler = _Simplifier(function, native_fp16).run(function)
        if simpler == function:
            return function
        function = simpler
    return function


def form_mad(function: Function, *, native_fp16: bool) -> Function:
    """Float `a + b * c` (and `a + Cast(T, b * c)` when the cast changes nothing) become
    `MAD(b, c, a)` when that has the same type as the sum."""
    return _MadFormer(native_fp16).run(function)


# ---- simplify -------------------------------------------------------------------------------


class _Simplifier(ScopedPass):
    def __init__(self, function: Function, native_fp16: bool) -> None:
        super().__init__(native_fp16)
        self.declared: Counter[str] = Counter()
        self.mentioned: Counter[str] = Counter()
        self.stored: set[str] = set()
        for node in walk(function):
            match node:
                case Declare(_, name, _) | Param(name, _) | For(name, _, _, _):
                    self.declared[name] += 1
                case Store(Lookup(name), _):
                    self.stored.add(name)
                case Lookup(name):
                    self.mentioned[name] += 1
        self.substitutions: dict[str, Expr] = {}

    # ---- statements ------------------------------------------------------------------------

    def statement(self, stmt: Stmt) -> list[Stmt]:
        match stmt:
            case Declare(_, name, _) if self.mentioned[name] == 0:
                return []  # never used: the initialiser has no side effects
            case Declare(_, name, _):
                [new] = super().statement(stmt)
                replacement = self.propagated(new)  # type: ignore[arg-type]
                if replacement is None:
                    return [new]
                self.substitutions[name] = replacement
                return []
            case Block():
                block = self.block(stmt)
                return [block] if block.stmts else []
            case If(cond, then, other):
                new_cond = self.condition(cond)
                truth = self.truth(new_cond)
                if truth is not None:
                    chosen = then if truth else other
                    block = Block() if chosen is None else self.body(chosen)
                    return [block] if block.stmts else []
                new_then = self.body(then)
                new_other = None if other is None else self.body(other)
                if new_other is not None and not new_other.stmts:
                    new_other = None
                if not new_then.stmts and new_other is None:
                    return []
                return [rebuilt(stmt, cond=new_cond, then=new_then, other=new_other)]  # type: ignore[list-item]
            case For(_, count, _, _):
                if count == 0:
                    return []
                [new] = super().statement(stmt)
                return [new] if new.body.stmts else []  # type: ignore[attr-defined]
            case While(cond, body):
                new_cond = self.condition(cond)
                if self.truth(new_cond) is False:
                    return []
                return [rebuilt(stmt, cond=new_cond, body=self.body(body))]  # type: ignore[list-item]
            case _:
                return super().statement(stmt)

    def splice(self, stmts: list[Stmt]) -> list[Stmt]:
        """Inline nested blocks that declare nothing (their scope makes no difference)."""
        out: list[Stmt] = []
        for stmt in stmts:
            if isinstance(stmt, Block) and not any(isinstance(s, Declare) for s in stmt.stmts):
                out.extend(stmt.stmts)
            else:
                out.append(stmt)
        return out

    def propagated(self, stmt: Declare) -> Expr | None:
        """What every later use of a never-stored, once-declared variable can read instead:
        a constant, or the variable its initialiser aliases."""
        type_, name, init = stmt.type, stmt.name, stmt.init
        if init is None or not type_.is_numeric or self.declared[name] != 1:
            return None
        if name in self.stored:
            return None
        target = value_type(type_, self.native_fp16)
        constant = self.constant(init)
        if constant is not None:
            value = self.operand_value(init, constant, target)
            return None if value is None else make_constant(value, target)
        if isinstance(init, Load) and isinstance(init.ref, Lookup):
            alias = init.ref.name
            if self.declared[alias] == 1 and alias not in self.stored:
                return init if type_of(init, self.scope, self.native_fp16) == target else None
        return None

    def condition(self, cond: Expr) -> Expr:
        new = self.expr(cond)[0]
        return exact_literal(new) or new  # truth values and offsets do not depend on the type

    def assigned(self, value: Expr, target: Type) -> Expr:
        new = self.expr(value)[0]
        literal = exact_literal(new)
        if literal is None:
            return new
        assert isinstance(new, Cast)
        element = value_type(target.element() if target.is_array else target, self.native_fp16)
        # A weak literal converts straight to the target; the cast converted through T.
        # The two agree unless T is a float and the target is not (saturation vs wrapping).
        same = new.type == element or new.type.is_float == element.is_float
        return literal if same or (new.type.is_integer and element.is_numeric) else new

    def leaf(self, expr: Expr) -> tuple[Expr, Type]:
        if isinstance(expr, Load) and isinstance(expr.ref, Lookup):
            expr = self.substitutions.get(expr.ref.name, expr)
        return super().leaf(expr)

    # ---- expressions -----------------------------------------------------------------------

    def node(self, expr: Expr, types: list[Type], type_: Type) -> Expr:
        folded = self.fold(expr, types, type_)
        if folded is not None:
            return folded
        match expr:
            case Cond(cond, then, other) | Select(cond, then, other):
                truth = self.truth(cond)
                if truth is not None:
                    branch, branch_type = (then, types[1]) if truth else (other, types[2])
                    return branch if branch_type == type_ else Cast(type_, branch)
            case Cast(target, inner) if types[0] == target and not is_literal(inner):
                return inner  # converts nothing (an emulated f16 cast rounds: f32 != f16)
            case Binary(op, lhs, rhs):
                shorter = self.identity(op, lhs, rhs, types, type_)
                if shorter is None:
                    shorter = self.strength_reduced(op, lhs, rhs, type_)
                if shorter is not None:
                    return shorter
        return self.relaxed(expr)

    def constant(self, expr: Expr) -> tuple[np.ndarray, Type] | None:
        """The value (one element) and type of a constant expression, or None."""
        match expr:
            case IntConst(value) | FloatConst(value):
                own = literal_type(expr)  # type: ignore[arg-type]
                return literal_value(value, own), own
            case LimitConst(which, dtype):
                exact = Type.value(dtype)
                number = {Limit.MIN: dtype.min, Limit.MAX: dtype.max, Limit.ZERO: 0, Limit.ONE: 1}
                type_ = value_type(exact, self.native_fp16)
                return convert(literal_value(number[which], exact), exact, type_), type_
            case Cast(target, IntConst() | FloatConst() as literal) if target.is_numeric:
                own = literal_type(literal, target)
                value = convert(literal_value(literal.value, own), own, target)
                type_ = value_type(target, self.native_fp16)
                return convert(value, target, type_), type_
            case _:
                return None

    def truth(self, cond: Expr) -> bool | None:
        constant = self.constant(cond)
        return None if constant is None else bool(constant[0][0] != 0)

    def operand_value(
        self, expr: Expr, constant: tuple[np.ndarray, Type], common: Type
    ) -> np.ndarray | None:
        """A constant operand converted to the operation's type (a literal directly)."""
        if is_literal(expr):
            own = literal_type(expr, common)  # type: ignore[arg-type]
            value = convert(literal_value(expr.value, own), own, common)  # type: ignore[attr-defined]
        else:
            value = convert(constant[0], constant[1], common)
        if common.is_index and not -(2**31) <= int(value[0]) < 2**31:
            return None  # outside rule 10's range: left for the devices to disagree on
        return value

    def fold(self, expr: Expr, types: list[Type], type_: Type) -> Expr | None:
        children = operands(expr)
        if isinstance(expr, Call) or (isinstance(expr, Cast) and is_literal(expr.value)):
            return None
        if not type_.is_numeric:
            return None
        constants = [self.constant(child) for child in children]
        if any(constant is None for constant in constants):
            return None
        values: list[np.ndarray | None]
        match expr:
            case Unary(op, _):
                (value,) = [self.operand_value(children[0], constants[0], types[0])]  # type: ignore[arg-type]
                if value is None:
                    return None
                with np.errstate(all="ignore"):
                    ufunc = {UnOp.NEG: np.negative, UnOp.BIT_NOT: np.invert}.get(op)
                    result = np.asarray(value == 0) if ufunc is None else ufunc(value)
            case Binary(op, _, _):
                common = operand_type(children, types)
                values = [
                    self.operand_value(child, constant, common)  # type: ignore[arg-type]
                    for child, constant in zip(children, constants, strict=True)
                ]
                if values[0] is None or values[1] is None:
                    return None
                result = fold_binary(op, values[0], values[1], common)
            case Cond() | Select():
                common = operand_type(children[1:], types[1:])
                chosen = 1 if bool(constants[0][0][0] != 0) else 2  # type: ignore[index]
                result = self.operand_value(children[chosen], constants[chosen], common)  # type: ignore[arg-type]
            case Clamp():
                values = [
                    self.operand_value(child, constant, type_)  # type: ignore[arg-type]
                    for child, constant in zip(children, constants, strict=True)
                ]
                if any(value is None for value in values):
                    return None
                low, high = (np.fmax, np.fmin) if type_.is_float else (np.maximum, np.minimum)
                result = high(low(values[0], values[1]), values[2])
            case Cast(target, _):
                exact = convert(constants[0][0], types[0], target)  # type: ignore[index]
                result = convert(exact, target, type_)
            case _:
                return None
        if result is None:
            return None
        result = np.asarray(result).astype(numpy_dtype(type_))
        if type_.is_index and not -(2**31) <= int(result[0]) < 2**31:
            return None
        return make_constant(result, type_)

    def identity(
        self, op: BinOp, lhs: Expr, rhs: Expr, types: list[Type], type_: Type
    ) -> Expr | None:
        if op.is_comparison or op.is_logical or op.is_bitwise:
            return None
        common = operand_type((lhs, rhs), types)
        integer = type_.is_integer
        for side, (constant_expr, other, other_type) in enumerate(
            ((rhs, lhs, types[0]), (lhs, rhs, types[1]))
        ):
            constant = self.constant(constant_expr)
            if constant is None:
                continue
            value = self.operand_value(constant_expr, constant, common)
            if value is None:
                continue
            number = value[0]
            keep = other_type == type_  # no conversion between `other` and the result
            right = side == 0  # the constant is the right operand
            vanishes = (op is BinOp.SUB and right) or (op is BinOp.ADD and integer)
            if number == 0 and keep and vanishes:
                return other
            if number == 1 and keep and (op is BinOp.MUL or (op is BinOp.DIV and right)):
                return other
            absorbs = op is BinOp.MUL or (op is BinOp.DIV and not right)
            if integer and (
                (number == 0 and absorbs) or (number == 1 and op is BinOp.MOD and right)
            ):
                return make_constant(np.zeros(1, numpy_dtype(type_)), type_)
        return None

    def strength_reduced(self, op: BinOp, lhs: Expr, rhs: Expr, type_: Type) -> Expr | None:
        if not type_.is_index or op not in (BinOp.MUL, BinOp.DIV, BinOp.MOD):
            return None
        pairs = [(lhs, rhs)] if op is not BinOp.MUL else [(lhs, rhs), (rhs, lhs)]
        for value, factor in pairs:
            constant = self.constant(factor)
            if constant is None or not self.non_negative(value):
                continue
            if type_of(value, self.scope, self.native_fp16) != INDEX:
                continue
            number = int(constant[0][0])
            if number < 2 or number & (number - 1) or number >= 2**31:
                continue
            shift = number.bit_length() - 1
            if op is BinOp.MUL:
                return Binary(BinOp.SHL, value, IntConst(shift), span=lhs.span)
            if op is BinOp.DIV:
                return Binary(BinOp.SHR, value, IntConst(shift), span=lhs.span)
            return Binary(BinOp.AND, value, IntConst(number - 1), span=lhs.span)
        return None

    def non_negative(self, expr: Expr) -> bool:
        match expr:
            case IndexExpr():
                return True
            case Load(Lookup(name)):
                return name in self.loops
            case Binary(BinOp.AND, lhs, rhs):
                return self.non_negative(lhs) or self.non_negative(rhs)
            case Binary(op, lhs, rhs) if op in _MONOTONE:
                return self.non_negative(lhs) and self.non_negative(rhs)
            case _:
                constant = self.constant(expr)
                return constant is not None and constant[1].is_integer and constant[0][0] >= 0

    def relaxed(self, expr: Expr) -> Expr:
        """Drop `Cast(T, literal)` around constant operands where typing gives the same."""
        if not isinstance(expr, Binary | Cond | Select | Clamp | Call):
            return expr
        before = self.signature(expr)
        current = list(operands(expr))
        for index, child in enumerate(current):
            literal = exact_literal(child)
            if literal is None:
                continue
            trial = [*current[:index], literal, *current[index + 1 :]]
            candidate = with_operands(expr, trial)
            if self.signature(candidate) == before:
                current, expr = trial, candidate
        return expr

    def signature(self, expr: Expr) -> tuple[Type, Type | None]:
        """The result type and the type operands are converted to: what a rewrite keeps."""
        children = operands(expr)
        types = [type_of(child, self.scope, self.native_fp16) for child in children]
        type_ = result_type(expr, types, self.scope, self.native_fp16)
        if isinstance(expr, Binary) and expr.op.is_logical:
            return type_, None
        if isinstance(expr, Cond | Select):
            return type_, operand_type(children[1:], types[1:])
        return type_, operand_type(children, types)


_MONOTONE = frozenset({BinOp.ADD, BinOp.MUL, BinOp.DIV, BinOp.MOD, BinOp.SHR, BinOp.SHL})


# ---- form_mad -------------------------------------------------------------------------------


class _MadFormer(ScopedPass):
    def node(self, expr: Expr, types: list[Type], type_: Type) -> Expr:
        if not (isinstance(expr, Binary) and expr.op is BinOp.ADD and type_.is_float):
            return expr
        for product, product_type, addend in (
            (expr.rhs, types[1], expr.lhs),
            (expr.lhs, types[0], expr.rhs),
        ):
            if isinstance(product, Cast) and product_type == type_:
                inner = product.value
                if type_of(inner, self.scope, self.native_fp16) == type_:
                    product = inner
            if not (isinstance(product, Binary) and product.op is BinOp.MUL):
                continue
            if product_type != type_:
                continue
            call = Call(Builtin.MAD, (product.lhs, product.rhs, addend), span=expr.span)
            arguments = operands(call)
            types_ = [type_of(argument, self.scope, self.native_fp16) for argument in arguments]
            if operand_type(arguments, types_) == type_:
                return call
        return expr
