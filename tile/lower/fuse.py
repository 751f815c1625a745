"""Fusion and buffer planning: which operations share a kernel, which values reach memory
(design 3.4 "unification", 8.5).

Sits between binding (`BoundProgram.ops`, in execution order) and kernel generation
(`tile.lower.generate`). Every kernel of this generator iterates over the full shape of what it
writes, one work-item per output element (or tile), so fusion is a matter of shapes and
availability:

* a **contraction** starts a kernel whose grid is its output shape;
* an **elementwise** operation (and the position-only builtins `index` and `shape`, and
  `gather`) joins an earlier kernel of the same shape when each of its inputs is a constant,
  a value that kernel computes at the same element (kept in registers), or a buffer complete
  before that kernel starts. It prefers the latest kernel computing one of its inputs
  (vertical fusion: the epilogue of a contraction, or a chain); otherwise the latest
  elementwise kernel that fits (horizontal fusion); otherwise it starts a new kernel;
* `reshape` never moves data when it can alias its source's buffer: a temporary reshaped into
  a program output is computed straight into the output's buffer; only a reshape between two
  buffers the caller owns (inputs, outputs) becomes a copy;
* `scatter` and the `prng_value`/`prng_state` pair of one `prng_step` get kernels of their own.

A value reaches a buffer only if it is a program output or some other kernel (or a
non-elementwise read: a contraction operand, a `default`, a `gather` table) needs it. Dead
operations are dropped first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING

from tile.bind.program import ConstBinding, OpKind, TensorBinding

if TYPE_CHECKING:
    from collections.abc import Mapping

    from semtree.types import TensorShape
    from tile.bind.program import Binding, BoundOp, BoundProgram


class PlanKind(Enum):
    CONTRACTION = "contraction"  # a contraction, maybe with an elementwise epilogue
    ELEMENTWISE = "elementwise"  # a fused group of elementwise operations
    COPY = "copy"  # a reshape between two caller-owned buffers
    SCATTER = "scatter"
    PRNG = "prng"  # prng_value and/or prng_state of one prng_step


# Special operations that are functions of the element position (plus buffer reads), and so
# fuse like elementwise operations.
POSITIONAL = frozenset({"index", "shape", "gather"})


@dataclass(frozen=True, slots=True)
class KernelPlan:
    kind: PlanKind
    shape: tuple[int, ...]  # the grid: the shape of every value the kernel computes
    ops: tuple[BoundOp, ...]  # in execution order; a contraction comes first
    stores: tuple[str, ...]  # the values written to buffers

    @property
    def contraction(self) -> BoundOp | None:
        first = self.ops[0]
        return first if first.kind is OpKind.CONTRACTION else None


@dataclass(frozen=True, slots=True)
class ProgramPlan:
    kernels: tuple[KernelPlan, ...]
    buffer_of: Mapping[str, str]  # tensor name -> the buffer holding its elements
    shapes: Mapping[str, TensorShape]  # buffer -> shape
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    temporaries: tuple[str, ...]


def reads(op: BoundOp) -> list[tuple[str, bool]]:
    """The tensors whose elements `op` reads, each with whether the read is local (the
    element at the same position, up to broadcasting) rather than anywhere in the tensor."""
    match op.kind, op.fn:
        case OpKind.CONTRACTION, _:
            return [(name, False) for name in op.inputs]
        case OpKind.ELEMENTWISE, _:
            return [(name, True) for name in op.inputs]
        case _, "index" | "shape":
            return []  # only the shape of the argument matters
        case _, "scatter":
            return [(op.inputs[0], False), (op.inputs[1], False)]  # the target's values unused
        case _:
            return [(name, False) for name in op.inputs]


@dataclass(slots=True)
class _Group:
    kind: PlanKind
    shape: tuple[int, ...]
    index: int
    ops: list[BoundOp] = field(default_factory=list)
    produced: set[str] = field(default_factory=set)


def plan_program(bound: BoundProgram) -> ProgramPlan:
    """Group the live operations of `bound` into kernels and assign buffers."""
    return _Planner(bound).run()


class _Planner:
    def __init__(self, bound: BoundProgram) -> None:
        self.bound = bound
        self.bindings: Mapping[str, Binding] = bound.bindings
        self.inputs = tuple(
            name
            for name in bound.inputs
            if isinstance(bound.input_bindings.get(name, bound.bindings[name]), TensorBinding)
        )
        self.outputs = bound.output_names
        self.pinned = set(self.inputs) | set(self.outputs)
        self.parent: dict[str, str] = {}  # reshape alias -> the name it aliases
        self.class_buffer: dict[str, str] = {}  # alias class root -> buffer name
        self.groups: list[_Group] = []
        self.group_of: dict[str, _Group] = {}
        self.ready: dict[str, int] = dict.fromkeys(self.inputs, -1)

    # ---- helpers -------------------------------------------------------------------------------

    def constant(self, name: str) -> bool:
        return isinstance(self.bindings[name], ConstBinding)

    def dims(self, name: str) -> tuple[int, ...]:
        binding = self.bindings[name]
        return binding.shape.dims if isinstance(binding, TensorBinding) else ()

    def root(self, name: str) -> str:
        while name in self.parent:
            name = self.parent[name]
        return name

    def buffer(self, name: str) -> str:
        root = self.root(name)
        return self.class_buffer.get(root, root)

    # ---- the passes ----------------------------------------------------------------------------

    def live_ops(self) -> list[BoundOp]:
        ops = self.bound.ops
        needed = set(self.outputs)
        live = [False] * len(ops)
        state_steps: set[int] = set()
        changed = True
        while changed:
            changed = False
            for index in reversed(range(len(ops))):
                op = ops[index]
                if live[index]:
                    continue
                drawn = op.fn == "prng_value" and op.params[0] in state_steps
                if op.output not in needed and not drawn:
                    continue
                live[index] = changed = True
                if op.fn == "prng_state":
                    state_steps.add(op.params[0])
                if op.fn == "reshape":
                    needed.add(op.inputs[0])
                needed.update(name for name, _ in reads(op))
        return [op for op, alive in zip(ops, live, strict=True) if alive]

    def run(self) -> ProgramPlan:
        prng_groups: dict[int, _Group] = {}
        for op in self.live_ops():
            if op.fn == "reshape" and self.constant(op.inputs[0]):
                op = replace(op, kind=OpKind.ELEMENTWISE, fn="ident")
            if op.kind is OpKind.CONTRACTION:
                group = self.new_group(PlanKind.CONTRACTION, self.dims(op.output))
            elif op.kind is OpKind.ELEMENTWISE or op.fn in POSITIONAL:
                group = self.place(op)
            elif op.fn == "reshape":
                if self.alias(op):
                    continue
                group = self.new_group(PlanKind.COPY, self.dims(op.output))
            elif op.fn == "scatter":
                group = self.new_group(PlanKind.SCATTER, self.dims(op.output))
            else:  # prng_value, prng_state
                step = op.params[0]
                if step not in prng_groups:
                    prng_groups[step] = self.new_group(PlanKind.PRNG, tuple(op.params[1:]))
                group = prng_groups[step]
            group.ops.append(op)
            group.produced.add(op.output)
            self.group_of[op.output] = group
            self.ready[op.output] = group.index
        return self.finish()

    def new_group(self, kind: PlanKind, shape: tuple[int, ...]) -> _Group:
        group = _Group(kind, shape, len(self.groups))
        self.groups.append(group)
        return group

    def alias(self, op: BoundOp) -> bool:
        """Make `op` (a reshape) an alias of its source's buffer; False if it needs a copy."""
        source = self.root(op.inputs[0])
        if op.output in self.pinned:
            if self.buffer(source) in self.pinned:
                return False
            self.class_buffer[source] = op.output
        self.parent[op.output] = source
        self.ready[op.output] = self.ready[source]
        return True

    def fits(self, group: _Group, op: BoundOp) -> bool:
        for name, local in reads(op):
            if self.constant(name):
                continue
            if local and name in group.produced:
                continue
            if self.ready[name] >= group.index:
                return False
        return True

    def place(self, op: BoundOp) -> _Group:
        shape = self.dims(op.output)
        local = {name for name, is_local in reads(op) if is_local}
        fallback = None
        for group in reversed(self.groups):
            if group.shape != shape or group.kind not in (
                PlanKind.CONTRACTION,
                PlanKind.ELEMENTWISE,
            ):
                continue
            if not self.fits(group, op):
                continue
            if local & group.produced:
                return group
            if fallback is None and group.kind is PlanKind.ELEMENTWISE:
                fallback = group
        return fallback or self.new_group(PlanKind.ELEMENTWISE, shape)

    def finish(self) -> ProgramPlan:
        stored: set[str] = set()
        for name in self.outputs:
            if name not in self.inputs:
                stored.add(self.root(name))
        for group in self.groups:
            for op in group.ops:
                sources = [name for name, _ in reads(op)]
                if group.kind is PlanKind.COPY:
                    sources = [op.inputs[0]]
                for name in sources:
                    if self.constant(name):
                        continue
                    owner = self.root(name)
                    local = group.kind in (PlanKind.ELEMENTWISE, PlanKind.CONTRACTION) and any(
                        n == name and is_local for n, is_local in reads(op)
                    )
                    if owner != name or self.group_of.get(owner) is not group or not local:
                        stored.add(owner)
        kernels = []
        written: list[str] = []
        buffer_of: dict[str, str] = {name: name for name in self.inputs}
        for group in self.groups:
            stores = tuple(op.output for op in group.ops if op.output in stored)
            kernels.append(KernelPlan(group.kind, group.shape, tuple(group.ops), stores))
            written += [self.buffer(name) for name in stores]
        for name in list(self.bindings):
            if not self.constant(name) and (name in self.ready or name in self.outputs):
                buffer_of[name] = self.buffer(name)
        shapes: dict[str, TensorShape] = {}
        for buffer in dict.fromkeys([*self.inputs, *self.outputs, *written]):  # stable order
            binding = self.bindings[buffer]
            assert isinstance(binding, TensorBinding)
            shapes[buffer] = binding.shape
        temporaries = tuple(
            dict.fromkeys(b for b in written if b not in self.inputs and b not in self.outputs)
        )
        return ProgramPlan(
            tuple(kernels), buffer_of, shapes, self.inputs, self.outputs, temporaries
        )
