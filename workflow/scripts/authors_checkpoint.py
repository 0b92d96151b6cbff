"""Rule `official_checkpoint`: one authors' checkpoint, resumable and verified (dgno.models.official)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.models.official import fetch_official  # noqa: E402

fetch_official(sm.params.url, sm.output[0], retries=sm.params.retries, sha256=sm.params.sha256)
