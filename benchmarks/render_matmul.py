"""Performance sanity check of the LLVM renderer: a hand-built semtree matmul in the shape
PERFORMANCE.md 2.1 recommends (an MR x NV register tile of `vec_size`-wide float32
accumulators, one scalar A element broadcast per row, MAD into every accumulator), rendered,
JIT-compiled and run on the llvm_cpu device, against numpy in the same process.

    python benchmarks/render_matmul.py [--size 512] [--rows 6] [--vectors 4] [--threads 2]

Prints compile time, our median time, GFLOP/s, numpy's, and the ratio (ours / numpy: below
1 is faster). Timings on a shared machine are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from hal_llvm.compiler import host
from hal_llvm.device import LLVMDevice
from semtree import builder as sb
from semtree.kernel import (
    Direction,
    HardwareSettings,
    KernelInfo,
    KernelKind,
    KernelList,
    KernelParam,
)
from semtree.nodes import Builtin, Function
from semtree.types import DType, TensorShape, Type, TypeBase
from tests.hal.kernels import download, upload

F32 = DType.FLOAT32


def matmul_body(m: int, n: int, k: int, rows: int, vectors: int, width: int) -> Function:
    """C[m, n] = A[m, k] @ B[k, n]; work-group (jt, it) owns rows it*rows.. and columns
    jt*vectors*width.. of C. Rows past M read a clamped row and skip their stores."""
    stride = n // width  # a row of B or C in vectors
    jt, it = sb.global_id(0), sb.global_id(1)
    kk, r, v = sb.var("k"), sb.var("r"), sb.var("v")
    agg, b_row, a_value = sb.var("agg"), sb.var("b_row"), sb.var("a_value")
    a, b, c = sb.var("A"), sb.var("B"), sb.var("C")
    row = it * rows + r
    load_row = row if m % rows == 0 else sb.call(Builtin.MIN, row, m - 1)
    store = sb.for_(
        "v",
        vectors,
        body=sb.assign(c[row * stride + jt * vectors + v], agg[r * vectors + v]),
    )
    return sb.function(
        "matmul",
        [
            ("C", Type.ptr(F32, width)),
            ("A", Type.ptr(F32, const=True)),
            ("B", Type.ptr(F32, width, const=True)),
        ],
        [
            sb.declare(Type(TypeBase.VALUE, F32, width, rows * vectors), "agg", 0.0),
            sb.declare(Type(TypeBase.VALUE, F32, width, vectors), "b_row"),
            sb.for_(
                "k",
                k,
                body=[
                    sb.for_(
                        "v", vectors, body=sb.assign(b_row[v], b[kk * stride + jt * vectors + v])
                    ),
                    sb.for_(
                        "r",
                        rows,
                        body=[
                            sb.declare(F32, "a_value", a[load_row * k + kk]),
                            sb.for_(
                                "v",
                                vectors,
                                body=sb.assign(
                                    agg[r * vectors + v],
                                    sb.call(Builtin.MAD, a_value, b_row[v], agg[r * vectors + v]),
                                ),
                            ),
                        ],
                    ),
                ],
            ),
            sb.for_("r", rows, body=store if m % rows == 0 else sb.if_(row.lt(m), store)),
        ],
    )


def matmul_list(size: int, rows: int, vectors: int, width: int) -> KernelList:
    m = n = k = size
    body = matmul_body(m, n, k, rows, vectors, width)
    params = (
        KernelParam("C", Direction.OUT, F32, (m, n), width),
        KernelParam("A", Direction.IN, F32, (m, k)),
        KernelParam("B", Direction.IN, F32, (k, n), width),
    )
    grid = (n // (vectors * width), -(-m // rows), 1)
    info = KernelInfo(
        "matmul",
        KernelKind.CONTRACTION,
        params,
        grid,
        (1, 1, 1),
        body,
        flops=2 * m * n * k,
        bytes=4 * (m * k + k * n + m * n),
    )
    shapes = {param.name: TensorShape(F32, param.shape) for param in params}
    return KernelList((info,), shapes, ("A", "B"), ("C",), ())


def median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--vectors", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    options = parser.parse_args()

    cpu = host()
    settings = HardwareSettings.llvm_cpu(options.threads, cpu.features)
    width = settings.vec_size
    size = options.size
    if size % (options.vectors * width):
        parser.error(f"--size must be a multiple of vectors x vec_size = {options.vectors * width}")
    device = LLVMDevice(cpu, 0, settings=settings, threads=options.threads)
    kernel_list = matmul_list(size, options.rows, options.vectors, width)

    start = time.perf_counter()
    library = device.compiler.build(kernel_list, device)
    compile_ms = (time.perf_counter() - start) * 1e3
    kernel = device.executor.prepare(library, 0)

    random = np.random.default_rng(0)
    a = random.standard_normal((size, size), dtype=np.float32)
    b = random.standard_normal((size, size), dtype=np.float32)
    buffers = [
        upload(device, np.zeros((size, size), np.float32)),
        upload(device, a),
        upload(device, b),
    ]
    kernel.run(buffers).wait()
    result = download(buffers[0], np.float32).reshape(size, size)
    want = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(result - want)) / np.max(np.abs(want)))

    def ours() -> None:
        kernel.run(buffers).wait()

    def theirs() -> None:
        np.matmul(a, b)

    for action in (ours, theirs, ours, theirs):  # warm up
        action()
    ours_times, numpy_times = [], []
    for _ in range(3):  # interleaved rounds: both see the same machine load
        ours_times.append(median_seconds(ours, options.repeats))
        numpy_times.append(median_seconds(theirs, options.repeats))
    mine, reference = min(ours_times), min(numpy_times)
    flops = 2 * size**3
    print(f"host: {cpu.name}, vec_size {width}, {options.threads} threads, load {os.getloadavg()}")
    print(
        f"tile {options.rows}x{options.vectors * width}, compile {compile_ms:.0f} ms, "
        f"max relative error {error:.1e}"
    )
    print(f"ours : {mine * 1e3:7.3f} ms  {flops / mine / 1e9:6.1f} GFLOP/s")
    print(f"numpy: {reference * 1e3:7.3f} ms  {flops / reference / 1e9:6.1f} GFLOP/s")
    print(f"ratio ours/numpy: {mine / reference:.2f}")
    device.close()


if __name__ == "__main__":
    main()
