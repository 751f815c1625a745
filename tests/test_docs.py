"""Docstrings cite documents a reader can find: `spec N` (the language specification) and
`design N` (the design document), both in ../shared/ and explained in ARCHITECTURE.md and in
`tile`'s docstring, the front page of the API reference (`make docs`). "ARCHITECTURE 9" once
named a section of the design document, which read as this repository's ARCHITECTURE.md (it
has no numbered sections)."""

from __future__ import annotations

import re
from pathlib import Path

import tile

REPO = Path(__file__).resolve().parents[1]
CHECKED = ("tile", "semtree", "hal", "hal_llvm", "hal_opencl", "tests/opencl", "examples")
OLD_CITATION = re.compile(r"ARCHITECTURE (?:[0-9]|A\.)")


def test_citations_name_documents_that_are_explained() -> None:
    stale = [
        f"{path.relative_to(REPO)}:{number}"
        for top in CHECKED
        for path in sorted((REPO / top).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OLD_CITATION.search(line)
    ]
    assert stale == []
    for text in (tile.__doc__ or "", (REPO / "ARCHITECTURE.md").read_text()):
        assert "`spec 9.1`" in text and "docs/TILE_LANGUAGE.md" in text
        assert "`design 8.10`" in text and "docs/DESIGN.md" in text
    # the cited documents are in the repository, with the cited sections
    assert "### 9.1 General rules" in (REPO / "docs" / "TILE_LANGUAGE.md").read_text()
    assert "8.10" in (REPO / "docs" / "DESIGN.md").read_text()
