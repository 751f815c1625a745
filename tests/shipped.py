"""The two shipped devices, `llvm_cpu.0` and `opencl.0` (PoCL), are required: a test that
needs one fails when it is missing, never skips (ARCHITECTURE 12, issue 4).

One exception, outside this project's control: PoCL 3.0, the newest build on PyPI, compiles
with LLVM 14, which cannot name processors newer than itself (AMD Zen 5, for one) and then
rejects every program ("unknown target CPU 'generic'"). The OpenCL driver detects this with a
probe build and marks its failure `unsupported_host`; only then do OpenCL tests skip, with
the driver's reason. Any other OpenCL failure still fails them.
"""

from __future__ import annotations

from typing import NoReturn

import pytest

import hal
import tile

SHIPPED = ("llvm_cpu.0", "opencl.0")


def opencl_failure() -> hal.DeviceUnavailableError | None:
    """Why the OpenCL backend has no device here, or None when it has one."""
    try:
        hal.get_driver("opencl").default_device()
    except hal.DeviceUnavailableError as error:
        return error
    return None


def missing_opencl(error: hal.DeviceUnavailableError) -> NoReturn:
    """Skip for the known host limitation; fail for anything else."""
    if error.unsupported_host:
        pytest.skip(f"PoCL cannot compile for this processor: {error.reason}")
    pytest.fail(f"opencl must be available here: {error}")


def require_opencl() -> hal.Device:
    """The first OpenCL HAL device (see the module docstring for when this skips)."""
    error = opencl_failure()
    if error is not None:
        missing_opencl(error)
    return hal.get_driver("opencl").default_device()


def shipped_devices() -> dict[str, tile.Device]:
    """Both shipped devices by id (see the module docstring for when this skips)."""
    require_opencl()
    found = {d.id: d for d in tile.devices()}
    missing = [d for d in SHIPPED if d not in found]
    if missing:
        unavailable = tile.devices(include_unavailable=True)
        failures = [d.description for d in unavailable if not d.available]
        pytest.fail(f"shipped devices missing: {missing}; backend failures: {failures}")
    return found


def main() -> int:
    """`python -m tests.shipped`: print the shipped devices this host can run, one per line,
    for `make test`; say on stderr why OpenCL is left out (the known host limitation only),
    and exit 1 when a shipped device is missing for any other reason."""
    import sys

    error = opencl_failure()
    if error is not None and not error.unsupported_host:
        print(f"opencl.0 must be available here: {error}", file=sys.stderr)
        return 1
    if error is not None:
        print(f"WARNING: opencl.0 is not tested here: {error.reason}", file=sys.stderr)
    runnable = [d for d in SHIPPED if error is None or not d.startswith("opencl.")]
    found = {d.id for d in tile.devices()}
    missing = [d for d in runnable if d not in found]
    if missing:
        print(f"shipped devices missing: {missing}", file=sys.stderr)
        return 1
    print("\n".join(runnable))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
