"""Rule `stardist_model`: the published StarDist model when it can be fetched, else one trained here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.downstream import load_stardist_model, train_on_dataset  # noqa: E402
from dgno.io import write_json  # noqa: E402

spec = sm.params.spec
out = Path(sm.output[0])
choice, record = spec.get("model", "auto"), None
if choice in ("auto", "pretrained"):
    try:
        _, description = load_stardist_model("pretrained")
        record = {"model_dir": "pretrained", "source": description}
    except RuntimeError as exc:
        if choice == "pretrained":
            raise
        print(f"published model unavailable ({exc}); training a local model instead", flush=True)
if record is None:
    model_dir = out.parent / "model"
    _, description = train_on_dataset(
        Path(sm.input.split).parent,
        model_dir,
        epochs=spec.get("epochs", 10),
        steps_per_epoch=spec.get("steps_per_epoch", 50),
        patch=spec.get("patch", 64),
        seed=sm.params.seed,
    )
    record = {"model_dir": str(model_dir), "source": description}
write_json(out, record)
