"""Rule `restore_slide`: one whole slide restored where it is out of focus (all logic in dgno.slides.job)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.slides.job import restore_slide_job  # noqa: E402
from dgno.slides.run import SlideInterrupted  # noqa: E402
from dgno.train import INTERRUPTED_EXIT  # noqa: E402

try:
    restore_slide_job(
        sm.input.slide,
        Path(sm.output.summary).parent,
        model=sm.input.model,
        options=sm.params.options,
        settings=sm.params.settings,
        device=sm.params.device,
        threads=sm.threads,
    )
except SlideInterrupted as err:
    # SIGTERM (SLURM's warning before the time limit): the finished tiles are on disk; a failed job makes
    # Snakemake retry (profile `retries`), and the retry restores only the rest.
    print(f"{err}; the retry resumes from the finished tiles", file=sys.stderr)
    sys.exit(INTERRUPTED_EXIT)
