"""Notices for deprecated names: one line on stderr, in the project's words, once per name in a process.

Why not :func:`warnings.warn`: Python prints a warning with the source line that raised it
(``.../workflow/config.py:97: FutureWarning: ...``), which tells a user nothing about their file, and a
warnings filter may hide it. A notice names where the name was met, the old name and the new one
(``config: reproduction: renamed authors``); the name is still read.
"""

from __future__ import annotations

import sys

SAID: set[str] = set()  # the notices this process has printed (so each is printed once)


def renamed(where: str, old: str, new: str) -> str:
    """Say once that ``old`` (met in ``where``: config, environment, a folder) is read as ``new``; returns the line."""
    line = f"{where}: {old}: renamed {new}"
    if line not in SAID:
        SAID.add(line)
        print(line, file=sys.stderr, flush=True)
    return line


__all__ = ["SAID", "renamed"]
