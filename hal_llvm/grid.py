"""The native calling convention of an LLVM kernel: the `__grid` entry point (7.1, 7.2).

Place in the pipeline: `render.py` emits, for every distinct kernel body `K`, a per-work-group
function and a wrapper that the runtime calls through ctypes:

    define internal void @K(ptr noalias %p0, ..., ptr noalias %pN-1,
                            i64 %gid0, i64 %gid1, i64 %gid2)          ; alwaysinline
    define void @K__grid(ptr %params, i64 %begin, i64 %end)

`params` points to an array of N buffer addresses, one per `KernelParam`, in `info.params`
order. The wrapper runs the half-open range [begin, end) of *linear* work-group ids, where
linear = g0 + S0 * (g1 + S1 * g2) for grid extents (S0, S1, S2) = `info.global_size` (one
work-item per work-group on the CPU, so work-group ids equal global ids) and g0 varies
fastest. The runtime may call the wrapper concurrently on disjoint ranges from several
threads. An empty range (begin >= end) returns at once.

This module holds the ABI in one place: the symbol naming rule, the ctypes prototype, and
`emit_grid_entry`, which builds the wrapper around any per-work-group function with
`llvmlite.ir.IRBuilder`. The renderer may use it; hand-written test kernels do.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from llvmlite import ir

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.kernel import KernelInfo

GRID_SUFFIX = "__grid"

# CFUNCTYPE, not PYFUNCTYPE: ctypes releases the GIL for the duration of the call, which is
# what lets the worker threads run slices of one grid in parallel (ARCHITECTURE.md A.1).
GRID_PROTOTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

_I64 = ir.IntType(64)
_BYTE_POINTER = ir.IntType(8).as_pointer()


def grid_symbol(body_name: str, variant: int = 0) -> str:
    """The exported symbol of the grid entry point for kernel body `body_name`: `K__grid`,
    then `K__grid1`, `K__grid2`, ... for the same body launched on other grids."""
    return body_name + GRID_SUFFIX + (str(variant) if variant else "")


def grid_symbols(kernels: Sequence[KernelInfo]) -> dict[int, tuple[str, int]]:
    """For each kernel with a body (by index): the symbol of its grid entry point and that
    entry's variant number. Kernels that share a body share an entry point when they launch
    the same grid extents (g2's extent never enters the unravelling); each other grid of the
    body gets a variant of its own, numbered in launch order."""
    grids: dict[str, list[tuple[int, int]]] = {}
    symbols = {}
    for index, info in enumerate(kernels):
        if info.body is None:
            continue
        seen = grids.setdefault(info.body.name, [])
        extents = (info.global_size[0], info.global_size[1])
        if extents not in seen:
            seen.append(extents)
        variant = seen.index(extents)
        symbols[index] = (grid_symbol(info.body.name, variant), variant)
    return symbols


def grid_function_type() -> ir.FunctionType:
    """`void (ptr params, i64 begin, i64 end)`."""
    return ir.FunctionType(ir.VoidType(), [_BYTE_POINTER, _I64, _I64])


def work_group_function_type(param_types: Sequence[ir.Type]) -> ir.FunctionType:
    """`void (ptr p0, ..., ptr pN-1, i64 gid0, i64 gid1, i64 gid2)` for the given pointers."""
    return ir.FunctionType(ir.VoidType(), [*param_types, _I64, _I64, _I64])


def emit_grid_entry(
    module: ir.Module, kernel: ir.Function, global_size: tuple[int, int, int], variant: int = 0
) -> ir.Function:
    """Add `@<kernel>__grid` (`grid_symbol(kernel, variant)`) to `module`: it loads the
    buffer addresses once, unravels `begin` into (g0, g1, g2) once, then runs a counted
    inner loop over g0 that carries into g1 and g2, calling `kernel(p0, ..., g0, g1, g2)`
    for each work-group.

    `kernel` must have the work-group signature (pointer parameters, then three i64 ids).
    The grid extents are constants, so LLVM folds the divisions and can unroll or
    vectorise the inner loop once `kernel` is inlined into it.
    """
    if len(kernel.args) < 3 or any(argument.type != _I64 for argument in kernel.args[-3:]):
        raise ValueError(f"{kernel.name} does not end with three i64 work-group ids")
    pointer_types = [argument.type for argument in kernel.args[:-3]]
    # An empty grid is never launched; clamping keeps its (unused) wrapper free of a
    # division by zero.
    size0, size1 = (ir.Constant(_I64, max(extent, 1)) for extent in global_size[:2])
    zero, one = ir.Constant(_I64, 0), ir.Constant(_I64, 1)

    function = ir.Function(module, grid_function_type(), grid_symbol(kernel.name, variant))
    params, begin, end = function.args
    params.name, begin.name, end.name = "params", "begin", "end"
    entry = function.append_basic_block("entry")
    row = function.append_basic_block("row")
    column = function.append_basic_block("column")
    row_end = function.append_basic_block("row_end")
    next_row = function.append_basic_block("next_row")
    done = function.append_basic_block("done")

    builder = ir.IRBuilder(entry)
    slots = builder.bitcast(params, _BYTE_POINTER.as_pointer(), name="slots")
    pointers = []
    for index, pointer_type in enumerate(pointer_types):
        slot = builder.gep(slots, [ir.Constant(_I64, index)], name=f"slot{index}")
        address = builder.load(slot, name=f"address{index}")
        pointers.append(builder.bitcast(address, pointer_type, name=f"param{index}"))
    start0 = builder.urem(begin, size0, name="start0")
    rest = builder.udiv(begin, size0, name="rest")
    start1 = builder.urem(rest, size1, name="start1")
    start2 = builder.udiv(rest, size1, name="start2")
    builder.cbranch(builder.icmp_unsigned("<", begin, end), row, done)

    # row: one run of g0 values with (g1, g2) fixed; `linear` is the id of its first group.
    builder.position_at_end(row)
    linear = builder.phi(_I64, name="linear")
    first0 = builder.phi(_I64, name="first0")
    group1 = builder.phi(_I64, name="g1")
    group2 = builder.phi(_I64, name="g2")
    to_row_end = builder.sub(size0, first0, name="to_row_end")
    to_end = builder.sub(end, linear, name="to_end")
    count = builder.select(
        builder.icmp_unsigned("<", to_row_end, to_end), to_row_end, to_end, name="count"
    )
    last0 = builder.add(first0, count, name="last0")
    builder.branch(column)

    builder.position_at_end(column)
    group0 = builder.phi(_I64, name="g0")
    builder.call(kernel, [*pointers, group0, group1, group2])
    following0 = builder.add(group0, one, name="g0.next")
    builder.cbranch(builder.icmp_unsigned("<", following0, last0), column, row_end)
    group0.add_incoming(first0, row)
    group0.add_incoming(following0, column)

    builder.position_at_end(row_end)
    following_linear = builder.add(linear, count, name="linear.next")
    builder.cbranch(builder.icmp_unsigned("<", following_linear, end), next_row, done)

    builder.position_at_end(next_row)
    bumped1 = builder.add(group1, one, name="g1.bumped")
    wraps = builder.icmp_unsigned("==", bumped1, size1, name="wraps")
    following1 = builder.select(wraps, zero, bumped1, name="g1.next")
    following2 = builder.add(group2, builder.zext(wraps, _I64), name="g2.next")
    builder.branch(row)

    linear.add_incoming(begin, entry)
    linear.add_incoming(following_linear, next_row)
    first0.add_incoming(start0, entry)
    first0.add_incoming(zero, next_row)
    group1.add_incoming(start1, entry)
    group1.add_incoming(following1, next_row)
    group2.add_incoming(start2, entry)
    group2.add_incoming(following2, next_row)

    builder.position_at_end(done)
    builder.ret_void()
    return function
