"""Compiled functions and saved bundles (issue 13 item 2).

`Function.compile(*inputs, device=None, **inputs)` compiles a function for one input signature
on one device and returns a `CompiledFunction`: callable like the Function with inputs of that
signature (tensors, numpy arrays, or the same constants), and `save(path)`-able. Inputs may be
given as arrays, Tensors, constants or `spec(shape, dtype)`.

A bundle is one zip file, self-describing:

- `bundle.json`: the format, tile's version, the function's name and Tile text (for the
  reader; never parsed again), its inputs in order with their signature entries, its
  outputs' shapes and dtypes, the device it was compiled for (id, description, settings,
  `code_identity`: driver, CPU model and features) and the sha256 of every other member;
- `plan.pickle`: the kernel list and the schedule (read by `tile.runtime.store.loads`, which
  builds IR classes only);
- `code.bin`: the device code (`hal.Compiler.export`: an object file for llvm_cpu, OpenCL C
  for OpenCL).

`tile.load(path, device=None)` (`tile.runtime.bundles`) needs neither the parser (Lark is not
imported) nor LLVM's optimiser: it checks the members' checksums, restores the device code
(`Compiler.restore`, which refuses a CPU without the features the code uses, with the reason)
and prepares the kernels. `device=None` means the device id the bundle was compiled for. A
`DynamicFunction`'s bundle (`tile.runtime.dynamic`) is the same with a `dynamic` entry in its
header, a plan per block size and a `code.<block>.bin` member per block size; this module
holds the reading and writing both kinds share.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hal.errors import HalError, UnsupportedOnDevice
from semtree.types import DType, TensorShape
from tile._version import __version__
from tile.errors import DeviceMismatch, TileBindError, TileBundleError, TileUnsupported, diagnostic
from tile.runtime import store
from tile.runtime.api import Tensor, resolve
from tile.runtime.cache import (
    ProgramKey,
    constant_entry,
    input_signature,
    source_hash,
    tensor_entry,
)
from tile.runtime.execute import CompiledProgram
from tile.runtime.launch import Invocation, PreparedRun, launch

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    from hal.interfaces import Kernel, Library
    from semtree.kernel import KernelList
    from tile.runtime.api import Device, DeviceLike, DTypeLike, InputValue
    from tile.runtime.cache import SignatureEntry

BUNDLE_FORMAT = 1
_MEMBERS = ("bundle.json", "plan.pickle", "code.bin")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """The shape and dtype of a tensor input, for `Function.compile` (no data)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def entry(self) -> SignatureEntry:
        return tensor_entry(self.dtype, self.shape)

    @property
    def tensor_shape(self) -> TensorShape:
        return TensorShape(DType.of(self.dtype), self.shape)


@dataclass(frozen=True, slots=True)
class SymbolicSpec:
    """A tensor input whose first axis is the batch dimension `name`, of any size
    (`tile.runtime.dynamic`)."""

    name: str
    rest: tuple[int, ...]
    dtype: np.dtype

    def at(self, rows: int) -> TensorSpec:
        return TensorSpec((rows, *self.rest), self.dtype)


def spec(
    shape: tuple[int | str, ...] | list[int | str] | int, dtype: DTypeLike = "float32"
) -> TensorSpec | SymbolicSpec:
    """A tensor input of this shape and dtype for `Function.compile`. A first dimension given
    as a name (`spec(("N", 128))`) is a batch of any size: the function compiles once for
    every N (`tile.runtime.dynamic`)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if dims and isinstance(dims[0], str):
        name, rest = dims[0], dims[1:]
        if not name.isidentifier():
            raise ValueError(f"a symbolic dimension is named by an identifier, not {name!r}")
        if any(isinstance(dim, str) for dim in rest):
            raise ValueError("only the first dimension of a spec may be symbolic")
        fixed = spec(rest, dtype) if rest else None
        return SymbolicSpec(name, fixed.shape if fixed else (), np.dtype(DType.of(dtype).numpy))
    for dim in dims:
        if isinstance(dim, str):
            raise ValueError(f"only the first dimension of a spec may be symbolic, not {dim!r}")
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 0:
            raise ValueError(f"a spec's dimensions are sizes (ints >= 0), not {dim!r}")
    if not dims:
        raise ValueError("a 0-d input is a constant: give its value, or a 0-d Tensor")
    return TensorSpec(tuple(int(d) for d in dims), np.dtype(DType.of(dtype).numpy))


class SignedFunction:
    """What compiled functions share: a name, a Tile source and a signature of inputs by name,
    and the binding of a call's inputs to those names."""

    name: str
    source: str
    signature: dict
    device: Device

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.signature)

    def _needs_value(self, name: str) -> bool:
        """Whether a call must give input `name` (a constant's value is compiled in)."""
        return self.signature[name][0] == "tensor"

    def _named(self, args: tuple, inputs: Mapping[str, InputValue]) -> dict[str, InputValue]:
        names = self.inputs
        if len(args) > len(names):
            raise TypeError(f"{self.name}() takes {len(names)} inputs, {len(args)} were given")
        named = dict(zip(names, args, strict=False))
        for name, value in inputs.items():
            if name not in self.signature:
                raise self._error(f"there is no input named '{name}'")
            if name in named:
                raise TypeError(f"{self.name}() got two values for input '{name}'")
            named[name] = value
        missing = [n for n in names if n not in named and self._needs_value(n)]
        if missing:
            raise self._error(f"missing input{'s' if len(missing) > 1 else ''} {missing}")
        for name, value in named.items():
            if isinstance(value, Tensor) and value.device is not self.device:
                raise DeviceMismatch(
                    f"{self.name} was compiled for {self.device.id}; input '{name}' is on "
                    f"{value.device.id}"
                )
        return named

    def _error(self, message: str) -> TileBindError:
        return TileBindError(diagnostic("E-BIND", f"{self.name}: {message}", None, self.source))


class CompiledFunction(SignedFunction):
    """A function compiled for one input signature on one device (module docstring)."""

    def __init__(
        self,
        name: str,
        source: str,
        device: Device,
        inputs: tuple[tuple[str, SignatureEntry], ...],
        program: CompiledProgram,
    ) -> None:
        self.name = name
        self.source = source  # the Tile text it was compiled from (information only)
        self.device = device
        self.signature = dict(inputs)  # input name -> its entry, in declaration order
        self.program = program

    @property
    def outputs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every output's shape and dtype."""
        return dict(self.program.output_shapes)

    def __call__(self, *args: InputValue, **inputs: InputValue) -> dict[str, Tensor]:
        """Run asynchronously on the compiled device; inputs positionally or by name, each of
        the compiled shape and dtype (a constant with the compiled value, or left out).
        Inputs that are all tensors take the program's `PreparedRun` from the second call."""
        program = self.program
        run = program.prepared
        if run is not None:
            outputs = run.repeat(inputs if not args else self._named(args, inputs))
            if outputs is not None:
                return outputs
        named = self._named(args, inputs)
        outputs = self.invoke(**named).outputs
        tensors = all(isinstance(value, Tensor) for value in named.values())
        if run is None and tensors and len(named) == len(self.signature):
            expected = tuple(self.signature.items())
            program.prepared = PreparedRun.of(self.device, program, expected)
        return outputs

    def invoke(self, *args: InputValue, **inputs: InputValue) -> Invocation:
        named = self._named(args, inputs)
        for name, value in named.items():
            wanted, got = self.signature[name], signature_entry(value)
            if got != wanted:
                raise self._error(f"input '{name}' is {_show(got)}; compiled for {_show(wanted)}")
        return launch(self.device, self.program, named, {}, self.name)

    # ---- bundles ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the bundle (module docstring) to `path`, atomically; return the path."""
        program, hal_device = self.program, self.device.runtime.device
        try:
            code = hal_device.compiler.export(program.library)
        except HalError as error:
            raise TileUnsupported(f"{self.device.id} cannot save compiled code: {error}") from None
        plan = store.dumps((program.kernel_list, program.schedule))
        header = {
            "name": self.name,
            "source": self.source,
            "inputs": [[name, list(_jsonable(entry))] for name, entry in self.signature.items()],
            "outputs": {
                name: [list(dims), dtype.str] for name, (dims, dtype) in self.outputs.items()
            },
        }
        return write_bundle(path, header, self.device, {"plan.pickle": plan, "code.bin": code})

    def __repr__(self) -> str:
        inputs = ", ".join(f"{name}: {_show(entry)}" for name, entry in self.signature.items())
        return f"<CompiledFunction {self.name}({inputs}) on {self.device.id}>"


def write_bundle(
    path: str | os.PathLike[str], header: dict, device: Device, members: dict[str, bytes]
) -> Path:
    """Write a bundle: `header` (with the format, tile's version, the device and each
    member's sha256 added) as `bundle.json`, then `members`; atomically. Returns the path."""
    hal_device = device.runtime.device
    header = {
        **header,
        "format": BUNDLE_FORMAT,
        "tile": __version__,
        "device": {
            "id": device.id,
            "description": device.description,
            "settings": device.runtime.fingerprint,
            "code_identity": hal_device.code_identity,
        },
        "sha256": {name: _digest(data) for name, data in members.items()},
    }
    target = Path(path)
    temporary = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("bundle.json", json.dumps(header, indent=1, sort_keys=True))
        for name, data in members.items():
            bundle.writestr(name, data)
    temporary.replace(target)
    return target


def read_bundle(path: Path) -> tuple[dict, dict[str, bytes]]:
    """A bundle's header and members, each member checked against its checksum."""
    try:
        with zipfile.ZipFile(path) as bundle:
            header = json.loads(bundle.read("bundle.json"))
            if not isinstance(header, dict) or header.get("format") != BUNDLE_FORMAT:
                found = header.get("format") if isinstance(header, dict) else None
                raise TileBundleError(
                    f"{path}: bundle format {found!r}, this tile reads {BUNDLE_FORMAT}"
                )
            sums = header.get("sha256")
            if not isinstance(sums, dict) or not sums:
                raise TileBundleError(f"{path}: the bundle lists no members")
            members = {name: bundle.read(name) for name in sums}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise TileBundleError(f"{path} is not a tile bundle: {error}") from None
    for name, data in members.items():
        if sums[name] != _digest(data):
            raise TileBundleError(f"{path}: {name} does not match its checksum (damaged)")
    return header, members


def bundle_device(path: Path, header: dict, device: DeviceLike) -> Device:
    """The device a bundle runs on (None: the one it was compiled for), if it runs that
    device's kind of code."""
    recorded = header["device"]
    target = resolve(recorded["id"] if device is None else device)
    backend = str(recorded.get("code_identity") or "").partition(" ")[0]
    here = str(target.runtime.device.code_identity or "").partition(" ")[0]
    if backend != here:
        raise TileUnsupported(
            f"{path} holds {backend or 'unknown'} code, compiled for {recorded['id']} "
            f"({recorded['description']}); {target.id} ({target.description}) runs {here} code"
        )
    return target


def restore_code(
    path: Path, header: dict, target: Device, kernel_list: KernelList, code: bytes
) -> tuple[Library, list[Kernel]]:
    """The library of a bundle's code on `target`, and its kernels prepared."""
    recorded, hal_device = header["device"], target.runtime.device
    try:
        library = hal_device.compiler.restore(kernel_list, code, hal_device)
        kernels = [
            hal_device.executor.prepare(library, index) for index in range(len(kernel_list.kernels))
        ]
    except UnsupportedOnDevice as error:
        raise TileUnsupported(
            f"{path} was compiled for {recorded['id']} ({recorded['description']}) and cannot "
            f"run on {target.id} ({target.description}): {error}"
        ) from None
    except HalError as error:
        raise TileUnsupported(
            f"{path} was compiled for {recorded['id']} ({recorded['description']}), whose code "
            f"{target.id} ({target.description}) cannot load: {error}"
        ) from None
    return library, kernels


def load_plan(path: Path, data: bytes) -> Any:
    """A bundle's pickled plan (tile's IR classes only: `store.loads`)."""
    try:
        return store.loads(data)
    except ValueError as error:
        raise TileBundleError(f"{path}: {error}") from None


def load_compiled(
    path: Path, header: dict, members: dict[str, bytes], device: DeviceLike
) -> CompiledFunction:
    """The `CompiledFunction` of a bundle `CompiledFunction.save` wrote."""
    if "plan.pickle" not in members or "code.bin" not in members:
        raise TileBundleError(f"{path}: the bundle has no plan.pickle or code.bin")
    target = bundle_device(path, header, device)
    kernel_list, schedule = load_plan(path, members["plan.pickle"])
    library, kernels = restore_code(path, header, target, kernel_list, members["code.bin"])
    inputs = tuple((name, _entry_from_json(entry)) for name, entry in header["inputs"])
    key = ProgramKey(
        source_hash(header["source"]),
        input_signature(inputs),
        target.id,
        target.runtime.fingerprint,
    )
    program = CompiledProgram(key, kernel_list, library, kernels, schedule, 0.0)
    return CompiledFunction(header["name"], header["source"], target, inputs, program)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def signature_entry(value: object) -> SignatureEntry:
    """A call input's entry in a program key (tile.runtime.cache): tensors, arrays and specs
    by dtype and dims, anything else as a constant."""
    if isinstance(value, Tensor):
        return value._entry
    if isinstance(value, TensorSpec):
        return value.entry
    if isinstance(value, np.ndarray) and value.ndim:
        return tensor_entry(value.dtype, value.shape)
    return constant_entry(value)


def _jsonable(entry: SignatureEntry) -> tuple:
    kind, type_, value = entry
    return (kind, type_, list(value) if isinstance(value, tuple) else value)


def _entry_from_json(entry: list) -> SignatureEntry:
    kind, type_, value = entry
    return (kind, type_, tuple(value) if isinstance(value, list) else value)


def _show(entry: SignatureEntry) -> str:
    kind, type_, value = entry
    if kind == "tensor":
        assert isinstance(value, tuple)
        return f"a {np.dtype(type_).name} tensor of shape {list(value)}"
    if type_ in {"float", "float16", "float32", "float64"} and isinstance(value, str):
        value = float.fromhex(value)  # keyed by its exact bits (tile.runtime.cache)
    return f"the {type_} constant {value}"
