"""Random differential tests of dynamic batch dimensions (`tile.runtime.dynamic`): programs of
the fuzzer's families, compiled with their first tensor input's first axis symbolic, are
either refused at compile time with the reason or right at every batch size tried (block
edges included) against tile's float64 reference evaluator at that size; enough of them must
be accepted for the test to mean something. (The fuzzer writes many sizes as literals, which
makes a program's rows depend on a fixed size: those are refused.)"""

from __future__ import annotations

import numpy as np
import pytest

import tile
from tests.fuzz.check import compare, judge, precisions, reference
from tests.fuzz.programs import Case, draw
from tests.shipped import SHIPPED, require_opencl
from tile.lower.batch import BLOCKS

CASES = 48
SEED = 2027
SIZES = (1, BLOCKS[1] + 1, BLOCKS[0] - 1, 2 * BLOCKS[0] + 5)


@pytest.fixture(params=SHIPPED)
def device(request: pytest.FixtureRequest) -> str:
    if request.param != "llvm_cpu.0":
        require_opencl()
    return request.param


def _batched_input(case: Case) -> str | None:
    for name, value in case.inputs.items():
        if value.ndim >= 1 and value.shape[0] > 1:
            return name
    return None


def _at(case: Case, name: str, rows: int, seed: int) -> Case:
    """`case` with `rows` rows of input `name`, drawn from its rows (values of the same kind)."""
    value = case.inputs[name]
    picks = np.random.default_rng(seed).integers(0, value.shape[0], rows)
    return Case(case.family, case.source, {**case.inputs, name: value[picks]}, case.seed, rows)


@pytest.mark.filterwarnings("ignore::tile.TileWarning")
def test_random_programs_with_a_dynamic_batch(device: str) -> None:
    accepted, refused, compared, failures = 0, 0, 0, []
    for index in range(CASES):
        case = draw(SEED, index)
        name = _batched_input(case)
        if name is None:
            continue
        value = case.inputs[name]
        specs: dict[str, object] = dict(case.inputs)
        specs[name] = tile.spec(("N", *value.shape[1:]), value.dtype)
        try:
            compiled = tile.Function(case.source).compile(device=device, **specs)
        except tile.TileUnsupported as error:
            assert "cannot take a dynamic N" in str(error) or "symbolic" in str(error), error
            refused += 1
            continue
        accepted += 1
        for rows in SIZES:
            sized = _at(case, name, rows, seed=index * 7 + rows)
            try:
                want = reference(sized)
            except tile.TileError:
                continue  # the program does not bind at this size (an empty range, say)
            if judge(sized, want):
                continue
            got = compiled(**sized.inputs)
            compared += 1
            for output, expected in want.items():
                result = got[output].to_numpy()
                problem = compare(result, expected, np.dtype(result.dtype), precisions(sized))
                if problem:
                    failures.append(f"case {index} ({case.family}) N={rows} {output}: {problem}")
    assert not failures, "\n".join(failures)
    assert accepted >= CASES // 4 and compared >= accepted, (accepted, refused, compared)
