"""Ctrl-C at any moment of a command's start-up: exit 130, one line, never a traceback or an abort."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile

DGNO = Path(sys.executable).parent / "dgno"


@pytest.mark.skipif(not DGNO.exists(), reason="the dgno console script is not installed in this environment")
@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8, 1.5])
def test_ctrl_c_during_start_up_ends_quietly(tmp_path, delay):
    image = tmp_path / "in.tif"
    tifffile.imwrite(image, np.zeros((64, 64), np.uint16))
    proc = subprocess.Popen([str(DGNO), "deblur", str(image), "--checkpoint", str(tmp_path / "none.pt"), "--output", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 2:  # it got as far as the missing model file before the signal came
        assert "none.pt: checkpoint does not exist" in err
        return
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "terminate called" not in err and "interrupted" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
