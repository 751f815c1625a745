"""The gradient check over every case of the shared corpora (issue 14): for each float output
of each case, the gradient with respect to every float tensor input agrees with central
differences in float64 (tests.grad.check), and both shipped devices compute the same
gradients as the reference evaluator.

Cases with nothing to differentiate are listed in NO_GRADIENT with the reason; the test
checks that each of them indeed has nothing, so the list cannot hide a failure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.conftest import SHARED
from tests.grad.check import Skip, numeric_check, on_device, prepare
from tests.grad.corpus import load
from tests.shipped import SHIPPED, shipped_devices

if TYPE_CHECKING:
    from tests.grad.corpus import CorpusCase

NO_FLOAT_INPUT = "no float tensor input: the float output is made from integers or constants"
NO_FLOAT_OUTPUT = "integer or bool outputs only"
NO_GRADIENT = {
    "add_two_0d_tensors": NO_FLOAT_INPUT,
    "cast_bool_to_float32": NO_FLOAT_INPUT,
    "cast_int32_to_float64": NO_FLOAT_INPUT,
    "prng_uniform_4x5_state_and_value": NO_FLOAT_INPUT,
}
# reverse_grad(X, S) is X whose gradient is -S times the incoming one: -S times the numbers.
REVERSED = {("spec083_softmax_family", "RG"): -2.0}
CASES = load(SHARED) if SHARED.is_dir() else []


def _cases() -> list[CorpusCase]:
    if not CASES:
        pytest.fail(f"the shared corpora are missing: {SHARED}")
    return CASES


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_gradients_agree_with_central_differences(case: CorpusCase) -> None:
    if not case.float_outputs:
        return  # NO_FLOAT_OUTPUT: test_cases_without_gradients covers these
    checked = 0
    for output in case.float_outputs:
        try:
            prepared = prepare(case.source, case.inputs(), of=output)
            problem = numeric_check(prepared, scale=REVERSED.get((case.name, output), 1.0))
        except Skip as skip:
            assert case.name in NO_GRADIENT, f"{output}: {skip}"
            continue
        assert problem is None, f"{output}: {problem}\n{prepared.gradient.source}"
        checked += 1
    assert checked or case.name in NO_GRADIENT


@pytest.mark.parametrize("device", SHIPPED)
def test_devices_compute_the_reference_gradients(device: str) -> None:
    shipped_devices()
    failures = []
    checked = 0
    for case in _cases():
        for output in case.float_outputs:
            try:
                prepared = prepare(case.source, case.inputs(), of=output)
            except Skip:
                continue
            problem = on_device(prepared, device)
            if problem:
                failures.append(f"{case.name} ({output}): {problem}")
            checked += 1
    assert not failures, "\n".join(failures)
    assert checked >= 250, checked


def test_cases_without_gradients() -> None:
    """Every case the lists name has nothing to differentiate, for the reason given."""
    names = {case.name: case for case in _cases()}
    assert set(NO_GRADIENT) <= set(names)
    for name, reason in NO_GRADIENT.items():
        case = names[name]
        for output in case.float_outputs:
            with pytest.raises(Skip, match="no float tensor input"):
                prepare(case.source, case.inputs(), of=output)
        assert reason == NO_FLOAT_INPUT
    no_float = [case.name for case in _cases() if not case.float_outputs]
    assert 40 <= len(no_float) <= 60, no_float  # integer, bool and index programs
