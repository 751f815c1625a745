"""Shared test fixtures: where the shared specification and cases live; a disk cache of the
run's own."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]


def run_script(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run Python `code` with `args` in a fresh interpreter at the repository root and return
    its standard output, stripped; the test fails, showing its standard error, if it does."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# The property tests draw the same examples on every run, so a run's verdict depends on the code
# alone: `make test` never turns red on a draw it had not seen before. `make explore` (the
# profile "explore") draws new examples each run, to look for such cases; a case it finds is
# pinned as a plain test.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("TILE_HYPOTHESIS_PROFILE", "ci"))

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
