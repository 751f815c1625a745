"""An exact bounded-variable primal simplex in integer arithmetic, for `tile.bind.bounds`.

`tile.bind.bounds` gives it the index variables of a contraction with their bounds and one row per
multi-variable constraint family; `check` finds a feasible point or the rows that conflict,
`optimize` the exact minimum or maximum of a column (see `tile.bind.bounds` for why a simplex).
"""

from __future__ import annotations

from fractions import Fraction
from math import gcd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# Degenerate pivots in a row after which `optimize` switches to Bland's rule.
_DEGENERATE_RUN = 20


class Simplex:
    """Exact bounded-variable simplex on a tableau `basic = sum(a * nonbasic) / denominator`.

    Columns `0 .. n-1` are the index variables, `n ..` the forms `b_k . v` of the multi-variable
    families; every column has optional integer bounds. The arithmetic is integer only, and
    exact: each row holds integers over one positive denominator (reduced by their gcd), and a
    nonbasic column always sits at one of its bounds or, if it has none, at its start value,
    so nonbasic values are integers and a basic value is the integer `numerator[basic]` (the
    row applied to them) over the row's denominator. Basic columns may lie outside their bounds
    until `check` succeeds. `check` follows Bland's rule, which cannot cycle; `optimize` takes
    the steepest column (Dantzig) and falls back to Bland's rule after a run of degenerate
    pivots, so it cannot cycle either.
    """

    __slots__ = ("denominator", "lower", "numerator", "rows", "upper", "value")

    def __init__(
        self,
        lower: Sequence[int | None],
        upper: Sequence[int | None],
        forms: Sequence[tuple[dict[int, int], int, int]],
    ) -> None:
        """Variable bounds `lower`/`upper`; `forms` are rows `(coefficients, low, high)`."""
        self.lower = [*lower, *(low for _, low, _ in forms)]
        self.upper = [*upper, *(high for _, _, high in forms)]
        self.value = [
            low if low is not None else high if high is not None else 0
            for low, high in zip(lower, upper, strict=True)
        ] + [0] * len(forms)
        self.rows: dict[int, dict[int, int]] = {}
        self.denominator: dict[int, int] = {}
        self.numerator: dict[int, int] = {}
        for offset, (form, _, _) in enumerate(forms):
            column = len(lower) + offset
            self.rows[column] = dict(form)
            self.denominator[column] = 1
            self.numerator[column] = self._evaluate(column)

    def _evaluate(self, basic: int) -> int:
        return sum(coefficient * self.value[k] for k, coefficient in self.rows[basic].items())

    def current(self, column: int) -> Fraction:
        if column in self.rows:
            return Fraction(self.numerator[column], self.denominator[column])
        return Fraction(self.value[column])

    def set_bounds(self, column: int, low: int | None, high: int | None) -> None:
        self.lower[column], self.upper[column] = low, high

    def _movable(self, nonbasic: int, up: bool) -> bool:
        if up:
            return self.upper[nonbasic] is None or self.value[nonbasic] < self.upper[nonbasic]
        return self.lower[nonbasic] is None or self.value[nonbasic] > self.lower[nonbasic]

    def _shift(self, nonbasic: int, target: int) -> None:
        """Move a nonbasic column to `target`; the basic columns follow."""
        delta = target - self.value[nonbasic]
        self.value[nonbasic] = target
        for basic, row in self.rows.items():
            coefficient = row.get(nonbasic)
            if coefficient is not None:
                self.numerator[basic] += coefficient * delta

    def _pivot(self, basic: int, nonbasic: int, target: int) -> None:
        """Swap roles: `basic` leaves at `target` (one of its bounds), `nonbasic` enters."""
        row = self.rows.pop(basic)
        denominator = self.denominator.pop(basic)
        del self.numerator[basic]
        head = row.pop(nonbasic)
        self.value[basic] = target
        # basic = (head * nonbasic + rest) / denominator  =>
        # nonbasic = (denominator * basic - rest) / head
        sign = 1 if head > 0 else -1
        solved = {basic: sign * denominator}
        for column, coefficient in row.items():
            solved[column] = -sign * coefficient
        solved_denominator = sign * head
        divisor = gcd(solved_denominator, *solved.values())
        if divisor > 1:
            solved = {column: value // divisor for column, value in solved.items()}
            solved_denominator //= divisor
        for other, other_row in self.rows.items():
            factor = other_row.pop(nonbasic, None)
            if factor is None:
                continue
            # other = (rest' + factor * solved / solved_denominator) / d, over one denominator.
            for column in other_row:
                other_row[column] *= solved_denominator
            for column, coefficient in solved.items():
                total = other_row.get(column, 0) + factor * coefficient
                if total:
                    other_row[column] = total
                else:
                    other_row.pop(column, None)
            combined = self.denominator[other] * solved_denominator
            divisor = gcd(combined, *other_row.values())
            if divisor > 1:
                for column in other_row:
                    other_row[column] //= divisor
                combined //= divisor
            self.denominator[other] = combined
            self.numerator[other] = self._evaluate(other)
        self.rows[nonbasic] = solved
        self.denominator[nonbasic] = solved_denominator
        self.numerator[nonbasic] = self._evaluate(nonbasic)

    def repair(self) -> None:
        """Bring nonbasic columns back inside bounds that were tightened."""
        for column in range(len(self.value)):
            if column in self.rows:
                continue
            low, high = self.lower[column], self.upper[column]
            if low is not None and self.value[column] < low:
                self._shift(column, low)
            elif high is not None and self.value[column] > high:
                self._shift(column, high)

    def check(self) -> tuple[int, ...] | None:
        """Make the assignment feasible; on failure, the columns of a conflicting row."""
        while True:
            for basic in sorted(self.rows):
                low, high = self.lower[basic], self.upper[basic]
                scaled = self.numerator[basic]
                if low is not None and scaled < low * self.denominator[basic]:
                    target, rising = low, True
                    break
                if high is not None and scaled > high * self.denominator[basic]:
                    target, rising = high, False
                    break
            else:
                return None
            row = self.rows[basic]
            for column in sorted(row):
                # The basic column rises with this column iff the coefficient is positive.
                if self._movable(column, up=(row[column] > 0) == rising):
                    self._pivot(basic, column, target)
                    break
            else:
                # Every column of the row is stuck at the bound that pushes the wrong way:
                # the row is a Farkas certificate of infeasibility.
                return (basic, *row)

    def _entering(self, objective: Mapping[int, int], sense: int, bland: bool) -> int | None:
        """The improving column: the steepest one, or with `bland` the first one."""
        chosen, steepest = None, 0
        for column in sorted(objective):
            gain = objective[column] * sense
            if abs(gain) > steepest and self._movable(column, up=gain > 0):
                if bland:
                    return column
                chosen, steepest = column, abs(gain)
        return chosen

    def optimize(self, column: int, sense: int) -> Fraction | None:
        """Maximise `sense * column` from a feasible state; None when it is unbounded."""
        degenerate = 0
        while True:
            objective = self.rows.get(column, {column: 1})
            entering = self._entering(objective, sense, bland=degenerate > _DEGENERATE_RUN)
            if entering is None:
                return self.current(column)
            step = 1 if objective[entering] * sense > 0 else -1
            # Ratio test: how far the entering column can move before a column hits a bound.
            # Ratios are compared as integer pairs (distance, rate), rate > 0. Ties go to the
            # smallest column, which is what Bland's rule needs.
            best: tuple[int, int, int | None, int] | None = None
            own = self.upper[entering] if step > 0 else self.lower[entering]
            if own is not None:
                best = (abs(own - self.value[entering]), 1, None, own)
            for basic in sorted(self.rows):
                coefficient = self.rows[basic].get(entering)
                if coefficient is None:
                    continue
                rate = coefficient * step
                limit = self.upper[basic] if rate > 0 else self.lower[basic]
                if limit is None:
                    continue
                distance = limit * self.denominator[basic] - self.numerator[basic]
                if rate < 0:
                    distance, rate = -distance, -rate
                if best is None or distance * best[1] < best[0] * rate:
                    best = (distance, rate, basic, limit)
            if best is None:
                return None
            distance, _, leaving, limit = best
            degenerate = degenerate + 1 if distance == 0 else 0
            if leaving is None:
                self._shift(entering, limit)
            else:
                self._pivot(leaving, entering, limit)
