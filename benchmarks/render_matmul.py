"""Performance sanity check of the LLVM renderer: a hand-built semtree matmul in the shape
PERFORMANCE.md 2.1 recommends (an MR x NV register tile of `vec_size`-wide float32
accumulators, one scalar A element broadcast per row, MAD into every accumulator), rendered,
JIT-compiled and run on the llvm_cpu device, against numpy in the same process.

    python benchmarks/render_matmul.py [--size 512] [--rows 6] [--vectors 4] [--threads 2]
                                       [--pack] [--rows-fastest]

`--pack` adds a kernel that first copies B into contiguous per-tile panels (PERFORMANCE.md
2.2): on CPUs with a small L2 the plain tile's 2 KB-strided B rows, not the arithmetic,
limit it. Prints compile time, our best and median times and GFLOP/s, numpy's, and the
ratios (ours / numpy: below 1 is faster). Timings on a shared machine are noisy: compare ratios
within one run, and prefer `--threads 1` (with OPENBLAS_NUM_THREADS=1) when others run.
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


def matmul_body(
    m: int,
    n: int,
    k: int,
    rows: int,
    vectors: int,
    width: int,
    rows_fastest: bool = False,
    packed: bool = False,
) -> Function:
    """C[m, n] = A[m, k] @ B[k, n]; work-group (jt, it) owns rows it*rows.. and columns
    jt*vectors*width.. of C. Rows past M read a clamped row and skip their stores.
    Column tiles vary fastest in the grid (neighbouring work-groups share rows of A) unless
    `rows_fastest` (they share a panel of B). `packed`: B arrives as `pack_body` lays it
    out, each column tile's panel contiguous (PERFORMANCE.md 2.2)."""
    stride = n // width  # a row of B or C in vectors
    jt, it = sb.global_id(0), sb.global_id(1)
    if rows_fastest:
        jt, it = it, jt
    kk, r, v = sb.var("k"), sb.var("r"), sb.var("v")
    agg, b_row, a_value = sb.var("agg"), sb.var("b_row"), sb.var("a_value")
    a, b, c = sb.var("A"), sb.var("B"), sb.var("C")
    row = it * rows + r
    load_row = row if m % rows == 0 else sb.call(Builtin.MIN, row, m - 1)
    b_index = (jt * k + kk) * vectors + v if packed else kk * stride + jt * vectors + v
    store = sb.for_(
        "v",
        vectors,
        body=sb.assign(c[row * stride + jt * vectors + v], agg[r * vectors + v]),
    )
    return sb.function(
        "matmul_packed" if packed else "matmul",
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
                    sb.for_("v", vectors, body=sb.assign(b_row[v], b[b_index])),
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


def pack_body(n: int, k: int, vectors: int, width: int) -> Function:
    """Bp[jt][kk][:] = B[kk, jt*vectors*width ...]: work-group (jt, kk) copies one row of
    one column tile's panel."""
    jt, kk, v = sb.global_id(0), sb.global_id(1), sb.var("v")
    packed, source = sb.var("Bp"), sb.var("B")
    return sb.function(
        "pack_b",
        [("Bp", Type.ptr(F32, width)), ("B", Type.ptr(F32, width, const=True))],
        sb.for_(
            "v",
            vectors,
            body=sb.assign(
                packed[(jt * k + kk) * vectors + v], source[kk * (n // width) + jt * vectors + v]
            ),
        ),
    )


def matmul_list(
    size: int, rows: int, vectors: int, width: int, rows_fastest: bool = False, pack: bool = False
) -> KernelList:
    """The launches of one matmul: [pack_b,] matmul."""
    m = n = k = size
    flops, traffic = 2 * m * n * k, 4 * (m * k + k * n + m * n)
    b_input = "Bp" if pack else "B"
    params = (
        KernelParam("C", Direction.OUT, F32, (m, n), width),
        KernelParam("A", Direction.IN, F32, (m, k)),
        KernelParam(b_input, Direction.IN, F32, (k, n), width),
    )
    grid = (n // (vectors * width), -(-m // rows), 1)
    if rows_fastest:
        grid = (grid[1], grid[0], 1)
    body = matmul_body(m, n, k, rows, vectors, width, rows_fastest, pack)
    kernels = [
        KernelInfo("matmul", KernelKind.CONTRACTION, params, grid, (1, 1, 1), body, flops, traffic)
    ]
    if pack:
        pack_params = (
            KernelParam("Bp", Direction.OUT, F32, (k, n), width),
            KernelParam("B", Direction.IN, F32, (k, n), width),
        )
        pack_grid = (n // (vectors * width), k, 1)
        pack_kernel = KernelInfo(
            "pack_b", KernelKind.SPECIAL, pack_params, pack_grid, (1, 1, 1),
            pack_body(n, k, vectors, width), 0, 8 * k * n,
        )  # fmt: skip
        kernels.insert(0, pack_kernel)
    shapes = {name: TensorShape(F32, (size, size)) for name in ("A", "B", "C", "Bp")}
    if not pack:
        del shapes["Bp"]
    return KernelList(tuple(kernels), shapes, ("A", "B"), ("C",), ("Bp",) if pack else ())


def sample_seconds(action, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--vectors", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--rows-fastest",
        action="store_true",
        help="row tiles vary fastest in the grid (share B panels; better with small L2)",
    )
    parser.add_argument(
        "--pack", action="store_true", help="pack B into contiguous panels first (2.2)"
    )
    options = parser.parse_args()

    cpu = host()
    settings = HardwareSettings.llvm_cpu(options.threads, cpu.features)
    width = settings.vec_size
    size = options.size
    if size % (options.vectors * width):
        parser.error(f"--size must be a multiple of vectors x vec_size = {options.vectors * width}")
    device = LLVMDevice(cpu, 0, settings=settings, threads=options.threads)
    kernel_list = matmul_list(
        size, options.rows, options.vectors, width, options.rows_fastest, options.pack
    )

    start = time.perf_counter()
    library = device.compiler.build(kernel_list, device)
    compile_ms = (time.perf_counter() - start) * 1e3
    kernels = [device.executor.prepare(library, index) for index in range(len(kernel_list.kernels))]

    random = np.random.default_rng(0)
    a = random.standard_normal((size, size), dtype=np.float32)
    b = random.standard_normal((size, size), dtype=np.float32)
    buffers = {
        "C": upload(device, np.zeros((size, size), np.float32)),
        "A": upload(device, a),
        "B": upload(device, b),
        "Bp": upload(device, np.zeros((size, size), np.float32)),
    }
    launches = [
        (kernel, [buffers[param.name] for param in info.params])
        for kernel, info in zip(kernels, kernel_list.kernels, strict=True)
    ]

    def ours() -> None:
        events = []
        for kernel, arguments in launches:  # one in-order queue: no dependencies to pass
            events.append(kernel.run(arguments))
        events[-1].wait()

    ours()
    result = download(buffers["C"], np.float32).reshape(size, size)
    want = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(result - want)) / np.max(np.abs(want)))

    def theirs() -> None:
        np.matmul(a, b)

    for action in (ours, theirs, ours, theirs):  # warm up
        action()
    ours_times: list[float] = []
    numpy_times: list[float] = []
    for _ in range(5):  # interleaved rounds: both see the same machine load
        ours_times += sample_seconds(ours, options.repeats)
        numpy_times += sample_seconds(theirs, options.repeats)
    flops = 2 * size**3
    print(f"host: {cpu.name}, vec_size {width}, {options.threads} threads, load {os.getloadavg()}")
    order = "row tiles" if options.rows_fastest else "column tiles"
    packing = ", B packed by a kernel" if options.pack else ""
    print(
        f"tile {options.rows}x{options.vectors * width}, {order} fastest{packing}, "
        f"compile {compile_ms:.0f} ms, max relative error {error:.1e}"
    )
    # The best time is the least disturbed by other processes; the median is shown too.
    for name, times in (("ours ", ours_times), ("numpy", numpy_times)):
        best, median = min(times), statistics.median(times)
        print(
            f"{name}: best {best * 1e3:7.3f} ms {flops / best / 1e9:6.1f} GFLOP/s, "
            f"median {median * 1e3:7.3f} ms {flops / median / 1e9:6.1f} GFLOP/s"
        )
    ratio_best = min(ours_times) / min(numpy_times)
    ratio_median = statistics.median(ours_times) / statistics.median(numpy_times)
    print(f"ratio ours/numpy: {ratio_best:.2f} (best), {ratio_median:.2f} (median)")
    device.close()


if __name__ == "__main__":
    main()
