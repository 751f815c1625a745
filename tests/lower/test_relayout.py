"""Output relayout (`tile.lower.relayout`, issue 11 "other layouts"): a convolution in
PyTorch's NCHW layout computes into a channels-last temporary with the register-tiled vector
kernel, and a transposition moves it into place; which contractions are relaid, and that the
kernels compute what numpy does in float64, in the reference interpreter (poisoned buffers,
strict bounds) and on both shipped devices (poisoned outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile
from semtree.kernel import KernelKind
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.lower.harness import LLVM_CPU, SCALAR, run_program
from tests.lower.windows import WINDOWS, by_taps, drawn_size, fitted
from tests.shipped import SHIPPED, shipped_devices
from tile.lower.generate import generate_program


def nchw(c_out: int, k: int, stride: int, dilation: int, pad: int, size: tuple[int, int]) -> str:
    """O = conv(I, K) in NCHW x OIHW, `pad` zeros on each side; `size`: the input's H, W."""
    oh, ow = ((extent + 2 * pad - (k - 1) * dilation - 1) // stride + 1 for extent in size)
    return (
        f"function (I[N, C, H, W], K[CO, C, KH, KW]) -> (O) {{ "
        f"O[n, co, y, x: N, {c_out}, {oh}, {ow}] = +(I[n, c, {stride} * y + {dilation} * i - "
        f"{pad}, {stride} * x + {dilation} * j - {pad}] * K[co, c, i, j]); }}"
    )


def conv_inputs(
    n: int, c: int, size: tuple[int, int], c_out: int, k: int, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Multiples of 1/8 up to 2: float32 sums of them are exact at these sizes.
    return {
        "I": (rng.integers(-16, 17, (n, c, *size)) / 8).astype(np.float32),
        "K": (rng.integers(-16, 17, (c_out, c, k, k)) / 8).astype(np.float32),
    }


def conv_reference(x: dict[str, np.ndarray], stride: int, dilation: int, pad: int) -> np.ndarray:
    """The convolution in float64, tap by tap over a zero-padded copy of the image."""
    kernel = x["K"].astype(np.float64)

    def tap(window: np.ndarray, i: int, j: int) -> np.ndarray:
        return np.einsum("nchw,oc->nohw", window, kernel[:, :, i, j])

    return by_taps(x["I"], kernel.shape[2], stride, dilation, pad, tap)


def kernels(source: str, x: dict, settings_: object = LLVM_CPU) -> list:
    bound = tile.Function(source).bind(x)
    return list(generate_program(bound, settings_).kernels)  # type: ignore[arg-type]


def relaid(kernel_list: list) -> bool:
    """The vector kernel into a temporary, then the transposition into the output."""
    vector = [k for k in kernel_list if k.kind is KernelKind.CONTRACTION and "b_row" in str(k.body)]
    return kernel_list[-1].name.endswith("_relaid") and len(vector) == 1


# (c_out, k, stride, dilation, pad): same padding, strided, strided and valid, dilated, and
# output channels that leave part of a vector.
CONVOLUTIONS = [
    (16, 3, 1, 1, 1),
    (24, 3, 2, 1, 1),
    (16, 3, 2, 1, 0),
    (9, 3, 1, 2, 2),
    (33, 5, 1, 1, 2),
]
# Also on the devices: a strided 1x1 convolution packs its image instead (a subsample, each
# element once: tile.lower.pack), and a valid one takes the vector kernel as it is.
OTHERS = [(33, 1, 2, 1, 0), (17, 3, 1, 1, 0)]


@pytest.mark.parametrize(("c_out", "k", "stride", "dilation", "pad"), CONVOLUTIONS)
def test_nchw_convolutions_are_relaid(
    c_out: int, k: int, stride: int, dilation: int, pad: int
) -> None:
    size = (9, 11)
    source = nchw(c_out, k, stride, dilation, pad, size)
    x = conv_inputs(2, 5 if k > 1 else 17, size, c_out, k)
    assert relaid(kernels(source, x))
    got = run_program(source, x)["O"]
    np.testing.assert_array_equal(got, conv_reference(x, stride, dilation, pad))


def test_before_the_change_the_generic_kernel_ran_one_channel_per_work_group() -> None:
    """Without the relayout (no vector lanes: `SCALAR`), the same convolution keeps one
    kernel; with it, the kernel that computes writes channels last."""
    source = nchw(16, 3, 1, 1, 1, (9, 11))
    x = conv_inputs(2, 5, (9, 11), 16, 3)
    assert [k.name for k in kernels(source, x, SCALAR)] == ["tile_0"]
    kernel_list = kernels(source, x)
    main = next(k for k in kernel_list if k.name == "tile_0")
    assert main.params[0].shape == (2, 9, 11, 16)  # N, OH, OW, CO


def with_bias(source: str, outputs: str) -> str:
    """`source` with a bias per output channel and a relu fused after it: outputs `outputs`."""
    source = source.replace(
        "K[CO, C, KH, KW]) -> (O)", f"K[CO, C, KH, KW], B[CO, U, V]) -> ({outputs})"
    )
    return source.replace("); }", "); R = relu(O + B); }")


@pytest.mark.parametrize("outputs", ["R", "O, R"])
def test_a_fused_epilogue_runs_in_the_transposition(outputs: str) -> None:
    """conv + bias + relu: the epilogue moves into the kernel that transposes (it ran in the
    generic kernel with the convolution, 33x torch's time at 8 x 64 x 56 x 56)."""
    source = with_bias(nchw(17, 3, 1, 1, 1, (7, 10)), outputs)
    x = conv_inputs(2, 6, (7, 10), 17, 3)
    x["B"] = (np.arange(17, dtype=np.float32) / 4 - 2).reshape(17, 1, 1)
    kernel_list = kernels(source, x)
    assert relaid(kernel_list)
    assert "select" in str(kernel_list[-1].body)  # the relu, after the transposition
    conv = conv_reference(x, 1, 1, 1)
    got = run_program(source, x)
    np.testing.assert_array_equal(got["R"], np.maximum(conv + x["B"], 0))
    if "O" in outputs:
        np.testing.assert_array_equal(got["O"], conv)


@pytest.mark.parametrize(
    ("source", "shapes"),
    [
        # A @ B.T with few rows keeps its dot products (tile.lower.pack), not relaid either.
        (
            "function (A[M, K], B[N, K]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[n, k]); }",
            {"A": (8, 512), "B": (512, 512)},
        ),
        # A convolution of one input channel and a 3x3 filter: 9 tuples per output element.
        (nchw(16, 3, 1, 1, 1, (20, 20)), {"I": (1, 1, 20, 20), "K": (16, 1, 3, 3)}),
        # Depthwise in NCHW: every coordinate of the output is used by the image.
        (
            "function (I[N, C, H, W], K[C, KH, KW]) -> (O) { O[n, c, y, x: N, C, 18, 18] = "
            "+(I[n, c, y + i, x + j] * K[c, i, j]); }",
            {"I": (1, 32, 20, 20), "K": (32, 3, 3)},
        ),
        # Channels last already takes the vector kernel as it is.
        (
            "function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) { O[n, y, x, co: N, 18, 18, CO] "
            "= +(I[n, y + i, x + j, c] * K[i, j, c, co]); }",
            {"I": (1, 20, 20, 8), "K": (3, 3, 8, 32)},
        ),
    ],
    ids=["nt-few-rows", "short-reduction", "depthwise", "nhwc"],
)
def test_what_is_not_relaid(source: str, shapes: dict) -> None:
    x = {name: np.ones(shape, np.float32) for name, shape in shapes.items()}
    assert not any(kernel.name.endswith("_relaid") for kernel in kernels(source, x))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 6), c_out=st.integers(8, 40), seed=st.integers(0, 2**16), **WINDOWS)
def test_random_nchw_convolutions(
    c: int, c_out: int, k: int, stride: int, dilation: int, pad: int, h: int, w: int, seed: int
) -> None:
    size = drawn_size(k, stride, dilation, pad, h, w)
    c = max(c, -(-16 // (k * k)))  # a reduction long enough to be relaid
    source = nchw(c_out, k, stride, dilation, pad, size)
    x = conv_inputs(2, c, size, c_out, k, seed)
    # Relaid where padding or a stride leaves no vector coordinate (most draws), else as it was.
    want = conv_reference(x, stride, dilation, pad)
    np.testing.assert_array_equal(run_program(source, x)["O"], want)


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize(("c_out", "k", "stride", "dilation", "pad"), CONVOLUTIONS + OTHERS)
def test_relaid_convolutions_on_the_devices(
    device_id: str, c_out: int, k: int, stride: int, dilation: int, pad: int, devices: dict
) -> None:
    """Sizes at lane and tile edges: widths of 1, 7, 16 and 17, heights 1 and 13."""
    for n, c, size in [(1, 16, (1, 7)), (2, 3, (13, 16)), (3, 7, (5, 17)), (1, 64, (8, 8))]:
        size = fitted(k, stride, dilation, pad, size)
        assert size is not None
        source = nchw(c_out, k, stride, dilation, pad, size)
        x = conv_inputs(n, c, size, c_out, k, seed=n + c)
        outcome = check(Case("relayout", source, x), devices[device_id])
        assert outcome.kind == "ok", (n, c, size, outcome)
        got = tile.Function(source)(device=devices[device_id], **x)["O"].to_numpy()
        want = conv_reference(x, stride, dilation, pad)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        x["B"] = np.linspace(-3, 3, c_out, dtype=np.float32).reshape(c_out, 1, 1)
        outcome = check(Case("relayout", with_bias(source, "O, R"), x), devices[device_id])
        assert outcome.kind == "ok", (n, c, size, "with bias", outcome)
