"""The ``dgno`` console script: quiet on Ctrl-C from its first instant (:mod:`dgno.interrupts`).

The handler is installed before :mod:`dgno.cli` and its imports load; the command itself then runs
with Python's own handler, so that it can stop cleanly (a batch writes no half file, a slide keeps
its finished tiles).
"""

from __future__ import annotations

import signal

from dgno.interrupts import quit_at_once

signal.signal(signal.SIGINT, quit_at_once)

from dgno.cli import main as cli_main  # noqa: E402 - after the handler: these imports take seconds


def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return cli_main()
