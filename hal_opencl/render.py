"""semtree to OpenCL C: the kernel renderer of the OpenCL back end (design 6.2).

Place in the pipeline: `program.py` hands each distinct kernel body of a `KernelList` to an
`OpenCLRenderer`, which prints it as an OpenCL C `__kernel` function. The renderer is pure and
deterministic (no device, no driver), so golden files pin its output.

`OpenCLRenderer` is a `semtree.printer.CPrinter` (through `expressions.ExpressionRenderer`,
which types and spells every expression) that overrides the kernel-level spellings:

- parameters are `__global [const] T* restrict`; `restrict` is left off the parameters named
  in the kernel's `safe_self_aliases`; a kernel whose launches all use one work-group size gets
  `reqd_work_group_size`;
- INDEX is `int`; booleans in memory and variables are `char` 0/1; half variables are `float`
  on devices without cl_khr_fp16 (rule 7), and stores convert to the memory form;
- `__local` declarations are hoisted to kernel scope (OpenCL allows them nowhere else); their
  initialisers stay where they were;
- conditions of `if` and `while` are made integers (OpenCL refuses some float conditions);
- loop nests of constant counts that unroll into at most `UNROLL_LIMIT` statements (register
  tiles, accumulator fills) carry `#pragma unroll`: PoCL 3.0 leaves them rolled and keeps
  the accumulator arrays in memory (a 512^2 matmul ran 3x slower).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hal_opencl.arithmetic import half_store
from hal_opencl.expressions import REGIONS, ExpressionRenderer
from hal_opencl.spelling import (
    UNARY,
    Helpers,
    Text,
    element_dtype,
    truth,
    vector_name,
)
from semtree.nodes import (
    Block,
    Declare,
    Expr,
    For,
    Function,
    If,
    Lanes,
    Lookup,
    LValue,
    Param,
    Stmt,
    Store,
    Subscript,
    UnsupportedNode,
    While,
    walk,
)
from semtree.types import DType, Region, Type
from semtree.typing import (
    lvalue_type,
    value_type,
)

if TYPE_CHECKING:
    from semtree.kernel import HardwareSettings

UNROLL_LIMIT = 64  # statements a fully unrolled loop nest may become


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """What the renderer needs to know about the device: its half and double support, the
    generator's math settings, and a name for messages."""

    native_fp16: bool = False
    fp64: bool = True
    fast_math: bool = False
    disable_mad: bool = False
    device: str = "this OpenCL device"

    @staticmethod
    def for_device(settings: HardwareSettings, device: str) -> RenderOptions:
        return RenderOptions(
            native_fp16=settings.native_fp16,
            fp64=settings.fp64,
            fast_math=settings.fast_math,
            disable_mad=settings.disable_mad,
            device=device,
        )


class OpenCLRenderer(ExpressionRenderer):
    """Prints semtree kernels as OpenCL C (see the module docstring for the conventions)."""

    def __init__(self, options: RenderOptions, helpers: Helpers | None = None) -> None:
        super().__init__(options, helpers)
        self._aliased: frozenset[str] = frozenset()
        self._local_size: tuple[int, int, int] = (0, 0, 0)
        self._hoisted: frozenset[str] = frozenset()

    # ---- kernels ---------------------------------------------------------------------------

    def kernel(
        self,
        function: Function,
        *,
        aliased: frozenset[str] = frozenset(),
        local_size: tuple[int, int, int] = (0, 0, 0),
    ) -> str:
        """`function` as a `__kernel`; `aliased` parameters get no `restrict`, and a non-zero
        `local_size` becomes a `reqd_work_group_size` attribute."""
        self._aliased, self._local_size = aliased, local_size
        try:
            return self.function(function)
        finally:
            self._aliased, self._local_size = frozenset(), (0, 0, 0)

    def function(self, function: Function) -> str:
        self.scope = {param.name: param.type for param in function.params}
        hoisted = hoisted_locals(function)
        self._hoisted = frozenset(declare.name for declare in hoisted)
        try:
            lines = [self.function_header(function) + " {"]
            lines += [self.indent + self.declaration(d.type, d.name) + ";" for d in hoisted]
            lines += self.statements(function.body.stmts, 1)
        finally:
            self._hoisted = frozenset()
        lines.append("}")
        return "\n".join(lines) + "\n"

    def function_qualifier(self) -> str:
        if any(self._local_size):
            sizes = ", ".join(str(size) for size in self._local_size)
            return f"__kernel __attribute__((reqd_work_group_size({sizes}))) "
        return "__kernel "

    def param_declaration(self, param: Param) -> str:
        if param.type.is_pointer:
            restrict = "" if param.name in self._aliased else " restrict"
            return f"{self.pointer_name(param.type)}{restrict} {param.name}"
        return f"{self.type_name(param.type)} {param.name}"

    def type_name(self, type_: Type) -> str:
        """The C type of a variable of `type_` (its memory form: booleans are `char`)."""
        if type_.is_void:
            return "void"
        if type_.is_index:
            return "int"
        if type_.base_is_pointer:
            return self.pointer_name(type_)
        stored = value_type(type_, self.native_fp16)
        return vector_name(element_dtype(stored), stored.vec_width)

    def declaration(self, type_: Type, name: str) -> str:
        if type_.is_array:
            element = type_.element()
            space = "" if type_.base_is_pointer else REGIONS[type_.region]
            text = f"{self.type_name(element)} {name}[{type_.array}]"
            return f"{space} {text}" if space else text
        space = REGIONS[type_.region] if not type_.base_is_pointer else ""
        text = f"{self.type_name(type_)} {name}"
        return f"{space} {text}" if space else text

    # ---- statements ------------------------------------------------------------------------

    def statement(self, stmt: Stmt, depth: int) -> list[str]:
        pad = self.indent * depth
        match stmt:
            case Store(ref, value):
                lines = [f"{pad}// {stmt.span}"] if stmt.span else []
                return [*lines, pad + self.store(ref, value)]
            case While(cond, body):
                lines = [f"{pad}// {stmt.span}"] if stmt.span else []
                lines.append(f"{pad}while ({self.condition(cond)}) {{")
                return [*lines, *self.body(body, depth + 1), pad + "}"]
            case For() if unrolled_size(stmt) <= UNROLL_LIMIT and self.registers_hold(stmt):
                lines = super().statement(stmt, depth)
                at = next(n for n, line in enumerate(lines) if line.startswith(f"{pad}for ("))
                return [*lines[:at], f"{pad}#pragma unroll", *lines[at:]]
            case _:
                return super().statement(stmt, depth)

    def registers_hold(self, stmt: Stmt) -> bool:
        """Whether every private array that `stmt` indexes could live in registers once its
        loops unroll: at most `UNROLL_LIMIT` elements. A larger one (the staging tile of a
        transposition) stays in memory whatever the unrolling, which then only leaves LLVM
        the enclosing loop to vectorise, with gathers and scatters (transpose 4096 on PoCL:
        25 ms unrolled, 19 rolled)."""
        for node in walk(stmt):
            if isinstance(node, Subscript | Lanes) and isinstance(node.base, Lookup):
                array = self.scope.get(node.base.name)
                if array is not None and in_memory(array):
                    return False
        return True

    def condition(self, cond: Expr) -> str:
        return truth(self.value(cond)).code

    def if_(self, stmt: If, depth: int) -> list[str]:
        pad = self.indent * depth
        lines = [f"{pad}if ({self.condition(stmt.cond)}) {{", *self.body(stmt.then, depth + 1)]
        other = stmt.other
        while (chained := self._else_if(other)) is not None:
            lines.append(f"{pad}}} else if ({self.condition(chained.cond)}) {{")
            lines += self.body(chained.then, depth + 1)
            other = chained.other
        if other is not None:
            lines += [pad + "} else {", *self.body(other, depth + 1)]
        lines.append(pad + "}")
        return lines

    def declare(self, stmt: Declare, depth: int) -> list[str]:
        pad = self.indent * depth
        type_, name, init = stmt.type, stmt.name, stmt.init
        hoisted = name in self._hoisted and type_.region is Region.LOCAL
        head = pad + self.declaration(type_, name)
        if not type_.is_array and init is not None:
            value = self.stored(init, type_).code
            return [f"{pad}{name} = {value};"] if hoisted else [f"{head} = {value};"]
        if hoisted:
            heads = []
        elif in_memory(type_):
            heads = self.memory_array(type_, name, depth)
        else:
            heads = [head + ";"]
        if init is None:
            return heads
        value = self.stored(init, type_.element()).code
        counter = f"{name}_fill"
        loop = f"for (int {counter} = 0; {counter} < {type_.array}; {counter} += 1)"
        fill = [f"{pad}{loop} {name}[{counter}] = {value};"]
        if type_.array <= UNROLL_LIMIT:
            fill.insert(0, f"{pad}#pragma unroll")
        return [*heads, *fill]

    def memory_array(self, type_: Type, name: str, depth: int) -> list[str]:
        """A private array too large for registers (a transposition's staging tile), declared
        as the one row of a two-dimensional array and used through a pointer to that row.
        Intel's CPU compiler vectorises the loops over the plain array form with gathers and
        scatters: transpose 4096 took 25-29 ms, 16-17 ms so (PoCL: the same either way)."""
        pad = self.indent * depth
        element = self.type_name(type_.element())
        return [
            f"{pad}{element} {name}_row[1][{type_.array}];",
            f"{pad}{element}* {name} = {name}_row[0];",
        ]

    def store(self, ref: LValue, value: Expr) -> str:
        target = lvalue_type(ref, self.scope, self.native_fp16)
        text = self.stored(value, target)
        if isinstance(ref, Lanes):
            return self.lanes(ref, text.code)
        packed = self.packed_access(ref)
        if packed is None:
            return f"{self.lvalue(ref)} = {text.code};"
        base, offset, pointer = packed
        width = str(pointer.vec_width) if pointer.vec_width > 1 else ""
        half = pointer.dtype is DType.FLOAT16 and not self.native_fp16
        if half and pointer.vec_width != 3:
            space = REGIONS[pointer.region]
            return half_store(text.code, base, offset, pointer.vec_width, space, self.helpers)
        function = f"vstore_half{width}" if half else f"vstore{width}"
        return f"{function}({text.code}, {offset}, {base});"

    def stored(self, value: Expr, target: Type) -> Text:
        """`value` converted to the memory form of a `target` variable or element."""
        if target.is_pointer:
            return self.value(value)
        if target.is_bool and target.is_vector:
            mask = self.typed(value, self._render(value), target, DType.INT8)
            return Text(f"-{mask.at(UNARY)}", UNARY, target)  # -1 lanes become char 1
        register = value_type(target, self.native_fp16)
        return self.typed(value, self._render(value), register)


def in_memory(type_: Type) -> bool:
    """A private array larger than registers could hold once its loops unroll
    (`UNROLL_LIMIT` elements): it stays in memory."""
    return type_.is_array and type_.array > UNROLL_LIMIT and type_.region is Region.PRIVATE


def unrolled_size(stmt: Stmt) -> float:
    """The statements `stmt` becomes once its constant loops are unrolled (inf with a
    `while`)."""
    match stmt:
        case For(_, count, _, body):
            return count * unrolled_size(body)
        case Block(stmts):
            return sum(unrolled_size(inner) for inner in stmts)
        case If(_, then, other):
            return 1 + unrolled_size(then) + (0 if other is None else unrolled_size(other))
        case While():
            return math.inf
        case _:
            return 1


def hoisted_locals(function: Function) -> list[Declare]:
    """The `__local` declarations of `function`, which OpenCL C allows only at kernel scope.
    Raises UnsupportedNode when a name is declared twice (hoisting would merge them)."""
    declares = [node for node in walk(function.body) if isinstance(node, Declare)]
    hoisted = [d for d in declares if d.type.region is Region.LOCAL and not d.type.base_is_pointer]
    names = [declare.name for declare in declares] + [param.name for param in function.params]
    for declare in hoisted:
        if names.count(declare.name) > 1:
            raise UnsupportedNode(
                declare, f"__local {declare.name} is declared more than once in {function.name}"
            )
    return hoisted
