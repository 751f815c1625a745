"""C and OpenCL C identifiers for semtree names (the node classes sanitise every name with
`c_identifier`)."""

from __future__ import annotations

import re

_RESERVED_WORDS = """
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while bool true false
kernel __kernel global __global local __local constant __constant private __private
read_only write_only half uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t
barrier select clamp mad fabs fmin fmax min max abs exp log sqrt pow tanh sin cos tan asin
acos atan sinh cosh floor ceil round recip native_exp native_log native_sqrt native_recip
get_global_id get_group_id get_local_id vload_half vstore_half INFINITY NAN
"""  # C keywords, then OpenCL C qualifiers, types and the functions our printers emit
_RESERVED = frozenset(_RESERVED_WORDS.split())
_TYPE_NAMES = "(bool|char|uchar|short|ushort|int|uint|long|ulong|half|float|double)"
_VECTOR_TYPE = re.compile(_TYPE_NAMES + "(2|3|4|8|16)")
_CONVERSION = re.compile(f"(convert_|as_){_TYPE_NAMES}(2|3|4|8|16)?(_sat)?(_rt[enpz])?")
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def c_identifier(name: str) -> str:
    """`name` made a valid C and OpenCL C identifier; idempotent.

    Characters outside `[A-Za-z0-9_]` become `_`, a leading digit gets a `_` prefix, and a
    reserved word (keyword, type or builtin function name) gets a `_` suffix. Distinct names
    may collide after sanitising; generators pick names that do not.
    """
    text = _NOT_IDENTIFIER.sub("_", name) or "_"
    if text[0].isdigit():
        text = "_" + text
    if text in _RESERVED or _VECTOR_TYPE.fullmatch(text) or _CONVERSION.fullmatch(text):
        text += "_"
    return text
