"""Does memory plateau once the program cache evicts? Calls one function with a new input
shape each time (every call compiles a program; past `tile.runtime.cache.PROGRAM_CACHE_SIZE` the
oldest is evicted), in a fresh process per device, and prints the resident set size after
the first `--warm` shapes and after all `--shapes`, and the growth between them.

Run: `PYTHONPATH=. python benchmarks/memory.py [--shapes 1000] [--warm 200] [--device ...]`.
Without `--device` it measures `llvm_cpu.0` and every OpenCL device `tile.devices()` lists.
Evicted programs must release their device code and buffers: the growth after the warm-up
stays under `--limit` MB (default 20) per device, else the exit status is 1.

Each child runs on a cache directory of its own (`TILE_CACHE_DIR`, new and empty), so every
shape is compiled from source, as in a new process on a new machine, whatever earlier runs
stored: programs restored from the disk cache skip the driver's compiler and allocate
differently (PoCL, for one, then keeps no LLVM metadata of its own per kernel), and a warm
cache gave a different growth than a cold one. `--cache user` measures with the usual cache.

Where the growth on PoCL comes from (measured on AMD Zen 4, PoCL 3.0 of pyopencl's wheel,
2026-11-27). PoCL compiles every OpenCL context's programs in one LLVM context that it shares
between all of them and frees only when the last OpenCL context is released. LLVM never frees
what a compile leaves in its context: distinct alias-scope metadata made when PoCL inlines a
kernel with `restrict` parameters into its work-group function, uniqued constants and
metadata, and PoCL's own buffer of optimisation remarks, which grows by every remark and is
read only under `POCL_VECTORIZER_REMARKS`. So the growth follows the number of programs ever
compiled in the process, whatever tile releases:
- tile's 450 programs replayed with pyopencl alone (one context; or a new context every 100,
  made while the old one still existed): glibc's in-use bytes (`mallinfo2`) grew 5.6 MB,
  the same either way; without `restrict` in the sources, 2.2 MB;
- the same replay releasing every object of the old context before making the new one: flat
  (129.3 MB after 100 programs and after 450).
A heaptrack diff of tile itself (150 against 450 new shapes, 10.2 MB more) names the same
owners: `MDTuple::getImpl` 3.4 MB, the remarks string 2.1 MB, LLVM constants and
`MetadataAsValue` 1.4 MB; Python objects 1.0 MB. The remedy: on PoCL the compiler renews the
device's context every `hal_opencl.compiler.RENEW_EVERY` builds (`DeviceQueue.renew`),
releasing every buffer, program, kernel, queue and event of it before making the next (a
renewal that made the new context first would change nothing, since the old one would still
be alive); growth after 200 shapes fell from +35.8 MB to +11.0 MB (opencl.0, 2026-11-27).
Of the Python part, most was pyopencl's: each kernel object's generated `set_args` module
filed in `linecache` for good (now dropped by `hal_opencl.compiler.forget_invoker_lines`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Three kernels and a temporary buffer (S) per program.
SOURCE = """
function (A[N, M], B[M]) -> (C, D) {
  S[n: N] = +(A[n, m] * B[m]);
  C[k: 1] = +(S[n]);
  D[m: M] = >(A[n, m]);
}"""


def rss_mb() -> float:
    """This process's resident set size in MB (Linux /proc, else psutil)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss / 2**20


def measure(device: str, shapes: int, warm: int) -> dict[str, float]:
    """RSS after `warm` and after `shapes` calls, each with a new shape, on `device`."""
    import gc

    import numpy as np

    import tile

    function = tile.Function(SOURCE)
    random = np.random.default_rng(0)
    result: dict[str, float] = {}
    for index in range(shapes):
        n, m = 3 + index % 37, 5 + index // 37
        a = random.random((n, m), dtype=np.float32)
        b = random.random(m, dtype=np.float32)
        outputs = function(device=device, A=a, B=b)
        if index % 50 == 0:  # now and then, check the answer
            got = np.asarray(outputs["C"])
            assert np.allclose(got, (a @ b).sum(), rtol=1e-4), f"wrong result at shape {n}x{m}"
        else:
            np.asarray(outputs["D"])  # waits for the call
        del outputs
        if index + 1 in (warm, shapes):
            gc.collect()
            result[f"rss_{index + 1}"] = rss_mb()
    return result


def run_child(device: str, shapes: int, warm: int, cache: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", device, f"--shapes={shapes}", f"--warm={warm}"]
    with tempfile.TemporaryDirectory(prefix="tile-memory-") as fresh:
        environment = dict(os.environ)
        if cache == "fresh":
            environment["TILE_CACHE_DIR"] = fresh
        done = subprocess.run(
            command, cwd=REPO, env=environment, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"{device}: the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--limit", type=float, default=20.0, help="MB of growth allowed")
    parser.add_argument("--device", action="append", default=[])
    parser.add_argument(
        "--cache",
        choices=("fresh", "user"),
        default="fresh",
        help="each child on a new, empty cache directory (default) or on the usual one",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(measure(arguments.child, arguments.shapes, arguments.warm)))
        return 0
    devices = arguments.device
    if not devices:
        import tile

        devices = [device.id for device in tile.devices()]
    failed = False
    warm, shapes = f"RSS @{arguments.warm}", f"RSS @{arguments.shapes}"
    print(f"{'device':<12} {warm:>10} {shapes:>11} {'growth':>9}")
    for device in devices:
        numbers = run_child(device, arguments.shapes, arguments.warm, arguments.cache)
        first, last = numbers[f"rss_{arguments.warm}"], numbers[f"rss_{arguments.shapes}"]
        growth = last - first
        failed |= growth >= arguments.limit
        flag = "" if growth < arguments.limit else f"  over {arguments.limit:g} MB"
        print(f"{device:<12} {first:>8.1f}MB {last:>9.1f}MB {growth:>+7.1f}MB{flag}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
