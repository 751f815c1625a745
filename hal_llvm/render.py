"""KernelList -> LLVM IR: the renderer of the LLVM CPU backend (design 7.2).

Place in the pipeline: `LLVMCompiler.build` calls `render(kernel_list, settings)` and hands
the `llvmlite.ir.Module` to `compile_module` (O3 for the host CPU, then MCJIT). `render` is
pure and deterministic: the same KernelList and settings give the same IR text.

For every distinct kernel body `K` (bodies are shared by name; ZERO and COPY kernels have
none: the device runs them as memset/memmove) the module holds

    define internal void @K(ptr noalias align 64 %out, ..., i64 %gid0, i64 %gid1, i64 %gid2)
    define void @K__grid(ptr %params, i64 %begin, i64 %end)       ; from grid.py

`@K` is one work-item, which on the CPU is one whole work-group (design 7.1): local
ids are 0, group ids are global ids, barriers are no-ops and LOCAL arrays live on the stack.
It is internal and always-inline, so it melts into the grid loop. Statements become basic
blocks, every declaration an `alloca` in the entry block (SROA turns register tiles into
registers once LLVM has unrolled their constant-count loops), and `For` loops counted loops
with constant trip counts. Expressions are `render_expr.py`'s; builtins `render_math.py`'s.

The grid wrapper sets the CPU to flush denormals to zero for its duration (restoring the
caller's mode on exit) unless `flush_denormals=False`: denormal operands make x86 float
code 10 to 200 times slower (PERFORMANCE.md 4.5); results below 1.2e-38 (float32) or
2.2e-308 (float64) become 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.binding as llvm
from llvmlite import ir

from hal_llvm.grid import emit_grid_entry, grid_symbols, work_group_function_type
from hal_llvm.render_expr import ExpressionEmitter, Variable
from hal_llvm.render_math import Declarations
from hal_llvm.render_types import (
    BUFFER_ALIGNMENT,
    I1,
    I8,
    I32,
    I64,
    INDEX,
    pointer_type,
    register_type,
)
from semtree.kernel import Direction
from semtree.nodes import (
    Barrier,
    Binary,
    BinOp,
    Block,
    Builtin,
    Call,
    Declare,
    For,
    If,
    Lanes,
    Load,
    Lookup,
    Return,
    Select,
    Store,
    Subscript,
    UnsupportedNode,
    While,
    walk,
)
from semtree.typing import check_function

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import HardwareSettings, KernelInfo, KernelList
    from semtree.nodes import Expr, Function, Node, Stmt
    from semtree.types import Type

# Arrays up to this many elements are initialised with straight-line stores (what SROA
# promotes most easily); longer ones with a loop.
_UNROLLED_FILL = 32

# MXCSR bits: FTZ (flush results to zero) and DAZ (treat denormal operands as zero).
_FLUSH_TO_ZERO = 0x8040


def render(
    kernel_list: KernelList, settings: HardwareSettings, *, flush_denormals: bool = True
) -> ir.Module:
    """One module with `@K` and `@K__grid` for every distinct kernel body of the list."""
    names = [info.name for info in kernel_list.kernels]
    module = ir.Module(name=names[0] if names else "empty")
    module.triple = llvm.get_process_triple()
    declarations = Declarations(module)
    flush = flush_denormals and module.triple.startswith(("x86_64", "i386", "i686"))
    symbols = grid_symbols(kernel_list.kernels)
    for infos in _by_body(kernel_list).values():
        body = infos[0].body
        assert body is not None
        function = KernelEmitter(declarations, body, settings, infos).emit()
        emitted = set()
        for info in infos:
            _, variant = symbols[kernel_list.kernels.index(info)]
            if variant in emitted:
                continue
            emitted.add(variant)
            grid = emit_grid_entry(module, function, info.global_size, variant)
            grid.attributes.add("nounwind")
            if flush:
                _flush_denormals(grid, declarations)
    return module


def _by_body(kernel_list: KernelList) -> dict[str, list[KernelInfo]]:
    """The kernels of each distinct body, in launch order: one work-group function serves
    them all, with one grid entry point per grid they launch (`grid_symbols`)."""
    groups: dict[str, list[KernelInfo]] = {}
    for info in kernel_list.kernels:
        if info.body is not None:
            groups.setdefault(info.body.name, []).append(info)
    return groups


def _may_alias(infos: Sequence[KernelInfo]) -> set[int]:
    """Indices of parameters that may share memory with another parameter written by the
    kernel: the same tensor bound twice (with an output among them) or a declared safe
    self-alias. All others get `noalias`."""
    aliased: set[int] = set()
    for info in infos:
        names = [param.name for param in info.params]
        written = {param.name for param in info.params if param.direction is Direction.OUT}
        for index, name in enumerate(names):
            if names.count(name) > 1 and name in written:
                aliased.add(index)
        for pair in info.safe_self_aliases:
            aliased.update(index for index, name in enumerate(names) if name in pair)
    return aliased


def _assigned_names(body: Function) -> set[str]:
    return {
        node.ref.name
        for node in walk(body)
        if isinstance(node, Store) and isinstance(node.ref, Lookup)
    }


class KernelEmitter(ExpressionEmitter):
    """Emits one kernel body as `@K`: parameters, statements and control flow."""

    def __init__(
        self,
        declarations: Declarations,
        body: Function,
        settings: HardwareSettings,
        infos: Sequence[KernelInfo],
    ) -> None:
        self.body = body
        self.infos = infos
        module = declarations.module
        params = [pointer_type(param.type) for param in body.params]
        for param in body.params:
            if not param.type.is_pointer:
                raise UnsupportedNode(param, "kernel parameters are buffer pointers")
        self.function = ir.Function(module, work_group_function_type(params), body.name)
        self.function.linkage = "internal"
        for attribute in ("alwaysinline", "nounwind", "norecurse"):
            self.function.attributes.add(attribute)
        entry_builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self.first_block = self.function.append_basic_block("body")
        super().__init__(ir.IRBuilder(self.first_block), entry_builder, declarations, settings)
        self.ids = tuple(self.function.args[-3:])
        for argument, name in zip(self.ids, ("gid0", "gid1", "gid2"), strict=True):
            argument.name = name

    def emit(self) -> ir.Function:
        check_function(self.body, self.native_fp16)
        self._bind_parameters()
        self.statement(self.body.body)
        if not self.builder.block.is_terminated:
            self.builder.ret_void()
        self.entry_builder.branch(self.first_block)
        return self.function

    def _bind_parameters(self) -> None:
        aliased = _may_alias(self.infos)
        assigned = _assigned_names(self.body)
        for index, (param, argument) in enumerate(
            zip(self.body.params, self.function.args, strict=False)
        ):
            argument.name = param.name
            argument.attributes.align = BUFFER_ALIGNMENT  # CpuBuffers are 64-byte aligned
            if index not in aliased:
                argument.add_attribute("noalias")
            # The device refuses buffers smaller than the tensor, so the whole tensor is
            # dereferenceable, which lets LLVM hoist loads out of conditions.
            size = min((_param_bytes(info, index) for info in self.infos), default=0)
            if size:
                argument.attributes.dereferenceable = size
            if param.name in assigned:
                storage = self.alloca(argument.type, param.name)
                self.entry_builder.store(argument, storage)
                self.scope[param.name] = Variable(param.type, storage=storage)
            else:
                self.scope[param.name] = Variable(
                    param.type, value=argument, alignment=BUFFER_ALIGNMENT
                )

    # ---- statements ----------------------------------------------------------------------------

    def statement(self, stmt: Stmt) -> None:
        match stmt:
            case Declare(type_, name, init):
                self._declare(type_, name, init)
            case Store(ref, value):
                self.store(ref, value)
            case Block(stmts):
                outer = dict(self.scope)
                for item in stmts:
                    if self.builder.block.is_terminated:
                        break  # after a return: the rest of the block never runs
                    self.statement(item)
                self.scope = outer
            case If(cond, then, other):
                self._if(cond, then, other)
            case For(var, count, step, body):
                self._for(var, count, step, body)
            case While(cond, body):
                self._while(cond, body)
            case Barrier():
                pass  # one work-item per work-group: nobody to wait for (7.1)
            case Return(None):
                self.builder.ret_void()
            case _:
                raise UnsupportedNode(stmt)

    def _scoped(self, stmt: Stmt) -> None:
        outer = dict(self.scope)
        self.statement(stmt)
        self.scope = outer

    def _continue_to(self, block: ir.Block) -> None:
        if not self.builder.block.is_terminated:
            self.builder.branch(block)

    def _declare(self, type_: Type, name: str, init: Expr | None) -> None:
        element = type_.element() if type_.is_array else type_
        register = self.value_type(element)
        storage_type = register_type(register)
        if type_.is_array:
            storage_type = ir.ArrayType(storage_type, type_.array)
        storage = self.alloca(storage_type, name)
        if init is not None:
            value = self.prepared(init, register)  # evaluated once, before `name` exists
            if type_.is_array:
                self._fill(storage, value, type_.array)
            else:
                self.builder.store(value, storage)
        self.scope[name] = Variable(type_, storage=storage)

    def _fill(self, storage: ir.Value, value: ir.Value, count: int) -> None:
        builder = self.builder
        zero = ir.Constant(I64, 0)
        if count <= _UNROLLED_FILL:
            for index in range(count):
                element = builder.gep(storage, [zero, ir.Constant(I64, index)], inbounds=True)
                builder.store(value, element)
            return
        counter = self.alloca(I64, "fill")
        builder.store(zero, counter)
        loop, done = builder.append_basic_block("fill"), builder.append_basic_block("fill.end")
        builder.branch(loop)
        builder.position_at_end(loop)
        index = builder.load(counter)
        builder.store(value, builder.gep(storage, [zero, index], inbounds=True))
        following = builder.add(index, ir.Constant(I64, 1), flags=("nsw",))
        builder.store(following, counter)
        builder.cbranch(builder.icmp_signed("<", following, ir.Constant(I64, count)), loop, done)
        builder.position_at_end(done)

    def _if(self, cond: Expr, then: Stmt, other: Stmt | None) -> None:
        builder = self.builder
        truth = self.truth(self.expression(cond))
        then_block = builder.append_basic_block("if.then")
        other_block = builder.append_basic_block("if.else") if other is not None else None
        merge = builder.append_basic_block("if.end")
        builder.cbranch(truth, then_block, other_block or merge)
        builder.position_at_end(then_block)
        self._scoped(then)
        self._continue_to(merge)
        if other is not None and other_block is not None:
            builder.position_at_end(other_block)
            self._scoped(other)
            self._continue_to(merge)
        builder.position_at_end(merge)

    def _for(self, var: str, count: int, step: int, body: Stmt) -> None:
        """`var` = 0, step, ..., (count - 1) * step, as a bottom-tested loop with a constant
        trip count (the form LLVM unrolls and vectorises without further proof)."""
        if count == 0:
            return
        builder = self.builder
        counter = self.alloca(I64, var)
        builder.store(ir.Constant(I64, 0), counter)
        loop = builder.append_basic_block(f"{var}.loop")
        done = builder.append_basic_block(f"{var}.end")
        builder.branch(loop)
        builder.position_at_end(loop)
        outer = dict(self.scope)
        self.scope[var] = Variable(INDEX, storage=counter)
        self.statement(body)
        self.scope = outer
        if not builder.block.is_terminated:
            following = builder.add(builder.load(counter), ir.Constant(I64, step), flags=("nsw",))
            builder.store(following, counter)
            end = ir.Constant(I64, count * step)
            latch = builder.cbranch(builder.icmp_signed("<", following, end), loop, done)
            self._mark_loop(latch, body, var)
        builder.position_at_end(done)

    def _while(self, cond: Expr, body: Stmt) -> None:
        builder = self.builder
        header = builder.append_basic_block("while.cond")
        loop = builder.append_basic_block("while.body")
        done = builder.append_basic_block("while.end")
        builder.branch(header)
        builder.position_at_end(header)
        builder.cbranch(self.truth(self.expression(cond)), loop, done)
        builder.position_at_end(loop)
        self._scoped(body)
        if not builder.block.is_terminated:
            self._mark_loop(builder.branch(header), body)
        builder.position_at_end(done)

    def _mark_loop(self, latch: ir.Instruction, body: Stmt, var: str | None = None) -> None:
        """Keep LLVM's loop vectoriser off a loop that carries a MAX or MIN.

        LLVM 22 (llvmlite 0.50) vectorises `maxnum`/`minnum` reductions with a NaN check and
        gets them wrong: at trip counts that are not a multiple of its vector width it drops
        the remainder iterations (a row max over 7 columns reads 4), and at some others an
        assertion inside its cost model aborts the process. Our own lane reductions
        (tile.lower.vector) vectorise the reductions worth it; this loop stays scalar.
        """
        if not carries_min_max(body, var):
            return
        module = self.function.module
        disable = module.add_metadata(
            [ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 0)]
        )
        # A loop id refers to itself (which also keeps it distinct from every other loop's).
        loop_id = ir.values.MDValue(module, [], name=str(len(module.metadata)))
        loop_id.operands = (loop_id, disable)
        latch.set_metadata("llvm.loop", loop_id)


def carries_min_max(body: Stmt, var: str | None = None) -> bool:
    """Whether a loop over `var` with this body carries a MAX or MIN from one iteration to the
    next: a MAX or MIN call reads a variable, declared outside the body, that the body stores
    to at a place that does not depend on `var` (`acc = max(acc, x)`, `acc[r] = max(acc[r],
    x)` in a loop over another variable; not `acc[lane] = max(acc[lane], x)` in the loop over
    `lane`, whose iterations are independent and which LLVM vectorises correctly)."""
    dependent = {var} if var is not None else set()
    declared = set()
    for node in walk(body):
        if isinstance(node, Declare):
            declared.add(node.name)
            if node.init is not None and _names(node.init) & dependent:
                dependent.add(node.name)
    carried = {
        _root(node.ref)
        for node in walk(body)
        if isinstance(node, Store) and not _names(node.ref) & dependent
    } - declared
    return any(
        _min_max(node)
        and any(isinstance(read, Load) and _root(read.ref) in carried for read in walk(node))
        for node in walk(body)
    )


def _min_max(node: Node) -> bool:
    """A MAX or MIN call, or the choice an aggregation writes for one (`x > acc ? x : acc`,
    `tile.lower.ops.aggregate`)."""
    if isinstance(node, Call):
        return node.fn in (Builtin.MAX, Builtin.MIN)
    return (
        isinstance(node, Select)
        and isinstance(node.cond, Binary)
        and node.cond.op in (BinOp.GT, BinOp.LT)
    )


def _names(node: Node) -> set[str]:
    return {n.name for n in walk(node) if isinstance(n, Lookup)}


def _root(ref: object) -> str:
    while isinstance(ref, Subscript | Lanes):
        ref = ref.base
    return ref.name if isinstance(ref, Lookup) else ""


def _param_bytes(info: KernelInfo, index: int) -> int:
    param = info.params[index]
    count = 1
    for extent in param.shape:
        count *= extent
    return count * param.dtype.itemsize


def _flush_denormals(grid: ir.Function, declarations: Declarations) -> None:
    """Set FTZ and DAZ in MXCSR on entry to `grid` and restore the caller's MXCSR before
    every return (a few nanoseconds per call; PERFORMANCE.md 4.5)."""
    byte_pointer = I8.as_pointer()
    read = declarations.function("llvm.x86.sse.stmxcsr", ir.VoidType(), [byte_pointer])
    write = declarations.function("llvm.x86.sse.ldmxcsr", ir.VoidType(), [byte_pointer])
    builder = ir.IRBuilder(grid.entry_basic_block)
    builder.position_at_start(grid.entry_basic_block)
    saved = builder.alloca(I32, name="mxcsr.saved")
    flushing = builder.alloca(I32, name="mxcsr.flushing")
    builder.call(read, [builder.bitcast(saved, byte_pointer)])
    mode = builder.or_(builder.load(saved), ir.Constant(I32, _FLUSH_TO_ZERO))
    builder.store(mode, flushing)
    builder.call(write, [builder.bitcast(flushing, byte_pointer)])
    for block in grid.blocks:
        terminator = block.terminator
        if isinstance(terminator, ir.Ret):
            builder.position_before(terminator)
            builder.call(write, [builder.bitcast(saved, byte_pointer)])
