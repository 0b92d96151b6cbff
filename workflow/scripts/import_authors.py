"""Rule `import_authors`: the authors' checkpoint as a project model.pt (dgno import-authors)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.checkpoint import import_authors  # noqa: E402

import_authors(sm.input.checkpoint, sm.params.options, sm.output.model, weights="params")
