"""Send a rule script's output to its Snakemake log file, and its failure to the console too (imported first by every script).

Why: Snakemake shows only "check log file(s)" for a failed job, so a message the user must act on
(a missing archive, a config key to change) would sit in a log file nobody opens. After
:func:`redirect`, an uncaught error ends the job with one line on the real console stderr and in the
log: the project's input and config errors (``dgno.io.InputError`` and its subclasses,
``dgno.workflow.config.ConfigError``) as their message and fix, with no traceback; any other error as
its type and message, with the traceback in the log. The job still exits non-zero.
"""

import sys
import traceback

USER_ERRORS = frozenset({"InputError", "ConfigError"})  # by class name: _log imports nothing of dgno


def redirect(log_path: str) -> None:
    fh = open(log_path, "w", buffering=1)  # line-buffered so `tail -f` shows progress
    sys.stdout = sys.stderr = fh
    sys.excepthook = _report


def is_user_error(exc: BaseException) -> bool:
    """A user's mistake with a message and a fix (an InputError or ConfigError, or a subclass of one)."""
    return any(cls.__name__ in USER_ERRORS for cls in type(exc).__mro__)


def rule_name() -> str:
    """The rule of this job, from the ``snakemake`` object Snakemake puts in the script's namespace."""
    sm = getattr(sys.modules.get("__main__"), "snakemake", None)
    return str(getattr(sm, "rule", None) or "job")


def warn(message: str) -> None:
    """Print a warning the user should see in the log and on the console; the job goes on."""
    line = f"{rule_name()}: warning: {message}"
    print(line, file=sys.stderr)
    print(line, file=sys.__stderr__)


def fail(message: str, code: int = 1) -> None:
    """Print `message` in the log and on the console, then exit with `code`."""
    print(message, file=sys.stderr)
    print(message, file=sys.__stderr__)
    sys.exit(code)


def _report(kind: type[BaseException], exc: BaseException, tb) -> None:
    if is_user_error(exc):
        message = f"{rule_name()}: {exc}"
        print(message, file=sys.stderr)
        print(message, file=sys.__stderr__)
        return
    traceback.print_exception(kind, exc, tb, file=sys.stderr)
    log = getattr(sys.stderr, "name", "the job's log")
    print(f"{rule_name()}: {kind.__name__}: {exc} (traceback in {log})", file=sys.__stderr__)
