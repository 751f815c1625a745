"""Stage 1, the language: Tile source -> checked AST (`tile.lang.syntax`).

The Lark grammar (`tile.lark`), the parser that builds the AST and measures nesting,
the checks that need no inputs (names, single assignment, index variables), and the
table of builtins. Input: a source string; output: a `FunctionDef` and diagnostics.
Imports nothing else of tile's but `tile.errors`.
"""
