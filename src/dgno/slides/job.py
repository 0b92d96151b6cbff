"""One slide restored as a workflow job (rule ``restore_slide``): the network from its files, then :func:`restore_slide`.

The same steps as ``dgno deblur-slide SLIDE --checkpoint MODEL --output DIR``, with the job's settings
(``dgno.workflow.slides.restore_settings``): the threads Snakemake gave the job drive the network, the
focus scan and the writer; an existing output is replaced (Snakemake decided the job must run); and a
job stopped by SLURM's time-limit signal keeps its finished tiles, so that the retry resumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgno.slides.network import load_network
from dgno.slides.restore import restore_slide


def restore_slide_job(slide: str | Path, output_dir: str | Path, *, model: str | Path, options: str | Path | None, settings: dict[str, Any], device: str, threads: int) -> dict:
    """Restore ``slide`` into ``output_dir`` with the network in ``model`` (and its authors' ``options``); the summary.

    ``settings``: ``{"network": load_network's tile/overlap/tile_batch/normalise, "restore": restore_slide's options}``.
    """
    network = load_network(checkpoint=str(model), options=str(options) if options else None, device=device, threads=threads, **settings["network"])
    return restore_slide(slide, output_dir, network=network, overwrite=True, workers=threads, **settings["restore"])
