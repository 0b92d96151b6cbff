"""Rule `slide_synthetic`: a synthetic whole slide with regions defocused on purpose, and its manifest (dgno.data.slides)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.slides import synthetic_slide  # noqa: E402
from dgno.io import write_json  # noqa: E402

write_json(sm.output.manifest, synthetic_slide(sm.output.slide, **sm.params.spec))
