"""Helpers of the OpenCL tests: kernel lists from hand-built semtree functions, runs on a HAL
device with event-ordered launches, and comparison with the reference interpreter
(`tests/reference.py`, the executable definition of the IR)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from semtree.kernel import Direction, KernelInfo, KernelKind, KernelList, KernelParam
from semtree.nodes import Lookup, Node, Param, rewrite
from semtree.types import DType, TensorShape
from tests.reference import poison, run_kernel, run_kernel_list

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import hal
    from semtree.nodes import Function

_DEVICE_POISON = 0xA5

# Tolerances (design 12): exact for integers and booleans; single float operations.
FLOAT_TOLERANCE = {
    DType.FLOAT16: {"rtol": 1e-2, "atol": 1e-3},
    DType.FLOAT32: {"rtol": 1e-5, "atol": 1e-6},
    DType.FLOAT64: {"rtol": 1e-12, "atol": 1e-14},
}


def kernel(
    function: Function,
    elements: Mapping[str, int] | int,
    global_size: Sequence[int],
    local_size: Sequence[int] = (0, 0, 0),
    *,
    name: str | None = None,
    aliases: Sequence[tuple[str, str]] = (),
    comments: str = "",
) -> KernelInfo:
    """A KernelInfo for `function`: a mutable pointer parameter is an output, a const one an
    input; `elements` gives each buffer's element count (or one count for all)."""
    params = []
    for param in function.params:
        type_ = param.type
        assert type_.dtype is not None
        count = elements if isinstance(elements, int) else elements[param.name]
        direction = Direction.IN if type_.is_const else Direction.OUT
        params.append(KernelParam(param.name, direction, type_.dtype, (count,), type_.vec_width))
    grid = tuple(global_size) + (1,) * (3 - len(global_size))
    local = tuple(local_size) + (1,) * (3 - len(local_size)) if any(local_size) else (0, 0, 0)
    return KernelInfo(
        name=name or function.name,
        kind=KernelKind.ELEMENTWISE,
        params=tuple(params),
        global_size=grid,  # type: ignore[arg-type]
        local_size=local,  # type: ignore[arg-type]
        body=function,
        flops=0,
        bytes=0,
        safe_self_aliases=tuple(aliases),
        comments=comments,
    )


def with_prefix(function: Function, prefix: str) -> Function:
    """`function` with its parameters renamed `<prefix><name>`, so that the sample kernels
    can share one KernelList without their buffers colliding."""
    names = {param.name for param in function.params}

    def rename(node: Node) -> Node | None:
        match node:
            case Lookup(name) if name in names:
                return Lookup(prefix + name)
            case Param(name, type_):
                return Param(prefix + name, type_)
            case _:
                return None

    return rewrite(function, rename)  # type: ignore[return-value]


def kernel_list(*infos: KernelInfo) -> KernelList:
    """A KernelList of `infos`: every buffer read before a kernel writes it is an input."""
    shapes: dict[str, TensorShape] = {}
    written: set[str] = set()
    inputs: list[str] = []
    for info in infos:
        for param in info.params:
            shapes.setdefault(param.name, TensorShape(param.dtype, param.shape))
            unwritten = param.direction is Direction.IN and param.name not in written
            if unwritten and param.name not in inputs:
                inputs.append(param.name)
        written.update(info.outputs)
    outputs = [name for name in shapes if name in written and name not in inputs]
    return KernelList(tuple(infos), shapes, tuple(inputs), tuple(outputs), ())


def upload(device: hal.Device, values: np.ndarray) -> hal.Buffer:
    buffer = device.executor.allocate(values.nbytes)
    view = buffer.map_discard()
    view[:] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    buffer.unmap()
    return buffer


def download(buffer: hal.Buffer, dtype: np.dtype, deps: Sequence[hal.Event] = ()) -> np.ndarray:
    view = buffer.map_current(deps)
    try:
        return view.view(dtype).copy()
    finally:
        buffer.unmap()


def run_on_device(
    device: hal.Device,
    program: KernelList,
    inputs: Mapping[str, np.ndarray],
    library: hal.Library | None = None,
) -> dict[str, np.ndarray]:
    """Build (unless `library` is given) and run every kernel of `program` in order, ordered
    by events only (read after write, write after read and write), and return its outputs.
    Outputs start filled with bytes that differ from the reference interpreter's poison, so
    an element the device leaves unwritten never agrees with the reference."""
    library = library or device.compiler.build(program, device)
    buffers: dict[str, hal.Buffer] = {}
    last_write: dict[str, hal.Event] = {}
    reads: dict[str, list[hal.Event]] = {}
    for name, shape in program.shapes.items():
        if name in inputs:  # program inputs, and initial contents of in-place outputs
            values = np.ascontiguousarray(inputs[name], dtype=shape.dtype.numpy)
        else:  # not the reference's poison: an element the kernel skips cannot agree
            values = np.full(shape.nbytes, _DEVICE_POISON, np.uint8)
        buffers[name] = upload(device, values)
    for index, info in enumerate(program.kernels):
        deps: list[hal.Event] = []
        for param in info.params:
            if param.name in last_write:
                deps.append(last_write[param.name])
            if param.direction is Direction.OUT:
                deps += reads.get(param.name, [])
        prepared = device.executor.prepare(library, index)
        event = prepared.run([buffers[param.name] for param in info.params], deps)
        for param in info.params:
            if param.direction is Direction.OUT:
                last_write[param.name] = event
                reads[param.name] = []
            else:
                reads.setdefault(param.name, []).append(event)
    device.executor.flush()
    results = {}
    for name in program.outputs:
        shape = program.shapes[name]
        events = [last_write[name]] if name in last_write else []
        results[name] = download(buffers[name], shape.dtype.numpy, events).reshape(shape.dims)
    return results


def run_reference(
    program: KernelList, inputs: Mapping[str, np.ndarray], *, native_fp16: bool = False
) -> dict[str, np.ndarray]:
    """The reference interpreter's outputs; `inputs` may also give the initial contents of
    outputs (for in-place kernels), which are otherwise poisoned."""
    if all(name in program.inputs for name in inputs):
        return run_kernel_list(program, inputs, native_fp16=native_fp16)
    buffers = {}
    for name, shape in program.shapes.items():
        if name in inputs:
            buffers[name] = np.array(inputs[name], dtype=shape.dtype.numpy).reshape(shape.dims)
        else:
            buffers[name] = poison(np.empty(shape.dims, shape.dtype.numpy))
    for info in program.kernels:
        run_kernel(info, buffers, native_fp16=native_fp16)
    return {name: buffers[name] for name in program.outputs}


def assert_same(name: str, got: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    """Exact for integers and booleans; the stated tolerance for floats (NaN equals NaN)."""
    if dtype.is_float:
        np.testing.assert_allclose(
            got.astype(np.float64),
            expected.astype(np.float64),
            equal_nan=True,
            err_msg=name,
            **FLOAT_TOLERANCE[dtype],
        )
    else:
        np.testing.assert_array_equal(got, expected, err_msg=name)


def check_against_reference(
    device: hal.Device,
    program: KernelList,
    inputs: Mapping[str, np.ndarray],
    library: hal.Library | None = None,
) -> dict[str, np.ndarray]:
    """Run on the device and on the reference interpreter; assert every output agrees."""
    got = run_on_device(device, program, inputs, library)
    expected = run_reference(program, inputs, native_fp16=device.settings.native_fp16)
    for name in program.outputs:
        assert_same(name, got[name], expected[name], program.shapes[name].dtype)
    return got


def edge_values(dtype: DType, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two operand arrays of `count` elements: every pair of the dtype's edge values
    (limits, 0, +-1, shift widths; NaN, infinities, signed zeros for floats), then random."""
    generator = np.random.default_rng(seed)
    numpy_type = dtype.numpy
    if dtype.is_bool:
        edges = np.array([False, True])
    elif dtype.is_float:
        info = np.finfo(numpy_type)
        specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, 1e-3, 1e4]
        limits = [float(info.max), float(info.tiny), -float(info.max)]
        edges = np.array([*specials, *limits]).astype(numpy_type)
    else:
        info = np.iinfo(numpy_type)
        candidates = [info.min, info.min + 1, -7, -1, 0, 1, 2, 3, 7, 8, 31, 32, 33, 63, 64]
        candidates += [info.max - 1, info.max]
        edges = np.array([int(v) for v in candidates if info.min <= v <= info.max], numpy_type)
    left, right = (grid.reshape(-1) for grid in np.meshgrid(edges, edges, indexing="ij"))
    left, right = left[:count], right[:count]
    missing = count - left.size
    if missing > 0:
        left = np.concatenate([left, random_values(dtype, missing, generator)])
        right = np.concatenate([right, random_values(dtype, missing, generator)])
    return left.astype(numpy_type), right.astype(numpy_type)


def random_values(dtype: DType, count: int, generator: np.random.Generator) -> np.ndarray:
    if dtype.is_bool:
        return generator.integers(0, 2, count).astype(bool)
    if dtype.is_float:
        return (generator.standard_normal(count) * 10).astype(dtype.numpy)
    info = np.iinfo(dtype.numpy)
    return generator.integers(int(info.min), int(info.max), count, endpoint=True, dtype=dtype.numpy)
