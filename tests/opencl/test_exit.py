"""A process that ran kernels on opencl.0 exits with status 0 (PoCL aborted at exit once a
completion callback had been registered with pyopencl)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO
from tests.shipped import require_opencl

SCRIPT = """
import numpy as np
import tile
out = tile.run("function (A) -> (B) { B = A * 2; }", {"A": np.ones(4, np.float32)},
               device="opencl.0")
assert out["B"].tolist() == [2.0] * 4
"""


def test_process_exits_cleanly_after_opencl_kernels() -> None:
    require_opencl()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
