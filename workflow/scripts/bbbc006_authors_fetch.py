"""Rule `bbbc006_authors_archive`: the authors' BBBC006.tar.gz, resumable and verified, unpacked once (dgno.data.bbbc006_authors).

A failed download stops with the steps to place the archive by hand, on the console too (_log).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.bbbc006_authors import fetch_record  # noqa: E402

fetch_record(Path(sm.output[0]).parent, sm.output[0], url=sm.params.url, retries=sm.params.retries)
