"""One check for every string option of the package (fluxes, boundaries, models, interpolations)."""

from __future__ import annotations

from collections.abc import Sequence


def check_choice(what: str, value: object, allowed: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the bad ``value`` and the ``allowed`` ones.

    Options are plain strings (``Literal``) so configs stay readable; a typo must
    fail loudly at construction, not silently fall through to a default branch.
    """
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; allowed: {', '.join(map(repr, allowed))}")
