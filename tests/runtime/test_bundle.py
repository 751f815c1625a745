"""Compiled functions and saved bundles (`tile.runtime.compiled`, issue 13 item 2): compile for
a signature, call with matching inputs, refuse others clearly; a bundle saved by one process
runs in another where Lark cannot be imported, with identical results; damaged or
incompatible bundles are clear errors."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import zipfile
from typing import TYPE_CHECKING

import numpy as np
import pytest

import tile
from tests.conftest import run_script
from tests.shipped import SHIPPED, require_opencl

if TYPE_CHECKING:
    from pathlib import Path

SOURCE = (
    "function (A[M, K], B[K, N], S) -> (C, D) "
    "{ C[m, n: M, N] = +(A[m, k] * B[k, n]); D = C * S - 1; }"
)
SIZES = [(1, 1, 1), (7, 13, 5), (31, 17, 33)]
TOLERANCE = 1e-5  # relative to the largest value: float32 sums of at most 17 products


@pytest.fixture(params=SHIPPED)
def device(request: pytest.FixtureRequest) -> str:
    if request.param != "llvm_cpu.0":
        require_opencl()
    return request.param


def operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((k, n)).astype(np.float32),
    )


def check(outputs: dict[str, tile.Tensor], a: np.ndarray, b: np.ndarray, s: float) -> None:
    c = a.astype(np.float64) @ b.astype(np.float64)
    d = c * s - 1
    for name, want in (("C", c), ("D", d)):
        got = outputs[name].to_numpy()
        assert got.shape == want.shape and got.dtype == np.float32
        assert np.abs(got - want).max() <= TOLERANCE * (1 + np.abs(want).max()), name


@pytest.mark.parametrize(("m", "k", "n"), SIZES)
def test_a_compiled_function_runs_its_signature(device: str, m: int, k: int, n: int) -> None:
    fn = tile.Function(SOURCE, name="affine")
    compiled = fn.compile(tile.spec((m, k)), tile.spec([k, n], "float32"), 2.5, device=device)
    assert compiled.device.id == tile.device(device).id and compiled.inputs == ("A", "B", "S")
    assert compiled.outputs == {"C": ((m, n), np.dtype("f4")), "D": ((m, n), np.dtype("f4"))}
    a, b = operands(m, k, n)
    check(compiled(a, b, 2.5), a, b, 2.5)
    tensors = tile.Tensor.from_numpy(a, device), tile.Tensor.from_numpy(b, device)
    check(compiled(A=tensors[0], B=tensors[1], S=2.5), a, b, 2.5)


def test_inputs_of_another_signature_are_refused(device: str) -> None:
    compiled = tile.Function(SOURCE).compile(
        tile.spec((3, 4)), tile.spec((4, 2)), 1.0, device=device
    )
    a, b = operands(3, 4, 2)
    wrong = {
        "shape": ((a[:2], b, 1.0), "shape \\[2, 4\\]; compiled for .* shape \\[3, 4\\]"),
        "dtype": ((a.astype(np.float64), b, 1.0), "float64 tensor"),
        "constant": ((a, b, 2.0), "constant 2.0; compiled for the float constant 1.0"),
        "missing": ((a,), "missing input \\['B'\\]"),
    }
    for args, message in wrong.values():
        with pytest.raises(tile.TileBindError, match=message):
            compiled(*args)
    check(compiled(a, b), a, b, 1.0)  # a constant left out is the compiled value
    with pytest.raises(tile.TileBindError, match="no input named 'X'"):
        compiled(a, b, 1.0, X=a)
    with pytest.raises(TypeError, match="two values"):
        compiled(a, b, 1.0, A=a)
    other = "opencl.0" if device == "llvm_cpu.0" else "llvm_cpu.0"
    if other != "llvm_cpu.0":
        require_opencl()
    with pytest.raises(tile.DeviceMismatch):
        compiled(tile.Tensor.from_numpy(a, other), b, 1.0)


# Saves (argv[1] = "save") or loads (argv[1] = "load", with Lark blocked) the bundle argv[3]
# for device argv[2], runs it on fixed operands and writes the outputs to argv[3] + ".npz".
SCRIPT = """
import sys
if sys.argv[1] == "load":
    sys.modules["lark"] = None  # importing Lark now fails
import numpy as np
import tile
mode, device, path = sys.argv[1:4]
rng = np.random.default_rng(3)
a = rng.standard_normal((31, 17)).astype(np.float32)
b = rng.standard_normal((17, 33)).astype(np.float32)
if mode == "save":
    compiled = tile.Function(SOURCE, name="affine").compile(a, b, 0.5, device=device)
    compiled.save(path)
    out = path + ".saved.npz"
else:
    compiled = tile.load(path)
    assert compiled.device.id == tile.device(device).id, compiled.device
    out = path + ".loaded.npz"
outputs = compiled(a, b, 0.5)
np.savez(out, **{name: tensor.to_numpy() for name, tensor in outputs.items()})
print("lark" in sys.modules and sys.modules["lark"] is not None)
"""


def script(mode: str, device: str, path: Path) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR",)}
    return run_script(f"SOURCE = {SOURCE!r}\n{SCRIPT}", mode, device, str(path), env=environment)


def test_a_bundle_runs_in_another_process_without_lark(tmp_path: Path, device: str) -> None:
    path = tmp_path / "affine.tileb"
    script("save", device, path)
    assert script("load", device, path) == "False"  # Lark was never imported
    saved = np.load(f"{path}.saved.npz")
    loaded = np.load(f"{path}.loaded.npz")
    assert set(saved) == set(loaded) == {"C", "D"}
    for name in saved:
        assert np.array_equal(saved[name], loaded[name]), name  # identical, bit for bit
    header = json.loads(zipfile.ZipFile(path).read("bundle.json"))
    assert header["device"]["id"] == tile.device(device).id and header["name"] == "affine"
    assert [name for name, _ in header["inputs"]] == ["A", "B", "S"]


def saved_bundle(tmp_path: Path, device: str = "llvm_cpu.0") -> Path:
    compiled = tile.Function(SOURCE).compile(
        tile.spec((3, 4)), tile.spec((4, 2)), 1.0, device=device
    )
    return compiled.save(tmp_path / "f.tileb")


def rewrite(path: Path, member: str, data: bytes, *, fix_checksum: bool) -> None:
    with zipfile.ZipFile(path) as bundle:
        members = {name: bundle.read(name) for name in bundle.namelist()}
    members[member] = data
    if fix_checksum:
        header = json.loads(members["bundle.json"])
        header["sha256"][member] = hashlib.sha256(data).hexdigest()
        members["bundle.json"] = json.dumps(header).encode()
    with zipfile.ZipFile(path, "w") as bundle:
        for name, content in members.items():
            bundle.writestr(name, content)


def test_damaged_bundles_are_clear_errors(tmp_path: Path) -> None:
    path = saved_bundle(tmp_path)
    garbage = tmp_path / "garbage.tileb"
    garbage.write_bytes(os.urandom(300))
    with pytest.raises(tile.TileBundleError, match="not a tile bundle"):
        tile.load(garbage)
    with pytest.raises(tile.TileBundleError, match="not a tile bundle"):
        tile.load(tmp_path / "missing.tileb")
    rewrite(path, "code.bin", b"tampered", fix_checksum=False)
    with pytest.raises(tile.TileBundleError, match=r"code\.bin does not match its checksum"):
        tile.load(path)
    path = saved_bundle(tmp_path)
    rewrite(path, "plan.pickle", pickle.dumps(os.system), fix_checksum=True)
    with pytest.raises(tile.TileBundleError, match="not a plan"):
        tile.load(path)
    path = saved_bundle(tmp_path)
    header = json.loads(zipfile.ZipFile(path).read("bundle.json"))
    header["format"] = 99
    rewrite(path, "bundle.json", json.dumps(header).encode(), fix_checksum=False)
    with pytest.raises(tile.TileBundleError, match="format 99"):
        tile.load(path)


def test_incompatible_bundles_are_refused_with_the_reason(tmp_path: Path) -> None:
    require_opencl()
    path = saved_bundle(tmp_path)
    with pytest.raises(tile.TileUnsupported, match="holds llvm code"):
        tile.load(path, device=SHIPPED[1])
    code = zipfile.ZipFile(path).read("code.bin")
    magic = b"tile-llvm-object\n"
    size = int.from_bytes(code[len(magic) : len(magic) + 8], "little")
    header = json.loads(code[len(magic) + 8 : len(magic) + 8 + size])
    header["features"].append("avx9000")
    data = json.dumps(header).encode()
    forged = magic + len(data).to_bytes(8, "little") + data + code[len(magic) + 8 + size :]
    rewrite(path, "code.bin", forged, fix_checksum=True)
    with pytest.raises(tile.TileUnsupported, match="avx9000"):
        tile.load(path)
    opencl = saved_bundle(tmp_path, SHIPPED[1])
    with pytest.raises(tile.TileUnsupported, match="holds opencl code"):
        tile.load(opencl, device="llvm_cpu.0")
    loaded = tile.load(opencl)
    a, b = operands(3, 4, 2)
    check(loaded(a, b, 1.0), a, b, 1.0)


def test_a_gradient_function_compiles_too() -> None:
    fn = tile.Function("function (X[N]) -> (Y) { Y[: ] = +(X[n] * X[n]); }")
    grad = tile.gradient(fn, of="Y", wrt=["X"])
    compiled = grad.compile(tile.spec(5), device="llvm_cpu.0")
    x = np.arange(5, dtype=np.float32)
    assert np.allclose(compiled(x)["DX"].to_numpy(), 2 * x)
