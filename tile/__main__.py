"""`python -m tile devices | info | run | dump`: the command line (`tile.cli.main`)."""

from __future__ import annotations

import sys

from tile.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
