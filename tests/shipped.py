"""The two shipped devices, `llvm_cpu.0` and an OpenCL device, are required: a test that needs
one fails when it is missing, never skips (design 12, issue 4).

Which OpenCL device: `opencl.0` (the first listed, PoCL where it works), or the one
`TILE_TEST_OPENCL` names: any device id or selector (`opencl:intel`, `opencl:pocl`,
`opencl.1`). Every shipped-device test, the fuzzer's quick pass, the stress test and
`make test`'s conformance runs use it (`SHIPPED`, `require_opencl`, `pick`).

One exception, outside this project's control: PoCL 3.0, the newest build on PyPI, compiles
with LLVM 14, which cannot name processors newer than itself (AMD Zen 5, for one) and then
rejects every program ("unknown target CPU 'generic'"). The OpenCL driver detects this with a
probe build and marks its failure `unsupported_host`; only then do OpenCL tests skip, with
the driver's reason. Any other OpenCL failure still fails them. `make test` does not rely on
that skip: where PoCL fails so (`python -m tests.shipped --opencl` prints `intel`), it
installs Intel's CPU runtime (the `intel-opencl` extra) and sets `TILE_TEST_OPENCL=opencl:intel`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NoReturn

import pytest

import hal
import tile

if TYPE_CHECKING:
    from hal.interfaces import Driver

VARIABLE = "TILE_TEST_OPENCL"
OPENCL = os.environ.get(VARIABLE, "").strip() or "opencl.0"
SHIPPED = ("llvm_cpu.0", OPENCL)


def pick(driver: Driver) -> hal.Device:
    """The tested OpenCL device among `driver`'s (module docstring); raises
    DeviceUnavailableError when it is not there."""
    _, colon, selector = OPENCL.partition(":")
    if colon:
        return driver.select(selector)
    if driver.id_prefix == OPENCL:
        return driver.default_device()
    for device in driver.devices():
        if device.id == OPENCL:
            return device
    listed = ", ".join(device.id for device in driver.devices())
    raise hal.DeviceUnavailableError("opencl", f"no device {OPENCL!r} ({VARIABLE}): {listed}")


def opencl_failure() -> hal.DeviceUnavailableError | None:
    """Why the tested OpenCL device is not there, or None when it is."""
    try:
        pick(hal.get_driver("opencl"))
    except hal.DeviceUnavailableError as error:
        return error
    return None


def missing_opencl(error: hal.DeviceUnavailableError) -> NoReturn:
    """Skip for the known host limitation; fail for anything else."""
    if error.unsupported_host:
        pytest.skip(f"the OpenCL driver cannot compile for this processor: {error.reason}")
    pytest.fail(f"{OPENCL} must be available here: {error}")


def require_opencl() -> hal.Device:
    """The tested OpenCL HAL device (see the module docstring for when this skips)."""
    try:
        return pick(hal.get_driver("opencl"))
    except hal.DeviceUnavailableError as error:
        missing_opencl(error)


def shipped_devices() -> dict[str, tile.Device]:
    """Both shipped devices by their `SHIPPED` names (module docstring for when this skips)."""
    require_opencl()
    found = {}
    for name in SHIPPED:
        try:
            found[name] = tile.device(name)
        except tile.DeviceNotFound as error:
            pytest.fail(f"shipped device {name} missing: {error}")
    return found


def pocl_usable() -> bool:
    """Whether PoCL compiles here: False only where its LLVM does not know the processor;
    raises DeviceUnavailableError for any other failure."""
    try:
        hal.get_driver("opencl").select("pocl")
    except hal.DeviceUnavailableError as error:
        if error.unsupported_host:
            return False
        raise
    return True


def main(arguments: list[str]) -> int:
    """`python -m tests.shipped`: print the shipped devices this host can run, one per line,
    for `make test`; say on stderr why OpenCL is left out (the known host limitation only),
    and exit 1 when a shipped device is missing for any other reason.
    `python -m tests.shipped --opencl`: print `pocl` where PoCL compiles, else `intel` (the
    runtime `make test` then installs and tests); exit 1 when OpenCL fails otherwise."""
    import sys

    if arguments == ["--opencl"]:
        try:
            print("pocl" if pocl_usable() else "intel")
        except hal.DeviceUnavailableError as error:
            print(f"OpenCL must be available here: {error}", file=sys.stderr)
            return 1
        return 0
    error = opencl_failure()
    if error is not None and not error.unsupported_host:
        print(f"{OPENCL} must be available here: {error}", file=sys.stderr)
        return 1
    if error is not None:
        print(f"WARNING: {OPENCL} is not tested here: {error.reason}", file=sys.stderr)
    runnable = [name for name in SHIPPED if error is None or not name.startswith("opencl")]
    missing = []
    for name in runnable:
        try:
            tile.device(name)
        except tile.DeviceNotFound:
            missing.append(name)
    if missing:
        print(f"shipped devices missing: {missing}", file=sys.stderr)
        return 1
    print("\n".join(runnable))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
