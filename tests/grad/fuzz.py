"""`python -m tests.grad.fuzz`: the gradient check over the differential fuzzer's random programs.

Every float output of every program `tests.fuzz.programs.draw(seed, index)` makes is
differentiated with respect to every float tensor input and checked against central
differences in float64 (tests.grad.check); with `--device`, the gradient function also runs
there against the reference. Each failure prints one line with its reproducer; the exit status
is 1 when any case failed.

    python -m tests.grad.fuzz --cases 2000 --device llvm_cpu.0 --device opencl.0
    python -m tests.grad.fuzz --seed 7 --case 57 --show
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import TYPE_CHECKING

import tile
from tests.fuzz.programs import draw
from tests.grad.check import Skip, numeric_check, on_device, prepare

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

DEFAULT_SEED = 20261125


def check_case(seed: int, index: int, devices: Sequence[str]) -> tuple[Counter[str], list[str]]:
    """Counts of checked and skipped outputs of case `index`, and its failures."""
    case = draw(seed, index)
    counts: Counter[str] = Counter()
    failures = []
    for output in tile.Function(case.source).outputs:
        where = f"--seed {seed} --case {index} ({case.family}, output {output})"
        try:
            prepared = prepare(case.source, case.inputs, of=output)
            problems = [numeric_check(prepared)]
            problems += [f"{d}: {p}" for d in devices if (p := on_device(prepared, d))]
        except Skip:
            counts["skipped"] += 1
            continue
        except Exception as error:
            problems = [f"{type(error).__name__}: {error}"]
        problems = [problem for problem in problems if problem]
        counts["failed" if problems else "checked"] += 1
        failures += [f"{where}: {problem}" for problem in problems]
    return counts, failures


def run(
    seed: int, indices: Iterable[int], devices: Sequence[str]
) -> tuple[Counter[str], list[str]]:
    total: Counter[str] = Counter()
    failures: list[str] = []
    for index in indices:
        counts, found = check_case(seed, index, devices)
        total.update(counts)
        failures += found
    return total, failures


def main(arguments: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--case", type=int, help="check this one case")
    parser.add_argument("--device", action="append", default=[], help="also run on a device")
    parser.add_argument("--show", action="store_true", help="print the case and its gradient")
    args = parser.parse_args(arguments)
    indices = range(args.first, args.first + args.cases) if args.case is None else [args.case]
    if args.show:
        for index in indices:
            case = draw(args.seed, index)
            print(f"# case {index} ({case.family})\n{case.source}")
            for output in tile.Function(case.source).outputs:
                try:
                    print(prepare(case.source, case.inputs, of=output).gradient.source)
                except Skip as skip:
                    print(f"# {output}: {skip}")
    counts, failures = run(args.seed, indices, args.device)
    for failure in failures:
        print(failure)
    print(f"{counts['checked']} outputs checked, {counts['skipped']} without a gradient, "
          f"{counts['failed']} failed")  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
