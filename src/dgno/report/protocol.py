"""Report section: the authors' network conventions and where each setting of the configuration comes from."""

from __future__ import annotations

import json
from functools import reduce
from typing import Any

from dgno.models.conventions import AUTHORS_CONVENTIONS
from dgno.report.section import Section


def protocol_section(config: dict[str, Any]) -> Section:
    """Where each setting of this configuration comes from, and the authors' network conventions.

    The settings table reads the config's ``protocol`` block (dotted path → source, note) and shows
    each setting's value in *this* config beside it; the conventions table is the list the network
    follows to compute the authors' function (``dgno.models.conventions.AUTHORS_CONVENTIONS``).
    Config validation has checked that every dotted path of the ``protocol`` block exists.
    """
    sec = Section(id="protocol", title="Protocol: the authors' network and recipe, and where each setting comes from")
    sec.notes.append(
        "The paper's numbers were made by the authors' code (GitHub qiiiiiii523/CC_defocus, third_party/DGNO) and option files. "
        "Where the paper's text and that code disagree, this pipeline follows the code and says so here. The network reproduces the "
        "authors' outputs to 1e-14 in float64 on their golden fixtures (tests/test_authors_import.py); their released checkpoints load with "
        "dgno import-authors."
    )
    rows = []
    for path, entry in config.get("protocol", {}).items():
        value = reduce(lambda node, key: node[key], path.split("."), config)
        rows.append([path, json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value), entry["source"], entry.get("note", "")])
    if rows:
        sec.text_tables.append((["setting", f"value ({config.get('name', 'this config')})", "source", "note"], rows))
    else:
        sec.notes.append(f"This configuration ({config.get('name', '')}) states no sources for its settings (no protocol block); config/paper.yaml does.")
    sec.text_tables.append((["network convention", "authors' code (followed here)", "paper text or alternative"], [list(row) for row in AUTHORS_CONVENTIONS]))
    return sec
