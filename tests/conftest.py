"""Shared test fixtures: where the shared specification and cases live; a disk cache of the
run's own."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TILE_SHARED", REPO.parent / "shared"))

# Every test run starts with an empty disk cache (tile's programs, the OpenCL drivers' files) of
# its own, shared by its subprocesses, so that no result depends on what an earlier run stored.
# Set before tile is imported; tests of the cache itself point TILE_CACHE_DIR elsewhere.
_CACHE = tempfile.mkdtemp(prefix="tile-test-cache-")
os.environ["TILE_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"the shared folder is missing: {SHARED} (set TILE_SHARED)")
    return SHARED
