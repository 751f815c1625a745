"""Shared test fixtures: where the shared specification and cases live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TILE_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"the shared folder is missing: {SHARED} (set TILE_SHARED)")
    return SHARED
