"""Rule `paired_source`: check (and if configured, download) a real paired dataset; fail with the steps."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.paired_sets import obtain  # noqa: E402
from dgno.io import InputError  # noqa: E402

ds = sm.params.dataset
try:
    obtain(
        ds["source"],
        ds["path"],
        sm.output[0],
        url=sm.params.url,
        counts=ds.get("counts"),
        check_size=ds["check_size"],
        retries=sm.params.retries,
    )
except InputError as exc:
    # The console shows only the log's path: print the instructions there too, they are the point.
    name, source = sm.wildcards.dataset, ds["source"]
    where = f"datasets.{name}.path"
    retry = f"set downloads.{source}_url to a working link or " if source != "3dhistech" else ""
    text = (
        f"{name}: the raw data are not in place.\n{exc}\n"
        f"In this workflow: {retry}place the files in {ds['path']} (config key {where}), then re-run the same snakemake command."
    )
    _log.fail(text)
