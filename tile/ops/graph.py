"""Lazy tensor expressions that compile to one Tile function (issue 16; docs/OPS.md).

A `Value` is a node of an expression graph: an input (`input`), a constant, or an op applied
to other values. It knows its shape, each size an `int` or the text of a Tile integer constant
expression (a dimension name such as "N", or "(H - 3) / 2 + 1"); element types are left to
binding, as in any Tile function. `function(O=value, ...)` writes the Tile text of every
value the outputs need, in order, and returns a `tile.Function`.

Each op is a function that returns `Value(shape, emit, args)`: `emit(writer, names)` writes
the statements that compute it from its arguments' names and returns the name of the result.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from tile.runtime.invoke import Function

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

Dim = Union[int, str]  # noqa: UP007 (evaluated at run time on 3.10)
Scalar = Union[int, float]  # noqa: UP007
Operand = Union["Value", int, float]

_created = itertools.count()


class OpsError(ValueError):
    """An op was applied to values it cannot take (shapes, axes, arguments)."""


def dim_text(size: Dim) -> str:
    return str(size) if isinstance(size, int) else size if _atomic(size) else f"({size})"


def _atomic(text: str) -> bool:
    return text.isidentifier() or text.isdigit() or (text.startswith("(") and _balanced(text))


def _balanced(text: str) -> bool:
    depth = 0
    for position, char in enumerate(text):
        depth += char == "("
        depth -= char == ")"
        if depth == 0 and position < len(text) - 1:
            return False
    return True


def dim_op(left: Dim, op: str, right: Dim) -> Dim:
    """`left op right` for sizes: folded when both are ints (`/` truncates, as Tile's)."""
    if isinstance(left, int) and isinstance(right, int):
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            return left // right
    if op == "*" and (left == 1 or right == 1):
        return right if left == 1 else left
    if op in "+-" and right == 0:
        return left
    return f"{dim_text(left)} {op} {dim_text(right)}"


def dim_product(sizes: Sequence[Dim]) -> Dim:
    total: Dim = 1
    for size in sizes:
        total = dim_op(total, "*", size)
    return total


class Writer:
    """Collects the statements of one function; hands out fresh names."""

    def __init__(self, taken: set[str]) -> None:
        self.statements: list[str] = []
        self.taken = set(taken)
        self.counter = itertools.count()

    def name(self, hint: str = "T") -> str:
        while True:
            name = f"{hint}{next(self.counter)}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def add(self, statement: str) -> None:
        self.statements.append(statement)

    def fresh(self, base: str) -> str:
        """`base`, or `base_1`, `base_2`, ... when taken."""
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}_{count}"
        self.taken.add(name)
        return name

    def assign(self, expression: str, hint: str = "T") -> str:
        name = self.name(hint)
        self.add(f"{name} = {expression};")
        return name


@dataclass(eq=False)
class Value:
    """A lazy tensor: its shape, how to write it, and the values it is made from."""

    shape: tuple[Dim, ...]
    emit: Callable[[Writer, list[str]], str] = field(repr=False)
    args: tuple[Value, ...] = field(default=(), repr=False)
    input_name: str | None = None
    order: int = field(default_factory=lambda: next(_created), repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def axis(self, axis: int) -> int:
        """`axis` counted from 0 (negative: from the end); OpsError when out of range."""
        if not -self.ndim <= axis < self.ndim:
            raise OpsError(f"axis {axis} is out of range for a tensor of rank {self.ndim}")
        return axis % self.ndim

    # Python operators: elementwise ops, as tile.ops.elementwise writes them.
    __hash__ = object.__hash__

    def __add__(self, other: Operand) -> Value:
        return apply("{0} + {1}", self, other)

    def __radd__(self, other: Operand) -> Value:
        return apply("{0} + {1}", other, self)

    def __sub__(self, other: Operand) -> Value:
        return apply("{0} - {1}", self, other)

    def __rsub__(self, other: Operand) -> Value:
        return apply("{0} - {1}", other, self)

    def __mul__(self, other: Operand) -> Value:
        return apply("{0} * {1}", self, other)

    def __rmul__(self, other: Operand) -> Value:
        return apply("{0} * {1}", other, self)

    def __truediv__(self, other: Operand) -> Value:
        return apply("{0} / {1}", self, other)

    def __rtruediv__(self, other: Operand) -> Value:
        return apply("{0} / {1}", other, self)

    def __pow__(self, other: Operand) -> Value:
        return apply("pow({0}, {1})", self, other)

    def __neg__(self) -> Value:
        return apply("-{0}", self)

    def __lt__(self, other: Operand) -> Value:
        return apply("{0} < {1}", self, other)

    def __le__(self, other: Operand) -> Value:
        return apply("{0} <= {1}", self, other)

    def __gt__(self, other: Operand) -> Value:
        return apply("{0} > {1}", self, other)

    def __ge__(self, other: Operand) -> Value:
        return apply("{0} >= {1}", self, other)

    def __eq__(self, other: object) -> Value:  # type: ignore[override]
        return apply("{0} == {1}", self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> Value:  # type: ignore[override]
        return apply("{0} != {1}", self, other)  # type: ignore[arg-type]

    def __matmul__(self, other: Value) -> Value:
        return matmul(self, other)


def broadcast_shape(shapes: Sequence[tuple[Dim, ...]]) -> tuple[Dim, ...]:
    """NumPy broadcasting of sizes that may be names: equal sizes stay, 1 gives way, other
    pairs become `broadcast(a, b)`, which binding checks."""
    rank = max((len(shape) for shape in shapes), default=0)
    result: list[Dim] = [1] * rank
    for shape in shapes:
        for axis, size in enumerate(shape, start=rank - len(shape)):
            current = result[axis]
            if size == 1 or size == current:
                continue
            if current == 1:
                result[axis] = size
            elif isinstance(size, int) and isinstance(current, int):
                raise OpsError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
            else:
                result[axis] = f"broadcast({dim_text(current)}, {dim_text(size)})"
    return tuple(result)


def apply(template: str, *operands: Operand, hint: str = "T") -> Value:
    """An elementwise op written as a Tile expression with `{0}`, `{1}`, ... for operands."""
    values = tuple(as_value(operand) for operand in operands)

    def emit(writer: Writer, names: list[str]) -> str:
        return writer.assign(template.format(*names), hint)

    return Value(broadcast_shape([value.shape for value in values]), emit, values)


def contraction(shape: Sequence[Dim], body: str, *operands: Operand, hint: str = "C") -> Value:
    """A contraction `NAME[...: sizes] = body;` whose body names operands `{0}`, `{1}`, ...;
    `{out}` stands for the output's name, `{sizes}` for its sizes."""
    values = tuple(as_value(operand) for operand in operands)
    shape = tuple(shape)

    def emit(writer: Writer, names: list[str]) -> str:
        name = writer.name(hint)
        sizes = ", ".join(dim_text(size) for size in shape)
        writer.add(body.format(*names, out=name, sizes=sizes) + ";")
        return name

    return Value(shape, emit, values)


def matmul(a: Operand, b: Operand) -> Value:
    """NumPy's matmul: 2-D by 2-D, 1-D operands as a row or a column (and dropped from the
    result), leading batch dimensions broadcast."""
    a, b = as_value(a), as_value(b)
    if a.ndim == 0 or b.ndim == 0:
        raise OpsError("matmul needs operands of rank 1 or more")
    a_shape = a.shape if a.ndim > 1 else (1, *a.shape)
    b_shape = b.shape if b.ndim > 1 else (*b.shape, 1)
    if a_shape[-1] != b_shape[-2] and all(isinstance(s, int) for s in (a_shape[-1], b_shape[-2])):
        raise OpsError(f"matmul: {a.shape} and {b.shape} do not agree in the inner dimension")
    batch = broadcast_shape([a_shape[:-2], b_shape[:-2]])
    rank = len(batch)
    batch_index = [f"b{axis}" for axis in range(rank)]

    def access(shape: tuple[Dim, ...], own: Sequence[str], wanted: int) -> list[str]:
        lead = shape[:-2]
        offset = rank - len(lead)
        indices = ["0" if size == 1 and batch[offset + k] != 1 else batch_index[offset + k]
                   for k, size in enumerate(lead)]  # fmt: skip
        return indices + list(own)[:wanted]

    a_index = access(a_shape, ["m", "k"], 2)[-(a.ndim + (a.ndim == 1)) :]
    b_index = access(b_shape, ["k", "n"], 2)
    if a.ndim == 1:
        a_index = ["k"]
    if b.ndim == 1:
        b_index = b_index[:-1]
    out_index = batch_index + (["m"] if a.ndim > 1 else []) + (["n"] if b.ndim > 1 else [])
    shape = batch + ((a_shape[-2],) if a.ndim > 1 else ()) + ((b_shape[-1],) if b.ndim > 1 else ())
    head = f"{{out}}[{', '.join(out_index)}: {{sizes}}]" if shape else "{out}[]"
    body = f"{head} = +({{0}}[{', '.join(a_index)}] * {{1}}[{', '.join(b_index)}])"
    return contraction(shape, body, a, b, hint="MM")


def input(name: str, shape: Sequence[Dim]) -> Value:
    """An input of the function named `name` (a Tile tensor name: an upper-case letter first)
    with sizes that are ints or dimension names (shared names must agree when called)."""
    if not (name[:1].isupper() and name.replace("_", "").isalnum()):
        raise OpsError(f"an input name starts with an upper-case letter: {name!r}")
    for size in shape:
        if isinstance(size, int) and size < 1:
            raise OpsError(f"sizes are at least 1: {tuple(shape)}")
        if isinstance(size, str) and not (size[:1].isupper() and size.isidentifier()):
            raise OpsError(f"a dimension name starts with an upper-case letter: {size!r}")

    def emit(writer: Writer, names: list[str]) -> str:
        return name

    return Value(tuple(shape), emit, (), name)


def constant(value: Scalar) -> Value:
    """A scalar constant (Python int or float) as a value."""
    text = repr(float(value)) if isinstance(value, float) else str(int(value))
    if isinstance(value, float) and not any(c in text for c in ".en"):
        text += ".0"

    def emit(writer: Writer, names: list[str]) -> str:
        return text

    return Value((), emit)


def as_value(item: Value | Scalar) -> Value:
    if isinstance(item, Value):
        return item
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return constant(item)
    raise OpsError(f"an op takes tile.ops values or Python numbers, not {type(item).__name__}")


def _inputs(outputs: Sequence[Value]) -> list[Value]:
    seen: dict[int, Value] = {}
    stack = list(outputs)
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen[id(value)] = value
        stack.extend(value.args)
    return sorted((v for v in seen.values() if v.input_name is not None), key=lambda v: v.order)


def source(**outputs: Value) -> str:
    """The Tile text of a function with the given outputs (name -> value)."""
    if not outputs:
        raise OpsError("a function needs at least one output")
    inputs = _inputs(list(outputs.values()))
    by_name: dict[str, Value] = {}
    for value in inputs:
        assert value.input_name is not None
        other = by_name.setdefault(value.input_name, value)
        if other is not value:
            raise OpsError(f"two different inputs are named {value.input_name!r}")
    taken = set(by_name) | set(outputs)
    taken |= {s for v in inputs for s in v.shape if isinstance(s, str)}
    writer = Writer(taken)
    header, checks = [], []
    for value in inputs:
        dims = []
        for axis, size in enumerate(value.shape):
            if isinstance(size, str):
                dims.append(size)
            else:  # a fixed size: a name of its own, checked when called
                own = writer.fresh(f"{value.input_name}_{axis}")
                dims.append(own)
                check = f"assert_{value.input_name}_shape({own} == {size})"
                checks.append(f"{writer.fresh('OK')} = {check};")
        header.append(f"{value.input_name}[{', '.join(dims)}]" if dims else f"{value.input_name}[]")
    names: dict[int, str] = {}

    def visit(value: Value) -> str:
        found = names.get(id(value))
        if found is None:
            found = value.emit(writer, [visit(arg) for arg in value.args])
            names[id(value)] = found
        return found

    body = list(checks)
    results = {}
    for output_name, value in outputs.items():
        results[output_name] = visit(value)
    body += writer.statements
    for output_name, result in results.items():
        body.append(f"{output_name} = {result};" if result != output_name else "")
    lines = [f"function ({', '.join(header)}) -> ({', '.join(outputs)}) {{"]
    lines += [f"  {statement}" for statement in body if statement]
    lines.append("}")
    return "\n".join(lines) + "\n"


def function(name: str | None = None, **outputs: Value) -> Function:
    """One `tile.Function` computing `outputs` (name -> value) from the inputs they use, in the
    order the inputs were made; its `.source` is the Tile text."""
    return Function(source(**outputs), name=name or "ops_fn")
