"""Kernel lists: buffers, kinds, fusion, naming, sharing, and the semantics of the special
builtins, each on a small program run through the reference interpreter."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tile
from semtree.kernel import Direction, KernelKind
from semtree.nodes import c_identifier
from semtree.types import DType
from tests.lower.harness import LLVM_CPU, SCALAR, run_kernel_list, run_program, tiled
from tile.lower.generate import generate_program

ALL_SETTINGS = [
    pytest.param(SCALAR, id="scalar"),
    pytest.param(replace(SCALAR, goal_dim_sizes=(1, 1, 65535)), id="narrow_grid"),
    pytest.param(tiled(2), id="tiled2"),
    pytest.param(LLVM_CPU, id="llvm_cpu"),
]


def kernels_of(source: str, settings: object = LLVM_CPU, **inputs: object) -> object:
    bound = tile.Function(source).bind(inputs)
    return generate_program(bound, settings)  # type: ignore[arg-type]


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


# ---- buffers and kinds ---------------------------------------------------------------------------


def test_worked_example_of_the_architecture() -> None:
    """design 3.7: log(O) is its own kernel; neg(Temp) fuses into the contraction and
    Temp is never stored."""
    source = """function (T[X, Y], O[X, Y]) -> (R) {
        LO = log(O);
        Temp[x: X] = +(LO[x, y] * T[x, y]);
        R = -Temp;
    }"""
    t = np.random.default_rng(1).uniform(0.5, 2, (10, 26)).astype(np.float32)
    o = np.random.default_rng(2).uniform(0.5, 2, (10, 26)).astype(np.float32)
    kernel_list = kernels_of(source, T=t, O=o)
    first, second = kernel_list.kernels
    assert first.kind is KernelKind.ELEMENTWISE and first.outputs == ("LO",)
    assert second.kind is KernelKind.CONTRACTION and second.outputs == ("R",)
    assert set(second.inputs) == {"LO", "T"}
    assert kernel_list.temporaries == ("LO",)
    assert "Temp" not in kernel_list.shapes
    got = run_program(source, {"T": t, "O": o})["R"]
    np.testing.assert_allclose(got, -(np.log(o) * t).sum(axis=1), rtol=1e-5)


def test_output_that_is_an_input_needs_no_kernel() -> None:
    kernel_list = kernels_of("function (I) -> (I) { }", I=f32(1, 2))
    assert kernel_list.kernels == ()
    assert kernel_list.inputs == ("I",) and kernel_list.outputs == ("I",)
    assert run_kernel_list(kernel_list, {"I": f32(1, 2)})["I"].tolist() == [1, 2]


def test_copy_of_an_input_is_a_copy_kernel() -> None:
    kernel_list = kernels_of("function (I) -> (O) { O = I; }", I=f32(1, 2))
    (kernel,) = kernel_list.kernels
    assert kernel.kind is KernelKind.COPY and kernel.body is None
    assert [(p.name, p.direction) for p in kernel.params] == [
        ("O", Direction.OUT),
        ("I", Direction.IN),
    ]


def test_constant_outputs_are_zero_d_tensors() -> None:
    source = "function (A[M, N]) -> (O, P) { O = M * N; P = exp(1.0); }"
    outputs = run_program(source, {"A": np.zeros((2, 3), np.float32)})
    assert outputs["O"].shape == () and outputs["O"].dtype == np.int32 and outputs["O"] == 6
    assert outputs["P"].dtype == np.float32
    assert outputs["P"] == pytest.approx(np.e)


def test_constant_input_returned_as_output() -> None:
    kernel_list = kernels_of("function (K) -> (K) { }", K=np.array(7, np.int64))
    assert kernel_list.inputs == ()
    assert kernel_list.outputs == ("K",)
    assert run_kernel_list(kernel_list, {})["K"] == 7


def test_reshape_of_a_temporary_into_an_output_moves_nothing() -> None:
    source = "function (A[N]) -> (O) { T = A * 2; O = reshape(T, 2, 3); }"
    kernel_list = kernels_of(source, A=np.arange(6, dtype=np.float32))
    (kernel,) = kernel_list.kernels
    assert kernel.outputs == ("O",)  # T is computed straight into O's buffer
    assert kernel_list.temporaries == ()
    got = run_kernel_list(kernel_list, {"A": np.arange(6, dtype=np.float32)})["O"]
    assert got.tolist() == [[0, 2, 4], [6, 8, 10]]


def test_reshape_between_caller_buffers_is_a_copy() -> None:
    kernel_list = kernels_of(
        "function (A[M, N]) -> (O, P) { O = reshape(A, N, M); P = reshape(O, M * N); }",
        A=np.zeros((2, 3), np.float32),
    )
    assert [k.kind for k in kernel_list.kernels] == [KernelKind.COPY, KernelKind.COPY]
    assert [k.params[1].name for k in kernel_list.kernels] == ["A", "O"]


def test_reshape_of_a_temporary_is_read_in_place() -> None:
    source = """function (A[N]) -> (O) {
        T = A + 1;
        R = reshape(T, 2, 3);
        O[i: 2] = +(R[i, j]);
    }"""
    a = np.arange(6, dtype=np.float32)
    kernel_list = kernels_of(source, A=a)
    assert kernel_list.temporaries == ("T",)
    assert "R" not in kernel_list.shapes
    assert run_kernel_list(kernel_list, {"A": a})["O"].tolist() == [6, 15]


def test_dead_statements_make_no_kernels() -> None:
    source = "function (A, B) -> (O) { Unused = exp(B); T[i: 3] = +(A[i]); O = A * 2; }"
    kernel_list = kernels_of(source, A=f32(1, 2, 3), B=f32(1))
    assert len(kernel_list.kernels) == 1
    assert kernel_list.inputs == ("A", "B")  # still bound, still in the list


def test_outputs_read_later_and_multiple_outputs() -> None:
    source = "function (A) -> (O, P) { O = A * 2; P = O + 1; }"
    kernel_list = kernels_of(source, A=f32(1, 2))
    (kernel,) = kernel_list.kernels  # P fuses into the kernel computing O
    assert kernel.outputs == ("O", "P")
    outputs = run_kernel_list(kernel_list, {"A": f32(1, 2)})
    assert outputs["O"].tolist() == [2, 4] and outputs["P"].tolist() == [3, 5]


def test_broadcast_consumer_of_a_reduction_reads_it_from_memory() -> None:
    source = "function (A[N]) -> (O) { S[] = +(A[i]); O = A / S; }"
    kernel_list = kernels_of(source, A=f32(1, 3))
    assert [k.kind for k in kernel_list.kernels] == [KernelKind.CONTRACTION, KernelKind.ELEMENTWISE]
    assert kernel_list.temporaries == ("S",)
    assert run_kernel_list(kernel_list, {"A": f32(1, 3)})["O"].tolist() == [0.25, 0.75]


def test_identical_kernels_share_one_body() -> None:
    source = """function (A[N, M], B[N, M]) -> (S, T) {
        S[i: N] = +(A[i, j]);
        T[i: N] = +(B[i, j]);
    }"""
    kernel_list = kernels_of(source, A=np.ones((3, 4), np.float32), B=np.ones((3, 4), np.float32))
    first, second = kernel_list.kernels
    assert first.key == second.key and first.body is second.body
    assert first.name != second.name


def test_kernel_names_are_identifiers_with_the_prefix() -> None:
    bound = tile.Function("function (A) -> (O) { O = A + 1; }").bind({"A": f32(1)})
    kernel_list = generate_program(bound, LLVM_CPU, name_prefix="my prog-1")
    (kernel,) = kernel_list.kernels
    assert kernel.name == c_identifier(kernel.name) and kernel.name.startswith("my_prog_1_")


@pytest.mark.parametrize(
    ("limits", "grid"), [((4, 65535, 65535), (4, 4, 1)), ((2, 3, 100), (2, 3, 3))]
)
def test_grids_beyond_one_dimension(limits: tuple[int, int, int], grid: tuple[int, ...]) -> None:
    """A device whose first grid dimension is too small gets a 2-D or 3-D grid, rounded up,
    with the extra work-groups idle."""
    narrow = replace(SCALAR, goal_dim_sizes=limits)
    source = "function (A[N, M]) -> (O) { T[i, j: N, M] = +(A[i, j]); O = T * 2; }"
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    kernel_list = kernels_of(source, narrow, A=a)
    (kernel,) = kernel_list.kernels
    assert kernel.global_size == grid
    assert run_kernel_list(kernel_list, {"A": a})["O"].tolist() == (a * 2).tolist()


# ---- contraction semantics -----------------------------------------------------------------------


@pytest.mark.parametrize("settings", ALL_SETTINGS)
@pytest.mark.parametrize("agg", ["+", "*", ">", "<", "="])
def test_identities_are_never_visible(settings: object, agg: str) -> None:
    """Spec 8.6: elements without a tuple are 0, whatever the aggregation."""
    values = f32(-5, -2, -7)
    wide = run_program(
        f"function (I[N]) -> (O) {{ O[i: N + 1] = {agg}(I[i]); }}", {"I": values}, settings
    )
    assert wide["O"].tolist() == [-5, -2, -7, 0]
    strided = run_program(
        f"function (I[N]) -> (O) {{ O[2 * i: 2 * N] = {agg}(I[i]); }}", {"I": values}, settings
    )
    assert strided["O"].tolist() == [-5, 0, -2, 0, -7, 0]
    if agg != "=":  # '=' must use every variable in the output (spec 8.7)
        prefix = run_program(
            f"function (I[N]) -> (O) {{ O[i: N] = {agg}(I[j]), i - j - 1 < N; }}",
            {"I": f32(-5, -2, -7, -1)},
            settings,
        )
        assert prefix["O"][0] == 0


def test_default_fills_only_unwritten_elements() -> None:
    source = "function (I[N], D[M]) -> (O) { O[2 * i: M] = +(I[i]) default D; }"
    got = run_program(source, {"I": f32(1, 2, 3), "D": f32(10, 20, 30, 40, 50, 60)})["O"]
    assert got.tolist() == [1, 20, 2, 40, 3, 60]


def test_default_is_converted_to_the_output_type() -> None:
    source = "function (I[N], D[N]) -> (O) { O[i: N] = =(I[i]), i < 2 default D; }"
    got = run_program(source, {"I": f32(1, 2, 3), "D": np.array([7, 8, 9], np.int8)})["O"]
    assert got.dtype == np.float32 and got.tolist() == [1, 2, 9]


def test_genuine_lowest_value_survives_a_maximum() -> None:
    lowest = np.finfo(np.float32).min
    got = run_program("function (I[N]) -> (O) { O[] = >(I[i]); }", {"I": f32(lowest, lowest)})["O"]
    assert got == lowest


def test_integer_accumulation_wraps_in_the_output_type() -> None:
    source = "function (A[N], B[N]) -> (O) { O[] = +(A[i] * B[i]); }"
    got = run_program(source, {"A": np.array([100, 100], np.int8), "B": np.array([2, 1], np.int8)})
    assert got["O"].dtype == np.int8 and got["O"] == 44


def test_conditional_contraction_zeros_take_part() -> None:
    source = "function (A[N], B[M], V[M]) -> (O) { O[i: N] = >(A[i] == B[j] ? V[j]); }"
    got = run_program(source, {"A": f32(1, 3, 2, 3), "B": f32(3, 1, 3), "V": f32(-100, -200, -300)})
    assert got["O"].tolist() == [0, 0, 0, 0]
    summed = run_program(
        source.replace(">(", "+("),
        {"A": f32(1, 3, 2, 3), "B": f32(3, 1, 3), "V": f32(100, 200, 300)},
    )
    assert summed["O"].tolist() == [200, 400, 0, 400]


def test_boolean_aggregations() -> None:
    source = """function (A[N, M], B[N, M]) -> (Any, All) {
        Any[i: N] = >(A[i, j] == B[i, j]);
        All[i: N] = <(A[i, j] == B[i, j]);
    }"""
    a = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    b = np.array([[1, 2], [0, 4], [0, 0]], np.int32)
    got = run_program(source, {"A": a, "B": b})
    assert got["Any"].tolist() == [True, True, False]
    assert got["All"].tolist() == [True, False, False]


def test_half_results_are_rounded_per_operation() -> None:
    """Spec 7.1: each f16 intermediate is rounded to f16, even inside a fused kernel."""
    x = np.array([2049.0, 1.0], np.float16)
    got = run_program("function (X) -> (O) { O = (X + 1) - X; }", {"X": x})["O"]
    expected = (x + np.float16(1)) - x  # numpy rounds every f16 operation too
    assert got.dtype == np.float16 and got.tolist() == expected.tolist()


# ---- special builtins ----------------------------------------------------------------------------


def test_index_and_shape() -> None:
    source = "function (A[N, M]) -> (O, S) { O = index(A, 0) * 10 + index(A, 1); S = shape(A); }"
    got = run_program(source, {"A": np.zeros((2, 3), np.float32)})
    assert got["O"].tolist() == [[0, 1, 2], [10, 11, 12]]
    assert got["S"].tolist() == [2, 3] and got["S"].dtype == np.int32


@pytest.mark.parametrize("settings", ALL_SETTINGS)
def test_gather_clamps(settings: object) -> None:
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    index = np.array([[2, -5], [9, 0]], np.int32)
    got = run_program(
        "function (V, I) -> (O) { O = gather(V, I); }", {"V": table, "I": index}, settings
    )
    assert got["O"].tolist() == table[np.clip(index, 0, 3)].tolist()


@pytest.mark.parametrize("settings", ALL_SETTINGS)
def test_scatter_adds_duplicates_and_clamps(settings: object) -> None:
    """One work-item per column zeroes it and adds the rows in order."""
    values = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32)
    index = np.array([2, 0, 2, 17], np.int32)
    got = run_program(
        "function (E, I, V) -> (O) { O = scatter(E, I, V); }",
        {"E": values, "I": index, "V": np.zeros((4, 2), np.float32)},
        settings,
    )["O"]
    assert got.tolist() == [[3, 4], [0, 0], [6, 8], [7, 8]]


def _prng_reference(state: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Spec 9.6, lane by lane."""
    state = state.astype(np.uint64).copy()
    mask = 0xFFFFFFFF
    values = np.zeros(count, np.float32)
    for lane in range(2048):
        a, b, d = (int(x) for x in state[:, lane])
        for position in range(lane, count, 2048):
            a = (((a & 0xFFFFFFFE) << 12) & mask) ^ ((((a << 13) & mask) ^ a) >> 19)
            b = (((b & 0xFFFFFFF8) << 4) & mask) ^ ((((b << 2) & mask) ^ b) >> 25)
            d = (((d & 0xFFFFFFF0) << 17) & mask) ^ ((((d << 3) & mask) ^ d) >> 11)
            values[position] = np.float32(a ^ b ^ d) / np.float32(4294967296.0)
        state[:, lane] = (a, b, d)
    return values, state.astype(np.uint32)


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param(LLVM_CPU, id="llvm_cpu"),
        pytest.param(replace(SCALAR, goal_dim_sizes=(1000, 65535, 65535)), id="narrow_grid"),
    ],
)
def test_prng_lanes(settings: object) -> None:
    rng = np.random.default_rng(5)
    state = rng.integers(16, 2**32, size=(3, 2048), dtype=np.uint64).astype(np.uint32)
    source = """function (S) -> (V, N) {
        X = prng_step(S, 3, 1500);
        V = prng_value(X);
        N = prng_state(X);
    }"""
    got = run_program(source, {"S": state}, settings)
    values, new_state = _prng_reference(state, 4500)
    assert np.array_equal(got["V"].reshape(-1), values)
    assert np.array_equal(got["N"], new_state)


def test_prng_state_advances_even_if_the_values_are_unused() -> None:
    state = np.full((3, 2048), 1000, np.uint32)
    source = "function (S) -> (N) { X = prng_step(S, 5); V = prng_value(X); N = prng_state(X); }"
    got = run_program(source, {"S": state})["N"]
    assert np.array_equal(got, _prng_reference(state, 5)[1])


def test_float_to_narrow_integer_wraps_like_plaidml() -> None:
    got = run_program(
        "function (F) -> (I8, U8) { I8 = as_int(F, 8); U8 = as_uint(F, 8); }",
        {"F": f32(2.7, -2.7, 300, -1)},
    )
    assert got["I8"].tolist() == [2, -2, 44, -1]
    assert got["U8"].tolist() == [2, 254, 44, 255]


def test_inverse_hyperbolic_functions() -> None:
    x = f32(-3, -0.5, 0, 0.25, 2)
    got = run_program("function (X) -> (O) { O = asinh(X); }", {"X": x})["O"]
    np.testing.assert_allclose(got, np.arcsinh(x.astype(np.float64)), rtol=1e-6, atol=1e-7)
    y = f32(1, 1.5, 10)
    got = run_program("function (X) -> (O) { O = acosh(X); }", {"X": y})["O"]
    np.testing.assert_allclose(got, np.arccosh(y.astype(np.float64)), rtol=1e-6)
    z = f32(-0.5, 0, 0.9)
    got = run_program("function (X) -> (O) { O = atanh(X); }", {"X": z})["O"]
    np.testing.assert_allclose(got, np.arctanh(z.astype(np.float64)), rtol=1e-6, atol=1e-7)


def test_flops_and_bytes_are_estimated() -> None:
    kernel_list = kernels_of(
        "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }",
        A=np.zeros((4, 6), np.float32),
        B=np.zeros((6, 5), np.float32),
    )
    (kernel,) = kernel_list.kernels
    assert kernel.flops == 2 * 4 * 5 * 6
    assert kernel.bytes == (4 * 5 + 4 * 6 + 6 * 5) * 4
    assert "C[i, j: 4, 5] = +(A[i, k] * B[k, j])" in kernel.comments


def test_native_half_devices_compute_the_same() -> None:
    """With native fp16 the same kernels run in half registers; results must not change."""
    from tests.reference import run_kernel

    native = replace(SCALAR, native_fp16=True)
    source = "function (X, Y) -> (O) { S[i: 3] = +(X[i, j] * Y[j]); O = S * 0.5; }"
    x = (np.arange(12).reshape(3, 4) / 8).astype(np.float16)
    y = np.array([0.5, 0.25, 1, 2], np.float16)
    kernel_list = kernels_of(source, native, X=x, Y=y)
    buffers = {"X": x.copy(), "Y": y.copy(), "O": np.zeros(3, np.float32)}
    for kernel in kernel_list.kernels:
        run_kernel(kernel, buffers, native_fp16=True)
    emulated = run_program(source, {"X": x, "Y": y})["O"]
    assert buffers["O"].dtype == emulated.dtype
    assert np.allclose(buffers["O"], emulated, rtol=1e-3)
    assert DType.of(emulated.dtype) is DType.FLOAT32
