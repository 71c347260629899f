"""`--quick`: the smallest size at which a bench still runs every one of its parts.

Its figures mean nothing; it is there so that tests/bench/ can run each bench to its end
and catch a bench broken by a change (a bench nobody ran rots: long_session.py once failed
at its last step for weeks)."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "a tiny size that runs every part once (to check the bench works; figures mean nothing)"


def parse_with_quick(
    parser: argparse.ArgumentParser, args: list[str] | None = None, **sizes: Any
) -> argparse.Namespace:
    """Parse `args` with a `--quick` flag that sets each of `sizes` (dest=value)."""
    parser.add_argument("--quick", action="store_true", help=HELP)
    parsed = parser.parse_args(args)
    if parsed.quick:
        for dest, value in sizes.items():
            setattr(parsed, dest, value)
    return parsed
