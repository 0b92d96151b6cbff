"""The ``dgno`` console script: quiet on Ctrl-C and SIGTERM from its first instant (:mod:`dgno.interrupts`).

The handler is installed before :mod:`dgno.cli` and its imports load; the command itself then runs
with Python's own Ctrl-C handler and SIGTERM turned into the same kind of exception (``dgno.cli.main``),
so that it can stop cleanly (a batch writes no half file, a slide keeps its finished tiles) and say how
to resume.
"""

from __future__ import annotations

import signal

from dgno.interrupts import START_UP_SIGNALS, quit_at_once

for _signal in START_UP_SIGNALS:
    signal.signal(_signal, quit_at_once)

from dgno.cli import main as cli_main  # noqa: E402 - after the handler: these imports take seconds


def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return cli_main()
