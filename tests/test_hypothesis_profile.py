"""`make test` runs the property tests on fixed examples; `make explore` on new ones."""

from __future__ import annotations

import os

from hypothesis import settings


def test_property_tests_draw_fixed_examples_unless_exploring() -> None:
    exploring = os.environ.get("TILE_HYPOTHESIS_PROFILE") == "explore"
    assert settings.default.derandomize is not exploring
    assert settings.default.database is None or exploring
