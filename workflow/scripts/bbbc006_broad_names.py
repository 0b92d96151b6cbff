"""Rule `bbbc006_broad_names`: the file names in the Broad z02/z06/z10 archives, from their central directories (dgno.data.bbbc006_listing).

Never fails for an unreachable server: the record says why, and the preparation then assigns those
planes by sharpness and says so. Delete the file to try again.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.data.bbbc006_listing import write_listing  # noqa: E402

# At most 2 retries: a listing that cannot be read is recorded, not fatal, and should not hold the run for long.
listing = write_listing(Path(sm.output[0]).parent, sm.output[0], base_url=sm.params.base_url, retries=min(sm.params.retries, 2))
for level, plane in listing["planes"].items():
    print(f"{level}: {plane['status']}; {plane.get('source') or plane.get('reason')}")
    if plane["status"] != "listed":
        _log.warn(
            f"the Broad {level} listing could not be read ({plane.get('reason')}): a blur file of that plane is placed by its name, by elimination "
            f"when the other two planes of its field are listed, else by sharpness (the preparation says which). To try again: delete {sm.output[0]} and rerun"
        )
