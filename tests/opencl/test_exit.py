"""A process that ran kernels on the tested OpenCL device (tests.shipped) exits with status 0
(PoCL aborted at exit once a completion callback had been registered with pyopencl; a watcher
thread still waiting in the driver when finalization began aborted it too, issue 10)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO
from tests.shipped import OPENCL, require_opencl

SCRIPT = """
import numpy as np
import tile
out = tile.run("function (A) -> (B) { B = A * 2; }", {"A": np.ones(4, np.float32)},
               device=DEVICE)
assert out["B"].tolist() == [2.0] * 4
""".replace("DEVICE", repr(OPENCL))


def test_process_exits_cleanly_after_opencl_kernels() -> None:
    require_opencl()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr


# The watcher waits for a kernel that outlasts the script (about 0.3 s); finalization lasts
# until the kernel completed and a little longer (a cycle whose __del__ waits, collected only
# by the last collection), so a watcher still waiting then wakes inside it, is ended by
# pthread_exit and aborts the process.
WAITING = """
import gc, time
import pyopencl as cl
from tests.shipped import require_opencl  # the tested device: TILE_TEST_OPENCL is inherited

gc.disable()
queue = require_opencl().queue
source = '''
__kernel void slow(__global float *out, int steps) {
    float x = 0.0f;
    for (int i = 0; i < steps; ++i) x += sin(x + i);
    out[get_global_id(0)] = x;
}'''
kernel = cl.Kernel(cl.Program(queue.context, source).build(), "slow")
out = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 64)

def launch(steps):
    kernel.set_args(out, cl.cltypes.int(steps))
    return queue.submit("slow", lambda: cl.enqueue_nd_range_kernel(queue.queue, kernel, (1,), None))

launch(1000).wait()  # PoCL compiles on the first launch
start = time.perf_counter()
launch(100000).wait()
event = launch(int(100000 * 0.3 / (time.perf_counter() - start)))
event.add_done_callback(lambda _: None)
time.sleep(0.05)  # the watcher starts waiting

class SlowFinalization:
    def __del__(self, sleep=time.sleep):
        while not self.event.is_complete:
            sleep(0.01)
        sleep(0.3)

cycle = SlowFinalization()
cycle.event = event
cycle.me = cycle
del cycle
"""


def test_process_exits_cleanly_while_a_kernel_runs() -> None:
    require_opencl()
    done = subprocess.run(
        [sys.executable, "-c", WAITING], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
