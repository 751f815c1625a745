"""Jammed steps of a streaming reduction (llvm_cpu; issue 11 item 3).

Where a reduction streams its operands from memory in strips of rows (`tile.lower.tiles`:
every operand contiguous along the tile's last dimension, or constant along it; more than
`CACHED_BYTES`), one pass of the generic kernel's tile loop (`tile.lower.contract`) takes
`JAM_STEPS` consecutive steps of the innermost reduction loop (unroll and jam): several rows
stream at once, and the accumulators are loaded and stored once per pass. Each element still
adds its tuples in the order of the reduction, so the results are the same bits. The steps
left at the end of the reduction take one shorter pass.

Not with guards, derived variables or hit flags, which test each step; not in lanes or over
rows counted at run time; and not with accumulators in registers (a strip within `max_regs`),
where the longer pass ran slower: matvec-T 1000 x 1000 from the caches, 0.10 ms one row a
pass, 0.18 with four; 4099 x 3001 from memory in AVX2 code, strips of 64, 4.4 and 4.8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from semtree.nodes import Load, Lookup
from tile.lower.accumulators import accumulator_dtype
from tile.lower.kernel import affine, product
from tile.lower.tiles import from_memory, streaming

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from semtree.kernel import HardwareSettings
    from semtree.nodes import Expr, Stmt
    from tile.lower.flat import FlatContraction

# Steps per pass: matvec-T 4096 in strips of 2048 columns, 4.1 ms one row a pass, 2.7 with
# four (AMD Zen 4, 2 threads).
JAM_STEPS = 4


class Element(Protocol):
    inside: Expr | None  # the element's test against the shape; `contribute` may clear it


Statements = tuple[list["Stmt"], list[tuple[int, "Stmt"]]]  # statements, hoisted by level


def jam_steps(
    flat: FlatContraction,
    shape: Sequence[int],
    tiles: Sequence[int],
    settings: HardwareSettings,
    *,
    plain: bool,
) -> int:
    """How many steps of `flat`'s innermost reduction loop one pass takes, for a kernel
    writing `shape` in `tiles`; `plain`: no lanes, hit flags or rows counted at run time."""
    if not settings.reduction_steps or not plain or not tiles or not flat.reductions:
        return 1
    if flat.constraints or flat.derived or not streaming(flat):
        return 1
    points = product(flat.ranges[k] for k in flat.reductions)
    acc_bytes = accumulator_dtype(flat.dtype).itemsize
    innermost = flat.ranges[flat.reductions[-1]]
    if innermost < 2 * JAM_STEPS or not from_memory(shape, points, acc_bytes):
        return 1
    if tiles[-1] * acc_bytes <= settings.max_regs:  # accumulators in registers
        return 1
    return JAM_STEPS


def jammed(
    contribute: Callable[[Element], Statements],
    variables: dict[int, Expr],
    k: int,
    counter: str,
    steps: int,
) -> Callable[[Element], Statements]:
    """An element body of `steps` contributions, reduction variable `k` taking the values
    `counter`, `counter + 1`, ... in turn in `variables` (then `counter` again)."""

    def element(tile: Element) -> Statements:
        statements: list[Stmt] = []
        hoisted: list[tuple[int, Stmt]] = []
        inside = tile.inside
        for step in range(steps):
            tile.inside = inside  # each step tests the element (a padded update clears it)
            variables[k] = affine([(1, Load(Lookup(counter)))], step)
            more, lifted = contribute(tile)
            statements += more
            hoisted += lifted
        variables[k] = Load(Lookup(counter))
        return statements, hoisted

    return element
