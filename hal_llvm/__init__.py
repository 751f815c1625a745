"""LLVM CPU back end (filled by issue 3)."""
