"""A repeated call whose inputs are all tensors takes `PreparedRun.repeat` (issue 11 item 6):
it skips the Invoker and `launch`, yet gives what the full path gives, waits for what the full
path waits for, and leaves every other call to the full path.

Each test that checks values compares with float64 numpy, on outputs that are new tensors
(nothing from an earlier call can show through: the inputs change every call).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
import tile.runtime.invoke as invoke
from tests.shipped import SHIPPED
from tile.runtime.launch import PreparedRun

if TYPE_CHECKING:
    from pathlib import Path

    from tests.runtime.fakes import FakeDevice

# Two contractions, a temporary between them, bias and relu: several kernels and a buffer
# the program owns, reused by every run.
MLP = """function (X[B, K], W1[K, H], C[H], W2[H, N]) -> (Y, T) {
    P[b, h : B, H] = +(X[b, k] * W1[k, h]);
    Q = P + C;
    T = Q > 0 ? Q : 0;
    Y[b, n : B, N] = +(T[b, h] * W2[h, n]);
}"""


def mlp_reference(x, w1, c, w2) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.maximum(x.astype(np.float64) @ w1 + c, 0)
    return hidden @ w2, hidden


class Repeats:
    """Counts the calls that `PreparedRun.repeat` served; with `forbid_others`, any other
    call fails the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.forbid_others = False
        real = PreparedRun.repeat

        def counted(run: PreparedRun, named: object) -> object:
            outputs = real(run, named)  # type: ignore[arg-type]
            if outputs is not None:
                self.count += 1
            return outputs

        def invoker(*args: object, **kwargs: object) -> object:
            if self.forbid_others:
                raise AssertionError("a call took the full path")
            return real_invoker(*args, **kwargs)  # type: ignore[arg-type]

        real_invoker = invoke.Invoker
        monkeypatch.setattr(PreparedRun, "repeat", counted)
        monkeypatch.setattr(invoke, "Invoker", invoker)


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize("sizes", [(1, 1, 1, 1), (7, 13, 5, 3), (33, 17, 65, 31)])
def test_repeated_calls_match_numpy(
    device_id: str, sizes: tuple[int, int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    device = tile.device(device_id)
    function = tile.Function(MLP, "mlp")
    b, k, h, n = sizes
    random = np.random.default_rng(sum(sizes))
    repeats = Repeats(monkeypatch)
    for call in range(6):
        arrays = [
            random.standard_normal(shape).astype(np.float32)
            for shape in ((b, k), (k, h), (h,), (h, n))
        ]
        tensors = [tile.Tensor.from_numpy(array, device) for array in arrays]
        if call == 1:
            repeats.forbid_others = True  # from here on, every call is a repeat
        outputs = function(*tensors)
        y, hidden = mlp_reference(*arrays)
        np.testing.assert_allclose(outputs["T"].numpy(), hidden, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outputs["Y"].numpy(), y, rtol=1e-4, atol=1e-4)
    assert repeats.count == 5  # all but the first


@pytest.mark.parametrize("device_id", SHIPPED)
def test_other_calls_take_the_full_path(device_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another shape, a numpy input, a device given by a selector or by another id, logging
    or profiles asked for, a cleared program cache: each takes the full path and is right;
    a device given by its id repeats like the device itself."""
    device = tile.device(device_id)
    function = tile.Function("function (A, B) -> (O) { O = A * B + 1; }", "fma")
    repeats = Repeats(monkeypatch)

    def check(a: np.ndarray, b: object, *, repeated: bool, **kwargs: object) -> None:
        before = repeats.count
        out = function(A=tile.Tensor.from_numpy(a, device), B=b, **kwargs)["O"].numpy()
        b_values = b.numpy() if isinstance(b, tile.Tensor) else np.asarray(b)
        np.testing.assert_allclose(out, a.astype(np.float64) * b_values + 1, rtol=1e-6)
        assert repeats.count == before + repeated

    def tensor(*shape: int) -> tile.Tensor:
        values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 2
        return tile.Tensor.from_numpy(values, device)

    a3 = np.arange(3, dtype=np.float32)
    check(a3, tensor(3), repeated=False)
    check(a3, tensor(3), repeated=True)
    check(np.arange(5, dtype=np.float32), tensor(5), repeated=False)  # another shape
    check(a3, np.arange(3, dtype=np.float32), repeated=False)  # a numpy input
    # Tensors of the first shape: the repeat prepared for the second shape does not serve
    # it; the call repeats the numpy call's signature, and prepares it for the next.
    check(a3, tensor(3), repeated=False)
    check(a3, tensor(3), repeated=True)
    check(a3, np.arange(3, dtype=np.float32), repeated=False)  # leaves the prepared one be
    check(a3, tensor(3), repeated=True)
    check(a3, tensor(3), repeated=False, device=device.id)  # the device by its id: repeats
    check(a3, tensor(3), repeated=True, device=device.id)
    selectors = [device_id, "llvm_cpu", "opencl", "opencl:intel"]  # never repeated
    selector = next(s for s in selectors if "." not in s and tile.device(s) is device)
    check(a3, tensor(3), repeated=False, device=selector)
    check(a3, tensor(3), repeated=False, device=selector)
    other = next(tile.device(other).id for other in SHIPPED if other != device_id)
    for _ in range(2):  # another device's id: a mismatch every time, never a repeat
        with pytest.raises(tile.DeviceMismatch):
            function(A=tensor(3), B=tensor(3), device=other)
    check(a3, tensor(3), repeated=True, device=device.id)
    for variable in ("TILE_DEBUG", "TILE_PROFILE"):
        monkeypatch.setenv(variable, "1")
        check(a3, tensor(3), repeated=False)
        monkeypatch.delenv(variable)
    monkeypatch.setenv("TILE_PROFILE", "0")  # set, but off: the repeat reads it properly
    check(a3, tensor(3), repeated=True)
    monkeypatch.delenv("TILE_PROFILE")
    check(a3, tensor(3), repeated=False, device=device)  # another device argument
    check(a3, tensor(3), repeated=True, device=device)
    device.clear_cache()  # the program is gone, and its prepared run with it
    assert function._prepared is not None and function._prepared[1]() is None
    check(a3, tensor(3), repeated=False, device=device)  # compiled again
    check(a3, tensor(3), repeated=True, device=device)


def test_a_repeat_waits_for_its_inputs_writers(fake: tile.Device, fake_hal: FakeDevice) -> None:
    """On the out-of-order fake device: a repeated call that reads a tensor still being
    written waits for its writer, and its own reader waits for it."""
    add_one = tile.Function("function (X) -> (Y) { Y = X + 1; }", "add_one")
    negate = tile.Function("function (A) -> (O) { O = -A; }", "negate")
    for _ in range(2):  # compiled, then prepared
        add_one(X=tile.Tensor.from_numpy(np.zeros(3, np.float32), fake))["Y"].numpy()
    assert add_one._prepared is not None and add_one._prepared[1]() is not None
    gate = fake_hal.hold("neg")
    pending = negate(A=tile.Tensor.from_numpy(np.array([1, 2, 3], np.float32), fake))["O"]
    out = add_one(X=pending)["Y"]
    (neg,) = fake_hal.jobs_of("neg")
    add = fake_hal.jobs_of("add")[-1]
    assert neg.event in add.deps
    time.sleep(0.1)
    assert not add.event.is_complete
    gate.set()
    np.testing.assert_array_equal(out.numpy(), [0, -1, -2])


def test_a_failed_repeat_fails_its_outputs(fake: tile.Device, fake_hal: FakeDevice) -> None:
    add_one = tile.Function("function (X) -> (Y) { Y = X + 1; }", "add_one")
    x = tile.Tensor.from_numpy(np.zeros(2, np.float32), fake)
    for _ in range(2):
        np.testing.assert_array_equal(add_one(X=x)["Y"].numpy(), [1, 1])
    fake_hal.failing["add"] = RuntimeError("kernel exploded")
    failed = add_one(X=x)["Y"]
    with pytest.raises(tile.ExecutionError, match="kernel exploded"):
        failed.numpy()
    del fake_hal.failing["add"]
    np.testing.assert_array_equal(add_one(X=x)["Y"].numpy(), [1, 1])


@pytest.mark.parametrize("device_id", SHIPPED)
def test_compiled_functions_and_bundles_repeat(
    device_id: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A CompiledFunction repeats its program from the second call over tensors; one loaded
    from a bundle too, though no cache holds its program."""
    device = tile.device(device_id)
    b, k, h, n = 5, 9, 17, 3
    shapes = ((b, k), (k, h), (h,), (h, n))
    specs = [tile.spec(shape) for shape in shapes]
    compiled = tile.Function(MLP, "mlp").compile(*specs, device=device)
    path = compiled.save(tmp_path / "mlp.tileb")
    loaded = tile.load(path, device=device)
    random = np.random.default_rng(11)
    repeats = Repeats(monkeypatch)
    for function in (compiled, loaded):
        before = repeats.count
        for call in range(4):
            arrays = [random.standard_normal(shape).astype(np.float32) for shape in shapes]
            tensors = [tile.Tensor.from_numpy(array, device) for array in arrays]
            named = dict(zip(("X", "W1", "C", "W2"), tensors, strict=True))
            outputs = function(*tensors) if call % 2 else function(**named)
            y, hidden = mlp_reference(*arrays)
            np.testing.assert_allclose(outputs["T"].numpy(), hidden, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(outputs["Y"].numpy(), y, rtol=1e-4, atol=1e-4)
        assert repeats.count == before + 3
    # The compiled function's program is the cache's; the loaded one's is its own.
    assert compiled.program.prepared._key is not None  # type: ignore[union-attr]
    assert loaded.program.prepared._key is None  # type: ignore[union-attr]


@pytest.mark.parametrize("device_id", SHIPPED)
def test_reads_of_a_tensor_rewritten_meanwhile_are_whole(device_id: str) -> None:
    """A read of a small tensor (taken under the device's lock on host-memory devices) sees
    one write or the next, never part of each, while another thread rewrites it."""
    device = tile.device(device_id)
    fill = tile.Function("function (A[N], K[]) -> (O) { O = A * 0 + K; }", "fill")
    n = 16384  # 64 KiB: the largest read made under the lock
    target = tile.Tensor.from_numpy(np.zeros(n, np.float32), device)
    zeros = tile.Tensor.from_numpy(np.zeros(n, np.float32), device)
    stop = threading.Event()
    failures: list[str] = []

    def rewrite() -> None:
        k = 0
        while not stop.is_set():
            k += 1
            value = tile.Tensor.from_numpy(np.array(k, np.float32), device)
            tile.Invoker(fill, {"A": zeros, "K": value}, {"O": target}).invoke()

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        deadline = time.monotonic() + 1.0
        reads = 0
        while time.monotonic() < deadline:
            values = target.numpy()
            reads += 1
            if not (values == values[0]).all():
                failures.append(f"read {reads}: {np.unique(values)[:4]}")
                break
    finally:
        stop.set()
        writer.join()
    assert not failures and reads > 10
