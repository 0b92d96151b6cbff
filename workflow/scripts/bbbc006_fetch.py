"""Rules `bbbc006_plane` / `bbbc006_labels`: resumable, verified download + unpack of one archive."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.bbbc006 import fetch_labels, fetch_plane  # noqa: E402

out = Path(sm.output[0])
kw = dict(base_url=sm.params.base_url, retries=sm.params.retries, progress=True)
if "zz" in sm.wildcards.keys():
    fetch_plane(int(sm.wildcards.zz), out.parent, **kw)
else:
    fetch_labels(out.parent, **kw)
