"""Send a rule script's stdout/stderr to its Snakemake log file (imported first by every script)."""

import sys


def redirect(log_path: str) -> None:
    fh = open(log_path, "w", buffering=1)  # line-buffered so `tail -f` shows progress
    sys.stdout = sys.stderr = fh
