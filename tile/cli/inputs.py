"""The program and its inputs for `python -m tile run` and `dump` (tile.cli.main).

Place in the pipeline: before the public API. A `.tile` file becomes a `tile.Function`
named after the file; `--shape NAME=2x3`, `--dtype [NAME=]TYPE` and `--value NAME=NUMBER`
become its inputs: random arrays (normal floats, small integers, fair booleans; `--seed`)
and scalar constants. Anything the command line cannot carry out as asked raises
`UsageError` (exit status 2).
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from semtree.types import DType
from tile.errors import TileWarning
from tile.runtime.api import device as find_device
from tile.runtime.gradient import gradient
from tile.runtime.invoke import Function

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from tile.runtime.api import Device

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A request the command line cannot carry out as asked (exit status 2)."""


def load_function(path: str, grad: str | None = None) -> Function:
    """The Tile function in file `path`, named after the file (raises TileError); with
    `grad` ("O:A,B", or "O" for every input), its gradient function instead (tile.gradient)."""
    file = Path(path)
    try:
        source = file.read_text()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from error
    name = re.sub(r"\W", "_", file.stem) or "tile_fn"
    with warnings.catch_warnings():  # printed below, with the file's name
        warnings.simplefilter("ignore", TileWarning)
        function = Function(source, name=name)
    for warning in function.warnings:
        print(f"{path}: {warning}", file=sys.stderr)
    if grad is None:
        return function
    of, colon, names = grad.partition(":")
    wrt = tuple(name.strip() for name in names.split(",") if name.strip()) if colon else None
    if not of.strip() or (colon and not wrt):
        raise UsageError(f"--grad {grad!r}: write OUTPUT:INPUT[,INPUT...] or OUTPUT")
    return gradient(function, of=of.strip(), wrt=wrt)


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`NAME=2x3` (or `2,3`; `NAME=` for a 0-d tensor) -> {NAME: (2, 3)}."""
    shapes = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals or not name.isidentifier():
            raise UsageError(f"--shape {item!r}: write NAME=2x3 (NAME= for a 0-d tensor)")
        text = text.strip()
        parts = [] if text in ("", "()", "scalar") else re.split(r"[x,]", text)
        try:
            dims = tuple(int(part) for part in parts)
        except ValueError:
            raise UsageError(f"--shape {item!r}: sizes are whole numbers, as in 2x3") from None
        if any(size < 0 for size in dims):
            raise UsageError(f"--shape {item!r}: sizes cannot be negative")
        shapes[name] = dims
    return shapes


def parse_dtypes(items: Sequence[str]) -> tuple[DType, dict[str, DType]]:
    """`float32` (every input) and `NAME=int8` (one input) -> (default, per name)."""
    default = DType.FLOAT32
    named: dict[str, DType] = {}
    for item in items:
        name, equals, text = item.rpartition("=")
        try:
            dtype = DType.of(text.strip())
        except TypeError:
            known = ", ".join(item.value for item in DType)
            raise UsageError(f"--dtype {item!r}: element types are {known}") from None
        if equals:
            named[name] = dtype
        else:
            default = dtype
    return default, named


def parse_values(items: Sequence[str]) -> dict[str, int | float]:
    """`NAME=3` or `NAME=0.5` -> a scalar constant input."""
    values: dict[str, int | float] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals or not name.isidentifier():
            raise UsageError(f"--value {item!r}: write NAME=NUMBER")
        try:
            values[name] = int(text)
        except ValueError:
            try:
                values[name] = float(text)
            except ValueError:
                raise UsageError(f"--value {item!r}: {text!r} is not a number") from None
    return values


def random_array(shape: tuple[int, ...], dtype: DType, rng: np.random.Generator) -> np.ndarray:
    """Random values of `dtype`: normal floats, small integers, fair booleans."""
    numpy_dtype = dtype.numpy
    if dtype is DType.BOOLEAN:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.is_float:
        return np.asarray(rng.standard_normal(shape)).astype(numpy_dtype)
    low = 0 if numpy_dtype.kind == "u" else -8
    return np.asarray(rng.integers(low, 9, shape)).astype(numpy_dtype)


def example_shapes(
    function: Function, shapes: dict[str, tuple[int, ...]], missing: list[str]
) -> list[str]:
    """`NAME=DIMS` for each input of `missing`: sizes the given shapes fix where the header
    shares a size name (B[K, N] after A=2x3 is 3x4), new sizes where none does."""
    known: dict[str, int] = {}
    for decl in function.ast.inputs:
        if decl.name in shapes and decl.dims is not None:
            known.update(zip((d.name for d in decl.dims), shapes[decl.name], strict=False))
    fresh = iter(range(4, 1000))
    examples = []
    for decl in function.ast.inputs:
        if decl.name not in missing:
            continue
        if decl.dims is None:
            examples.append(f"{decl.name}=2x3")  # any rank: its statements decide
            continue
        for dim in decl.dims:
            if dim.name not in known:
                known[dim.name] = next(fresh)
        sizes = [known[dim.name] for dim in decl.dims]
        examples.append(f"{decl.name}={'x'.join(str(size) for size in sizes)}")
    return examples


def make_inputs(function: Function, args: argparse.Namespace) -> dict[str, object]:
    """Every input of `function`: random arrays of the `--shape`s, `--value` constants."""
    shapes = parse_shapes(args.shape)
    values = parse_values(args.value)
    default, dtypes = parse_dtypes(args.dtype)
    declared = function.inputs
    for name in [*shapes, *values, *dtypes]:
        if name not in declared:
            raise UsageError(
                f"{args.file} has no input named {name!r} (inputs: {', '.join(declared) or 'none'})"
            )
    missing = [name for name in declared if name not in shapes and name not in values]
    if missing:
        example = "--shape " + " ".join(example_shapes(function, shapes, missing))
        raise UsageError(f"give every input a shape or a value; missing: {example}")
    rng = np.random.default_rng(args.seed)
    inputs: dict[str, object] = {}
    for name in declared:
        if name in values:
            value = values[name]
            inputs[name] = np.array(value, dtypes[name].numpy) if name in dtypes else value
        else:
            inputs[name] = random_array(shapes[name], dtypes.get(name, default), rng)
    return inputs


def describe_inputs(inputs: dict[str, object]) -> str:
    parts = []
    for name, value in inputs.items():
        if isinstance(value, np.ndarray) and value.ndim:
            parts.append(f"{name} {DType.of(value.dtype).short}{list(value.shape)}")
        else:
            parts.append(f"{name} = {value!r}")
    return ", ".join(parts)


def pick_device(wanted: str | None) -> Device:
    """`--device` (an id or backend prefix), else TILE_DEVICE, else llvm_cpu.0; never
    another device than the one asked for."""
    return find_device(wanted)
