"""The front end's public entry point: `Function(source)` parses and checks a Tile function;
`Function.bind(inputs)` binds it to input shapes and constants (no device needed).

Parsing and checking are cached per source text, so building the same `Function` twice
costs one dictionary look-up.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from semtree.types import DType
from tile.bind.binder import bind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tile.bind.program import BoundProgram
    from tile.errors import Diagnostic
    from tile.lang.syntax import FunctionDef


@lru_cache(maxsize=256)
def front_end(source: str) -> tuple[FunctionDef, tuple[Diagnostic, ...]]:
    """The checked syntax tree of `source` and its warnings, sorted by place (cached)."""
    # Imported here: the parser needs Lark, which a process running only stored programs and
    # front ends (tile.runtime.store) never imports.
    from tile.lang.check import check
    from tile.lang.parse import parse

    warnings: list[Diagnostic] = []
    function = parse(source, warnings)
    check(function, source, warnings)
    return function, tuple(sorted(warnings, key=lambda d: (d.line, d.column)))


class Function:
    """A parsed and checked Tile function.

    >>> f = Function("function (A[N]) -> (B) { B = A * 2; }")
    >>> import numpy as np
    >>> f.bind({"A": np.zeros(3, np.float32)}).outputs
    {'B': ((3,), dtype('float32'))}
    """

    def __init__(self, source: str, *, floatx: object = "float32") -> None:
        if not isinstance(source, str):
            raise TypeError(f"a Tile function is a str, not {type(source).__name__}")
        self.source = source
        self.floatx = DType.of(floatx)
        if not self.floatx.is_float:
            raise ValueError(f"floatx must be a float type, not {self.floatx}")
        self.ast, self.warnings = self._front_end(source)
        self._inputs = tuple(decl.name for decl in self.ast.inputs)  # every call reads these

    def _front_end(self, source: str) -> tuple[FunctionDef, tuple[Diagnostic, ...]]:
        """Parse and check `source` (the runtime's Function looks on disk first)."""
        return front_end(source)

    @property
    def inputs(self) -> tuple[str, ...]:
        return self._inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(name.name for name in self.ast.outputs)

    def bind(self, inputs: Mapping[str, object] | None = None, **named: object) -> BoundProgram:
        """Bind every input to a numpy array (a tensor; a 0-d array is a scalar constant), a
        Python number (a scalar constant) or a `TensorShape`. Only shapes, element types and
        constant values are read."""
        given = dict(inputs or {})
        given.update(named)
        return bind(self.ast, self.source, given, self.floatx)

    def __str__(self) -> str:
        return str(self.ast)

    def __repr__(self) -> str:
        return f"Function({self.source!r})"
