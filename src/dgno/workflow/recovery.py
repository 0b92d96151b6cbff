"""A plain rerun after a crash: remove the lock a killed Snakemake left, but never a live one's.

Snakemake locks the files of a run under ``.snakemake/locks/`` and removes the lock when it ends. A
run killed with SIGKILL, or a machine that went down, leaves the lock behind, and the next
``snakemake`` stops with "Directory cannot be locked ... --unlock". Unlocking is only safe when no
Snakemake of this working directory still runs, which a new user cannot easily tell; so ``make demo``
runs ``python -m dgno.workflow.recovery`` first: it removes the lock when no Snakemake process of
the directory is alive on this machine, and otherwise names the processes and leaves the lock.

A process counts as a Snakemake of the directory when its working directory is the directory (or
below it) and its command line runs Snakemake (``snakemake``, ``python -m snakemake``) or one of its
jobs (``.snakemake/scripts/...``): a job whose Snakemake was killed may still be writing its outputs.
Processes on other machines sharing the directory (a cluster's login node) cannot be seen from here.

The other half of a crash, outputs a killed job left half written, is Snakemake's
``--rerun-incomplete``, which the workflow's default profile (``profiles/default/``) turns on.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psutil  # a dependency of Snakemake itself


def lock_files(workdir: str | Path) -> list[Path]:
    """The lock files of Snakemake runs in ``workdir`` (none when no run holds or left a lock)."""
    return sorted((Path(workdir) / ".snakemake" / "locks").glob("*.lock"))


def _runs_snakemake(cmdline: list[str]) -> bool:
    names = [Path(arg).name for arg in cmdline]
    return (
        "snakemake" in names[:2]
        or any(a == "-m" and b == "snakemake" for a, b in zip(cmdline, cmdline[1:]))
        or any(f"{os.sep}.snakemake{os.sep}scripts{os.sep}" in arg for arg in cmdline)
    )


def snakemake_processes(workdir: str | Path) -> list[psutil.Process]:
    """Live processes on this machine that run Snakemake, or one of its jobs, in ``workdir`` or below."""
    root = Path(workdir).resolve()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid() or not proc.info["cmdline"]:
            continue
        try:
            cwd = Path(proc.cwd()).resolve()
            alive = proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone, or another user's (whose Snakemake could not have locked our files)
        if alive and (cwd == root or root in cwd.parents) and _runs_snakemake(proc.info["cmdline"]):
            found.append(proc)
    return found


def clear_stale_lock(workdir: str | Path) -> str:
    """Remove the Snakemake lock of ``workdir`` when no Snakemake of it is alive; say what was done.

    Returns "" when there is no lock. A lock held by a live Snakemake (or left by a killed one whose
    jobs still run) stays: the message names the processes and what to do.
    """
    locks = lock_files(workdir)
    if not locks:
        return ""
    live = snakemake_processes(workdir)
    if live:
        procs = "; ".join(f"PID {p.pid}: {' '.join(p.info['cmdline'])[:120]}" for p in live)
        return (
            f"Snakemake is still running in {Path(workdir).resolve()} ({procs}); its lock stays. "
            "Fix: wait for it to finish, or stop it (kill PID) and run the command again."
        )
    for lock in locks:
        lock.unlink(missing_ok=True)
    return (
        f"Removed the stale Snakemake lock of {Path(workdir).resolve()} ({len(locks)} file(s) under .snakemake/locks): "
        "a run was killed before it could unlock, and no Snakemake of this directory runs on this machine. "
        "Its half-written outputs are redone (rerun-incomplete, profiles/default)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dgno.workflow.recovery", description=__doc__.splitlines()[0])
    parser.add_argument("--directory", default=".", help="Snakemake working directory (default: the current one)")
    message = clear_stale_lock(parser.parse_args(argv).directory)
    if message:
        print(message, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
