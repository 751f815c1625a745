"""What the driver says about a build: shared by the device probe and the compiler."""

from __future__ import annotations

import pyopencl as cl


def build_log(program: cl.Program, cl_device: cl.Device) -> str:
    """The driver's build log of `program` for `cl_device` ("" when it has none)."""
    try:
        return str(program.get_build_info(cl_device, cl.program_build_info.LOG) or "")
    except cl.Error:
        return ""
