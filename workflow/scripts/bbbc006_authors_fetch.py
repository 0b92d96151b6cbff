"""Rule `bbbc006_authors_archive`: the authors' BBBC006.tar.gz, resumable and verified, unpacked once (dgno.data.bbbc006_authors)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.bbbc006_authors import fetch_record  # noqa: E402
from dgno.io import InputError  # noqa: E402

try:
    fetch_record(Path(sm.output[0]).parent, sm.output[0], url=sm.params.url, retries=sm.params.retries)
except InputError as exc:
    # The console shows only the log's path: the steps to place the archive by hand are the point.
    print(exc)
    print(f"bbbc006_authors_archive: {exc}", file=sys.__stderr__)
    sys.exit(1)
