"""`python -m tile dump FILE.tile --shape ... --stage STAGE`: one stage of the pipeline.

Place in the pipeline: it calls each stage the way the runtime does, and prints its result.

- `source`: the Tile text (with `--grad`, of the gradient function); needs no shapes;
- `ast`: the syntax tree as parsed (positions as `@line:column`); needs no shapes;
- `bound`: the bound program (every value with its shape and element type);
- `flat`: the flattened form of every contraction (loops, strides, offsets, guards);
- `kernels`: the kernel list, semtree bodies included, generated for the device's settings
  (`--device`, else the default device);
- `opencl`, `llvm`: the device code, as that backend's compiler produces it for its first
  device (or `--device`): OpenCL C, or LLVM IR after optimisation. Without such a device
  the command says why and exits with status 1.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import TYPE_CHECKING

import numpy as np

from hal import registry
from tile.cli.inputs import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    load_function,
    make_inputs,
    pick_device,
)
from tile.lower.flatten import flatten
from tile.lower.fuse import plan_program
from tile.lower.generate import generate_program
from tile.runtime.api import devices as list_devices
from tile.runtime.cache import ProgramKey, constant_entry, input_signature, tensor_entry
from tile.runtime.debug import distinct_sources
from tile.runtime.execute import compile_program

if TYPE_CHECKING:
    import argparse

    from tile.bind.program import BoundProgram
    from tile.runtime.api import Device
    from tile.runtime.invoke import Function

STAGES = ("source", "ast", "bound", "flat", "kernels", "opencl", "llvm")

# Backend stages: the registry's backend, its device id prefix, and what the code is.
BACKEND_STAGES = {
    "opencl": ("opencl", "opencl", "OpenCL C"),
    "llvm": ("llvm", "llvm_cpu", "LLVM IR, optimised (O3) as it is JIT-compiled"),
}

LINE_WIDTH = 96


def dump_command(args: argparse.Namespace) -> int:
    function = load_function(args.file, args.grad)
    if args.stage == "source":
        print(function.source, end="" if function.source.endswith("\n") else "\n")
        return EXIT_OK
    if args.stage == "ast":
        print("\n".join(syntax_tree(function.ast)))
        return EXIT_OK
    inputs = make_inputs(function, args)
    bound = function.bind(inputs)
    if args.stage == "bound":
        print(bound)
    elif args.stage == "flat":
        print(flat_contractions(bound))
    elif args.stage == "kernels":
        device = pick_device(args.device)
        print(f"// kernel list for {device.id} ({device.description})")
        print(generate_program(bound, device.settings))
    else:
        return _device_code(function, inputs, bound, args)
    return EXIT_OK


# ---- ast ------------------------------------------------------------------------------------


def syntax_tree(node: object, indent: str = "") -> list[str]:
    """The dataclass tree under `node`, one node per line when it does not fit on one.

    Fields left at their defaults, and spans, are left out; a node's span is shown as
    `@line:column` after its class name."""
    flat = _one_line(node)
    if len(indent) + len(flat) <= LINE_WIDTH or not dataclasses.is_dataclass(node):
        return [indent + flat]
    lines = [indent + _head(node)]
    for name, value in _fields(node):
        if isinstance(value, tuple) and value and any(dataclasses.is_dataclass(v) for v in value):
            lines.append(f"{indent}  {name}:")
            for item in value:
                child = syntax_tree(item, indent + "    ")
                child[0] = f"{indent}  - {child[0].lstrip()}"
                lines += child
        else:
            child = syntax_tree(value, indent + "    ")
            if len(child) == 1:
                lines.append(f"{indent}  {name}: {child[0].lstrip()}")
            else:
                lines.append(f"{indent}  {name}:")
                lines += child
    return lines


def _head(node: object) -> str:
    span = getattr(node, "span", None)
    return type(node).__name__ + (f"@{span}" if span is not None else "")


def _fields(node: object) -> list[tuple[str, object]]:
    shown = []
    for item in dataclasses.fields(node):  # type: ignore[arg-type]
        if not item.repr or item.name.endswith("span"):
            continue
        value = getattr(node, item.name)
        if item.default is not dataclasses.MISSING and value == item.default:
            continue
        shown.append((item.name, value))
    return shown


def _one_line(value: object) -> str:
    if dataclasses.is_dataclass(value):
        inner = ", ".join(f"{name}={_one_line(item)}" for name, item in _fields(value))
        return f"{_head(value)}({inner})"
    if isinstance(value, tuple):
        return (
            "("
            + ", ".join(_one_line(item) for item in value)
            + ("," if len(value) == 1 else "")
            + ")"
        )
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


# ---- flat -----------------------------------------------------------------------------------


def flat_contractions(bound: BoundProgram) -> str:
    """Every contraction's flat form, in kernel order, or a note when there is none."""
    plan = plan_program(bound)
    texts = []
    for index, kernel in enumerate(plan.kernels):
        if kernel.contraction is not None:
            texts.append(f"// kernel {index}\n{flatten(kernel.contraction, bound.bindings)}")
    if not texts:
        return "// no contractions: the program is elementwise and special operations only"
    return "\n\n".join(texts)


# ---- device code ----------------------------------------------------------------------------


def _device_code(
    function: Function, inputs: dict[str, object], bound: BoundProgram, args: argparse.Namespace
) -> int:
    backend, prefix, what = BACKEND_STAGES[args.stage]
    device = _backend_device(args.stage, backend, prefix, args.device)
    if device is None:
        return EXIT_FAILED
    runtime = device.runtime
    key = ProgramKey(function.source_hash, _signature(inputs), device.id, runtime.fingerprint)
    program = compile_program(runtime, key, bound, function.name)
    count = len(program.kernel_list.kernels)
    kernels = f"{count} kernel{'s' if count != 1 else ''}"
    print(f"// {what}: {function.name} on {device.id} ({device.description}), {kernels}")
    print("\n\n".join(distinct_sources(program.library, count)))
    return EXIT_OK


def _signature(inputs: dict[str, object]) -> tuple:
    """The program-cache form of the inputs, as a call with them would key its program."""
    entries = []
    for name, value in inputs.items():
        if isinstance(value, np.ndarray) and value.ndim:
            entries.append((name, tensor_entry(value.dtype, value.shape)))
        else:
            entries.append((name, constant_entry(value)))
    return input_signature(entries)


def _backend_device(stage: str, backend: str, prefix: str, wanted: str | None) -> Device | None:
    """The device whose code the stage shows: `--device` (which must belong to the
    backend), else the backend's first device; None, after saying why, when there is none."""
    if wanted is not None:
        device = pick_device(wanted)
        if not device.id.startswith(prefix + "."):
            raise UsageError(f"--stage {stage} needs a {prefix} device, not {device.id}")
        return device
    for device in list_devices():
        if device.id.startswith(prefix + "."):
            return device
    reasons = [failure.reason for failure in registry.failures() if failure.backend == backend]
    why = f" ({'; '.join(reasons)})" if reasons else ""
    print(
        f"error: no {backend} device is available{why}, so there is no {stage} code to show",
        file=sys.stderr,
    )
    return None
