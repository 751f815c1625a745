"""The cases of the shared corpora (conformance and spec) as gradient-check inputs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class CorpusCase:
    name: str
    source: str
    path: Path
    float_outputs: tuple[str, ...]

    def inputs(self) -> dict[str, object]:
        case = json.loads(self.path.read_text())
        with np.load(self.path.with_suffix(".npz")) as data:
            inputs: dict[str, object] = {}
            for name, spec in case["inputs"].items():
                array = data["input__" + name]
                tensor = spec.get("binding", "tensor") == "tensor" or array.ndim
                inputs[name] = array if tensor else array.item()
        return inputs


def load(shared: Path) -> list[CorpusCase]:
    cases = []
    for folder in (shared / "conformance" / "cases", shared / "spec" / "cases"):
        for path in sorted(folder.glob("*.json")):
            case = json.loads(path.read_text())
            if "source" not in case:
                continue
            floats = tuple(
                name for name, spec in case["outputs"].items() if spec["dtype"].startswith("float")
            )
            cases.append(CorpusCase(case["name"], case["source"], path, floats))
    return cases
