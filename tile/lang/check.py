"""Stage 1b: semantic checks that need no shapes (spec 4, 6.1, 6.4, 8.1, 8.7, 8.12, 9.1).

`check(function, source)` runs after `tile.lang.parse` and before `tile.bind.binder`. It reports,
all at once and at least one per statement: duplicate and redefined names (E-DUP, E-REDEF), names
used before their definition or never defined (E-NAME), unknown functions (E-NAME) and wrong
argument counts (E-ARG), outputs that are never defined (E-OUTPUT), missing or miscounted output
sizes (E-SHAPE), index variables that occur only in constraints (E-INDEX), `=` aggregations that can
collide (E-ASSIGN) and sums or products of booleans (E-TYPE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tile.errors import DiagnosticSink
from tile.lang.builtins import ASSERT, lookup, suggest
from tile.lang.syntax import (
    AggOp,
    Binary,
    Call,
    CombOp,
    ContractionStmt,
    Expr,
    FloatLit,
    FunctionDef,
    IntLit,
    Name,
    PBinary,
    PConst,
    PIndex,
    PNeg,
    PolyExpr,
    PSize,
    Span,
    Ternary,
    Unary,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tile.errors import Diagnostic


@dataclass(frozen=True, slots=True)
class _Definition:
    kind: str  # "input", "size" or "statement"
    span: Span | None
    owner: str = ""  # for sizes: the input that declares it

    def describe(self) -> str:
        where = f" at {self.span}" if self.span else ""
        match self.kind:
            case "input":
                return f"an input{where}"
            case "size":
                return f"a dimension size of input '{self.owner}'{where}"
            case _:
                return f"defined{where}"


def check(function: FunctionDef, source: str, warnings: list[Diagnostic] | None = None) -> None:
    """Raise TileTypeError listing every shape-free semantic error of `function`; W-DEAD
    warnings (a statement that contributes to no output) are appended to `warnings` when it
    is given and there is no error."""
    checker = _Checker(function, source)
    checker.run()
    if warnings is not None:
        warnings.extend(checker.dead_statements())


class _Checker:
    def __init__(self, function: FunctionDef, source: str) -> None:
        self.function = function
        self.sink = DiagnosticSink(source)
        self.defined: dict[str, _Definition] = {}
        self.later: dict[str, Span | None] = {}  # statement targets not yet reached
        self.uses: dict[str, set[str]] = {}  # statement target -> the names it reads
        self.checks: list[str] = []  # targets of statements that call assert_* (spec 9.7)
        self._reading: set[str] = set()
        self._asserts = False

    def run(self) -> None:
        self._header()
        for statement in self.function.body:
            self.later.setdefault(statement.target, statement.span)
        for statement in self.function.body:
            self._reading, self._asserts = set(), False
            if isinstance(statement, ContractionStmt):
                self._contraction(statement)
            else:
                self._expr(statement.value)
            self.uses.setdefault(statement.target, self._reading)
            if self._asserts:
                self.checks.append(statement.target)
            self._define(statement.target, statement.span)
        for output in self.function.outputs:
            if output.name not in self.defined:
                self.sink.error(
                    "E-OUTPUT",
                    f"output '{output.name}' is neither an input nor defined by a statement",
                    output.span,
                )
        self.sink.raise_if_any()

    def dead_statements(self) -> list[Diagnostic]:
        """W-DEAD for each statement whose result no output and no assertion needs (spec
        11.1; an `Ok = assert_square(M == N);` is there for its check, its result unused)."""
        live: set[str] = set()
        pending = [output.name for output in self.function.outputs] + self.checks
        while pending:
            name = pending.pop()
            if name not in live:
                live.add(name)
                pending.extend(self.uses.get(name, ()))
        for statement in self.function.body:
            if statement.target not in live:
                self.sink.warn(
                    "W-DEAD",
                    f"'{statement.target}' contributes to no output: the statement can be removed",
                    statement.span,
                )
        return self.sink.warnings

    # ---- header -------------------------------------------------------------------------

    def _header(self) -> None:
        input_names = {decl.name for decl in self.function.inputs}
        for decl in self.function.inputs:
            if decl.name in self.defined:
                self.sink.error("E-DUP", f"input '{decl.name}' is declared twice", decl.span)
                continue
            self.defined[decl.name] = _Definition("input", decl.span)
        for decl in self.function.inputs:
            for dim in decl.dims or ():
                if dim.name in input_names:
                    self.sink.error(
                        "E-DUP",
                        f"size name '{dim.name}' of input '{decl.name}' is also the name of "
                        f"an input tensor",
                        dim.span,
                    )
                elif dim.name not in self.defined:
                    self.defined[dim.name] = _Definition("size", dim.span, decl.name)
        seen: set[str] = set()
        for output in self.function.outputs:
            if output.name in seen:
                self.sink.error("E-DUP", f"output '{output.name}' is listed twice", output.span)
            seen.add(output.name)

    def _define(self, name: str, span: Span | None) -> None:
        previous = self.defined.get(name)
        if previous is not None:
            if previous.kind == "statement":
                what = f"'{name}' is already {previous.describe()}"
            else:
                what = f"'{name}' is {previous.describe()}"
            self.sink.error(
                "E-REDEF", f"cannot assign '{name}': {what}; names are defined once", span
            )
            return
        self.defined[name] = _Definition("statement", span)
        self.later.pop(name, None)

    # ---- uses ---------------------------------------------------------------------------

    def _use(self, name: str, span: Span | None) -> None:
        self._reading.add(name)
        if name in self.defined:
            return
        if name in self.later:
            where = self.later[name]
            at = f" at {where}" if where else ""
            self.sink.error("E-NAME", f"'{name}' is used before its definition{at}", span)
        else:
            self.sink.error("E-NAME", f"'{name}' is not defined", span)

    def _expr(self, expr: Expr) -> None:
        match expr:
            case IntLit() | FloatLit():
                pass
            case Name(name=name, span=span):
                self._use(name, span)
            case Unary(operand=operand):
                self._expr(operand)
            case Binary(lhs=lhs, rhs=rhs):
                self._expr(lhs)
                self._expr(rhs)
            case Ternary(cond=cond, then=then, other=other):
                self._expr(cond)
                self._expr(then)
                self._expr(other)
            case Call(fn=fn, args=args, span=span):
                self._call(fn, args, span)
                for arg in args:
                    self._expr(arg)
            case _:
                raise TypeError(f"unexpected expression node {expr!r}")

    def _call(self, fn: str, args: tuple[Expr, ...], span: Span | None) -> None:
        builtin = lookup(fn)
        self._asserts |= builtin is ASSERT
        if builtin is None:
            hint = suggest(fn)
            extra = f"; did you mean '{hint}'?" if hint else ""
            self.sink.error("E-NAME", f"unknown function '{fn}'{extra}", span)
            return
        count = len(args)
        too_many = builtin.max_args is not None and count > builtin.max_args
        if count < builtin.min_args or too_many:
            self.sink.error(
                "E-ARG",
                f"'{fn}' takes {builtin.arity_text()}, but {count} "
                f"{'was' if count == 1 else 'were'} given",
                span,
            )

    # ---- contractions -------------------------------------------------------------------

    def _contraction(self, stmt: ContractionStmt) -> None:
        out = stmt.out
        if out.sizes is None and out.indices:
            self.sink.error(
                "E-SHAPE",
                f"output '{out.name}' has {len(out.indices)} index "
                f"expression{'s' if len(out.indices) != 1 else ''} but no sizes; "
                f"write {out.name}[{', '.join(str(p) for p in out.indices)}: <sizes>]",
                out.span,
            )
        elif out.sizes is not None and len(out.sizes) != len(out.indices):
            self.sink.error(
                "E-SHAPE",
                f"output '{out.name}' has {len(out.indices)} index expressions but "
                f"{len(out.sizes)} sizes",
                out.span,
            )
        for size in out.sizes or ():
            self._expr(size)
        for operand in stmt.operands:
            self._use(operand.name, operand.span)
        for constraint in stmt.constraints:
            self._expr(constraint.bound)
        for poly in self._polys(stmt):
            for node in _walk_poly(poly):
                if isinstance(node, PSize):
                    self._use(node.name, node.span)
        if stmt.default is not None:
            self._use(stmt.default.name, stmt.default.span)
        self._index_variables(stmt)
        if stmt.comb is CombOp.EQ and stmt.agg in (AggOp.SUM, AggOp.PROD):
            verb = "sum" if stmt.agg is AggOp.SUM else "multiply"
            self.sink.error(
                "E-TYPE",
                f"cannot {verb} the bool values of an '==' combination; aggregate them with "
                f"'>' (any), '<' (all) or '=', or convert first (T = (A == B) ? 1 : 0)",
                stmt.agg_span,
            )

    @staticmethod
    def _polys(stmt: ContractionStmt) -> Iterator[PolyExpr]:
        yield from stmt.out.indices
        for operand in stmt.operands:
            yield from operand.indices
        for constraint in stmt.constraints:
            yield constraint.poly

    def _index_variables(self, stmt: ContractionStmt) -> None:
        in_output = _variables(stmt.out.indices)
        in_access = dict(in_output)
        for operand in stmt.operands:
            for name, span in _variables(operand.indices).items():
                in_access.setdefault(name, span)
        for constraint in stmt.constraints:
            for name, span in _variables((constraint.poly,)).items():
                if name not in in_access:
                    self.sink.error(
                        "E-INDEX",
                        f"index variable '{name}' occurs only in a constraint; it must also "
                        f"index a tensor",
                        span,
                    )
                    in_access[name] = span  # report it once
        if stmt.agg is AggOp.ASSIGN:
            free = [name for name in in_access if name not in in_output]
            if free:
                names = ", ".join(f"'{n}'" for n in free)
                self.sink.error(
                    "E-ASSIGN",
                    f"'=' needs every index variable in the output, but {names} "
                    f"{'does' if len(free) == 1 else 'do'} not index '{stmt.out.name}', so "
                    f"several values can land on one element; use '+' or '>' instead",
                    in_access[free[0]],
                )


def _walk_poly(poly: PolyExpr) -> Iterator[PolyExpr]:
    yield poly
    match poly:
        case PBinary(lhs=lhs, rhs=rhs):
            yield from _walk_poly(lhs)
            yield from _walk_poly(rhs)
        case PNeg(operand=operand):
            yield from _walk_poly(operand)
        case PIndex() | PSize() | PConst():
            pass
        case _:
            raise TypeError(f"unexpected polynomial node {poly!r}")


def _variables(polys: tuple[PolyExpr, ...]) -> dict[str, Span | None]:
    """Index variables in order of first occurrence, with that occurrence's span."""
    found: dict[str, Span | None] = {}
    for poly in polys:
        for node in _walk_poly(poly):
            if isinstance(node, PIndex):
                found.setdefault(node.name, node.span)
    return found
