"""Progress of long work, on a terminal and in a log: one mechanism for every command and workflow job.

On a terminal, a bar (tqdm) redrawn in place. Anywhere else — a file (``2>log``, ``nohup``, a SLURM
job's output, a Snakemake rule's log), a pipe — redraws would fill the file with carriage returns, and
no output at all makes a six-minute image look hung: there, :class:`LogLines` prints one plain line
every :func:`interval` seconds of work (done/total, rate, time left), and a last one when work that
printed lines ends. ``DGNO_PROGRESS_SECONDS`` sets the interval (default 30 s; 0: a line at every
step, for tests and for debugging a job).

:func:`bar` chooses between the two from the stream the lines go to (``sys.stderr`` by default, which
the workflow's scripts point at their log), so a caller writes ``for x in bar(items, desc=...)`` or
``with bar(total=n, ...) as b: b.update(k)`` once and is right in both places.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from tqdm import tqdm

from dgno.io import InputError

INTERVAL_ENV = "DGNO_PROGRESS_SECONDS"
DEFAULT_INTERVAL_S = 30.0


def interval() -> float:
    """Seconds between two progress lines in a log: ``$DGNO_PROGRESS_SECONDS``, else 30.

    A value that is no number of seconds is an InputError naming the variable, raised when the first
    bar is made (``dgno`` checks it before any work).
    """
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"{INTERVAL_ENV}={raw}: not a number of seconds. Fix: set it to the seconds between progress lines in a log (e.g. 60), or unset it for {DEFAULT_INTERVAL_S:g}")
    return value


def duration(seconds: float) -> str:
    """``seconds`` as a person reads it in a log: "45 s", "3 min 05 s", "2 h 07 min"."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _amount(n: float, unit: str, scale: bool) -> str:
    return tqdm.format_sizeof(n, unit, divisor=1024) if scale else f"{n:g}"


def progress_line(desc: str, done: float, total: float | None, seconds: float, *, rate_done: float, unit: str = "it", unit_scale: bool = False) -> str:
    """One line of progress: "deblur: 3/10 image (30 %), 0.41 image/s, about 17 s left (elapsed 7 s)".

    ``rate_done`` is the work done in ``seconds`` by this run (a resumed run starts above 0 without
    having done that work), from which the rate and the time left are estimated.
    """
    head = f"{desc}: " if desc else ""
    amount = _amount(done, unit, unit_scale) + (f"/{_amount(total, unit, unit_scale)}" if total else "")
    share = f" ({100 * done / total:.0f} %)" if total else ""
    parts = [f"{head}{amount}{'' if unit_scale else ' ' + unit}{share}"]
    if rate_done > 0 and seconds > 0:
        rate = rate_done / seconds
        if unit_scale:
            parts.append(f"{tqdm.format_sizeof(rate, unit, divisor=1024)}/s")
        else:
            parts.append(f"{rate:.3g} {unit}/s" if rate >= 1 else f"{1 / rate:.3g} s/{unit}")
        if total and done < total:
            parts.append(f"about {duration((total - done) / rate)} left")
    parts[-1] += f" (elapsed {duration(seconds)})"
    return ", ".join(parts)


class LogLines:
    """Progress as plain lines for a log (module docstring); the part of tqdm's interface callers use.

    A line is printed by :meth:`update` when ``every`` seconds have passed since the last one, so work
    that ends sooner prints nothing; :meth:`close` prints the last line of work that printed any (unless
    that line was the last). Safe to update from a worker thread.
    """

    def __init__(self, iterable: Iterable | None = None, *, total: float | None = None, desc: str = "", unit: str = "it",
                 initial: float = 0, every: float = DEFAULT_INTERVAL_S, unit_scale: bool = False, file: IO[str] | None = None) -> None:  # fmt: skip
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.unit, self.unit_scale = iterable, total, desc, unit, unit_scale
        self.n = self._start = initial
        self.every, self.file = every, file
        self._t0 = self._last = time.monotonic()
        self._postfix = ""
        self._said: float | None = None  # the count of the last line printed
        self._closed = False
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator:
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> LogLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _say(self, now: float) -> None:
        line = progress_line(self.desc, self.n, self.total, now - self._t0, rate_done=self.n - self._start, unit=self.unit, unit_scale=self.unit_scale)
        print(line + (f"; {self._postfix}" if self._postfix else ""), file=self.file or sys.stderr, flush=True)
        self._said, self._last = self.n, now

    def update(self, n: float = 1) -> None:
        with self._lock:
            self.n += n
            now = time.monotonic()
            if not self._closed and now - self._last >= self.every:
                self._say(now)

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:  # noqa: ARG002 - tqdm's signature
        """Values shown after the counts (a training's loss and learning rate), as ``key=value``."""
        self._postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        with self._lock:
            if not self._closed and self._said is not None and self._said != self.n:
                self._say(time.monotonic())
            self._closed = True


def bar(iterable: Iterable | None = None, *, total: float | None = None, desc: str = "", unit: str = "it", initial: float = 0,
        enabled: bool = True, file: IO[str] | None = None, **terminal: Any) -> tqdm | LogLines:  # fmt: skip
    """A progress bar on a terminal, progress lines elsewhere (module docstring); nothing when not ``enabled``.

    ``file``: where it is shown (default ``sys.stderr`` now, so a redirected stderr is followed).
    ``terminal``: further tqdm options for the bar (``delay``, ``leave``, ``smoothing``, ``mininterval``);
    ``unit_scale`` (byte counts) applies to both.
    """
    stream = file or sys.stderr
    if enabled and not _is_terminal(stream):
        return LogLines(iterable, total=total, desc=desc, unit=unit, initial=initial, every=interval(), unit_scale=terminal.get("unit_scale", False), file=stream)
    return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, disable=not enabled, file=stream, **terminal)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or bare stream
        return False
