"""Rule `bbbc006_prepare`: one channel's dataset, split by well (Broad planes) or as the authors split it (their archive)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data import bbbc006, bbbc006_authors  # noqa: E402
from dgno.data.bbbc006_listing import read_listing  # noqa: E402
from dgno.io import read_json  # noqa: E402

ds = sm.params.dataset
out = Path(sm.output.split).parent
if ds.get("split", "by_well") == "authors":
    archive_planes = {bbbc006.level_name(z) for z in bbbc006.TRAIN_PLANES}  # what the archive holds
    extra = sorted({int(lvl[1:]) for lvl in ds["train_levels"] + ds["test_levels"] if lvl not in archive_planes})
    bbbc006_authors.prepare_dataset(
        sm.params.raw,
        out,
        channel=ds["channel"],
        seed=sm.params.seed,
        broad_root=sm.params.raw,
        extra_planes=extra,
        n_val_wells=ds["n_val_wells"],
        plane_rule=ds["plane_rule"],
        plane_check=ds["plane_check"],
        max_out_of_order=ds["max_out_of_order"],
        broad_listing=read_listing(sm.input.get("broad_names")),
        config_key=f"datasets.{sm.wildcards.dataset}",  # a fix names the config keys to change
        url=ds["authors_url"],
    )
    for warning in read_json(out / "manifest.json")["warnings"]:  # also in the manifest and the report
        _log.warn(warning)
else:
    train = [int(lvl[1:]) for lvl in ds["train_levels"]]
    extra = [int(lvl[1:]) for lvl in ds["test_levels"] if lvl not in ds["train_levels"]]
    bbbc006.prepare_dataset(
        sm.params.raw,
        out,
        channel=ds["channel"],
        seed=sm.params.seed,
        train_planes=train,
        extra_planes=extra,
        n_val_wells=ds["n_val_wells"],
    )
