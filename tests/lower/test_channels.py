"""Channels last (`tile.lower.channels`, issue 11 "other layouts"): a depthwise convolution in
NCHW layout runs on transposed copies with the channel axis last; which contractions are
rewritten, and that the kernels compute what numpy does in float64, in the reference
interpreter (poisoned buffers, strict bounds) and on both shipped devices (poisoned outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile
from tests.fuzz.check import check
from tests.fuzz.programs import Case
from tests.gpu.settings import POCL_GPU
from tests.lower.harness import LLVM_CPU, run_program
from tests.lower.windows import WINDOWS, by_taps, drawn_size, fitted
from tests.shipped import SHIPPED, shipped_devices
from tile.lower import channels
from tile.lower.generate import generate_program


def depthwise(k: int, stride: int, dilation: int, pad: int, size: tuple[int, int]) -> str:
    """O = depthwise conv(I, K) in NCHW x CHW, `pad` zeros on each side of an H x W image."""
    oh, ow = ((extent + 2 * pad - (k - 1) * dilation - 1) // stride + 1 for extent in size)
    return (
        f"function (I[N, C, H, W], K[C, KH, KW]) -> (O) {{ O[n, c, y, x: N, C, {oh}, {ow}] = "
        f"+(I[n, c, {stride} * y + {dilation} * i - {pad}, {stride} * x + {dilation} * j - "
        f"{pad}] * K[c, i, j]); }}"
    )


def dw_inputs(n: int, c: int, size: tuple[int, int], k: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    # Multiples of 1/8 up to 2: float32 sums of them are exact at these sizes.
    return {
        "I": (rng.integers(-16, 17, (n, c, *size)) / 8).astype(np.float32),
        "K": (rng.integers(-16, 17, (c, k, k)) / 8).astype(np.float32),
    }


def dw_reference(x: dict, stride: int, dilation: int, pad: int) -> np.ndarray:
    """The depthwise convolution in float64, tap by tap over a zero-padded image."""
    kernel = x["K"].astype(np.float64)

    def tap(window: np.ndarray, i: int, j: int) -> np.ndarray:
        return window * kernel[None, :, i, j, None, None]

    return by_taps(x["I"], kernel.shape[1], stride, dilation, pad, tap)


def temporaries(source: str, x: dict, settings_: object = LLVM_CPU) -> tuple[str, ...]:
    bound = tile.Function(source).bind(x)
    return generate_program(bound, settings_).temporaries  # type: ignore[arg-type]


def rewritten(source: str, x: dict, settings_: object = LLVM_CPU) -> bool:
    return any(name.startswith("_cl") for name in temporaries(source, x, settings_))


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrite outputs of any size: the reference interpreter runs small ones."""
    monkeypatch.setattr(channels, "MIN_OUTPUT", 0)


# (k, stride, dilation, pad): same padding, strided, dilated, valid, a wide window.
DEPTHWISE = [(3, 1, 1, 1), (3, 2, 1, 1), (3, 1, 2, 2), (3, 1, 1, 0), (5, 2, 1, 2)]


@pytest.mark.usefixtures("small")
@pytest.mark.parametrize(("k", "stride", "dilation", "pad"), DEPTHWISE)
def test_depthwise_nchw_runs_channels_last(k: int, stride: int, dilation: int, pad: int) -> None:
    size = (9, 11)
    source = depthwise(k, stride, dilation, pad, size)
    x = dw_inputs(2, 9, size, k)
    assert set(temporaries(source, x)) >= {"_cl0_O", "_cl1_I", "_cl2_K"}
    got = run_program(source, x)["O"]
    np.testing.assert_array_equal(got, dw_reference(x, stride, dilation, pad))


def test_what_is_not_rewritten() -> None:
    """Small outputs, few channels, no window along the last axis, the GPU settings."""
    big = dw_inputs(1, 32, (130, 130), 3)
    assert rewritten(depthwise(3, 1, 1, 1, (130, 130)), big)
    assert not rewritten(depthwise(3, 1, 1, 1, (130, 130)), big, POCL_GPU)
    assert not rewritten(depthwise(3, 1, 1, 1, (20, 20)), dw_inputs(1, 32, (20, 20), 3))
    assert not rewritten(depthwise(3, 1, 1, 1, (300, 300)), dw_inputs(1, 4, (300, 300), 3))
    scale = """function (I[N, C, H, W], S[C, U]) -> (O) {
        O[n, c, y, x: N, C, H, W] = +(I[n, c, y, x] * S[c, u]);
    }"""
    x = {"I": np.ones((1, 32, 64, 64), np.float32), "S": np.ones((32, 2), np.float32)}
    assert not rewritten(scale, x)


@pytest.mark.usefixtures("small")
def test_an_operand_whose_channel_axis_is_last_is_read_as_it_is() -> None:
    """A filter K[i, j, c] needs no copy; the image and the output still do."""
    source = depthwise(3, 1, 1, 1, (7, 8)).replace("K[C, KH, KW]", "K[KH, KW, C]")
    source = source.replace("K[c, i, j]", "K[i, j, c]")
    x = dw_inputs(2, 9, (7, 8), 3)
    x["K"] = np.ascontiguousarray(x["K"].transpose(1, 2, 0))
    names = temporaries(source, x)
    assert "_cl1_I" in names and "_cl0_O" in names
    assert not any(name.startswith("_cl2") for name in names)
    want = dw_reference({"I": x["I"], "K": x["K"].transpose(2, 0, 1)}, 1, 1, 1)
    np.testing.assert_array_equal(run_program(source, x)["O"], want)


@pytest.mark.usefixtures("small")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(8, 20), seed=st.integers(0, 2**16), **WINDOWS)
def test_random_depthwise(
    c: int, k: int, stride: int, dilation: int, pad: int, h: int, w: int, seed: int
) -> None:
    size = drawn_size(k, stride, dilation, pad, h, w)
    source = depthwise(k, stride, dilation, pad, size)
    x = dw_inputs(2, c, size, k, seed)
    want = dw_reference(x, stride, dilation, pad)
    np.testing.assert_array_equal(run_program(source, x)["O"], want)


@pytest.fixture(scope="module")
def devices() -> dict:
    return shipped_devices()


@pytest.mark.parametrize("device_id", SHIPPED)
@pytest.mark.parametrize(("k", "stride", "dilation", "pad"), DEPTHWISE)
def test_depthwise_on_the_devices(
    device_id: str, k: int, stride: int, dilation: int, pad: int, devices: dict
) -> None:
    """Sizes at lane and tile edges, each output over `MIN_OUTPUT` elements: 8, 9, 17 and 33
    channels, widths of 19, 31, 64 and 1031, heights of 1, 13, 33 and 61."""
    for n, c, size in [(1, 17, (61, 31)), (2, 8, (1, 1031)), (1, 33, (33, 19)), (3, 9, (13, 64))]:
        size = fitted(k, stride, dilation, pad, size)
        assert size is not None
        source = depthwise(k, stride, dilation, pad, size)
        x = dw_inputs(n, c, size, k, seed=n + c)
        if device_id == "llvm_cpu.0" and stride == 1:
            assert rewritten(source, x)
        outcome = check(Case("channels", source, x), devices[device_id])
        assert outcome.kind == "ok", (n, c, size, outcome)
        got = tile.Function(source)(device=devices[device_id], **x)["O"].to_numpy()
        np.testing.assert_allclose(
            got, dw_reference(x, stride, dilation, pad), rtol=1e-6, atol=1e-6
        )
