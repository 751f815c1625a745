"""Front-end speed: parse, check and bind a 2,000-statement Tile program (issue 2 target:
under 2 s in all). Run: `.venv/bin/python benchmarks/parse_bind.py [--statements N]`."""

from __future__ import annotations

import argparse
import time

import numpy as np

from tile.bind.binder import bind
from tile.lang.check import check
from tile.lang.parse import parse


def program(statements: int) -> str:
    """A chain of elementwise statements and contractions, each using earlier results."""
    lines = ["function (A[N, M], B[M, K]) -> (R) {", "  T0 = A * 2 + 1;"]
    for index in range(1, statements - 1):
        previous = f"T{index - 1}"
        match index % 4:
            case 0:
                lines.append(f"  T{index} = {previous} * 0.5 + exp(-{previous}) - A / 3;")
            case 1:
                lines.append(f"  T{index}[i, j: N, M] = +({previous}[i, j] * A[i, j]);")
            case 2:
                lines.append(f"  T{index} = max({previous}, 0.0) + (A < 1 ? 2 : {previous});")
            case _:
                lines.append(f"  T{index}[i, j: N, M] = >({previous}[i, j + k]), k < 2;")
    lines.append(f"  R[i, j: N, K] = +(T{statements - 2}[i, k] * B[k, j]);")
    lines.append("}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--statements", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    source = program(args.statements)
    inputs = {"A": np.zeros((8, 16), np.float32), "B": np.zeros((16, 4), np.float32)}
    parse(source)  # build the parser tables once, as a long-running process would
    best = {"parse": float("inf"), "check": float("inf"), "bind": float("inf")}
    for _ in range(args.repeat):
        start = time.perf_counter()
        function = parse(source)
        parsed = time.perf_counter()
        check(function, source)
        checked = time.perf_counter()
        bound = bind(function, source, inputs)
        done = time.perf_counter()
        best["parse"] = min(best["parse"], parsed - start)
        best["check"] = min(best["check"], checked - parsed)
        best["bind"] = min(best["bind"], done - checked)
    total = sum(best.values())
    print(f"{args.statements} statements, {len(source):,} characters, {len(bound.ops)} ops")
    for stage, seconds in best.items():
        print(f"  {stage:6s} {seconds * 1000:8.1f} ms")
    print(f"  total  {total * 1000:8.1f} ms  (target: < 2000 ms)")


if __name__ == "__main__":
    main()
