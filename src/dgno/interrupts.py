"""Ctrl-C and SIGTERM: while a command starts up, the process ends at once and quietly; later, the command
stops cleanly and says what is done.

Why: a command's imports (scipy, yaml, torch) take seconds before it can catch an interrupt. Python
would print a traceback, and an interrupt that lands inside torch's C++ start-up aborts the process
(``terminate called ... KeyboardInterrupt``). Nothing is written during start-up, so an interrupt
then ends the process with the status a shell gives Ctrl-C (130), or SIGTERM (143), and one line.

Once the command runs, SIGTERM — what ``kill``, ``scancel`` and a SLURM time limit send — is turned
into :class:`Terminated`, a ``KeyboardInterrupt``, so that it stops the work exactly as Ctrl-C does
(a batch writes no half file and reports what is complete, a slide keeps its finished tiles) and the
command can say how to resume; the process still exits with 143, the status SLURM and shells expect of
a process SIGTERM ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

INTERRUPTED = 130  # 128 + SIGINT
TERMINATED = 128 + signal.SIGTERM  # 143
START_UP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM while a command runs: handled wherever Ctrl-C is, exit status 143."""


def exit_status(exc: BaseException) -> int:
    """The status a shell reports for the signal behind ``exc``: 143 for SIGTERM, 130 for Ctrl-C."""
    return TERMINATED if isinstance(exc, Terminated) else INTERRUPTED


def signal_name(exc: BaseException) -> str:
    """How a message names the stop: "SIGTERM" (a time limit, scancel, kill) or "Ctrl-C"."""
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"


def quit_at_once(signum, frame) -> None:
    """A start-up handler of SIGINT and SIGTERM: one line on stderr, then exit 128 + signum without unwinding."""
    os.write(2, b"dgno: interrupted\n" if signum == signal.SIGINT else b"dgno: stopped by SIGTERM before any work began; nothing was written\n")
    os._exit(128 + signum)


def raise_terminated(signum, frame) -> None:
    """The SIGTERM handler while a command runs: raise :class:`Terminated` in the main thread."""
    raise Terminated


@contextlib.contextmanager
def quiet_start() -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM end the process at once (:func:`quit_at_once`); after it, the previous handlers again."""
    previous = {s: signal.signal(s, quit_at_once) for s in START_UP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (module docstring); after it, the previous handler again.

    Only the main thread may set handlers: elsewhere (a command run from a thread) nothing changes.
    """
    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
