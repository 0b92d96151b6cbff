"""Rules `evaluate`, `evaluate_gumbel` and `evaluate_input`: score restored test images (all logic in dgno.inference.evaluate)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821

from dgno.inference.evaluate import evaluate_checkpoint, identity_restorer, score_dataset  # noqa: E402

sm = snakemake  # noqa: F821
ev = sm.params.evaluate
data_dir = Path(sm.input.split).parent
out_dir = Path(sm.output.summary).parent
# Restored images only where a later rule reads them (dgno.workflow.plan.restored_readers); the folder
# exists either way, as the rule's output.
common = dict(method=sm.wildcards.get("method", "input"), with_lpips=ev["lpips"], save_restored=sm.params.keep_restored)
# Speed-only settings (tiles per pass, CUDA graphs, overlapped reading/writing) are not params: changing
# one gives the same scores and files, so it must not re-evaluate (the schema fills in their defaults).
speed = {k: sm.config["evaluate"][k] for k in ("tile_batch", "cuda_graphs", "overlap_io", "engine")}
# Seed replicate r >= 1 (rule evaluate_replicate): written into summary.json, so tables can tell the seeds apart.
replicate = {"replicate": sm.params.replicate} if "replicate" in sm.params.keys() else {}
if "model" in sm.input.keys():
    routing = dict(routing=ev.get("routing", "argmax"), routing_seed=ev.get("routing_seed", 0), repeat=ev.get("repeat", 0))
    evaluate_checkpoint(
        sm.input.model, data_dir, sm.wildcards.level, out_dir, tile=ev["tile"], overlap=ev["overlap"], blend=ev["blend"], device=sm.params.device, extra=replicate, **speed, **routing, **common
    )
else:
    score_dataset(identity_restorer, data_dir, sm.wildcards.level, out_dir, **common)
if "restored" in sm.output.keys():
    Path(sm.output.restored).mkdir(parents=True, exist_ok=True)
