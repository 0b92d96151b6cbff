"""Ctrl-C while a command starts up: the process ends at once and quietly.

Why: a command's imports (scipy, yaml, torch) take seconds before it can catch an interrupt. Python
would print a traceback, and an interrupt that lands inside torch's C++ start-up aborts the process
(``terminate called ... KeyboardInterrupt``). Nothing is written during start-up, so an interrupt
then ends the process with the status a shell gives Ctrl-C (130) and one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

INTERRUPTED = 130  # 128 + SIGINT


def quit_at_once(signum, frame) -> None:
    """A SIGINT handler for start-up: one line on stderr, then exit 130 without unwinding."""
    os.write(2, b"dgno: interrupted\n")
    os._exit(INTERRUPTED)


@contextlib.contextmanager
def quiet_start() -> Iterator[None]:
    """Within the block, Ctrl-C ends the process at once (:func:`quit_at_once`); after it, the previous handler again."""
    previous = signal.signal(signal.SIGINT, quit_at_once)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
