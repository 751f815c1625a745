"""Binding builtin calls (spec 9): expansions, conversions, special and compile-time builtins,
and the frontend helpers that lower to contractions.

`call_builtin` is called by `Binder.call` with the argument values already bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape, promote
from tile.bind.arguments import as_tensor, dtype_of, require_float, sizes_arg, tensor_arg
from tile.bind.evaluate import Const, FoldError, TypeRuleError, fold_mod
from tile.bind.helpers import bind_dim, bind_helper
from tile.bind.program import OpKind
from tile.bind.values import BindFailure, Poison, PrngValue, TensorValue, TupleValue
from tile.lang.builtins import Kind

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.bind.binder import Binder
    from tile.bind.values import Value
    from tile.lang.builtins import Builtin
    from tile.lang.syntax import Span

CAST_WIDTHS = {
    "as_float": {16: DType.FLOAT16, 32: DType.FLOAT32, 64: DType.FLOAT64},
    "as_int": {8: DType.INT8, 16: DType.INT16, 32: DType.INT32, 64: DType.INT64},
    "as_uint": {8: DType.UINT8, 16: DType.UINT16, 32: DType.UINT32, 64: DType.UINT64},
}
PRNG_STATE = TensorShape(DType.UINT32, (3, 2048))


def call_builtin(
    binder: Binder,
    builtin: Builtin,
    fn: str,
    values: list[Value],
    texts: list[str],
    span: Span | None,
    text: str,
) -> Value:
    if any(isinstance(v, Poison) for v in values):
        raise BindFailure
    match builtin.kind:
        case Kind.EXPANSION:
            return _expansion(binder, fn, values, texts, span, text)
        case Kind.CAST:
            return _cast(binder, fn, values, texts, span, text)
        case Kind.SPECIAL:
            return _special(binder, fn, values, texts, span, text)
        case Kind.COMPILE_TIME:
            return _compile_time(binder, fn, values, texts, span, text)
        case Kind.HELPER:
            return bind_helper(binder, fn, values, texts, span, text)
        case _:
            return binder.apply(fn, values, texts, span, text)


# ---- spec 9.1: builtins defined by expansion ------------------------------------------------


def _expansion(
    binder: Binder, fn: str, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    zero = Const.of(0, DType.INT32)
    fzero = Const.of(0.0, binder.floatx)
    one = Const.of(1.0, binder.floatx)

    def apply(name: str, args: Sequence[Value], arg_texts: Sequence[str]) -> Value:
        return binder.apply(name, args, arg_texts, span, text)

    try:
        match fn:
            case "abs":
                (x,) = values
                less = apply("cmp_lt", [x, zero], [texts[0], "0"])
                negated = apply("neg", [x], texts)
                return apply("cond", [less, negated, x], [text, f"-{texts[0]}", texts[0]])
            case "max" | "min":
                a, b = values
                less = apply("cmp_lt", [a, b], texts)
                pair = [b, a] if fn == "max" else [a, b]
                pair_texts = [texts[1], texts[0]] if fn == "max" else texts
                return apply("cond", [less, *pair], [text, *pair_texts])
            case "relu":
                (x,) = values
                less = apply("cmp_lt", [x, fzero], [texts[0], "0.0"])
                return apply("cond", [less, fzero, x], [text, "0.0", texts[0]])
            case _:  # sigmoid: 1.0 / (1.0 + exp(-x))
                (x,) = values
                require_float(binder, fn, values, span)
                negated = apply("neg", [x], texts)
                power = apply("exp", [negated], [f"-{texts[0]}"])
                total = apply("add", [one, power], ["1.0", text])
                return apply("div", [one, total], ["1.0", text])
    except TypeRuleError as err:  # pragma: no cover - apply() reports its own
        raise binder.fail("E-TYPE", str(err), span) from None


# ---- spec 9.4: conversions ---------------------------------------------------------------------


def _cast(
    binder: Binder, fn: str, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    source = binder.plain(values[0], texts[0], span)
    if fn == "as_bool":
        dtype = DType.BOOLEAN  # an optional width is accepted and ignored (spec 9.4)
    else:
        width = binder.integer(values[1], texts[1], span, "E-ARG", f"the width of '{fn}'")
        choices = CAST_WIDTHS[fn]
        if width not in choices:
            allowed = ", ".join(str(w) for w in choices)
            raise binder.fail("E-ARG", f"'{fn}' width must be one of {allowed}, not {width}", span)
        dtype = choices[width]
    dims = source.shape.dims if isinstance(source, TensorValue) else ()
    # Conversions never fold (spec 7.6): a constant argument gives a 0-D tensor.
    return binder.emit(
        OpKind.ELEMENTWISE, "cast", [source], TensorShape(dtype, dims), span=span, text=text
    )


# ---- spec 9.5, 9.6: shape, indexing and random builtins ----------------------------------------


def _special(
    binder: Binder, fn: str, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    match fn:
        case "reshape":
            source = as_tensor(binder, values[0], texts[0], span)
            dims = sizes_arg(binder, values[1:], texts[1:], span, fn)
            shape = TensorShape(source.shape.dtype, dims)
            if shape.size != source.shape.size:
                raise binder.fail(
                    "E-SHAPE",
                    f"cannot reshape {source.describe()} with {source.shape.size} elements to "
                    f"[{', '.join(map(str, dims))}] with {shape.size}",
                    span,
                )
            return binder.emit(OpKind.SPECIAL, "reshape", [source], shape, span=span, text=text)
        case "index":
            source = tensor_arg(binder, values[0], texts[0], span, fn)
            axis = binder.integer(values[1], texts[1], span, "E-ARG", "the axis of 'index'")
            if not 0 <= axis < source.shape.rank:
                raise binder.fail(
                    "E-ARG",
                    f"axis {axis} is out of range for {source.describe()}, which has "
                    f"{source.shape.rank} dimension(s)",
                    span,
                )
            shape = TensorShape(DType.INT32, source.shape.dims)
            return binder.emit(
                OpKind.SPECIAL, "index", [source], shape, params=(axis,), span=span, text=text
            )
        case "shape":
            source = tensor_arg(binder, values[0], texts[0], span, fn)
            if source.shape.rank == 0:
                raise binder.fail(
                    "E-ARG",
                    f"'shape' needs a tensor of rank 1 or more, not {source.describe()}",
                    span,
                )
            shape = TensorShape(DType.INT32, (source.shape.rank,))
            return binder.emit(OpKind.SPECIAL, "shape", [source], shape, span=span, text=text)
        case "gather":
            table = tensor_arg(binder, values[0], texts[0], span, fn)
            index = _index_tensor(binder, values[1], texts[1], span, fn)
            if table.shape.rank == 0:
                raise binder.fail(
                    "E-ARG",
                    f"'gather' needs a table of rank 1 or more, not {table.describe()}",
                    span,
                )
            shape = TensorShape(table.shape.dtype, index.shape.dims + table.shape.dims[1:])
            return binder.emit(
                OpKind.SPECIAL, "gather", [table, index], shape, span=span, text=text
            )
        case "scatter":
            return _scatter(binder, values, texts, span, text)
        case "prng_step":
            state = tensor_arg(binder, values[0], texts[0], span, fn)
            if state.shape.dims != PRNG_STATE.dims or state.shape.dtype is not DType.UINT32:
                raise binder.fail(
                    "E-SHAPE",
                    f"the prng state must be {PRNG_STATE}, but {state.describe()} was given",
                    span,
                )
            dims = sizes_arg(binder, values[1:], texts[1:], span, fn)
            step = binder.prng_count
            binder.prng_count += 1
            binder.prng_uses[step] = {"value": 0, "state": 0}
            return PrngValue(state.name, dims, step)
        case _:  # prng_value, prng_state
            step_value = values[0]
            if not isinstance(step_value, PrngValue):
                raise binder.fail(
                    "E-TYPE", f"'{fn}' needs the result of prng_step, not '{texts[0]}'", span
                )
            use = "value" if fn == "prng_value" else "state"
            uses = binder.prng_uses[step_value.step]
            if uses[use]:
                raise binder.fail(
                    "E-TYPE", f"'{fn}' is applied to '{texts[0]}' more than once", span
                )
            uses[use] += 1
            shape = TensorShape(DType.FLOAT32, step_value.dims) if use == "value" else PRNG_STATE
            state = TensorValue(step_value.state, PRNG_STATE, step_value.state)
            return binder.emit(
                OpKind.SPECIAL,
                fn,
                [state],
                shape,
                params=(step_value.step, *step_value.dims),
                span=span,
                text=text,
            )


def _index_tensor(
    binder: Binder, value: Value, text: str, span: Span | None, fn: str
) -> TensorValue:
    index = as_tensor(binder, value, text, span)
    if index.shape.dtype is not DType.INT32:
        raise binder.fail(
            "E-ARG",
            f"the index argument of '{fn}' must be an i32 tensor, not '{text}' ({index.shape})",
            span,
        )
    return index


def _scatter(
    binder: Binder, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    source = tensor_arg(binder, values[0], texts[0], span, "scatter")
    index = _index_tensor(binder, values[1], texts[1], span, "scatter")
    target = tensor_arg(binder, values[2], texts[2], span, "scatter")
    rank = index.shape.rank
    if source.shape.dims[:rank] != index.shape.dims or source.shape.rank < rank:
        raise binder.fail(
            "E-SHAPE",
            f"the index {index.describe()} must have the leading sizes of the values "
            f"{source.describe()}",
            span,
        )
    if target.shape.rank == 0:
        raise binder.fail(
            "E-ARG", f"'scatter' needs a target of rank 1 or more, not {target.describe()}", span
        )
    dims = (target.shape.dims[0], *source.shape.dims[rank:])
    shape = TensorShape(source.shape.dtype, dims)
    return binder.emit(
        OpKind.SPECIAL, "scatter", [source, index, target], shape, span=span, text=text
    )


# ---- spec 9.7: compile-time builtins -----------------------------------------------------------


def _compile_time(
    binder: Binder, fn: str, values: list[Value], texts: list[str], span: Span | None, text: str
) -> Value:
    if fn.startswith("assert_"):
        condition = values[0]
        if not isinstance(condition, Const):
            raise binder.fail(
                "E-ARG", f"'{fn}' needs a compile-time constant, but '{texts[0]}' is not", span
            )
        if condition.value == 0:
            raise binder.fail(
                "E-ASSERT",
                f"assertion '{fn[len('assert_') :]}' failed: '{texts[0]}' is false",
                span,
            )
        return Const.of(1, DType.INT32)
    match fn:
        case "mod":
            for value, arg_text in zip(values, texts, strict=True):
                if isinstance(value, TensorValue):
                    raise binder.fail(
                        "E-TYPE",
                        f"'mod' works on integer constants only, but '{arg_text}' is "
                        f"a tensor ({value.shape})",
                        span,
                    )
            a = binder.integer(values[0], texts[0], span, "E-CONST", "each argument of 'mod'")
            b = binder.integer(values[1], texts[1], span, "E-CONST", "each argument of 'mod'")
            try:
                return fold_mod(Const.of(a, dtype_of(values[0])), Const.of(b, dtype_of(values[1])))
            except FoldError as err:
                raise binder.fail(err.code, f"{err.message}: '{text}'", span) from None
        case "broadcast":
            sizes = [
                binder.integer(v, t, span, "E-ARG", "each argument of 'broadcast'")
                for v, t in zip(values, texts, strict=True)
            ]
            distinct = {s for s in sizes if s != 1}
            if len(distinct) > 1:
                raise binder.fail(
                    "E-SHAPE", f"sizes {', '.join(map(str, sizes))} do not broadcast", span
                )
            return Const.of(distinct.pop() if distinct else 1, promote(map(dtype_of, values)))
        case "dim":
            return bind_dim(binder, values, texts, span)
        case "tuple":
            return TupleValue(tuple(values))
        case _:  # element
            group = values[0]
            if not isinstance(group, TupleValue):
                raise binder.fail("E-TYPE", f"'element' needs a tuple, not '{texts[0]}'", span)
            member = binder.integer(values[1], texts[1], span, "E-ARG", "the member of 'element'")
            if not 0 <= member < len(group.members):
                raise binder.fail(
                    "E-ARG",
                    f"the tuple has {len(group.members)} members; {member} is out of range",
                    span,
                )
            return group.members[member]
