"""``python -m bench.soak``: see bench/soak/run.py."""

from __future__ import annotations

import sys

from bench.soak.run import main

if __name__ == "__main__":
    sys.exit(main())
