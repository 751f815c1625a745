"""Programs the differential fuzzer (tests/fuzz) found wrong, kept after their fix: each runs
on every shipped device, outputs poisoned, against the reference evaluator.

Written out as source and shapes rather than (seed, index), so that they survive changes
to the fuzzer's program generator.
"""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.fuzz.check import compare, poison
from tests.shipped import SHIPPED, shipped_devices
from tile.reference import evaluate_function

# (what was wrong, source, input shapes)
CASES = [
    (
        # llvm_cpu.0 refused it: the two products share a kernel body but launch different
        # grids (2 x 17 and 1 x 17), and the CPU back end had one grid wrapper per body.
        "one body on two grids",
        """function (X[X0, X1], W0[W00, W01], W3[W30, W31]) -> (T3, T0) {
          T0[i, j: 2, 17] = +(X[i, k] * W0[k, j]);
          T1[i, 0: 2, 1] = +(X[i, j]);
          T2[0, j: 1, 17] = +(T0[i, j]);
          T3[i, j: 1, 17] = +(T2[i, k] * W3[k, j]);
        }""",
        {"X": (2, 17), "W0": (17, 17), "W3": (17, 17)},
    ),
    (
        # Intel's OpenCL CPU compiler crashed (SIGSEGV in SimplifyCFG) on the padded update
        # of a partial tile (`float v = 0; if (m < 7) v = a * b; acc += v`) in an 8 x 33
        # register tile; OpenCL CPU kernels now guard the update instead.
        "partial register tile on Intel's OpenCL CPU compiler",
        """function (A[M, K], B[N, K], Bias[N]) -> (D) {
          C[m, n: 7, 33] = +(A[m, k] * B[n, k]);
          D = sigmoid(C - Bias);
        }""",
        {"A": (7, 1), "B": (33, 1), "Bias": (33,)},
    ),
]


@pytest.fixture(scope="module")
def devices() -> dict[str, tile.Device]:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize(("what", "source", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_found_by_the_fuzzer(
    device_id: str,
    what: str,
    source: str,
    shapes: dict[str, tuple[int, ...]],
    devices: dict[str, tile.Device],
) -> None:
    device = devices[device_id]
    rng = np.random.default_rng(1)
    inputs = {n: rng.uniform(-2, 2, s).astype(np.float32) for n, s in shapes.items()}
    want = evaluate_function(source, inputs)
    invoker = tile.Invoker(source, inputs, device=device)
    outputs = {}
    for name in invoker.function.outputs:
        shape, dtype = invoker.get_output_shape(name)
        outputs[name] = tile.Tensor.from_numpy(poison(shape, np.dtype(dtype)), device)
    invoker.set_outputs(outputs)
    invoker.invoke().wait()
    for name, tensor in outputs.items():
        got = tensor.to_numpy()
        assert not compare(got, want[name], got.dtype), f"{what}: {name}"
