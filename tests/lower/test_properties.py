"""Differential property tests: generated kernels, run by the reference interpreter, against
direct evaluations of the specification.

* Random contractions (`tests.lower.strategies`): 1 to 4 index variables in random
  orders, offsets, strides, fractional subscripts, constraints, every aggregation and
  combination, `default`. The reference enumerates the valid tuples of spec 8.4 and
  aggregates them exactly (Python ints; floats in float64). Tolerance: the inputs are
  multiples of 1/4 in [-2, 2], so sums, maxima, minima and the `?` form are exact in f32 and
  compared exactly; products are compared with a relative tolerance of 1e-5. Under `=`
  only elements reached by at most one tuple are compared (collisions are unspecified).
* Random elementwise expressions (`tests.lower.expressions`) over every element type with
  broadcasting, literals, casts, comparisons, selects, bitwise operators and shifts, integer
  division and the builtins defined by expansion: every intermediate is exactly defined, so
  results must match exactly (NaN matches NaN) wherever the specification defines them.
  With a transcendental function at the root: relative tolerance 1e-5 for f32 (2e-3 for f16,
  1e-12 for f64) against the float64 value rounded to the result type.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tile
from semtree.types import DType
from tests.lower.expressions import Evaluator, Value, expressions, math_function
from tests.lower.harness import LLVM_CPU, SCALAR, run_program, tiled
from tests.lower.strategies import contractions, reference_contraction
from tile.lower.flatten import flatten

SETTINGS = st.sampled_from([SCALAR, tiled(2), LLVM_CPU])
RELAXED = [HealthCheck.too_slow, HealthCheck.filter_too_much]
MAX_REDUCTION = 300


def _quarters(shape: tuple[int, ...], dtype: str) -> st.SearchStrategy[np.ndarray]:
    size = math.prod(shape)
    quarters = st.integers(-8, 8).map(lambda k: k / 4)
    elements = st.integers(-3, 3) if dtype == "int32" else quarters
    return st.lists(elements, min_size=size, max_size=size).map(
        lambda items: np.array(items, dtype=dtype).reshape(shape)
    )


@settings(max_examples=120, deadline=None, suppress_health_check=RELAXED)
@given(contractions(), st.sampled_from(["float32", "int32"]), SETTINGS, st.data())
def test_contraction_matches_the_specification(
    case: object, dtype: str, hardware: object, data: st.DataObject
) -> None:
    inputs = {
        name: data.draw(_quarters(shape, dtype), label=name)
        for name, shape in case.shapes.items()  # type: ignore[attr-defined]
    }
    try:
        bound = tile.Function(case.source).bind(inputs)  # type: ignore[attr-defined]
    except tile.TileError:
        assume(False)
        return
    (op,) = [op for op in bound.ops if op.contraction is not None]
    # The interpreter runs a work-item's loops in Python: keep the reduction loops short.
    flat = flatten(op, bound.bindings)
    assume(math.prod(flat.ranges[k] for k in flat.reductions) <= MAX_REDUCTION)
    expected, counts = reference_contraction(bound, op, inputs)
    got = run_program(case.source, inputs, hardware)["O"]  # type: ignore[arg-type,attr-defined]
    assert got.shape == expected.shape
    compared = counts <= 1 if case.agg == "=" else np.ones(got.shape, bool)  # type: ignore[attr-defined]
    if dtype == "int32":
        wrapped = np.array([((int(v) + 2**31) % 2**32) - 2**31 for v in expected.flat])
        assert np.array_equal(got.reshape(-1)[compared.reshape(-1)], wrapped[compared.reshape(-1)])
        return
    want = expected.astype(np.float64)
    if case.agg == "*":  # type: ignore[attr-defined]
        assert np.allclose(got[compared], want[compared], rtol=1e-5, atol=1e-30)
    else:
        assert np.array_equal(got[compared], want[compared].astype(np.float32)), (got, want)


@settings(max_examples=250, deadline=None, suppress_health_check=RELAXED)
@given(expressions(), SETTINGS)
def test_elementwise_expression_is_exact(case: object, hardware: object) -> None:
    try:
        outputs = run_program(case.source, case.inputs, hardware)  # type: ignore[arg-type,attr-defined]
    except tile.TileError:
        assume(False)  # a constant subexpression that divides by zero (E-CONST)
        return
    expected = case.node.evaluate(Evaluator(case.inputs))  # type: ignore[attr-defined]
    got = outputs["O"]
    assert got.dtype == expected.dtype.numpy, case.source  # type: ignore[attr-defined]
    assert got.shape == np.shape(expected.data)
    defined = np.broadcast_to(expected.defined, got.shape)
    want = expected.data
    same = (got == want) | (_isnan(got) & _isnan(want))
    assert np.all(same | ~defined), (case.source, got, want)  # type: ignore[attr-defined]


TOLERANCE = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}


@settings(max_examples=80, deadline=None, suppress_health_check=RELAXED)
@given(expressions(math=True), SETTINGS)
def test_math_builtins_are_accurate(case: object, hardware: object) -> None:
    try:
        outputs = run_program(case.source, case.inputs, hardware)  # type: ignore[arg-type,attr-defined]
    except tile.TileError:
        assume(False)
        return
    expected = case.node.evaluate(Evaluator(case.inputs))  # type: ignore[attr-defined]
    got = outputs["O"]
    assert got.dtype == expected.dtype.numpy
    rtol = TOLERANCE[got.dtype.name]
    defined = np.broadcast_to(expected.defined, got.shape)
    close = np.isclose(
        got.astype(np.float64),
        expected.data.astype(np.float64),
        rtol=rtol,
        atol=rtol * 1e-2,
        equal_nan=True,
    )
    assert np.all(close | ~defined), (case.source, got, expected.data)  # type: ignore[attr-defined]


def _isnan(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    return np.isnan(array) if array.dtype.kind == "f" else np.zeros(array.shape, bool)


def test_round_keeps_the_sign_of_zero() -> None:
    """`round` of -0.0 and of -0.4 is -0.0 (C's round), in the generated code and in the
    oracle of `test_math_builtins_are_accurate` alike (1 / -0.0 is -inf)."""
    x = np.array([-0.0, -0.4, 0.4, 0.0, -2.5, 2.5], np.float32)
    want = np.array([-np.inf, -np.inf, np.inf, np.inf, -1 / 3, 1 / 3])
    with np.errstate(divide="ignore"):
        got = run_program("function (X[N]) -> (O) { O = 1.0 / round(X); }", {"X": x})["O"]
        oracle = 1.0 / math_function("round", Value(x, DType.FLOAT32)).data
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(oracle, want, rtol=1e-6)
