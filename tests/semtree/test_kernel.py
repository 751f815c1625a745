"""KernelInfo / KernelList invariants (design 3.5) and HardwareSettings presets (5.3,
Appendix C)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from semtree import builder as sb
from semtree.kernel import (
    Direction,
    HardwareSettings,
    KernelInfo,
    KernelKind,
    KernelList,
    KernelListError,
    KernelParam,
)
from semtree.types import DType, Region, TensorShape, Type
from tests.reference import run_kernel_list
from tests.semtree.kernels import elementwise_vec4

F32, I32 = DType.FLOAT32, DType.INT32
IN, OUT = Direction.IN, Direction.OUT


def params(*specs: tuple[str, Direction, int]) -> tuple[KernelParam, ...]:
    return tuple(KernelParam(name, direction, F32, (64,), vec) for name, direction, vec in specs)


def elementwise(name: str = "k1", out: str = "R", a: str = "A", b: str = "B", **changes):
    fields = {
        "name": name,
        "kind": KernelKind.ELEMENTWISE,
        "params": params((out, OUT, 4), (a, IN, 4), (b, IN, 4)),
        "global_size": (16, 1, 1),
        "local_size": (1, 1, 1),
        "body": elementwise_vec4(64),
        "flops": 128,
        "bytes": 768,
        "key": "scale_add_relu/64",
    }
    return KernelInfo(**(fields | changes))


def zero(name: str, buffer: str) -> KernelInfo:
    return KernelInfo(
        name, KernelKind.ZERO, params((buffer, OUT, 1)), (64, 1, 1), (0, 0, 0), None, 0, 256
    )


def copy(name: str, target: str, source: str) -> KernelInfo:
    return KernelInfo(
        name,
        KernelKind.COPY,
        params((target, OUT, 1), (source, IN, 1)),
        (64, 1, 1),
        (0, 0, 0),
        None,
        0,
        512,
    )


SHAPES = {name: TensorShape(F32, (64,)) for name in ("A", "B", "T", "R", "S")}


def program(*kernels: KernelInfo, **changes) -> KernelList:
    fields = {
        "kernels": kernels,
        "shapes": SHAPES,
        "inputs": ("A", "B"),
        "outputs": ("R", "S"),
        "temporaries": ("T",),
        "var_rewrites": {"Result": "R"},
    }
    return KernelList(**(fields | changes))


def test_kernel_info_properties() -> None:
    info = elementwise(comments="R = relu(2 * A + B)")
    assert info.inputs == ("A", "B")
    assert info.outputs == ("R",)
    assert info == elementwise(comments="something else")  # comments do not compare
    text = str(info)
    assert text.startswith("// R = relu(2 * A + B)\n// k1: elementwise, global (16, 1, 1)")
    assert "//   R: OUT f32[64] x4" in text and "void scale_add_relu(" in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.flops = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "k-1"}, "not a C identifier"),
        ({"global_size": (16, 1)}, "three dimensions"),
        ({"global_size": (-16, 1, 1)}, "negative grid"),
        ({"local_size": (3, 1, 1)}, "not a multiple"),
        ({"local_size": (1, 0, 1)}, "mixes 0"),
        ({"flops": -1}, "negative flops"),
        ({"params": params(("A", IN, 4), ("R", OUT, 4), ("B", IN, 4))}, "outputs must come"),
        ({"params": params(("R", OUT, 4), ("A", IN, 4))}, "2 params but the body takes 3"),
        ({"params": params(("R", OUT, 1), ("A", IN, 4), ("B", IN, 4))}, "body type"),
        ({"params": params(("R", OUT, 4), ("A", OUT, 4), ("B", IN, 4))}, "body type"),
        ({"kind": KernelKind.ZERO}, "body must be None"),
        ({"body": None}, "body must be None"),
        ({"safe_self_aliases": (("A", "R"),)}, "is not \\(out, in\\)"),
    ],
)
def test_kernel_info_invariants(changes: dict, message: str) -> None:
    with pytest.raises(KernelListError, match=message):
        elementwise(**changes)


def test_body_parameter_types_must_match() -> None:
    wrong = sb.function(
        "scale_add_relu",
        [
            ("out", Type.ptr(F32, 4)),
            ("a", Type.ptr(F32, 4, const=True)),
            ("b", Type.ptr(F32, 4, const=True, region=Region.LOCAL)),
        ],
        [],
    )
    with pytest.raises(KernelListError, match="body type"):
        elementwise(body=wrong)
    wrong = sb.function(
        "scale_add_relu",
        [("out", Type.ptr(F32, 4)), ("a", Type.ptr(F32, 4, const=True)), ("b", Type.ptr(I32, 4))],
        [],
    )
    with pytest.raises(KernelListError, match="body type"):
        elementwise(body=wrong)


def test_zero_and_copy_kernels() -> None:
    assert zero("z", "R").outputs == ("R",)
    assert copy("c", "R", "A").inputs == ("A",)
    with pytest.raises(KernelListError, match="zero parameters"):
        KernelInfo("z", KernelKind.ZERO, params(("R", IN, 1)), (1, 1, 1), (0, 0, 0), None, 0, 0)
    with pytest.raises(KernelListError, match="different dtypes"):
        KernelInfo(
            "c",
            KernelKind.COPY,
            (KernelParam("R", OUT, F32, (4,)), KernelParam("A", IN, I32, (4,))),
            (1, 1, 1),
            (0, 0, 0),
            None,
            0,
            0,
        )
    with pytest.raises(KernelListError, match="vector width"):
        KernelParam("R", OUT, F32, (4,), 5)


def test_kernel_list_runs_in_the_reference_interpreter() -> None:
    kernels = program(
        zero("k0", "S"),
        copy("k1", "T", "A"),
        elementwise("k2", out="R", a="T", b="B"),
    )
    assert "T" in kernels and "X" not in kernels
    with pytest.raises(TypeError):
        kernels.shapes["X"] = TensorShape(F32, (1,))  # type: ignore[index]
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    results = run_kernel_list(kernels, {"A": a, "B": b})
    np.testing.assert_allclose(results["R"], np.maximum(2 * a + b, 0), rtol=1e-6)
    assert results["Result"] is results["R"]
    assert not results["S"].any()
    text = str(kernels)
    assert "// inputs: A, B" in text and "// Result -> R" in text and "// k2: elementwise" in text


def test_kernels_may_share_a_body() -> None:
    first = elementwise("k1", out="T", a="A", b="B")
    second = elementwise("k2", out="R", a="T", b="B")
    program(first, second)
    renamed = sb.function("scale_add_relu", elementwise_vec4(64).params, [])
    with pytest.raises(KernelListError, match="two different bodies"):
        program(first, elementwise("k2", out="R", a="T", b="B", body=renamed, key="other"))
    other = sb.function("other", elementwise_vec4(64).params, [])
    with pytest.raises(KernelListError, match="have different bodies"):
        program(first, elementwise("k2", out="R", a="T", b="B", body=other))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: program(elementwise("k"), zero("k", "S")), "duplicate kernel names"),
        (lambda: program(inputs=("A", "B", "C")), "without a shape"),
        (lambda: program(temporaries=("A",)), "also a program input"),
        (lambda: program(var_rewrites={"Y": "Z"}), "unknown buffer"),
        (lambda: program(elementwise(a="Q")), "Q has no shape"),
        (lambda: program(elementwise(a="T")), "reads temporary T before"),
        (
            lambda: program(elementwise(), shapes=SHAPES | {"B": TensorShape(I32, (64,))}),
            "but the buffer is i32",
        ),
        (
            lambda: program(elementwise(), shapes=SHAPES | {"B": TensorShape(F32, (8, 8))}),
            "but the buffer is f32\\[8, 8\\]",
        ),
    ],
)
def test_kernel_list_invariants(make: object, message: str) -> None:
    with pytest.raises(KernelListError, match=message):
        make()  # type: ignore[operator]


# ---- hardware settings --------------------------------------------------------------------------


def test_llvm_cpu_preset() -> None:
    avx512 = HardwareSettings.llvm_cpu(2, ["avx2", "avx512f", "fma"])
    assert avx512 == HardwareSettings(
        threads=1,
        vec_size=16,
        use_global=True,
        mem_width=64,
        max_mem=32768,
        max_regs=1536,
        goal_groups=8,
        goal_flops_per_byte=16,
        goal_dim_sizes=(2**31 - 1, 65535, 65535),
        max_work_group_size=1,
        native_fp16=False,
        fp64=True,
        fast_math=False,
        half_as_float=True,
        reduction_steps=True,
        row_folds=True,
        transpose_tile=64,
    )
    avx2 = HardwareSettings.llvm_cpu(4, {"avx2"})
    assert (avx2.vec_size, avx2.max_regs, avx2.goal_groups) == (8, 768, 16)
    assert HardwareSettings.llvm_cpu(1).vec_size == 4


def test_opencl_gpu_preset() -> None:
    settings = HardwareSettings.opencl_gpu(
        max_work_group_size=1024,
        max_work_item_sizes=(1024, 1024, 64),
        local_mem_size=49152,
        max_compute_units=80,
        global_mem_cacheline_size=128,
        extensions=["cl_khr_fp64", "cl_khr_fp16"],
    )
    assert settings.threads == 256 and settings.vec_size == 1 and not settings.use_global
    assert (settings.mem_width, settings.max_mem, settings.max_regs) == (128, 49152, 16384)
    assert (settings.goal_groups, settings.goal_flops_per_byte) == (320, 50)
    assert settings.goal_dim_sizes == (1024, 1024, 64)
    assert settings.native_fp16 and settings.fp64 and not settings.fast_math
    small = HardwareSettings.opencl_gpu(
        max_work_group_size=96,
        max_work_item_sizes=(96, 96, 96),
        local_mem_size=16384,
        max_compute_units=2,
    )
    assert small.threads == 64 and small.mem_width == 64
    assert not small.native_fp16 and not small.fp64


def test_opencl_cpu_preset() -> None:
    def preset(
        width: int, extensions: tuple[str, ...] = ("cl_khr_fp64",), native: int = 1
    ) -> HardwareSettings:
        return HardwareSettings.opencl_cpu(
            max_work_group_size=4096,
            max_work_item_sizes=(4096, 4096, 4096),
            max_compute_units=2,
            preferred_vector_width_float=width,
            native_vector_width_float=native,
            extensions=extensions,
        )

    settings = preset(16)
    assert settings.threads == 1 and settings.vec_size == 16 and settings.use_global
    assert (settings.max_mem, settings.max_regs, settings.goal_flops_per_byte) == (32768, 1536, 16)
    assert settings.fp64 and not settings.native_fp16 and settings.half_as_float
    assert settings.transpose_tile == 64
    assert preset(32).vec_size == 16 and preset(8).vec_size == 8
    assert preset(4).vec_size == 4 and preset(3).vec_size == 2
    # A CPU driver with half arithmetic (Intel's) still computes float16 in float32.
    with_half = preset(16, ("cl_khr_fp16",))
    assert not with_half.native_fp16 and with_half.half_as_float and not with_half.fp64
    # Intel's CPU runtime: preferred width 1, native 16: explicit vectors of 16.
    intel = preset(1, native=16)
    assert intel.vec_size == 16 and intel.vector_loops
    assert preset(1).vec_size == 1  # no native width given: scalar


def test_settings_fingerprint() -> None:
    base = HardwareSettings.llvm_cpu(2, ["avx512f"])
    assert base.fingerprint() == HardwareSettings.llvm_cpu(2, ["avx512f"]).fingerprint()
    assert base.fingerprint().startswith("threads=1;vec_size=16;use_global=1;")
    assert "goal_dim_sizes=2147483647x65535x65535" in base.fingerprint()
    for change in ({"fast_math": True}, {"disable_mad": True}, {"goal_groups": 9}):
        assert dataclasses.replace(base, **change).fingerprint() != base.fingerprint()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"threads": 0}, "threads must be positive"),
        ({"vec_size": 3}, "vec_size 3"),
        ({"threads": 2}, "max_work_group_size"),
        ({"goal_dim_sizes": (1, 1)}, "goal_dim_sizes"),
    ],
)
def test_settings_validation(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(HardwareSettings.llvm_cpu(1), **change)
