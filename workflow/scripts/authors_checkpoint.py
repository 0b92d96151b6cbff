"""Rule `authors_checkpoint`: one authors' checkpoint, resumable and verified (dgno.models.authors)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.models.authors import fetch_authors_checkpoint  # noqa: E402

fetch_authors_checkpoint(sm.params.url, sm.output[0], retries=sm.params.retries, sha256=sm.params.sha256)
