"""Reverse-mode differentiation of a Tile function into a new Tile function (docs/GRADIENTS.md).

`derive(function, source, of="O", wrt=("A", "B"))` returns the text of a function whose inputs
are the original inputs and the cotangent `DO` of the output `O`, and whose outputs are `DA`,
`DB`, ...: the gradients of `sum(O * DO)` with respect to `A`, `B`, shaped and typed like them.
Its body is the part of the original body that `O` needs, then the reverse pass:

* each tensor `T` on a path from an input in `wrt` to `O` gets the cotangent `G_T`, the sum of
  one contribution per use of `T` (fan-out adds up);
* an elementwise statement passes cotangents down its expression tree by the rules of
  `tile.grad.rules`; a contribution to a tensor is brought to its shape and element type by
  `cotangent(x, T)` (the inverse of broadcasting; integer and bool tensors get zeros);
* a contraction passes its cotangent to each operand by the transposed contraction: the same
  index variables, constraints and accesses, with the operand's access as the output and the
  cotangent read where the output was written (`+` and `=` aggregations: multiplied by the other
  operands; `>` and `<`: routed to every element equal to the extreme; `*`: times the product
  over the element); unwritten elements pass theirs to the `default` tensor;
* `reshape`, `gather`, `scatter`, `simple_reduce`, the softmax helpers, `tuple`/`element` and
  the helpers of differentiation have their own transposes.

Names the reverse pass makes never clash with the function's own (`G_T`, `G_T_1`, ...).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tile.errors import TileGradientError, diagnostic
from tile.grad.contractions import ContractionRules
from tile.grad.names import expr_names, statement_names, subexpressions
from tile.grad.rules import CONSTANT, RULES, ZERO, add, call, equal, mul, select, sub
from tile.lang.syntax import (
    BINARY_FUNCTION,
    UNARY_FUNCTION,
    AggOp,
    Assign,
    Binary,
    Call,
    CombOp,
    ContractionStmt,
    Expr,
    FloatLit,
    FunctionDef,
    InputDecl,
    IntLit,
    Name,
    OutSpec,
    PConst,
    PIndex,
    Span,
    Statement,
    TensorRef,
    Ternary,
    Unary,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

# Calls whose cotangent rule is not elementwise: their argument receives a transformed
# cotangent of exactly the call's shape.
_STRUCTURAL = frozenset(
    {
        "reshape", "reshape_like", "gather", "scatter", "simple_reduce", "cotangent",
        "builtin_softmax", "builtin_logsoftmax",
    }
)  # fmt: skip


# Builtins with no gradient rule whose result has the broadcast shape of their arguments.
ELEMENTWISE = CONSTANT - {"index", "shape", "prng_step", "prng_value", "prng_state"}


def _calls(node: Expr) -> Iterator[Call]:
    return (item for item in subexpressions(node) if isinstance(item, Call))


def _live(body: list[Statement], outputs: Sequence[str]) -> tuple[Statement, ...]:
    """The statements the outputs need, and the checks (`assert_*`), in order: a cotangent
    that reaches no input (through a constant branch) is not computed."""
    wanted = set(outputs)
    keep = []
    for statement in reversed(body):
        check = isinstance(statement, Assign) and any(
            call.fn.startswith("assert_") for call in _calls(statement.value)
        )
        if statement.target in wanted or check:
            wanted.update(statement_names(statement))
            keep.append(statement)
    return tuple(reversed(keep))


@dataclass(frozen=True, slots=True)
class Gradient:
    """The gradient function of `of` with respect to the inputs `gradients` names."""

    source: str
    of: str
    cotangent: str  # the input that takes the output's cotangent
    gradients: tuple[tuple[str, str], ...]  # (input, output holding its gradient)
    scalar: bool  # the output is 0-D whatever the binding: the cotangent may default to 1
    with_value: bool  # the gradient function also returns `of`


def derive(
    function: FunctionDef, source: str, of: str, wrt: Sequence[str], with_value: bool = False
) -> Gradient:
    """The gradient function of `function`'s output `of` with respect to the inputs `wrt`;
    TileGradientError (E-GRAD) when one is not an output or input, or a statement on the way
    cannot be differentiated."""
    return _Deriver(function, source, of, tuple(wrt), with_value).run()


@dataclass
class _Deriver(ContractionRules):
    function: FunctionDef
    source: str
    of: str
    wrt: tuple[str, ...]
    with_value: bool
    defs: dict[str, Statement] = field(default_factory=dict)
    inputs: dict[str, InputDecl] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    active: set[str] = field(default_factory=set)
    emitted: list[Statement] = field(default_factory=list)
    contributions: dict[str, list[Expr]] = field(default_factory=dict)

    # ---- set-up ---------------------------------------------------------------------------

    def run(self) -> Gradient:
        self.inputs = {decl.name: decl for decl in self.function.inputs}
        self.defs = {statement.target: statement for statement in self.function.body}
        self._check_request()
        for decl in self.function.inputs:
            self.taken.add(decl.name)
            self.taken.update(dim.name for dim in decl.dims or ())
        for statement in self.function.body:
            self.taken.add(statement.target)
            self.taken.update(statement_names(statement))
        self.taken.update(output.name for output in self.function.outputs)
        forward = self._needed()
        self.active = set(self.wrt)
        for statement in forward:
            if any(name in self.active for name in statement_names(statement)):
                self.active.add(statement.target)

        cotangent = self._fresh("D" + self.of)
        declaration, checks, scalar = self._cotangent_input(cotangent)
        self.emitted.extend(checks)
        self._contribute(self.of, Name(cotangent))
        for statement in reversed(forward):
            if statement.target in self.active and statement.target in self.contributions:
                total = self._total(statement.target)
                if isinstance(statement, Assign):
                    self._expr(statement.value, total, statement)
                else:
                    self._contraction(statement, total)

        outputs: list[tuple[str, str]] = []
        for name in self.wrt:
            output = self._fresh("D" + name)
            parts = self.contributions.get(name)
            if parts and len(parts) == 1 and self._rename(parts[0], output):
                outputs.append((name, output))
                continue
            if parts:
                value = functools.reduce(add, parts)
            else:  # unused: zeros of its shape and type
                value = call("cotangent", select(Name(name), ZERO, ZERO), Name(name))
            self.emitted.append(Assign(output, value))
            outputs.append((name, output))

        result_names = [output for _, output in outputs]
        if self.with_value:
            result_names.insert(0, self.of)
        header = FunctionDef(
            inputs=(*self.function.inputs, declaration),
            outputs=tuple(Name(name) for name in result_names),
            body=_live([*forward, *self.emitted], result_names),
        )
        return Gradient(
            source=str(header) + "\n",
            of=self.of,
            cotangent=cotangent,
            gradients=tuple(outputs),
            scalar=scalar,
            with_value=self.with_value,
        )

    def _rename(self, part: Expr, output: str) -> bool:
        """Let the statement that computes `part` write `output` instead, if it is one of ours."""
        for index, statement in enumerate(self.emitted):
            same = isinstance(part, Name) and statement.target == part.name
            if same and isinstance(statement, Assign):
                self.emitted[index] = Assign(output, statement.value)
                return True
        return False

    def _fail(self, message: str, span: Span | None = None) -> TileGradientError:
        return TileGradientError(diagnostic("E-GRAD", message, span, self.source))

    def _check_request(self) -> None:
        outputs = [output.name for output in self.function.outputs]
        if self.of not in outputs:
            raise self._fail(
                f"'{self.of}' is not an output of the function; its outputs are "
                f"{', '.join(outputs)}"
            )
        if not self.wrt:
            raise self._fail("no input to differentiate with respect to")
        for name in self.wrt:
            if name not in self.inputs:
                raise self._fail(
                    f"'{name}' is not an input of the function; its inputs are "
                    f"{', '.join(self.inputs) or 'none'}"
                )
        if len(set(self.wrt)) != len(self.wrt):
            raise self._fail(f"an input is named twice in {', '.join(self.wrt)}")

    def _needed(self) -> list[Statement]:
        """The statements `of` depends on and the checks (`assert_*`), in their order."""
        return list(_live(list(self.function.body), [self.of]))

    def _fresh(self, base: str) -> str:
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}_{count}"
        self.taken.add(name)
        return name

    def _temp(self, base: str, value: Expr) -> Name:
        """A new statement `base_k = value`; its name."""
        if isinstance(value, Name):
            return value
        name = self._fresh(base)
        self.emitted.append(Assign(name, value))
        return Name(name)

    # ---- shapes ---------------------------------------------------------------------------

    def _dims(self, name: str, rank: int) -> tuple[Expr, ...]:
        """Size expressions of tensor `name` of rank `rank`: the declared names of an input,
        the sizes of a contraction, else `dim(name, k)`."""
        decl = self.inputs.get(name)
        if decl is not None and decl.dims is not None and len(decl.dims) == rank:
            return tuple(Name(dim.name) for dim in decl.dims)
        statement = self.defs.get(name)
        if isinstance(statement, ContractionStmt) and statement.out.sizes is not None:
            return statement.out.sizes
        return tuple(call("dim", Name(name), IntLit(axis)) for axis in range(rank))

    def _rank(self, name: str) -> int | None:
        """The rank of `name` where the source fixes it whatever the binding, else None."""
        decl = self.inputs.get(name)
        if decl is not None:
            return None if decl.dims is None else len(decl.dims)
        statement = self.defs.get(name)
        if isinstance(statement, ContractionStmt):
            return len(statement.out.indices)
        if statement is None:
            return 0  # a dimension size
        calls = [node.fn for node in _calls(statement.value)]
        if any(fn not in RULES and fn not in ELEMENTWISE for fn in calls):
            return None  # reshape, gather, tuple, ... change the shape
        ranks = [self._rank(read) for read in set(expr_names(statement.value))]
        return None if None in ranks else max(ranks, default=0)  # type: ignore[type-var]

    def _cotangent_input(self, cotangent: str) -> tuple[InputDecl, list[Statement], bool]:
        """The cotangent's declaration (the output's sizes where they are names), the checks
        of its other sizes, and whether the output is 0-D whatever the binding."""
        rank = self._rank(self.of)
        if rank is None:
            return InputDecl(cotangent, None), [], False
        sizes = self._dims(self.of, rank)
        signature = {dim.name for decl in self.function.inputs for dim in decl.dims or ()}
        names: list[Name] = []
        checks: list[Statement] = []
        for axis, size in enumerate(sizes):
            if isinstance(size, Name) and size.name in signature:
                names.append(size)
                continue
            own = Name(self._fresh(f"{cotangent}_{axis}"))
            names.append(own)
            condition = equal(own, size)
            checks.append(Assign(self._fresh("OK"), call("assert_cotangent_shape", condition)))
        return InputDecl(cotangent, tuple(names)), checks, rank == 0

    # ---- contributions --------------------------------------------------------------------

    def _contribute(self, name: str, value: Expr) -> None:
        """Add `value`, brought to `name`'s shape and type, to `name`'s cotangent."""
        shaped = call("cotangent", value, Name(name))
        part = self._temp(f"G_{name}", shaped)
        self.contributions.setdefault(name, []).append(part)

    def _total(self, name: str) -> Name:
        parts = self.contributions[name]
        if len(parts) == 1 and isinstance(parts[0], Name):
            return parts[0]
        return self._temp(f"G_{name}", functools.reduce(add, parts))

    def _is_active(self, node: Expr) -> bool:
        return any(name in self.active for name in expr_names(node))

    # ---- elementwise statements -----------------------------------------------------------

    def _expr(self, node: Expr, g: Expr, statement: Statement) -> None:
        """Pass the cotangent `g` of `node` to the active tensors `node` reads."""
        if not self._is_active(node):
            return
        match node:
            case Name(name=name):
                self._contribute(name, g)
                return
            case IntLit() | FloatLit():
                return
            case Unary(op=op, operand=operand):
                fn, args = UNARY_FUNCTION[op], (operand,)
            case Binary(op=op, lhs=lhs, rhs=rhs):
                fn, args = BINARY_FUNCTION[op], (lhs, rhs)
            case Ternary(cond=cond, then=then, other=other):
                fn, args = "cond", (cond, then, other)
            case Call(fn=fn, args=args):
                pass
            case _:  # pragma: no cover - the parser makes nothing else
                raise self._fail(f"cannot differentiate {node}", statement.span)
        if fn in CONSTANT or fn.startswith("assert_"):
            return
        g = self._temp(f"G_{statement.target}", g)
        if fn in RULES:
            for index, value in RULES[fn](args, node, g):
                self._expr(args[index], value, statement)
            return
        self._special(fn, args, node, g, statement)

    def _special(
        self, fn: str, args: Sequence[Expr], node: Expr, g: Expr, statement: Statement
    ) -> None:
        if fn == "element":
            member = self._element(args, statement)
            self._expr(member, g, statement)
            return
        if fn == "tuple":
            raise self._fail("a tuple is differentiated through element(T, k) only", node.span)
        if fn not in _STRUCTURAL:
            raise self._fail(f"'{fn}' has no gradient rule", node.span or statement.span)
        value = self._temp(f"F_{statement.target}", node)  # the call's value, computed again
        g = self._temp(f"G_{statement.target}", call("cotangent", g, value))
        x = args[0]
        match fn:
            case "reshape" | "reshape_like":
                self._expr(x, call("reshape_like", g, x), statement)
            case "cotangent":
                self._expr(x, call("cotangent", g, x), statement)
            case "simple_reduce":
                self._expr(x, select(x, g, g), statement)  # g broadcast to x's shape
            case "gather":
                self._expr(x, call("scatter", g, args[1], x), statement)
            case "scatter":
                self._expr(x, call("gather", g, args[1]), statement)
            case _:  # builtin_softmax, builtin_logsoftmax: rows of [R, C]
                rows, columns = args[1], args[2]
                weighted = mul(g, value) if fn == "builtin_softmax" else g
                summed = self._row_sum(weighted, rows, columns, statement)
                if fn == "builtin_softmax":
                    gradient = mul(value, sub(g, summed))
                else:
                    gradient = sub(g, mul(call("exp", value), summed))
                self._expr(x, gradient, statement)

    def _row_sum(self, value: Expr, rows: Expr, columns: Expr, statement: Statement) -> Name:
        """`S[i, 0: R, 1] = +(V[i, j])` for an [R, C] value."""
        del columns  # the access range of V bounds j
        source = self._temp(f"G_{statement.target}", value)
        name = self._fresh(f"S_{statement.target}")
        i, j = PIndex("i"), PIndex("j")
        self.emitted.append(
            ContractionStmt(
                out=OutSpec(name, (i, PConst(0)), (rows, IntLit(1))),
                agg=AggOp.SUM,
                comb=CombOp.NONE,
                operands=(TensorRef(source.name, (i, j)),),
            )
        )
        return Name(name)

    def _element(self, args: Sequence[Expr], statement: Statement) -> Expr:
        """The member `element(T, k)` reads, where T is `tuple(...)` and k a literal or a
        named integer literal."""
        group, index = args
        if isinstance(group, Name) and isinstance(self.defs.get(group.name), Assign):
            group = self.defs[group.name].value  # type: ignore[union-attr]
        while isinstance(index, Name) and isinstance(self.defs.get(index.name), Assign):
            index = self.defs[index.name].value  # type: ignore[union-attr]
        if not (isinstance(group, Call) and group.fn == "tuple" and isinstance(index, IntLit)):
            raise self._fail(
                "element(T, k) is differentiated only where T is a tuple(...) statement and k "
                "an integer literal or a name for one",
                statement.span,
            )
        if not 0 <= index.value < len(group.args):
            raise self._fail(f"element {index.value} of a {len(group.args)}-tuple", statement.span)
        return group.args[index.value]
