"""One OpenCL C program per KernelList: assembly and device checks (design 6.2, 6.3).

Place in the pipeline: `compiler.py` calls `render_program(kernel_list, options)` and builds the
text it returns. Pure and deterministic, like the renderer: the same kernel list and options
always give the same text, which is what the program caches are keyed on.

Layout of a program:

    // header naming the kernels
    #pragma OPENCL EXTENSION cl_khr_fp64 : enable     only when a kernel uses double
    #pragma OPENCL EXTENSION cl_khr_fp16 : enable     only for native half that is used
    #pragma OPENCL FP_CONTRACT OFF                     only under settings.disable_mad
    helper functions (guarded division, half rounding), each once, sorted by name
    each distinct kernel body once, preceded by its KernelInfo comments and launch summary

A kernel using float64 on a device without cl_khr_fp64 raises `UnsupportedOnDevice` naming the
device, the kernel and the dtype (float64 is the only dtype a device may refuse: half works on
every device through vload_half/vstore_half).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hal.errors import UnsupportedOnDevice
from hal_opencl.render import OpenCLRenderer, RenderOptions
from hal_opencl.spelling import Helpers
from semtree.nodes import Cast, Declare, LimitConst, Param, walk
from semtree.types import DType

if TYPE_CHECKING:
    from collections.abc import Iterator

    from semtree.kernel import KernelInfo, KernelList
    from semtree.nodes import Function


@dataclass(frozen=True, slots=True)
class ProgramSource:
    """The text of one program and where each kernel of the list is in it."""

    text: str
    entry_points: tuple[str | None, ...]  # per KernelInfo: its `__kernel` name (None: no body)
    functions: dict[str, str] = field(default_factory=dict)  # kernel name -> its own text

    def kernel_source(self, index: int) -> str | None:
        name = self.entry_points[index]
        return None if name is None else self.functions[name]


def dtypes_used(info: KernelInfo) -> set[DType]:
    """Every element type a kernel names: its parameters, declarations, casts and limits."""
    used = {param.dtype for param in info.params}
    if info.body is None:
        return used
    for node in walk(info.body):
        match node:
            case Param(_, type_) | Declare(type_, _, _) | Cast(type_, _):
                if type_.dtype is not None:
                    used.add(type_.dtype)
            case LimitConst(_, dtype):
                used.add(dtype)
            case _:
                pass
    return used


def check_dtypes(kernel_list: KernelList, options: RenderOptions) -> None:
    """Raise UnsupportedOnDevice when a kernel needs float64 that the device lacks."""
    if options.fp64:
        return
    for info in kernel_list.kernels:
        if DType.FLOAT64 in dtypes_used(info):
            raise UnsupportedOnDevice(
                f"{options.device} does not support dtype float64 (no cl_khr_fp64), which "
                f"kernel {info.name!r} uses"
            )


def _bodies(kernel_list: KernelList) -> Iterator[tuple[Function, list[KernelInfo]]]:
    """Each distinct body once, in first-use order, with the kernels that launch it."""
    users: dict[str, list[KernelInfo]] = {}
    bodies: dict[str, Function] = {}
    for info in kernel_list.kernels:
        if info.body is not None:
            bodies.setdefault(info.body.name, info.body)
            users.setdefault(info.body.name, []).append(info)
    for name, body in bodies.items():
        yield body, users[name]


def _aliased(body: Function, users: list[KernelInfo]) -> frozenset[str]:
    """Body parameters that may share a buffer with another (no `restrict` for them)."""
    names: set[str] = set()
    for info in users:
        positions = {param.name: index for index, param in enumerate(info.params)}
        for pair in info.safe_self_aliases:
            names.update(body.params[positions[name]].name for name in pair)
    return frozenset(names)


def _local_size(users: list[KernelInfo]) -> tuple[int, int, int]:
    """The work-group size every launch of a body uses, or (0, 0, 0) when they differ."""
    sizes = {tuple(info.local_size) for info in users}
    return sizes.pop() if len(sizes) == 1 else (0, 0, 0)  # type: ignore[return-value]


def _comments(users: list[KernelInfo]) -> list[str]:
    lines = [f"// {line}".rstrip() for line in users[0].comments.splitlines()]
    for info in users:
        lines.append(
            f"// {info.name}: {info.kind.value}, global {tuple(info.global_size)}, "
            f"local {tuple(info.local_size)}"
        )
    return lines


def render_program(kernel_list: KernelList, options: RenderOptions) -> ProgramSource:
    """The OpenCL C program for every kernel of `kernel_list` (ZERO and COPY kernels need no
    code: the executor runs them as fills and copies)."""
    check_dtypes(kernel_list, options)
    helpers = Helpers()
    renderer = OpenCLRenderer(options, helpers)
    functions: dict[str, str] = {}
    sections: list[str] = []
    for body, users in _bodies(kernel_list):
        text = renderer.kernel(body, aliased=_aliased(body, users), local_size=_local_size(users))
        functions[body.name] = "\n".join([*_comments(users), text.rstrip("\n")]) + "\n"
        sections.append(functions[body.name])
    used = set().union(*(dtypes_used(info) for info in kernel_list.kernels))
    names = [info.name for info in kernel_list.kernels]
    header = [f"// OpenCL C for {len(names)} kernel(s): {', '.join(names)}"]
    if DType.FLOAT64 in used:
        header.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if DType.FLOAT16 in used and options.native_fp16:
        header.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if options.disable_mad:  # `a * b + c` rounds the product: never a fused multiply-add
        header.append("#pragma OPENCL FP_CONTRACT OFF")
    parts = ["\n".join(header) + "\n", *(helper + "\n" for helper in helpers), *sections]
    entry_points = tuple(
        None if info.body is None else info.body.name for info in kernel_list.kernels
    )
    return ProgramSource("\n".join(parts), entry_points, functions)
