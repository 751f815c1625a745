"""Vector lanes in LLVM IR: counted `semtree.Lanes` accesses, masked loads and stores of the
lanes below a count (`llvm.masked.load`/`llvm.masked.store`, which AVX-512 runs as k-masked
moves), and `semtree.Shuffle` (a `shufflevector`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from hal_llvm.render_types import I32, I64, intrinsic_suffix

if TYPE_CHECKING:
    from hal_llvm.render_math import Declarations


def lane_mask(builder: ir.IRBuilder, count: ir.Value, width: int) -> ir.Value:
    """`<width x i1>`: lane < `count` (an i64; any value, negative included)."""
    limit = builder.select(
        builder.icmp_signed("<", count, ir.Constant(I64, width)), count, ir.Constant(I64, width)
    )
    lanes = ir.VectorType(I32, width)
    splat = builder.insert_element(
        ir.Constant(lanes, ir.Undefined), builder.trunc(limit, I32), ir.Constant(I32, 0)
    )
    splat = builder.shuffle_vector(
        splat, ir.Constant(lanes, ir.Undefined), ir.Constant(lanes, [0] * width)
    )
    return builder.icmp_signed("<", ir.Constant(lanes, list(range(width))), splat)


def lanes_index(builder: ir.IRBuilder, index: ir.Value, count: ir.Value) -> ir.Value:
    """The element index of a counted access: `index`, or 0 where `count` <= 0. An access of
    no lanes (the rows of an edge tile past the shape) may lie far past its buffer, and a
    masked-off lane on a page never written costs a fault suppressed in microcode: an edge
    tile's 160 empty 8-lane stores a launch took 0.45 ms (AMD Zen 5, B.T packed for 16 x 300
    x 2000 where the buffer ended the heap). Element 0 of a buffer is always mapped."""
    live = builder.icmp_signed(">", count, ir.Constant(I64, 0))
    return builder.select(live, index, ir.Constant(I64, 0))


def masked_load(
    builder: ir.IRBuilder,
    declarations: Declarations,
    pointer: ir.Value,
    alignment: int,
    mask: ir.Value,
    vector: ir.Type,
    others: ir.Value | None = None,
) -> ir.Value:
    """The lanes of `mask` read from `pointer`, those of `others` (0 without) in the others."""
    name = f"llvm.masked.load.{intrinsic_suffix(vector)}.p0"
    function = declarations.function(name, vector, [pointer.type, I32, mask.type, vector])
    others = ir.Constant(vector, None) if others is None else others
    arguments = [pointer, ir.Constant(I32, alignment), mask, others]
    return builder.call(function, arguments)


def masked_store(
    builder: ir.IRBuilder,
    declarations: Declarations,
    pointer: ir.Value,
    alignment: int,
    mask: ir.Value,
    value: ir.Value,
) -> ir.Value:
    """Store the lanes of `mask` of `value` to `pointer`; the other elements untouched."""
    vector = value.type
    function = declarations.function(
        f"llvm.masked.store.{intrinsic_suffix(vector)}.p0",
        ir.VoidType(),
        [vector, pointer.type, I32, mask.type],
    )
    return builder.call(function, [value, pointer, ir.Constant(I32, alignment), mask])


def shuffle(
    builder: ir.IRBuilder, first: ir.Value, second: ir.Value, mask: tuple[int, ...]
) -> ir.Value:
    """The lanes `mask` of `first` followed by `second` (two vectors of one type)."""
    return builder.shuffle_vector(
        first, second, ir.Constant(ir.VectorType(I32, len(mask)), list(mask))
    )
