"""Expressions and memory accesses in OpenCL C: the typed half of the renderer (design 6.2).

Place in the pipeline: `render.OpenCLRenderer` (kernels, declarations, statements) derives from
`ExpressionRenderer`, which prints every expression as a `spelling.Text`: OpenCL C code plus the
type `semtree.typing` gives the value. Each operation converts its operands to the common type
the typing rules name (`spelling.convert`) and is spelled by `arithmetic.py`, so the device
computes what the reference interpreter computes:

- `Cond`/`Select` with a scalar condition print as `c ? a : b`, with a vector condition as
  `select(other, then, mask)`; a vector `Cond` whose branches read memory evaluates a branch
  only where some lane chooses it (`any`/`all`), as the reference does;
- `MAD` prints as `a * b + c`, which the compiler contracts to a fused multiply-add (not
  under `disable_mad`: `#pragma OPENCL FP_CONTRACT OFF`); `MAX`/`MIN` call small helpers of
  the program (`arithmetic.min_max`), not the builtins, which PoCL 3.0 never inlines;
- `Clamp` prints as `min(max(x, lo), hi)` with those helpers, never as OpenCL's
  `clamp`, which is undefined when a bound converted to the common type makes lo > hi;
  `fast_math` uses `native_exp/log/sqrt/recip` for float;
- loads and stores through half pointers without cl_khr_fp16 use `vload_half[N]` and
  `vstore_half[N]`, and width-3 vectors in buffers are packed (`vload3`/`vstore3`);
- a `Cast` to FLOAT16 on such a device rounds through a helper (half is storage only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal_opencl.arithmetic import (
    PRECEDENCE,
    call,
    counted_lanes,
    float_to_half,
    half_load,
    half_to_float,
    infix,
    integer_arithmetic,
    min_max,
    round_to_half,
    shuffle,
    unary,
)
from hal_opencl.spelling import (
    ADD,
    ATOM,
    BOOLEAN,
    EQUALITY,
    INDEX,
    LOGIC_OR,
    MULTIPLY,
    TERNARY,
    UNARY,
    Helpers,
    Text,
    convert,
    convert_constant,
    element_dtype,
    exact,
    literal,
    mask_lanes_of,
    register_name,
    to_mask,
    truth,
    vector_name,
)
from semtree.nodes import (
    Binary,
    BinOp,
    Builtin,
    Call,
    Cast,
    Clamp,
    Cond,
    Expr,
    FloatConst,
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
from semtree.printer import CPrinter
from semtree.types import DType, Region, Type
from semtree.typing import (
    is_literal,
    literal_type,
    lvalue_type,
    operand_type,
    result_type,
    value_type,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hal_opencl.render import RenderOptions

_FAST_BUILTINS = {Builtin.EXP: "native_exp", Builtin.LOG: "native_log", Builtin.SQRT: "native_sqrt"}
REGIONS = {Region.GLOBAL: "__global", Region.LOCAL: "__local", Region.PRIVATE: ""}


class ExpressionRenderer(CPrinter):
    """Prints semtree expressions and memory accesses as typed OpenCL C text."""

    def __init__(self, options: RenderOptions, helpers: Helpers | None = None) -> None:
        super().__init__(native_fp16=options.native_fp16, spans=True)
        self.options = options
        self.helpers = helpers if helpers is not None else Helpers()

    # ---- pointers ------------------------------------------------------------------------

    def is_packed(self, pointer: Type) -> bool:
        """Pointers whose elements are accessed with vloadN/vstoreN through a scalar pointer:
        width-3 vectors (packed in buffers) and half without native support."""
        half = pointer.dtype is DType.FLOAT16 and not self.native_fp16
        return pointer.vec_width == 3 or half

    def pointer_name(self, pointer: Type) -> str:
        assert pointer.dtype is not None
        width = 1 if self.is_packed(pointer) else pointer.vec_width
        space = REGIONS[pointer.region]
        const = "const " if pointer.is_const else ""
        prefix = f"{space} " if space else ""
        return f"{prefix}{const}{vector_name(pointer.dtype, width)}*"

    # ---- lvalues and memory ----------------------------------------------------------------

    def packed_access(self, ref: LValue) -> tuple[str, str, Type] | None:
        """(pointer code, offset code, pointer type) of an element read with vloadN."""
        if not isinstance(ref, Subscript):
            return None
        base = lvalue_type(ref.base, self.scope, self.native_fp16)
        if not base.is_pointer or not self.is_packed(base):
            return None
        return self.lvalue(ref.base), self.value(ref.offset).code, base

    def lvalue(self, ref: LValue) -> str:
        match ref:
            case Lookup(name):
                return name
            case Subscript(base, offset):
                return f"{self.lvalue(base)}[{self.value(offset).code}]"
            case _:
                raise UnsupportedNode(ref)

    def lanes(self, ref: Lanes, value: str | None = None) -> str:
        """A load of `ref` (value None), or a store of the vector `value` to it: a vector
        access through a pointer of element alignment at any element, or, with a count, a
        helper that touches only its lanes. Not `vloadN`/`vstoreN`, which PoCL 3.0 calls out
        of line."""
        base = lvalue_type(ref.base, self.scope, self.native_fp16)
        assert base.dtype is not None
        pointer, offset = self.lvalue(ref.base), self.value(ref.offset).code
        width = ref.width
        space = REGIONS[base.region]
        prefix = f"{space} " if space else ""
        dtype = base.dtype
        if dtype is DType.FLOAT16 and not self.native_fp16:
            # Half without native support: the lanes' bits, through the program's conversions.
            const = "const " if value is None else ""
            pointer, dtype = f"(({prefix}{const}ushort*)({pointer}))", DType.UINT16
            if ref.fill is not None:
                raise UnsupportedNode(ref)  # the fill would be bits
            if value is None:
                bits = self._lanes(ref, space, pointer, offset, dtype, None)
                return f"{half_to_float(width, self.helpers)}({bits})"
            value = f"{float_to_half(width, self.helpers)}({value})"
        return self._lanes(ref, space, pointer, offset, dtype, value)

    def _lanes(
        self, ref: Lanes, space: str, pointer: str, offset: str, dtype: DType, value: str | None
    ) -> str:
        """`lanes` on the pointer text `pointer` to `dtype` elements in address space `space`."""
        width = ref.width
        scalar, vector = vector_name(dtype), vector_name(dtype, width)
        unaligned = self.helpers.unaligned(vector, dtype.itemsize)
        prefix = f"{space} " if space else ""
        if ref.count is None:
            const = "const " if value is None else ""
            access = f"*({prefix}{const}{unaligned}*)({pointer} + ({offset}))"
            return access if value is None else f"{access} = {value};"
        count = self.value(ref.count).code
        fill = None if ref.fill is None else f"({scalar})({self.value(ref.fill).code})"
        at = f"{pointer} + ({offset})"
        return counted_lanes(at, count, dtype, width, space, self.helpers, value, fill)

    def load(self, ref: LValue) -> Text:
        declared = lvalue_type(ref, self.scope, self.native_fp16)
        if isinstance(ref, Lanes):
            return Text(self.lanes(ref), ATOM, value_type(declared, self.native_fp16))
        if declared.is_pointer:
            return Text(self.lvalue(ref), ATOM, declared)
        packed = self.packed_access(ref)
        if packed is None:
            code = self.lvalue(ref)
        else:
            base, offset, pointer = packed
            width = str(pointer.vec_width) if pointer.vec_width > 1 else ""
            half = pointer.dtype is DType.FLOAT16 and not self.native_fp16
            if half and pointer.vec_width != 3:
                space = REGIONS[pointer.region]
                code = half_load(base, offset, pointer.vec_width, space, self.helpers)
            else:
                code = f"{'vload_half' if half else 'vload'}{width}({offset}, {base})"
        if declared.is_bool and declared.is_vector:
            zero = f"({vector_name(DType.INT8, declared.vec_width)})(0)"
            return Text(f"{code} != {zero}", EQUALITY, declared, DType.INT8)
        return Text(code, ATOM, value_type(declared, self.native_fp16))

    # ---- expressions -----------------------------------------------------------------------

    def expr_text(self, expr: Expr) -> tuple[str, int]:
        text = self.value(expr)
        return text.code, text.precedence

    def _render(self, expr: Expr) -> Text | None:
        """The text of a non-literal operand; literals wait for their context (rule 4)."""
        return None if is_literal(expr) else self.value(expr)

    def _children(self, children: Sequence[Expr]) -> tuple[list[Text | None], list[Type]]:
        rendered = [self._render(child) for child in children]
        types = [
            literal_type(child) if text is None else text.type  # type: ignore[arg-type]
            for child, text in zip(children, rendered, strict=True)
        ]
        return rendered, types

    def typed(
        self, expr: Expr, text: Text | None, target: Type, lanes: DType | None = None
    ) -> Text:
        """An operand as a value of `target`: a literal printed in that type, anything else
        converted (scalars broadcast to vector targets)."""
        if text is None:
            assert isinstance(expr, IntConst | FloatConst)
            scalar = target.scalar()
            own = literal_type(expr, scalar)
            constant = literal(convert_constant(exact(expr.value, own), own, scalar), scalar)
            return convert(constant, target, lanes, self.helpers)
        return convert(text, target, lanes, self.helpers)

    def value(self, expr: Expr) -> Text:
        """`expr` as OpenCL C text with its register type."""
        match expr:
            case IntConst() | FloatConst():
                return self.typed(expr, None, literal_type(expr))
            case LimitConst(which, dtype):
                return self.limit_text(which, dtype)
            case IndexExpr(kind, dim):
                return Text(f"(int)get_{kind.value}_id({dim})", UNARY, INDEX)
            case Load(ref):
                return self.load(ref)
            case Unary(UnOp.NOT, operand):
                return self.logical_not(self.value(operand))
            case Unary(op, operand):
                text = self.value(operand)
                return unary(op, text, text.type)
            case Binary(op, lhs, rhs) if op.is_logical:
                return self.logical(op, (lhs, rhs))
            case Binary(op, lhs, rhs):
                return self.binary_value(op, lhs, rhs)
            case Cond() | Select():
                return self.choice(expr)
            case Clamp(value, lo, hi):
                return self.clamp((value, lo, hi))
            case Shuffle(first, second, mask):
                return shuffle(self.value(first), self.value(second), mask)
            case Cast(type_, value):
                return self.cast(type_, value)
            case Call(fn, args):
                return self.builtin(fn, args)
            case _:
                raise UnsupportedNode(expr)

    def clamp(self, args: tuple[Expr, Expr, Expr]) -> Text:
        """`min(max(x, lo), hi)` in the operands' common type, as the reference computes it.
        Not OpenCL's `clamp`, which is undefined when lo > hi (a bound converted to the
        common type can be: `clamp(uchar, -2, 3)` has lo = 254; Intel's OpenCL then gives
        254, the reference 3). A float NaN gives lo, then min(lo, hi), as with fmax/fmin."""
        common, (value, low, high) = self.common_arguments(args)
        larger = min_max(True, [value, low], common, self.helpers)
        return min_max(False, [larger, high], common, self.helpers)

    def limit_text(self, which: Limit, dtype: DType) -> Text:
        register = value_type(Type.value(dtype), self.native_fp16)
        if which in (Limit.ZERO, Limit.ONE):
            return literal(int(which is Limit.ONE), register)
        number = dtype.min if which is Limit.MIN else dtype.max
        macro = {DType.FLOAT32: "FLT_MAX", DType.FLOAT64: "DBL_MAX"}.get(dtype)
        if macro is not None:
            return Text(f"-{macro}" if which is Limit.MIN else macro, UNARY, register)
        return literal(number, register)

    def logical_not(self, text: Text) -> Text:
        if not text.type.is_vector:
            return Text(f"!{text.at(UNARY)}", UNARY, BOOLEAN)
        lanes = text.lanes if text.type.is_bool else mask_lanes_of(text.type)
        return Text(f"!{text.at(UNARY)}", UNARY, Type.boolean(text.type.vec_width), lanes)

    def logical(self, op: BinOp, children: tuple[Expr, Expr]) -> Text:
        texts = [self.value(child) for child in children]
        width = max(text.type.vec_width for text in texts)
        if width == 1:
            return infix(op.value, PRECEDENCE[op], texts[0], texts[1], BOOLEAN)
        lanes = _shared_lanes(texts)
        masks = [to_mask(text, width, lanes) for text in texts]
        result = infix(op.value, PRECEDENCE[op], masks[0], masks[1], masks[0].type)
        return Text(result.code, result.precedence, result.type, lanes)

    def binary_value(self, op: BinOp, lhs: Expr, rhs: Expr) -> Text:
        children = (lhs, rhs)
        rendered, types = self._children(children)
        common = operand_type(children, types)
        if common.is_pointer:
            return self.pointer_arithmetic(op, rendered, types, children)
        if common.is_bool and common.is_vector:
            lanes = _shared_lanes([text for text in rendered if text is not None])
            left, right = (
                self.typed(child, text, common, lanes)
                for child, text in zip(children, rendered, strict=True)
            )
        else:
            left, right = (
                self.typed(child, text, common.with_width(type_.vec_width))
                for child, text, type_ in zip(children, rendered, types, strict=True)
            )
        if op.is_comparison:
            return self.compare(op, left, right, common)
        if common.is_bool:
            result = infix(op.value, PRECEDENCE[op], left, right, common)
            return Text(result.code, result.precedence, common, left.lanes)
        if common.is_float:
            return self.float_arithmetic(op, left, right, common)
        return integer_arithmetic(op, left, right, common, self.helpers)

    def float_arithmetic(self, op: BinOp, left: Text, right: Text, common: Type) -> Text:
        return infix(op.value, PRECEDENCE[op], left, right, common)

    def compare(self, op: BinOp, left: Text, right: Text, common: Type) -> Text:
        width = common.vec_width
        if common.is_bool and width > 1:
            lanes = left.lanes
            if op not in (BinOp.EQ, BinOp.NE):  # order booleans as 0 < 1, not as -1 < 0
                numbers = Type.value(lanes or DType.INT32, width)
                left, right = (Text(f"-{t.at(UNARY)}", UNARY, numbers) for t in (left, right))
            result = infix(op.value, PRECEDENCE[op], left, right, Type.boolean(width))
            return Text(result.code, result.precedence, result.type, lanes)
        if width > 1:
            result = infix(op.value, PRECEDENCE[op], left, right, Type.boolean(width))
            return Text(result.code, result.precedence, result.type, mask_lanes_of(common))
        return infix(op.value, PRECEDENCE[op], left, right, BOOLEAN)

    def pointer_arithmetic(
        self,
        op: BinOp,
        rendered: list[Text | None],
        types: list[Type],
        children: tuple[Expr, Expr],
    ) -> Text:
        first = 0 if types[0].is_pointer else 1
        pointer = rendered[first]
        assert pointer is not None
        offset = self.typed(children[1 - first], rendered[1 - first], INDEX)
        width = types[first].vec_width
        if self.is_packed(types[first]) and width > 1:
            offset = infix("*", MULTIPLY, offset, literal(width, INDEX), INDEX)
        return infix(op.value, ADD, pointer, offset, types[first])

    def choice(self, expr: Cond | Select) -> Text:
        """`Cond` and `Select`: a C conditional for a scalar condition, `select` for a mask."""
        condition = self.value(expr.cond)
        branches = (expr.then, expr.other)
        rendered, types = self._children(branches)
        result = result_type(expr, (condition.type, *types), self.scope, self.native_fp16)
        width = result.vec_width
        if result.is_bool and width > 1:
            lanes = _shared_lanes([condition, *(t for t in rendered if t is not None)])
        else:
            lanes = mask_lanes_of(result) if width > 1 and not result.is_pointer else None
        then, other = (
            self.typed(child, text, result, lanes)
            for child, text in zip(branches, rendered, strict=True)
        )
        if not condition.type.is_vector:
            test = truth(condition).at(LOGIC_OR)
            code = f"{test} ? {then.at(LOGIC_OR)} : {other.at(TERNARY)}"
            return Text(code, TERNARY, result, lanes)
        assert lanes is not None
        mask = to_mask(condition, width, lanes)
        chosen = f"select({other.code}, {then.code}, {mask.code})"
        if isinstance(expr, Cond) and any(_reads_memory(branch) for branch in branches):
            # Evaluate a branch only where some lane chooses it (an unchosen branch may read
            # out of bounds), as the reference interpreter does.
            inner = f"all({mask.code}) ? {then.at(LOGIC_OR)} : {chosen}"
            code = f"any({mask.code}) ? ({inner}) : {other.at(TERNARY)}"
            return Text(code, TERNARY, result, lanes if result.is_bool else None)
        return Text(chosen, ATOM, result, lanes if result.is_bool else None)

    def common_arguments(self, args: Sequence[Expr]) -> tuple[Type, list[Text]]:
        """The common type of a call's arguments and the arguments converted to it (vector
        arguments and scalars broadcast to the full type, as OpenCL builtins need)."""
        rendered, types = self._children(args)
        common = operand_type(args, types)
        converted = [
            self.typed(arg, text, common) for arg, text in zip(args, rendered, strict=True)
        ]
        return common, converted

    def cast(self, target: Type, value: Expr) -> Text:
        if target.is_pointer:
            text = self.value(value)
            return Text(f"({self.pointer_name(target)}){text.at(UNARY)}", UNARY, target)
        register = value_type(target, self.native_fp16)
        if isinstance(value, IntConst | FloatConst):
            own = literal_type(value, target.scalar())
            number = convert_constant(exact(value.value, own), own, target.scalar())
            return convert(literal(number, register.scalar()), register)
        text = self.value(value)
        if target.dtype is DType.FLOAT16 and not self.native_fp16:
            if not (text.type.is_float and element_dtype(text.type) is DType.FLOAT64):
                text = convert(text, register, None, self.helpers)
            elif text.type.vec_width != target.vec_width:
                text = convert(text, Type.value(DType.FLOAT64, target.vec_width))
            return round_to_half(text, self.helpers)
        return convert(text, register, None, self.helpers)

    def builtin(self, fn: Builtin, args: tuple[Expr, ...]) -> Text:
        common, arguments = self.common_arguments(args)
        float32 = common.is_float and element_dtype(common) is DType.FLOAT32
        fast = self.options.fast_math and float32
        match fn:
            case Builtin.ABS if common.is_float:
                return call("fabs", arguments, common)
            case Builtin.ABS if element_dtype(common).is_signed:  # abs() returns unsigned
                return Text(f"as_{register_name(common)}(abs({arguments[0].code}))", ATOM, common)
            case Builtin.MAX | Builtin.MIN:
                return min_max(fn is Builtin.MAX, arguments, common, self.helpers)
            case Builtin.MAD if common.is_float:
                product = infix("*", MULTIPLY, arguments[0], arguments[1], common)
                return infix("+", ADD, product, arguments[2], common)
            case Builtin.MAD:
                product = integer_arithmetic(
                    BinOp.MUL, arguments[0], arguments[1], common, self.helpers
                )
                return integer_arithmetic(BinOp.ADD, product, arguments[2], common, self.helpers)
            case Builtin.RECIP if fast:
                return call("native_recip", arguments, common)
            case Builtin.RECIP:
                return infix("/", MULTIPLY, literal(1, common), arguments[0], common)
            case _ if fast and fn in _FAST_BUILTINS:
                return call(_FAST_BUILTINS[fn], arguments, common)
            case _:
                return call(fn.value, arguments, common)


def _shared_lanes(texts: Sequence[Text]) -> DType:
    """The mask lane type for combining booleans: that of the first vector boolean, else the
    one that masks the first vector operand, else `int`."""
    for text in texts:
        if text.type.is_bool and text.type.is_vector and text.lanes is not None:
            return text.lanes
    for text in texts:
        if text.type.is_vector and not text.type.is_bool:
            return mask_lanes_of(text.type)
    return DType.INT32


def _reads_memory(expr: Expr) -> bool:
    return any(isinstance(node, Subscript | Lanes) for node in walk(expr))
