"""A process forked after using a device (multiprocessing forks on Linux) neither hangs nor
computes wrong answers: on llvm_cpu.0 the child starts its own compute threads and gets right
results, even when the parent forked with work still queued; an OpenCL device, whose driver's
threads stay in the parent, refuses work in the child with an error that says why, and the
parent goes on using it. Each case runs in a fresh interpreter with a time limit, so a hang
fails the test instead of stopping the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.shipped import SHIPPED

REPO = Path(__file__).resolve().parents[2]

# The parent computes, forks, and reports the child's outcome and its own after the fork.
SCRIPT = """
import os, sys
import numpy as np
import tile

device = sys.argv[1]
matmul = tile.Function(
    "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
)
rng = np.random.default_rng(0)
a = rng.standard_normal((300, 257)).astype(np.float32)
b = rng.standard_normal((257, 129)).astype(np.float32)


def error(got, x, y):
    want = x.astype(np.float64) @ y.astype(np.float64)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


assert error(matmul(a, b, device=device)["C"].numpy(), a, b) < 1e-5
big = rng.standard_normal((700, 700)).astype(np.float32)
pending = matmul(big, big, device=device)["C"]  # most likely still running at the fork
pid = os.fork()
if pid == 0:
    try:
        first = error(pending.numpy(), big, big)
        again = error(matmul(a, b, device=device)["C"].numpy(), a, b)  # a cached program
        other = error(matmul(a[:31], b, device=device)["C"].numpy(), a[:31], b)  # a new one
        print(f"child ok {max(first, again, other):.1e}", flush=True)
    except Exception as failure:
        print(f"child refused {type(failure).__name__}: {failure}", flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert error(pending.numpy(), big, big) < 1e-5
assert error(matmul(a[:31], b, device=device)["C"].numpy(), a[:31], b) < 1e-5
print(f"parent ok, child status {status}", flush=True)
"""


def _run(device: str) -> list[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), device],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "parent ok, child status 0", done.stdout
    return lines


def test_a_forked_child_computes_on_llvm_cpu() -> None:
    lines = _run("llvm_cpu.0")
    (child,) = [line for line in lines if line.startswith("child")]
    assert child.startswith("child ok"), child
    assert float(child.split()[-1]) < 1e-5


def test_a_forked_child_is_refused_opencl() -> None:
    lines = _run(SHIPPED[1])
    (child,) = [line for line in lines if line.startswith("child")]
    assert child.startswith("child refused"), child
    assert "forked after the OpenCL driver was loaded" in child
    assert "'spawn'" in child
