"""Out of memory is one error, `tile.TileOutOfMemory`, on `llvm_cpu.0`: for a tensor with too
many elements to index, for a size beyond the host's memory and for the host's refusals. It
names the tensor, its shape and its bytes, and a failed call changes no bound tensor and
keeps no buffer (issue 10). The OpenCL side is in tests/opencl/test_out_of_memory.py."""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING

import numpy as np
import pytest

import hal
import hal_llvm.memory
import tile

if TYPE_CHECKING:
    from collections.abc import Iterator

# S, E and T are the program's temporaries, in this order; T (N x M) is the large one.
THREE_TEMPORARIES = """
function (A[N], B[M]) -> (C, D) {
  S[i, k: N, 2] = =(A[i] * B[k]);
  E[i: N] = +(S[i, k]);
  T[i, j: N, M] = =(E[i] * B[j]);
  C[i: N] = +(T[i, j]);
  D = A + 1;
}"""
N = M = 1024
LIMIT = 1 << 20  # the host's memory while a test lowers it: T (4 MiB) does not fit


@pytest.fixture
def cpu() -> Iterator[tile.Device]:
    """`llvm_cpu.0` with the real kernel generator and an empty program cache."""
    device = tile.device("llvm_cpu.0")
    device.clear_cache()
    yield device
    device.clear_cache()


@pytest.fixture
def allocations(cpu: tile.Device, monkeypatch: pytest.MonkeyPatch) -> list[weakref.ref]:
    """Weak references to every buffer `cpu` allocates during the test."""
    executor = cpu.runtime.executor
    made: list[weakref.ref] = []
    allocate = executor.allocate

    def tracked(size: int) -> hal.Buffer:
        buffer = allocate(size)
        made.append(weakref.ref(buffer))
        return buffer

    monkeypatch.setattr(executor, "allocate", tracked)
    return made


def survivors(made: list[weakref.ref]) -> int:
    """How many of the buffers are still alive. (Call it once the error is dropped: its
    traceback holds the frames the error passed through, and their locals, as always.)"""
    gc.collect()
    return sum(ref() is not None for ref in made)


def check_error(
    error: tile.TileOutOfMemory,
    name: str | None,
    shape: tuple[int, ...],
    nbytes: int,
    device: str | None,
) -> None:
    assert isinstance(error, tile.TileError) and isinstance(error, MemoryError)
    assert error.code == "E-MEMORY"
    assert (error.tensor, error.shape, error.nbytes, error.device) == (name, shape, nbytes, device)
    text = str(error)
    assert str(list(shape)) in text and f"{nbytes} bytes" in text
    assert (f"tensor '{name}'" if name else "a tensor") in text
    assert device is None or device in text


def snapshot(tensors: dict[str, tile.Tensor]) -> dict[str, np.ndarray]:
    return {name: tensor.to_numpy() for name, tensor in tensors.items()}


def assert_unchanged(tensors: dict[str, tile.Tensor], before: dict[str, np.ndarray]) -> None:
    for name, tensor in tensors.items():
        np.testing.assert_array_equal(tensor.to_numpy(), before[name], err_msg=name)


def test_out_of_memory_is_exported() -> None:
    assert tile.TileOutOfMemory in (getattr(tile, name) for name in tile.__all__)
    assert issubclass(tile.TileOutOfMemory, tile.DeviceError)


@pytest.mark.parametrize(
    "shape", [(10**6, 10**6), (2**62,)], ids=["more-than-the-host", "bytes-overflow"]
)
def test_a_tensor_larger_than_the_host(cpu: tile.Device, shape: tuple[int, ...]) -> None:
    # Refused before the host is asked: with overcommit, the host would grant it.
    with pytest.raises(tile.TileOutOfMemory) as caught:
        tile.Tensor(cpu, shape, "float32", name="X")
    check_error(caught.value, "X", shape, 4 * int(np.prod(shape, dtype=object)), cpu.id)
    assert "more than the host's memory" in str(caught.value)
    assert isinstance(caught.value.__cause__, hal.OutOfMemoryError)
    with pytest.raises(tile.TileOutOfMemory, match=r"a tensor float32\[1000000, 1000000\]"):
        tile.Tensor(cpu, (10**6, 10**6))


@pytest.mark.parametrize(
    ("dtype", "refusal"),
    [("int8", MemoryError), ("float32", ValueError)],  # 2^62 bytes; 2^64, past numpy's reach
)
def test_the_hosts_refusals(
    cpu: tile.Device, dtype: str, refusal: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", None)  # no limit: numpy is asked
    with pytest.raises(tile.TileOutOfMemory, match="the host refused it") as caught:
        tile.Tensor(cpu, (2**62,), dtype, name="X")
    nbytes = 2**62 * np.dtype(dtype).itemsize
    check_error(caught.value, "X", (2**62,), nbytes, cpu.id)
    assert isinstance(caught.value.__cause__.__cause__, refusal)


def test_too_many_elements_for_generated_code(cpu: tile.Device) -> None:
    source = "function (A[N]) -> (C) { T[i, j: N, N] = =(A[i]); C[i: N] = +(T[i, j]); }"
    values = np.ones(2**16, np.float32)
    a = tile.Tensor.from_numpy(values, cpu)
    c = tile.Tensor.from_numpy(np.full(2**16, 7, np.float32), cpu)
    invoker = tile.Invoker(source, {"A": a}, {"C": c})
    with pytest.raises(tile.TileOutOfMemory, match="2\\^31 - 1") as caught:
        invoker.invoke()
    check_error(caught.value, "T", (2**16, 2**16), 2**34, None)
    np.testing.assert_array_equal(c.to_numpy(), 7)
    np.testing.assert_array_equal(a.to_numpy(), values)


def bound_call(cpu: tile.Device) -> tuple[tile.Invoker, dict[str, tile.Tensor]]:
    rng = np.random.default_rng(1)
    tensors = {
        "A": tile.Tensor.from_numpy(rng.random(N, np.float32), cpu),
        "B": tile.Tensor.from_numpy(rng.random(M, np.float32), cpu),
        "C": tile.Tensor.from_numpy(np.full(N, -1, np.float32), cpu),
        "D": tile.Tensor.from_numpy(np.full(N, -2, np.float32), cpu),
    }
    inputs = {name: tensors[name] for name in "AB"}
    return tile.Invoker(THREE_TEMPORARIES, inputs, {n: tensors[n] for n in "CD"}), tensors


def test_a_failed_temporary_changes_nothing(
    cpu: tile.Device, allocations: list[weakref.ref], monkeypatch: pytest.MonkeyPatch
) -> None:
    invoker, tensors = bound_call(cpu)
    before = snapshot(tensors)
    allocations.clear()
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", LIMIT)
    with pytest.raises(tile.TileOutOfMemory) as caught:
        invoker.invoke()
    check_error(caught.value, "T", (N, M), 4 * N * M, cpu.id)
    del caught
    assert len(allocations) == 2 and survivors(allocations) == 0  # S and E, released
    (program,) = cpu.runtime.programs._entries.values()
    assert program.temporaries is None
    assert_unchanged(tensors, before)
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", None)
    invoker.invoke().wait()  # the same call works once the memory is there
    a, b = before["A"].astype(np.float64), before["B"].astype(np.float64)
    expected = (a * b[:2].sum()) * b.sum()
    np.testing.assert_allclose(tensors["C"].to_numpy(), expected, rtol=1e-4)
    np.testing.assert_allclose(tensors["D"].to_numpy(), before["A"] + 1)


def test_a_failed_scratch_buffer_changes_nothing(
    cpu: tile.Device, allocations: list[weakref.ref], monkeypatch: pytest.MonkeyPatch
) -> None:
    # D is bound to a float64 tensor: the kernel writes a float32 scratch buffer of D's size.
    source = """
    function (A[N], B[M]) -> (C, D) {
      S[i, k: N, 2] = =(A[i] * B[k]);
      C[i: N] = +(S[i, k]);
      D[i, j: N, M] = =(A[i] * B[j]);
    }"""
    tensors = {
        "A": tile.Tensor.from_numpy(np.ones(N, np.float32), cpu),
        "B": tile.Tensor.from_numpy(np.ones(M, np.float32), cpu),
        "C": tile.Tensor.from_numpy(np.full(N, 3, np.float32), cpu),
        "D": tile.Tensor.from_numpy(np.full((N, M), 4, np.float64), cpu),
    }
    invoker = tile.Invoker(source, {"A": tensors["A"], "B": tensors["B"]})
    invoker.set_outputs({"C": tensors["C"], "D": tensors["D"]})
    before = snapshot(tensors)
    allocations.clear()
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", LIMIT)
    with pytest.raises(tile.TileOutOfMemory) as caught:
        invoker.invoke()
    check_error(caught.value, "D", (N, M), 4 * N * M, cpu.id)
    del caught
    assert len(allocations) == 1 and survivors(allocations) == 0  # S, released
    (program,) = cpu.runtime.programs._entries.values()
    assert program.temporaries is None and not program.scratch
    assert_unchanged(tensors, before)


def test_a_failed_private_copy_changes_nothing(
    cpu: tile.Device, allocations: list[weakref.ref], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The output is bound to the input it is computed from: kernels read a private copy.
    source = """
    function (A[N, M]) -> (B) {
      T[i: N] = +(A[i, j]);
      B[i, j: N, M] = =(A[i, j] + T[i]);
    }"""
    a = tile.Tensor.from_numpy(np.ones((N, M), np.float32), cpu, name="A")
    invoker = tile.Invoker(source, {"A": a}, {"B": a})
    allocations.clear()
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", LIMIT)
    with pytest.raises(tile.TileOutOfMemory) as caught:
        invoker.invoke()
    check_error(caught.value, "A", (N, M), 4 * N * M, cpu.id)
    del caught
    assert len(allocations) == 1 and survivors(allocations) == 0  # T, released
    (program,) = cpu.runtime.programs._entries.values()
    assert program.temporaries is None
    np.testing.assert_array_equal(a.to_numpy(), 1)
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", None)
    invoker.invoke().wait()
    np.testing.assert_array_equal(a.to_numpy(), 1 + M)


def test_a_failed_output_releases_the_uploads(
    cpu: tile.Device, allocations: list[weakref.ref], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A function call uploads its numpy inputs, then allocates its outputs: T does not fit.
    source = "function (A[N], B[M]) -> (T) { T[i, j: N, M] = =(A[i] * B[j]); }"
    function = tile.Function(source)
    monkeypatch.setattr(hal_llvm.memory, "HOST_MEMORY", LIMIT)
    with pytest.raises(tile.TileOutOfMemory) as caught:
        function(device=cpu, A=np.ones(N, np.float32), B=np.ones(M, np.float32))
    check_error(caught.value, "T", (N, M), 4 * N * M, cpu.id)
    del caught
    assert len(allocations) == 2 and survivors(allocations) == 0  # the uploads of A and B


def test_a_refused_map(cpu: tile.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = tile.Tensor.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3), cpu, name="X")
    buffer = tensor._state.buffer

    def refuse(*args: object, **kwargs: object) -> None:
        raise hal.OutOfMemoryError(cpu.id, buffer.size, "no room to map")

    monkeypatch.setattr(buffer, "read", refuse)
    monkeypatch.setattr(buffer, "map_current", refuse)
    monkeypatch.setattr(buffer, "map_discard", refuse)
    with pytest.raises(tile.TileOutOfMemory, match="reading it for the host: no room") as caught:
        tensor.to_numpy()
    check_error(caught.value, "X", (2, 3), 12, cpu.id)
    for writing in (lambda: tensor.mmap_current(writable=True), tensor.mmap_discard):
        with pytest.raises(tile.TileOutOfMemory), writing():
            pass
    monkeypatch.undo()
    # Nothing was written: the tensor is neither changed nor poisoned.
    np.testing.assert_array_equal(tensor.to_numpy(), np.arange(6).reshape(2, 3))


def test_a_cached_calls_refused_output(cpu: tile.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cached call makes its small outputs through `DeviceRuntime.output_maker`, not
    # `allocate`: a refusal there is the same error, naming the output, and changes nothing.
    refuse = False
    cut = hal_llvm.memory._Slabs.cut

    def refusing(slabs: object, device: str, step: int) -> tuple[np.ndarray, int, int]:
        if refuse:
            raise hal.OutOfMemoryError(device, step, "refused for the test")
        return cut(slabs, device, step)  # type: ignore[arg-type]

    monkeypatch.setattr(hal_llvm.memory._Slabs, "cut", refusing)
    function = tile.Function("function (A[N]) -> (B) { B = A + 1; }")
    a = tile.Tensor.from_numpy(np.arange(16, dtype=np.float32), cpu)
    for _ in range(3):  # the first call compiles, the next ones repeat it
        np.testing.assert_array_equal(function(device=cpu, A=a)["B"].to_numpy(), np.arange(16) + 1)
    assert function._prepared is not None
    refuse = True
    with pytest.raises(tile.TileOutOfMemory, match="refused for the test") as caught:
        function(device=cpu, A=a)
    check_error(caught.value, "B", (16,), 64, cpu.id)
    refuse = False
    np.testing.assert_array_equal(a.to_numpy(), np.arange(16))
    np.testing.assert_array_equal(function(device=cpu, A=a)["B"].to_numpy(), np.arange(16) + 1)
