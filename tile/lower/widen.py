"""Elementwise tiles and reductions in lanes as vector code, for device compilers that do not
vectorize loops (`widen`, and `widen_lanes` below).

PoCL 3.0 compiles the scalar loop over a tile's elements as written, one out-of-line library
call per `tanh` or `exp`, so an elementwise kernel there runs 8x slower than the same work on
vectors. Under `HardwareSettings.vector_loops`, `widen(body, width)` rewrites the innermost
tile loop of a generated elementwise body,

    for tw < T:   x = base + tw (or tw);  [if (x < N)] { scalar statements }

into `width` lanes per iteration,

    for tw < T / width:   x = base + tw * width;
        if (x + width <= N) { the statements on vectors }            (or no test, N % width == 0)
        else if (x < N)     { the same, every access counted: lanes below N - x }

A guard on other dimensions as well (`if (x0 < M && x < N)`, a tile over several rows) keeps
its other part around the vector code: it holds for every lane. An outer tile loop (the rows
of such a tile) is left as it is, and the tile loop inside it widened.

Lane `l` computes what element `x + l` computed: a value that depends on `x` becomes a vector
of `width` lanes; one that does not stays a scalar, broadcast where it meets a vector. A memory
access whose element offset has coefficient 1 in `x` becomes `Lanes` (a vector at any
element); one without `x` stays a scalar access. Anything else (a strided access, `x` used as a
value, a condition that depends on `x`, a branch that reads memory, boolean memory) leaves the
body as it was: `widen` returns None; so do 64-bit values (`LANE_TYPES`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from semtree.nodes import (
    LANE_WIDTHS,
    Binary,
    BinOp,
    Block,
    Cast,
    Cond,
    Declare,
    FloatConst,
    For,
    If,
    IntConst,
    Lanes,
    Load,
    Lookup,
    Stmt,
    Store,
    Subscript,
    children,
    rewrite,
    walk,
)
from semtree.types import DType, Type

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.nodes import Expr, Function, Node

# Lanes of 8- to 32-bit numbers only: Lanes cannot access boolean memory, and PoCL 3.0
# (LLVM 14) aborts the process compiling some builtins on vectors of doubles (`tanh(double8)`:
# "Cannot select: vselect"). Half lanes are computed in float where the device has no half
# arithmetic (the OpenCL renderer converts their bits with the program's own helpers).
_INTEGERS = (DType.INT8, DType.INT16, DType.INT32, DType.UINT8, DType.UINT16, DType.UINT32)
LANE_TYPES = frozenset((*_INTEGERS, DType.FLOAT16, DType.FLOAT32))


def _lane_type(type_: Type) -> bool:
    """Whether a value of `type_` can become a vector of lanes (booleans can, in registers)."""
    if type_.vec_width != 1 or type_.is_pointer or type_.is_index or type_.is_array:
        return False
    return type_.is_bool or type_.dtype in LANE_TYPES


class _RefusedError(Exception):
    """The body has a shape this pass does not widen."""


def widen(function: Function, width: int) -> Function | None:
    """`function` with its innermost tile loop on vectors of `width` lanes, or None."""
    pointers = {param.name: param.type for param in function.params if param.type.is_pointer}
    try:
        body = _statement(function.body, width, pointers)
    except _RefusedError:
        return None
    return None if body is function.body else replace(function, body=body)


def widen_lanes(function: Function, width: int) -> Function:
    """`function` (a contraction kernel) with each innermost counted loop of stores to
    consecutive elements on vectors: a reduction in lanes (`tile.lower.accumulators`),
    `acc[i * L + lane] = acc[i * L + lane] + in0[... + lane] * ...` over `lane` < L, becomes
    L / `width` steps of `width` lanes, its private accumulators read and written as `Lanes`,
    and so do the wide halves of the fold that follows, and a tile's loops along a coordinate
    every access walks contiguously (a column sum's accumulation and stores; `_steps`), also
    under a guard every step shares (a padding's, in a tile over channels); fewer lanes than
    `width` that read memory take one narrower vector.
    Intel's CPU OpenCL compiler ran these loops on scalars: a 4096 x 4096 matrix-vector
    product took 15 ms, 1.1 on vectors; a sum over the middle axis of 101 x 194 x 159, 2.6 ms,
    0.75 on vectors; a same-padded depthwise 3 x 3 convolution, 112 x 112 x 32, 0.75 ms, 0.29
    (AMD Zen 5). A loop whose steps depend on each other, or that reads a
    buffer it may write, is left as it is."""
    if width not in LANE_WIDTHS:
        return function
    pointers = {param.name: param.type for param in function.params if param.type.is_pointer}
    for node in walk(function.body):
        if isinstance(node, Declare) and node.type.is_array and not node.type.base_is_pointer:
            pointers[node.name] = node.type
    body = _lane_loops(function.body, width, pointers)
    return function if body is function.body else replace(function, body=body)


def _lane_loops(stmt: Stmt, width: int, pointers: dict[str, Type]) -> Stmt:
    match stmt:
        case Block(stmts):
            new = tuple(_lane_loops(inner, width, pointers) for inner in stmts)
            same = all(a is b for a, b in zip(new, stmts, strict=True))
            return stmt if same else replace(stmt, stmts=new)
        case If(_, then, other):
            new_then = _lane_loops(then, width, pointers)
            new_other = None if other is None else _lane_loops(other, width, pointers)
            if new_then is then and new_other is other:
                return stmt
            return replace(stmt, then=new_then, other=new_other)
        case For(var, count, 1, Block(stmts)) if not _innermost(list(stmts)):
            body = _lane_loops(stmt.body, width, pointers)
            return stmt if body is stmt.body else replace(stmt, body=body)
        case For(var, count, 1, Block(stmts)) if count % width == 0 or (
            count in LANE_WIDTHS and _buffers_read(stmts, pointers)
        ):
            width = min(width, count)  # fewer lanes than a vector reading memory: one narrower
            widened = _steps(var, count, stmts, width, pointers)
            if widened is None:
                return stmt
            step = f"{var}_vector"
            start = Binary(BinOp.MUL, Load(Lookup(step)), IntConst(width))
            head = Declare(Type.index(), var, start)
            return For(step, count // width, 1, Block((head, *widened)), span=stmt.span)
        case _:
            return stmt


def _steps(
    var: str, count: int, stmts: Sequence[Stmt], width: int, pointers: dict[str, Type]
) -> tuple[Stmt, ...] | None:
    """The statements of a loop over `var` for `width` lanes at a time, or None. A tile loop's
    coordinate `x = base + var` is written out where it is used; its guard (a partial tile,
    around the statements or around a padded value, `tile.lower.contract`) becomes a count of
    the lanes that read and write memory: the others belong to elements past the shape, whose
    accumulators are never stored. The last step of a reduction in lanes pads its other lanes
    with the identity, which they then fold into the result: its counted loads give the
    identity there (`Lanes.fill`, where it is not 0)."""
    body = list(stmts)
    start: Expr = Load(Lookup(var))
    tile = bool(body) and isinstance(body[0], Declare) and body[0].type.is_index
    if tile:
        head, body = body[0], body[1:]
        start = head.init  # type: ignore[assignment]
        base = start.lhs if isinstance(start, Binary) and start.op is BinOp.ADD else None
        if start != Load(Lookup(var)) and not (
            base is not None and start.rhs == Load(Lookup(var)) and not _mentions(base, {var})  # type: ignore[union-attr]
        ):
            return None
        coordinate = Load(Lookup(head.name))
        body = [rewrite(s, lambda n: start if n == coordinate else None) for s in body]  # type: ignore[misc]
    shared: Expr | None = None  # a guard every step shares (a padding's, tiled along another axis)
    lanes: Expr | None = None
    fill: Expr | None = None  # the identity of a reduction in lanes, where not 0
    for _ in range(2):  # the two guards nest either way round
        match body:
            case [If(condition, Block(then), None)] if shared is None and not _mentions(
                condition, {var}
            ):
                shared, body = condition, list(then)
            case [If(Binary(BinOp.LT, bound, IntConst(size)), Block(then), None)] if (
                lanes is None and bound == start
            ):
                body, lanes = list(then), Binary(BinOp.SUB, IntConst(size), start)
            case [
                Declare(_, value, pad) as padded,
                If(
                    Binary(BinOp.LT, bound, IntConst(size)),
                    Block((Store(Lookup(name), read),)),
                    None,
                ),
                *rest,
            ] if lanes is None and bound == start and name == value and pad is not None:
                body = [replace(padded, init=read), *rest]
                lanes = Binary(BinOp.SUB, IntConst(size), start)
                fill = None if tile or _is_zero(pad) else pad
    if not all(isinstance(s, Store | Declare) for s in body) or not _independent(
        body, var, count, pointers
    ):
        return None
    widener = _Widener(var, width, pointers, lanes)
    try:
        widened = widener.block(tuple(body))
    except _RefusedError:
        return None
    stores = [s for s in widened.stmts if isinstance(s, Store)]
    if not all(widener.varies(s.value) for s in stores):
        return None  # a value for every lane: nothing to gain
    if fill is not None:  # the padded value, one load, takes the identity past the edge
        first, loads = widened.stmts[0], [n for n in walk(widened) if _counted_buffer(n, pointers)]
        value = first.init  # type: ignore[attr-defined]
        while isinstance(value, Cast):
            value = value.value
        half = any(pointers[_name(n)].dtype is DType.FLOAT16 for n in loads)
        if len(loads) != 1 or value != Load(loads[0]) or half:
            return None  # a product's lanes would multiply identities; half: bits, no identity
        filled = rewrite(first, lambda n: replace(n, fill=fill) if n == loads[0] else None)
        widened = Block((filled, *widened.stmts[1:]))  # type: ignore[arg-type]

    def whole(node: Node) -> Node | None:  # a private array's lanes are all inside it
        if isinstance(node, Lanes) and node.count is not None and pointers[_name(node)].is_array:
            return replace(node, count=None)
        return None

    steps = tuple(rewrite(s, whole) for s in widened.stmts)  # type: ignore[misc]
    return steps if shared is None else (If(shared, Block(steps)),)


def _counted_buffer(node: Node, pointers: dict[str, Type]) -> bool:
    """Whether `node` is a counted access to a buffer (not a private array)."""
    return isinstance(node, Lanes) and node.count is not None and not pointers[_name(node)].is_array


def _is_zero(expr: Expr | None) -> bool:
    while isinstance(expr, Cast):
        expr = expr.value
    return isinstance(expr, FloatConst | IntConst) and expr.value == 0


def _name(lanes: Lanes) -> str:
    assert isinstance(lanes.base, Lookup)
    return lanes.base.name


def _independent(stmts: Sequence[Stmt], var: str, count: int, pointers: dict[str, Type]) -> bool:
    """Whether no step of a loop over `var` < `count` reads what another writes: each store
    goes to one element per step of a private array, or of a buffer in a loop that reads no
    writable buffer; each read of a written array is at the written element itself, or at a
    constant distance of at least `count` from it (a fold's other half)."""
    written: dict[str, Expr] = {}
    for stmt in stmts:
        match stmt:
            case Store(Subscript(Lookup(name), offset), _) if name in pointers:
                if written.setdefault(name, offset) != offset:
                    return False
            case Declare():
                pass
            case _:
                return False
    buffer = any(not pointers[name].is_array for name in written)  # others only read then
    if buffer and any(not pointers[name].is_const for name in _buffers_read(stmts, pointers)):
        return False
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, Subscript) and isinstance(node.base, Lookup):
                store = written.get(node.base.name)
                if store is None or node.offset == store:
                    continue
                distance = _distance(node.offset, store)
                if distance is None or abs(distance) < count or not _mentions(store, {var}):
                    return False
    return True


def _distance(offset: Expr, other: Expr) -> int | None:
    """`c` where `offset` is `other + c` as written (the generator's affine form), else None."""
    match offset:
        case Binary(BinOp.ADD, inner, IntConst(c)) if inner == other:
            return int(c)
        case Binary(BinOp.SUB, inner, IntConst(c)) if inner == other:
            return -int(c)
    match other:
        case Binary(BinOp.ADD, inner, IntConst(c)) if inner == offset:
            return -int(c)
    return None


def _statement(stmt: Stmt, width: int, pointers: dict[str, Type]) -> Stmt:
    """`stmt` with the first tile loop found in it widened (the same object when none is)."""
    match stmt:
        case Block(stmts):
            for position, inner in enumerate(stmts):
                new = _statement(inner, width, pointers)
                if new is not inner:
                    return replace(stmt, stmts=(*stmts[:position], new, *stmts[position + 1 :]))
            return stmt
        case If(_, then, None):
            new = _statement(then, width, pointers)
            return stmt if new is then else replace(stmt, then=new)
        case For(var, count, 1, Block((Declare(type_, x, start), *rest))):
            step = Load(Lookup(var))
            match start:
                case Binary(BinOp.ADD, base, inner) if inner == step:
                    pass
                case _ if start == step:  # a tile that starts at 0
                    base = IntConst(0)
                case _:
                    return stmt
            if not type_.is_index:
                return stmt
            if not _innermost(rest):  # an outer tile loop (rows): widen the loop inside
                body = _statement(stmt.body, width, pointers)
                return stmt if body is stmt.body else replace(stmt, body=body)
            if _mentions(base, {var}):
                raise _RefusedError
            if count % width:  # a loop over a whole row (`tile.lower.rows`): its last step ragged
                if base != IntConst(0) or any(isinstance(s, If) for s in rest):
                    raise _RefusedError  # no guard of its own
                bound = Binary(BinOp.LT, Load(Lookup(x)), IntConst(count))
                rest = [If(bound, Block(tuple(rest)))]
                stmt = replace(stmt, count=-(-count // width) * width)
            return _loop(stmt, x, base, tuple(rest), width, pointers)
        case _:
            return stmt


def _buffers_read(stmts: Sequence[Stmt], pointers: dict[str, Type]) -> set[str]:
    """The buffers (not private arrays) that `stmts` read."""
    loads = [n.ref for s in stmts for n in walk(s) if isinstance(n, Load)]
    bases = {ref.base.name for ref in loads if isinstance(ref, Subscript | Lanes)}  # type: ignore[union-attr]
    return {name for name in bases & pointers.keys() if not pointers[name].is_array}


def _innermost(stmts: list[Stmt]) -> bool:
    return not any(isinstance(node, For) for stmt in stmts for node in walk(stmt))


def _loop(
    loop: For, x: str, base: Expr, rest: tuple[Stmt, ...], width: int, pointers: dict[str, Type]
) -> For:
    """The widened loop: `x` steps by `width`; the body is guarded as the module says."""
    start = Binary(BinOp.ADD, base, Binary(BinOp.MUL, Load(Lookup(loop.var)), IntConst(width)))
    head = Declare(Type.index(), x, start)
    here = Load(Lookup(x))
    outer = None  # the part of a tile's guard that holds for every lane (other dimensions)
    match rest:
        case (
            If(
                Binary(BinOp.LAND, left, Binary(BinOp.LT, Load(Lookup(name)), IntConst()) as right),
                then,
                None,
            ),
        ) if name == x and not _mentions(left, {x, loop.var}):
            outer, rest = left, (If(right, then),)
        case _:
            pass
    match rest:
        case (If(Binary(BinOp.LT, Load(Lookup(name)), IntConst(size)), then, None),) if name == x:
            statements = then.stmts if isinstance(then, Block) else (then,)
            full = _Widener(x, width, pointers, None).block(statements)
            if size % width == 0:
                body: Stmt = If(Binary(BinOp.LT, here, IntConst(size)), full)
            else:
                count = Binary(BinOp.SUB, IntConst(size), here)
                ragged = _Widener(x, width, pointers, count).block(statements)
                fits = Binary(BinOp.LE, Binary(BinOp.ADD, here, IntConst(width)), IntConst(size))
                body = If(fits, full, If(Binary(BinOp.LT, here, IntConst(size)), ragged))
        case _:
            body = _Widener(x, width, pointers, None).block(rest)
    if outer is not None:
        body = If(outer, body)
    return For(loop.var, loop.count // width, 1, Block((head, body)), span=loop.span)


def _as_value(node: Node, x: str) -> bool:
    """Whether `node` reads `x` other than in the address of a memory access."""
    if isinstance(node, Subscript | Lanes):
        return False
    if isinstance(node, Load) and node.ref == Lookup(x):
        return True
    return any(_as_value(child, x) for child in children(node))


def _mentions(node: Node, names: set[str]) -> bool:
    return any(isinstance(inner, Lookup) and inner.name in names for inner in walk(node))


class _Widener:
    """Rewrites statements of one element into statements of `width` consecutive elements."""

    def __init__(self, x: str, width: int, pointers: dict[str, Type], count: Expr | None) -> None:
        self.x, self.width, self.pointers, self.count = x, width, pointers, count
        self.varying: set[str] = {x}  # names whose value differs between lanes

    def block(self, stmts: tuple[Stmt, ...]) -> Block:
        return Block(tuple(self.statement(stmt) for stmt in stmts))

    def statement(self, stmt: Stmt) -> Stmt:
        match stmt:
            case Declare(type_, name, init) if init is not None and not type_.is_array:
                if not _mentions(init, self.varying):
                    return stmt
                if not _lane_type(type_):
                    raise _RefusedError
                self.varying.add(name)
                return Declare(type_.with_width(self.width), name, self.value(init), span=stmt.span)
            case Store(Subscript(Lookup(pointer), offset), value):
                access = self.access(pointer, offset)
                if not isinstance(access, Lanes):
                    raise _RefusedError  # every lane would store to one element
                return Store(access, self.value(value), span=stmt.span)
            case Block(stmts):
                return replace(stmt, stmts=tuple(self.statement(inner) for inner in stmts))
            case If(cond, then, other) if not _mentions(cond, self.varying):
                other = None if other is None else self.statement(other)
                return If(self.value(cond), self.statement(then), other, span=stmt.span)
            case _:
                raise _RefusedError

    def value(self, expr: Expr) -> Expr:
        """`expr` over lanes: memory reads at `x` become `Lanes`, the rest is unchanged (the
        types of the widened variables make the arithmetic vector arithmetic)."""

        def visit(node: Node) -> Node | None:
            match node:
                case Load(Subscript(Lookup(pointer), offset)) if pointer in self.pointers:
                    return Load(self.access(pointer, offset))
                case Load(Subscript()):
                    raise _RefusedError  # a private or local array
                case Cast(type_, inner) if self.varies(inner):
                    if not _lane_type(type_):
                        raise _RefusedError
                    return Cast(type_.with_width(self.width), inner)
                case Cond(cond, then, other) if _mentions(cond, self.varying) and any(
                    isinstance(inner, Subscript | Lanes) for inner in (*walk(then), *walk(other))
                ):
                    raise _RefusedError  # a branch reading memory, chosen per lane
            return None

        result = rewrite(expr, visit)
        if _as_value(result, self.x):
            raise _RefusedError  # the coordinate itself as a value
        return result  # type: ignore[return-value]

    def varies(self, expr: Expr) -> bool:
        """Whether the (widened) `expr` differs between lanes."""
        return any(isinstance(node, Lanes) for node in walk(expr)) or _mentions(expr, self.varying)

    def access(self, pointer: str, offset: Expr) -> Subscript | Lanes:
        """The access at element `offset` for every lane: a scalar one where the offset does
        not depend on `x`, `Lanes` where it grows by 1 with `x`."""
        coefficient = _coefficient(offset, self.x, self.varying)
        if coefficient == 0:
            return Subscript(Lookup(pointer), offset)
        pointer_type = self.pointers.get(pointer)
        if coefficient != 1 or pointer_type is None or pointer_type.vec_width != 1:
            raise _RefusedError
        if pointer_type.dtype not in LANE_TYPES:
            raise _RefusedError
        return Lanes(Lookup(pointer), offset, self.width, self.count)


def _coefficient(expr: Expr, x: str, varying: set[str]) -> int:
    """The integer `c` with `expr = c * x + (terms without x)`; refuses anything else."""
    match expr:
        case Load(Lookup(name)) if name == x:
            return 1
        case Binary(BinOp.ADD, lhs, rhs):
            return _coefficient(lhs, x, varying) + _coefficient(rhs, x, varying)
        case Binary(BinOp.SUB, lhs, rhs):
            return _coefficient(lhs, x, varying) - _coefficient(rhs, x, varying)
        case Binary(BinOp.MUL, lhs, IntConst(factor)):
            return factor * _coefficient(lhs, x, varying)
        case Binary(BinOp.MUL, IntConst(factor), rhs):
            return factor * _coefficient(rhs, x, varying)
    if _mentions(expr, varying):
        raise _RefusedError
    return 0
