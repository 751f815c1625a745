"""The Tile grammar (`tile.lark`, in Lark's EBNF) and what the parser and its messages share."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lark import Lark

GRAMMAR = Path(__file__).with_name("tile.lark")
START_SYMBOLS = ["start", "header", "chunk", "closing"]
TILE_WHITESPACE = " \t\r\n"


@cache
def _terminals() -> dict[str, str]:
    grammar = Lark(GRAMMAR.read_text(), parser="lalr", start=START_SYMBOLS)
    return {terminal.name: terminal.pattern.value for terminal in grammar.terminals}


def terminal_text(name: str) -> str:
    """The text (or pattern) of the grammar's terminal `name`, for error messages."""
    return _terminals()[name]
