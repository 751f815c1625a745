"""Messages of syntax errors: what was found, what was expected, where (spec 11.1).

`tile.lang.parse` turns Lark's `UnexpectedInput` into a positioned `Diagnostic` with
`syntax_diagnostic`, and places offsets with `position`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from tile.errors import Diagnostic, diagnostic
from tile.lang import syntax as ast
from tile.lang.grammar import TILE_WHITESPACE, terminal_text

if TYPE_CHECKING:
    from lark import Token


def position(text: str, offset: int) -> ast.Span:
    line_start = text.rfind("\n", 0, offset) + 1
    return ast.Span(text.count("\n", 0, offset) + 1, offset - line_start + 1)


# Expected terminals described in words; the rest are quoted as written.
_WORDS = {
    "UNAME": "a tensor name",
    "LNAME": "an index name",
    "INT": "an integer",
    "FLOAT": "a number",
    "$END": "the end of the text",
}
_EXPRESSION_START = {"INT", "FLOAT", "UNAME", "LNAME", "LPAR", "MINUS", "TILDE"}
_POLY_START = {"INT", "FLOAT", "UNAME", "LNAME", "LPAR", "MINUS"}
_EXPRESSION_OPERATORS = {
    *("PLUS", "MINUS", "STAR", "SLASH", "EQUAL", "NOT_EQUAL", "LT", "GT", "LE", "GE"),
    *("SHL", "SHR", "AMPERSAND", "PIPE", "CARET", "QUESTION"),
}
_POLY_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH"}
_KEYWORDS = {"FUNCTION", "DEFAULT", "NO_DEFRACT"}
_RESERVED = re.compile(r"(?:polynomial|expression|contraction)(?![A-Za-z0-9_'])")
_NUMBER_TAIL = re.compile(r"[0-9.]*(?:[eE][-+]?[0-9]+)?")
_INDEX_NAME_BEFORE = re.compile(r"(?<![A-Za-z0-9_'])([a-z][A-Za-z0-9_]*'?)[ \t\r\n]*\Z")


def syntax_diagnostic(error: UnexpectedInput, text: str, source: str) -> Diagnostic:
    """The E-LEX or E-SYNTAX diagnostic for a Lark error in `text` (a padded piece of `source`)."""
    if isinstance(error, UnexpectedCharacters):
        code, message, offset = _character_message(text, error.pos_in_stream)
    elif isinstance(error, UnexpectedToken):
        expected = error.accepts or error.expected  # `accepts` is exact, `expected` is not
        code, message, offset = "E-SYNTAX", *_token_message(error.token, expected, text)
    else:
        assert isinstance(error, UnexpectedEOF)
        end = len(text.rstrip(TILE_WHITESPACE))
        code, message, offset = "E-SYNTAX", _unexpected("end of text", error.expected), end
    return diagnostic(code, message, position(text, offset), source)


def _character_message(text: str, offset: int) -> tuple[str, str, int]:
    """A character that starts no token, or a reserved word (no terminal matches either)."""
    char = text[offset]
    if reserved := _RESERVED.match(text, offset):
        word = reserved.group()
        return "E-SYNTAX", f"'{word}' is a reserved word and cannot be a name", offset
    if char == ".":
        start = offset
        while start > 0 and (text[start - 1].isdigit() or text[start - 1] == "."):
            start -= 1
        if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_'"):
            start = offset  # the digits belong to a name
        number = text[start : _NUMBER_TAIL.match(text, offset).end()]
        return (
            "E-LEX",
            f"malformed number '{number}': a float literal has digits on both sides of one "
            "'.' (as in '1.5' or '0.5e-3')",
            start,
        )
    if char == "'" and offset > 0 and text[offset - 1] == "'":
        return "E-LEX", "a name can end with only one prime (')", offset
    hints = {
        "!": "'!' is not an operator (did you mean '!='?)",
        "#": "'#' cannot start a token: Tile has no comments (and no escaped '#name' names)",
        "$": "'$' cannot start a token: escaped '$name' names are not supported",
        '"': "'\"' cannot start a token: Tile has no string literals",
    }
    shown = char if char.isprintable() else repr(char)[1:-1]
    return "E-LEX", hints.get(char, f"the character '{shown}' cannot start a token"), offset


def _token_message(token: Token, expected: set[str], text: str) -> tuple[str, int]:
    """The message and offset for a token the grammar does not allow where it stands."""
    if token.type == "$END":
        return _unexpected("end of text", expected), len(text.rstrip(TILE_WHITESPACE))
    offset = token.start_pos
    for start in (offset - 1, offset):
        if start >= 0 and text[start : start + 2] in ("//", "/*"):
            comment = text[start : start + 2]
            return f"'{comment}' does not start a comment: Tile has no comment syntax", start
    if expected == {"$END"}:
        return f"unexpected '{token}' after the end of the function", offset
    if token.type == "RBRACE" and "SEMICOLON" in expected:
        # A statement without its `;`: point just after it, not at the `}` (maybe lines on).
        after = len(text[:offset].rstrip(TILE_WHITESPACE))
        return f"missing ';' after the statement: expected {_describe(expected)} before '}}'", after
    message = _unexpected(f"'{token}'", expected)
    if token.type == "FUNCTION" or (token.type in _KEYWORDS and "LNAME" in expected):
        message += f" ('{token}' is a keyword and cannot be a name)"
    elif token.type in _KEYWORDS:
        message += " (a modifier follows the constraints of a contraction, each at most once)"
    elif "NO_DEFRACT" in expected and token.type in _EXPRESSION_OPERATORS:
        message += " (a contraction is a whole statement: it cannot be part of an expression)"
    elif (
        expected == {"LPAR"}
        and (name := _INDEX_NAME_BEFORE.search(text, 0, offset))
        and name.group(1) != "function"
    ):
        message += (
            f" ('{name.group(1)}' is an index name: index names belong in contractions, "
            "and a lower-case name in an expression must be a function call)"
        )
    elif {"RPAR", "EQUAL", "STAR"} <= expected and "AMPERSAND" not in expected:
        message += " (a contraction combines tensor accesses with '+', '*' or '==' only)"
    return message, offset


def _unexpected(what: str, expected: set[str]) -> str:
    return f"unexpected {what}: expected {_describe(expected)}"


def _describe(expected: set[str]) -> str:
    """Expected terminals in words: `';', ')' or an operator`."""
    names = set(expected) - {"WHITESPACE"}
    groups = []
    if {"INT", "UNAME", "LPAR", "MINUS", "TILDE"} <= names:
        groups.append("an expression")
        names -= _EXPRESSION_START
    elif {"INT", "UNAME", "LNAME", "LPAR", "MINUS"} <= names:
        groups.append("an index polynomial")
        names -= _POLY_START
    if "AMPERSAND" in names:
        groups.append("an operator")
        names -= _EXPRESSION_OPERATORS
    elif names >= _POLY_OPERATORS:
        groups.append("an operator")
        names -= _POLY_OPERATORS | {"LE"}  # '<=' is only accepted to explain its error
    if {"UNAME", "LNAME"} <= names:
        groups.append("a name")
        names -= {"UNAME", "LNAME"}
    texts = sorted((terminal_text(name) for name in names if name not in _WORDS), key=_order)
    quoted = [f"'{text}'" for text in texts]
    words = [_WORDS[name] for name in sorted(names) if name in _WORDS]
    items = quoted + words + groups
    if not items:
        return "nothing more"
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _order(text: str) -> tuple[bool, str]:
    return text != ";", text  # "';' or an operator" reads better than "'(', ';' or ..."
