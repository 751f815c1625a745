"""Index-bound speed: `index_bounds` (and `residual_guards`) on the large systems of
tests/bind/test_bounds.py, against the targets the binder needs to stay interactive: a conv2d
under 20 ms, a strided dilated conv3d with 25 constraints under 200 ms, a dense random system
of 10 variables and 25 constraints under 5 s. Exits 1 when one is missed.

Run: `PYTHONPATH=. .venv/bin/python benchmarks/bounds.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from tests.bind.test_bounds import conv2d_constraints, conv3d_constraints, dense_random_system
from tile.bind.bounds import index_bounds, residual_guards

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.bind.polynomial import RangeConstraint


def solve(constraints: Sequence[RangeConstraint], names: Sequence[str]) -> None:
    result = index_bounds(constraints, names)
    assert result.bounds is not None
    residual_guards(constraints, result.bounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    dense, dense_names, _ = dense_random_system()
    systems = {
        "conv2d (7 variables, 12 constraints)": (*conv2d_constraints(), 0.020),
        "conv3d strided, dilated (9, 25)": (*conv3d_constraints(), 0.200),
        "dense random (10, 25)": (dense, dense_names, 5.0),
    }
    missed = 0
    for name, (constraints, names, target) in systems.items():
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            solve(constraints, names)
            best = min(best, time.perf_counter() - start)
        ok = best < target
        missed += not ok
        verdict = "ok" if ok else "MISSED"
        print(f"{name:38s} {best * 1000:9.2f} ms  (target < {target * 1000:.0f} ms) {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
