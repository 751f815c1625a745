"""What a cached call of a trivial function costs (issue 11 item 6, issue 12 item 4).

`B = A + 1` over 16 float32s, the program already compiled, timed three ways per device:
- `call`: `fn(A=tensor)` returns its output tensor, nothing waited for (calls back to back);
- `call + wait`: then wait until the output is written (`tensor.wait()`);
- `call + map`: then map the output for the host and unmap it (`tensor.mmap_current()`);
- `call + read`: then read the output as a numpy array (`tensor.numpy()`).
torch (if installed) and numpy do the same on the host in the same run (`a + 1`, whose result
is there at once), as the floor that a Python call can reach. Each figure is the best of
`--rounds` medians of `--calls` calls, in µs; the devices and the peers alternate round by
round, so that a busy moment of the machine touches them all.

Run: `PYTHONPATH=. .venv/bin/python benchmarks/call_overhead.py [--device ID ...]`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING

import numpy as np

import tile

if TYPE_CHECKING:
    from collections.abc import Callable

SOURCE = "function (A[N]) -> (B) { B = A + 1; }"


def per_call(action: Callable[[], object], calls: int) -> float:
    """Seconds per call of `action`, as the median of 5 batches of `calls // 5`."""
    batch = max(1, calls // 5)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(batch):
            action()
        times.append((time.perf_counter() - start) / batch)
    return statistics.median(times)


def device_actions(device_id: str) -> dict[str, Callable[[], object]]:
    device = tile.device(device_id)
    function = tile.Function(SOURCE)
    tensor = tile.Tensor.from_numpy(np.ones(16, np.float32), device)
    function(device=device, A=tensor)["B"].numpy()  # compiled, warmed

    def call() -> object:
        return function(device=device, A=tensor)

    def call_wait() -> object:
        output = function(device=device, A=tensor)["B"]
        output.wait()  # returns once the output is written
        return output

    def call_map() -> object:
        output = function(device=device, A=tensor)["B"]
        with output.mmap_current():  # the output mapped for the host, and unmapped
            pass
        return output

    def call_read() -> object:
        return function(device=device, A=tensor)["B"].numpy()

    return {
        "call": call,
        "call + wait": call_wait,
        "call + map": call_map,
        "call + read": call_read,
    }


def peer_actions() -> dict[str, Callable[[], object]]:
    array = np.ones(16, np.float32)
    peers: dict[str, Callable[[], object]] = {"numpy": lambda: array + 1}
    try:
        import torch
    except ImportError:
        return peers
    torch.set_num_threads(1)
    values = torch.ones(16)
    peers["torch"] = lambda: values + 1
    return peers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", action="append", help="device id (default: every device)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    devices = args.device or [device.id for device in tile.devices()]
    actions = {(d, mode): a for d in devices for mode, a in device_actions(d).items()}
    actions.update({(name, "call"): a for name, a in peer_actions().items()})
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for key, action in actions.items():
            seconds = per_call(action, args.calls)
            best[key] = min(best.get(key, seconds), seconds)
    print(f"{'who':<14} {'what':<12} {'µs per call':>12}")
    for (who, what), seconds in best.items():
        print(f"{who:<14} {what:<12} {1e6 * seconds:>12.1f}")


if __name__ == "__main__":
    main()
