"""`python -m tile cache info | clear`: what tile's disk cache holds, and emptying it (issue 13).

`info` prints the cache directory, whether the cache is on (`TILE_CACHE`), its size budget
(`TILE_CACHE_MAX_MB`) and, per store, its entries and bytes (`programs`: compiled programs and
front ends; `opencl/store`: the OpenCL drivers' files and binaries); `--json` prints the same
as JSON. `clear` deletes every store and says how many bytes it freed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hal import disk_cache
from tile.cli.inputs import EXIT_OK

if TYPE_CHECKING:
    import argparse


def cache_command(args: argparse.Namespace) -> int:
    root = disk_cache.cache_directory()
    if args.action == "clear":
        freed = disk_cache.clear(root)
        print(f"cleared {root}: {freed / 2**20:.1f} MB freed")
        return EXIT_OK
    stores = disk_cache.usage(root)
    report = {
        "directory": str(root),
        "enabled": disk_cache.cache_enabled(),
        "limit_bytes": disk_cache.cache_limit(),
        "bytes": sum(store["bytes"] for store in stores.values()),
        "stores": stores,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    state = "on" if report["enabled"] else f"off ({disk_cache.CACHE_SWITCH_VARIABLE}=0)"
    print(f"directory: {root}")
    megabytes, limit = report["bytes"] / 2**20, report["limit_bytes"] / 2**20
    print(f"cache: {state}; {megabytes:.1f} MB of {limit:.0f} MB")
    for name, store in stores.items():
        size = store["bytes"] / 2**20
        print(f"  {name}: {store['entries']} entries, {store['blobs']} blobs, {size:.1f} MB")
    if not stores:
        print("  (empty)")
    return EXIT_OK


def add_cache_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("cache", help="show or clear tile's disk cache")
    parser.add_argument("action", choices=("info", "clear"), help="show the cache, or empty it")
    parser.add_argument("--json", action="store_true", help="info as JSON")
    parser.set_defaults(command=cache_command)
