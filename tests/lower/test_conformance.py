"""Every shared case (spec/cases and conformance/cases) through binding, generation and the
reference interpreter, compared with its expected outputs exactly as the conformance runner
(`shared/conformance/run.py`, `compare_output`) compares them: shape, dtype, and values under
the case's tolerance. Outputs start poisoned (see `tests.lower.harness`).

Each case runs twice: with `SCALAR` settings (one element per work-item: the plainest
kernels) and with the `llvm_cpu` preset of an AVX-512 host (register tiles, strips, partial
tiles at the edges). The interpreter executes a kernel's loops in Python, so tiles multiply
its time; the cases in `SLOW_TILED` (the convolutions and bigger matmuls, which take from 0.5 s
to several seconds each that way) run with the preset only under `-m slow`.
"""

from __future__ import annotations

import importlib.util
import json
from typing import TYPE_CHECKING

import pytest

from tests.conftest import SHARED
from tests.lower.harness import LLVM_CPU, SCALAR, run_program

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

    from semtree.kernel import HardwareSettings

SLOW_TILED = frozenset(
    [
        "avgpool2d_same_excludes_padding",
        "codegen_conv2d_bias_relu",
        "conv1d_stride2_same",
        "conv1d_transpose_stride2",
        "conv1d_valid_nwc",
        "conv2d_dilated_same",
        "conv2d_explicit_pads_oihw",
        "conv2d_nchw_keras_channels_first",
        "conv2d_same_stride2",
        "conv2d_transpose_same_stride2",
        "conv2d_transpose_valid_stride1",
        "conv2d_valid_nhwc",
        "conv3d_valid_ndhwc",
        "conv_bias_relu_maxpool_block",
        "cumsum_2d_axis1",
        "lang_test_fractional_index_subdivision",
        "lang_test_matmul_leaky_clip",
        "maxpool2d_same_stride2",
        "mlp_two_dense_softmax",
        "tile_keras_2d",
        "tutorial_dilated_conv2d",
    ]
)


def _cases() -> list[Path]:
    return sorted((SHARED / "spec/cases").glob("*.json")) + sorted(
        (SHARED / "conformance/cases").glob("*.json")
    )


CASES = _cases()


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("conformance_run", SHARED / "conformance/run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNER = _runner() if SHARED.is_dir() else None


def _params() -> list[object]:
    params = []
    for path in CASES:
        params.append(pytest.param(path, SCALAR, id=f"scalar-{path.stem}"))
        marks = [pytest.mark.slow] if path.stem in SLOW_TILED else []
        params.append(pytest.param(path, LLVM_CPU, id=f"llvm_cpu-{path.stem}", marks=marks))
    return params


@pytest.mark.parametrize(("path", "settings"), _params())
def test_case(path: Path, settings: HardwareSettings) -> None:
    assert RUNNER is not None
    case = json.loads(path.read_text())
    case["_dir"] = str(path.parent)
    inputs, expected = RUNNER.load_arrays(case)
    outputs = run_program(case["source"], inputs, settings)
    tolerance = case.get("tolerance", {"rtol": 0.0, "atol": 0.0})
    for name, spec in case["outputs"].items():
        assert name in outputs, f"output {name} missing"
        ok, message, _ = RUNNER.compare_output(
            name, outputs[name], expected[name], spec, tolerance, False
        )
        assert ok, message


def test_all_cases_are_found() -> None:
    assert len(CASES) == 277
