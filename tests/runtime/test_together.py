"""Kernels of one function that do not depend on each other run together where the device
runs them side by side (llvm_cpu.0; issue 11 item 5), in an order that keeps every
dependency: `launch_groups` on random schedules, and whole programs against float64 numpy
on the general path and on the repeat path."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import tile
from tests.runtime.test_prepared import Repeats
from tests.shipped import SHIPPED
from tile.lower.schedule import Step, launch_groups
from tile.runtime.execute import launch_order

# Three full reductions of one input: on llvm_cpu.0, each is one work-group (or a first
# pass over a few, then one), too little to fill the threads by itself.
SOURCE = """function (X[N]) -> (S, M, L) {
    S[] = +(X[i]);
    M[] = >(X[i]);
    L[] = <(X[i]);
}"""


def _conflict(first: Step, second: Step) -> bool:
    """Whether `second` must run after `first`, which precedes it in the schedule."""
    return bool(
        set(first.writes) & {*second.reads, *second.writes} or set(first.reads) & set(second.writes)
    )


@pytest.mark.parametrize("seed", range(40))
def test_groups_keep_every_dependency_and_the_order_within(seed: int) -> None:
    generator = random.Random(seed)
    slots = generator.randint(1, 6)
    steps = []
    for index in range(generator.randint(0, 9)):
        used = generator.sample(range(slots), generator.randint(1, slots))
        cut = generator.randint(0, len(used) - 1)  # every step writes at least one slot
        steps.append(Step(index, tuple(used), tuple(used[:cut]), tuple(used[cut:])))
    groups = launch_groups(tuple(steps))
    flat = [step for group in groups for step in group]
    assert sorted(flat, key=lambda step: step.kernel_index) == steps
    assert all(group for group in groups)
    assert all(list(group) == sorted(group, key=lambda step: step.kernel_index) for group in groups)
    where = {step.kernel_index: number for number, group in enumerate(groups) for step in group}
    for first, second in itertools.combinations(steps, 2):
        if _conflict(first, second):
            assert where[first.kernel_index] < where[second.kernel_index]
    for group in groups:
        for first, second in itertools.combinations(group, 2):
            assert not _conflict(first, second)


def test_independent_steps_share_a_group() -> None:
    a = Step(0, (0, 1), (0,), (1,))  # 1 = f(0)
    b = Step(1, (0, 2), (0,), (2,))  # 2 = g(0): beside a
    c = Step(2, (1, 2, 3), (1, 2), (3,))  # 3 = h(1, 2): after both
    d = Step(3, (0, 4), (0,), (4,))  # 4 = k(0): beside a and b
    e = Step(4, (3, 0), (3,), (0,))  # 0 = m(3): after c, and after every reader of 0
    assert launch_groups((a, b, c, d, e)) == ((a, b, d), (c,), (e,))


@pytest.fixture
def eager_llvm(monkeypatch: pytest.MonkeyPatch):
    """llvm_cpu.0 with a split threshold of 0 s, so that every launch of more than one
    work-group is split and any independent kernels run together (`LLVMExecutor.together`),
    however short: programs compiled while it is active see it; none stay in the cache."""
    device = tile.device("llvm_cpu.0")
    device.clear_cache()
    monkeypatch.setattr(device.runtime.device.runtime, "split_seconds", 0.0)
    yield device
    device.clear_cache()


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 2**21 - 1])
def test_reductions_run_together_and_match_numpy(
    eager_llvm: tile.Device, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three full reductions: each a kernel of one work-group, or a first pass over several
    and then one; the single work-groups run side by side. Every call has new inputs, so
    nothing stale can pass; the general path and the repeat path both run."""
    device = eager_llvm
    compiled = tile.Function(SOURCE).compile(tile.spec((n,)), device=device)
    order = launch_order(compiled.program, device.runtime.executor)
    assert max(len(group) for group in order) == 3
    repeats = Repeats(monkeypatch)
    generator = np.random.default_rng(n)
    for call in range(4):
        x = generator.standard_normal(n).astype(np.float32)
        # A numpy input takes the general path; a tensor, from the second call, the repeat.
        outputs = compiled(tile.Tensor.from_numpy(x, device)) if call % 2 else compiled(X=x)
        wide = x.astype(np.float64)
        # The sum to 1e-5 of the sum of magnitudes (float32 partial sums); max, min exact.
        assert abs(float(outputs["S"].numpy()) - wide.sum()) <= 1e-5 * np.abs(wide).sum()
        assert float(outputs["M"].numpy()) == wide.max()
        assert float(outputs["L"].numpy()) == wide.min()
    assert repeats.count >= 1


@pytest.mark.parametrize("device_id", [d for d in SHIPPED if not d.startswith("llvm_cpu")])
def test_other_devices_launch_in_the_schedules_order(device_id: str) -> None:
    device = tile.device(device_id)
    compiled = tile.Function(SOURCE).compile(tile.spec((4096,)), device=device)
    program = compiled.program
    order = launch_order(program, device.runtime.executor)
    assert order == tuple((step,) for step in program.schedule.steps)
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    assert float(compiled(X=x)["M"].numpy()) == x.max()
