"""Neighbouring reduction loops that walk memory as one become one loop (issue 11 item 3,
issue 12).

A reduction over several axes (`O[] = >(A[i, j, k, l])`, a mean over the last two axes of
NCHW data) flattens to one loop per axis. Where the innermost axis is short, the generator
finds no long contiguous loop to run in lanes (`tile.lower.accumulators.lane_split`) or to split
across work-groups (`tile.lower.split`): a maximum over 301 x 133 x 4 x 8 elements ran as one
scalar loop on one core, 6x torch's time on PoCL.

`merge_reductions` replaces two neighbouring reduction variables `a` (outer) and `b` (inner)
by one of range `range(a) * range(b)` wherever every linear form of the contraction (access
strides, guard left-hand sides, derived numerators) gives `a` `range(b)` times `b`'s
coefficient. The merged variable `m = a * range(b) + b` visits the tuples in the same order,
at the same addresses, under the same guards. Only contractions of one operand (reductions
of one tensor) are merged: a product's reductions (a convolution's kx and ci) keep the loop
structure that its register tiles were measured with.

`merge_coordinates` merges neighbouring output coordinates by the same rule, for the CPU
generator (`tile.lower.generate`), which then tiles one long coordinate of stride 1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tile.lower.flat import FlatContraction


def merge_reductions(flat: FlatContraction) -> FlatContraction:
    """`flat` with its mergeable neighbouring reduction variables merged (module docstring)."""
    if flat.empty or len(flat.operands) != 1 or len(flat.reductions) < 2:
        return flat
    return _merged(flat, flat.reductions[0], len(flat.names))


def merge_coordinates(flat: FlatContraction) -> FlatContraction:
    """`flat` with neighbouring output coordinates merged by the same rule: a reduction over
    outer axes that keeps several inner ones (a sum over axis 0 of 309 x 997 x 2 x 2) gets
    one long coordinate of stride 1 to tile and run in vectors, where it had tiles of 2. The
    caller makes the merged ranges its kernel's grid; that is only right for a kernel that
    computes nothing but the contraction (its output is then the same row-major buffer)."""
    if flat.empty or len(flat.operands) != 1 or flat.derived or flat.outputs < 2:
        return flat
    merged = _merged(flat, 0, flat.outputs)
    if merged is flat:
        return flat
    return replace(merged, outputs=flat.outputs - len(flat.names) + len(merged.names))


def _merged(flat: FlatContraction, first: int, stop: int) -> FlatContraction:
    """`flat` with the mergeable neighbours among variables [first, stop) merged."""
    names, ranges = list(flat.names), list(flat.ranges)
    forms = [list(access.strides) for access in flat.access]
    forms += [list(constraint.lhs) for constraint in flat.constraints]
    forms += [list(derived.numerator) for derived in flat.derived]
    for a in reversed(range(first, stop - 1)):  # innermost pair first
        b = a + 1
        if min(ranges[a], ranges[b]) < 1:
            continue
        if any(form[a] != form[b] * ranges[b] for form in forms):
            continue
        ranges[a] *= ranges[b]
        del names[b], ranges[b]
        for form in forms:
            form[a] = form[b]
            del form[b]
    if len(names) == len(flat.names):
        return flat
    guards = len(flat.access)
    derived_forms = guards + len(flat.constraints)
    access = tuple(
        replace(old, strides=tuple(form))
        for old, form in zip(flat.access, forms[:guards], strict=True)
    )
    constraints = tuple(
        replace(old, lhs=tuple(form))
        for old, form in zip(flat.constraints, forms[guards:derived_forms], strict=True)
    )
    derived = tuple(
        replace(old, numerator=tuple(form))
        for old, form in zip(flat.derived, forms[derived_forms:], strict=True)
    )
    return replace(
        flat,
        names=tuple(names),
        ranges=tuple(ranges),
        access=access,
        constraints=constraints,
        derived=derived,
    )
