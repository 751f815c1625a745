"""`python -m tests.fuzz`: the differential fuzzer from the command line.

    python -m tests.fuzz --cases 300                          # every shipped target
    python -m tests.fuzz --cases 10000 --device llvm_cpu.0    # the long pass of one device
    python -m tests.fuzz --seed 7 --case 1234 --device opencl.0 --gpu --show   # one case

Targets are `llvm_cpu.0`, `opencl.0` (or the device `TILE_TEST_OPENCL` names) and the same with
the GPU settings forced, unless `--device` (and `--gpu`) name one. Each failure prints one
line with its reproducer; the last line counts passed and failed cases. The exit status is 1
when any case failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from tests.fuzz.programs import FAMILIES, draw
from tests.fuzz.runner import Result, run_cases

DEFAULT_SEED = 20261125


def targets(device: str | None, gpu: bool) -> list[str]:
    if device is not None:
        return [f"{device}+gpu" if gpu else device]
    from tests.shipped import OPENCL, opencl_failure

    failure = opencl_failure()
    if failure is not None and failure.unsupported_host:
        print(f"WARNING: no OpenCL device here: {failure.reason}", file=sys.stderr)
        return ["llvm_cpu.0"]
    return ["llvm_cpu.0", OPENCL, f"{OPENCL}+gpu"]


def fuzz(
    chosen: list[str], seed: int, indices: range, family: str | None, workers: int
) -> list[Result]:
    """Every target over `indices`, the range cut into `workers` slices per target."""
    slices = []
    step = max(1, -(-len(indices) // workers))
    for target in chosen:
        for first in range(indices.start, indices.stop, step):
            slices.append((target, range(first, min(first + step, indices.stop))))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = pool.map(lambda job: run_cases(job[0], seed, job[1], family), slices)
        return [result for part in parts for result in part]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--cases", type=int, default=300, help="cases per target")
    parser.add_argument("--first", type=int, default=0, help="index of the first case")
    parser.add_argument("--case", type=int, help="run this one case")
    parser.add_argument("--device", help="one device id (default: every shipped target)")
    parser.add_argument("--gpu", action="store_true", help="force the GPU settings (OpenCL)")
    parser.add_argument("--family", choices=sorted(FAMILIES))
    parser.add_argument("--workers", type=int, default=2, help="worker processes at a time")
    parser.add_argument("--show", action="store_true", help="print each case's source")
    args = parser.parse_args()

    if args.case is not None:
        indices = range(args.case, args.case + 1)
    else:
        indices = range(args.first, args.first + args.cases)
    if args.show:
        for index in indices:
            case = draw(args.seed, index, args.family)
            shapes = {n: f"{v.dtype}{list(v.shape)}" for n, v in case.inputs.items()}
            print(f"# case {index} ({case.family}) {shapes}\n{case.source}")
    chosen = targets(args.device, args.gpu)
    began = time.monotonic()
    results = fuzz(chosen, args.seed, indices, args.family, args.workers)
    elapsed = time.monotonic() - began
    failed = [r for r in results if r.failed]
    for result in sorted(failed, key=lambda r: (r.target, r.index)):
        print(
            f"FAIL {result.target} case {result.index} ({result.family}) {result.kind}: "
            f"{result.detail}\n     reproduce: {result.reproducer(args.seed)}"
        )
    kinds = Counter(r.kind for r in results)
    families = Counter(r.family for r in results if r.target == chosen[0])
    per_target = ", ".join(
        f"{t}: {sum(1 for r in results if r.target == t and not r.failed)}/"
        f"{sum(1 for r in results if r.target == t)}"
        for t in chosen
    )
    print(
        f"seed {args.seed}, cases {indices.start}..{indices.stop - 1}, {per_target}; "
        f"families {dict(sorted(families.items()))}; skipped {kinds['skip']}; "
        f"{elapsed:.0f} s"
    )
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
