"""Stage 2: binding — a checked AST plus the caller's inputs becomes a `BoundProgram`.

Binding fixes every dimension size (spec 6.2), folds compile-time constants (7.6), resolves
broadcasting (7.2) and element types (5, 7.3, 8.11), expands builtins defined by expansion
(9.1) and the frontend helpers (9.8), and turns index polynomials into exact rational
`Polynomial`s whose bounds are checked (8.12). Only shapes, element types and the values of
scalar constants are read from the inputs; arrays are never touched.

Errors are reported per statement: a statement that fails defines a poisoned value, so that
later statements using it are skipped silently instead of repeating the error.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape
from tile.bind.calls import call_builtin
from tile.bind.contraction import bind_contraction
from tile.bind.evaluate import (
    FOLDABLE,
    Const,
    FoldError,
    TypeRuleError,
    call_type,
    fold,
    literal_int_type,
)
from tile.bind.inputs import bind_inputs
from tile.bind.program import (
    BoundOp,
    BoundProgram,
    ConstBinding,
    OpKind,
    TensorBinding,
)
from tile.bind.values import (
    BindFailure,
    Poison,
    PrngValue,
    TensorValue,
    TupleValue,
    Value,
)
from tile.errors import DiagnosticSink
from tile.lang.builtins import BUILTINS, lookup
from tile.lang.syntax import (
    BINARY_FUNCTION,
    UNARY_FUNCTION,
    Binary,
    Call,
    ContractionStmt,
    Expr,
    FloatLit,
    FunctionDef,
    IntLit,
    Name,
    Span,
    Ternary,
    Unary,
    source_text,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


PRNG_STATE_DIMS = (3, 2048)


def bind(
    function: FunctionDef,
    source: str,
    inputs: Mapping[str, object],
    floatx: DType = DType.FLOAT32,
) -> BoundProgram:
    """Bind a checked function to its inputs; raise TileError listing every error."""
    return Binder(function, source, floatx).run(inputs)


class Binder:
    def __init__(self, function: FunctionDef, source: str, floatx: DType) -> None:
        self.function = function
        self.source = source
        self.floatx = floatx
        self.sink = DiagnosticSink(source)
        self.values: dict[str, Value] = {}
        self.bindings: dict[str, TensorBinding | ConstBinding] = {}
        self.ops: list[BoundOp] = []
        self.const_names: dict[tuple[DType, str], str] = {}
        self.temp_count = 0
        self.prng_uses: dict[int, dict[str, int]] = {}  # step -> {"value": n, "state": n}
        self.prng_count = 0

    # ---- driver -------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, object]) -> BoundProgram:
        bind_inputs(self, inputs)
        self.sink.raise_if_any()
        input_bindings = dict(self.bindings)
        for statement in self.function.body:
            try:
                if isinstance(statement, ContractionStmt):
                    value: Value = bind_contraction(self, statement)
                else:
                    value = self.expr(statement.value)
                self.assign(statement.target, value)
            except BindFailure:
                self.values[statement.target] = Poison()
        self._finish_prng()
        self._outputs()
        self.sink.raise_if_any()
        return BoundProgram(
            source=self.source,
            ops=tuple(self.ops),
            bindings=self.bindings,
            inputs=tuple(decl.name for decl in self.function.inputs),
            output_names=tuple(o.name for o in self.function.outputs),
            input_bindings=input_bindings,
            floatx=self.floatx,
        )

    def fail(self, code: str, message: str, span: Span | None) -> BindFailure:
        self.sink.error(code, message, span)
        return BindFailure()

    def assign(self, target: str, value: Value) -> None:
        if isinstance(value, TensorValue) and value.name != target:
            last = self.ops[-1] if self.ops else None
            if last is not None and last.output == value.name and value.name.startswith("_T"):
                # The statement's last operation writes the target directly.
                self.ops[-1] = replace(last, output=target)
                self.bindings[target] = self.bindings.pop(value.name)
            else:
                self.emit(OpKind.ELEMENTWISE, "ident", [value], value.shape, target=target)
            value = TensorValue(target, value.shape, target)
        elif isinstance(value, TensorValue):
            value = TensorValue(target, value.shape, target)
        self.values[target] = value

    def _outputs(self) -> None:
        for output in self.function.outputs:
            value = self.values.get(output.name)
            match value:
                case Const():
                    shape = TensorShape(value.dtype, ())
                    op = BoundOp(
                        OpKind.ELEMENTWISE,
                        output.name,
                        (self.const_name(value),),
                        "ident",
                        value.dtype,
                        span=output.span,
                    )
                    self.ops.append(op)
                    self.bindings[output.name] = TensorBinding(shape)
                case TupleValue() | PrngValue():
                    kind = "a tuple" if isinstance(value, TupleValue) else "a prng_step value"
                    self.sink.error(
                        "E-TYPE", f"output '{output.name}' is {kind}, not a tensor", output.span
                    )

    def _finish_prng(self) -> None:
        # prng_state without prng_value draws nothing: the state passes through (spec 9.6).
        for index, op in enumerate(self.ops):
            if op.fn == "prng_state" and self.prng_uses[op.params[0]]["value"] == 0:
                self.ops[index] = replace(op, kind=OpKind.ELEMENTWISE, fn="ident", params=())

    # ---- names for the program ----------------------------------------------------------

    def const_name(self, const: Const) -> str:
        key = (const.dtype, repr(const.value))
        name = self.const_names.get(key)
        if name is None:
            name = f"_K{len(self.const_names)}"
            self.const_names[key] = name
            self.bindings[name] = ConstBinding(const.value, const.dtype)
        return name

    def temp_name(self) -> str:
        name = f"_T{self.temp_count}"
        self.temp_count += 1
        return name

    def emit(
        self,
        kind: OpKind,
        fn: str,
        args: Sequence[TensorValue | Const],
        shape: TensorShape,
        *,
        compute: DType | None = None,
        params: tuple[int, ...] = (),
        span: Span | None = None,
        target: str | None = None,
        text: str = "",
        contraction: object = None,
    ) -> TensorValue:
        output = target or self.temp_name()
        inputs = tuple(a.name if isinstance(a, TensorValue) else self.const_name(a) for a in args)
        self.ops.append(
            BoundOp(
                kind,
                output,
                inputs,
                fn,
                compute or shape.dtype,
                params,
                contraction,  # type: ignore[arg-type]
                span,
            )
        )
        self.bindings[output] = TensorBinding(shape)
        return TensorValue(output, shape, text or output)

    # ---- expressions --------------------------------------------------------------------

    def expr(self, node: Expr) -> Value:
        match node:
            case IntLit(value=value):
                return Const.of(value, literal_int_type(value))
            case FloatLit(value=value):
                return Const.of(value, self.floatx)
            case Name(name=name):
                value = self.values[name]
                if isinstance(value, Poison):
                    raise BindFailure
                if isinstance(value, TensorValue):
                    return TensorValue(value.name, value.shape, name)
                return value
            case Unary(op=op, operand=operand, span=span):
                return self.call(UNARY_FUNCTION[op], [operand], span, node)
            case Binary(op=op, lhs=lhs, rhs=rhs, span=span):
                return self.call(BINARY_FUNCTION[op], [lhs, rhs], span, node)
            case Ternary(cond=cond, then=then, other=other, span=span):
                return self.call("cond", [cond, then, other], span, node)
            case Call(fn=fn, args=args, span=span):
                return self.call(fn, list(args), span, node)
            case _:
                raise TypeError(f"unexpected expression node {node!r}")

    def call(self, fn: str, arg_nodes: list[Expr], span: Span | None, node: Expr) -> Value:
        values = [self.expr(arg) for arg in arg_nodes]
        texts = [source_text(arg) for arg in arg_nodes]
        builtin = lookup(fn)
        assert builtin is not None, f"check() lets only known functions through: {fn}"
        return call_builtin(self, builtin, fn, values, texts, span, source_text(node))

    # ---- elementwise application (shared by operators, calls and expansions) ---------------

    def apply(
        self,
        fn: str,
        values: Sequence[Value],
        texts: Sequence[str],
        span: Span | None,
        text: str,
    ) -> TensorValue | Const:
        """Apply an elementwise builtin: fold constants, or broadcast and emit an op."""
        kind = BUILTINS[fn].kind
        operands = [self.plain(v, t, span) for v, t in zip(values, texts, strict=True)]
        try:
            result, compute = call_type(fn, kind, [o.dtype for o in operands])
        except TypeRuleError as err:
            raise self.fail("E-TYPE", f"{err} in '{text}'", span) from None
        if fn == "cond" and isinstance(operands[0], Const):
            # A constant condition keeps only the selected branch (spec 7.4).
            chosen = operands[1] if operands[0].value != 0 else operands[2]
            return self.convert(chosen, result, span, text)
        if fn in FOLDABLE and all(isinstance(o, Const) for o in operands):
            try:
                return fold(fn, kind, operands)  # type: ignore[arg-type]
            except FoldError as err:
                raise self.fail(err.code, f"{err.message}: '{text}'", span) from None
        dims = self.broadcast(operands, texts, span)
        return self.emit(
            OpKind.ELEMENTWISE,
            fn,
            operands,
            TensorShape(result, dims),
            compute=compute,
            span=span,
            text=text,
        )

    def convert(
        self, value: TensorValue | Const, dtype: DType, span: Span | None, text: str
    ) -> TensorValue | Const:
        if value.dtype is dtype:
            return value
        if isinstance(value, Const):
            return Const.of(value.value, dtype)
        shape = TensorShape(dtype, value.shape.dims)
        return self.emit(OpKind.ELEMENTWISE, "cast", [value], shape, span=span, text=text)

    def plain(self, value: Value, text: str, span: Span | None) -> TensorValue | Const:
        """A tensor or a constant; tuples and prng values are rejected (E-TYPE)."""
        match value:
            case TensorValue() | Const():
                return value
            case TupleValue():
                raise self.fail(
                    "E-TYPE", f"'{text}' is a tuple; take a member with element(T, k)", span
                )
            case PrngValue():
                raise self.fail(
                    "E-TYPE",
                    f"'{text}' is a prng_step value; it can only be passed to prng_value() "
                    f"or prng_state()",
                    span,
                )
            case _:
                raise BindFailure

    def broadcast(
        self, operands: Sequence[TensorValue | Const], texts: Sequence[str], span: Span | None
    ) -> tuple[int, ...]:
        """NumPy broadcasting of the tensor operands' sizes (spec 7.2)."""
        tensors = [
            (o, t) for o, t in zip(operands, texts, strict=True) if isinstance(o, TensorValue)
        ]
        rank = max((o.shape.rank for o, _ in tensors), default=0)
        dims = [1] * rank
        owner: list[tuple[TensorValue, str] | None] = [None] * rank
        for operand, text in tensors:
            offset = rank - operand.shape.rank
            for axis, size in enumerate(operand.shape.dims):
                position = offset + axis
                if size == 1:
                    continue
                if dims[position] in (1, size):
                    dims[position] = size
                    owner[position] = (operand, text)
                    continue
                first, first_text = owner[position]  # type: ignore[misc]
                raise self.fail(
                    "E-SHAPE",
                    f"cannot broadcast '{first_text}' ({first.shape}) with '{text}' "
                    f"({operand.shape}): sizes {dims[position]} and {size} differ in the "
                    f"{_ordinal(rank - position)}",
                    span,
                )
        return tuple(dims)

    def integer(self, value: Value, text: str, span: Span | None, code: str, what: str) -> int:
        """The value of an integer constant expression (spec 7.6), or `code` naming `what`."""
        if isinstance(value, Const) and value.is_integral:
            return int(value.value)
        match value:
            case Const():
                found = f"the {value.dtype.short} constant {value.value!r}"
            case TensorValue():
                found = f"a tensor ({value.shape})"
            case Poison():
                raise BindFailure
            case _:
                found = "not a constant"
        raise self.fail(code, f"{what} must be an integer constant, but '{text}' is {found}", span)


def _ordinal(n: int) -> str:
    return {1: "last dimension", 2: "second-to-last dimension"}.get(
        n, f"dimension {n} from the end"
    )
